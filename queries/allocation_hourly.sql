-- name: allocation_hourly
-- grain: one row per pod (uid) per clock hour it held GPUs
-- param: hour_from TIMESTAMP = NULL -- the first hour to build (a refresh rebuilds the hours a load touched)
-- param: hour_to TIMESTAMP = NULL -- the hour after the last to build
-- materialize: table
-- partition: hour
-- depends: pod_gpu_allocations, node_hours, pod_gpu_shares
-- columns: cluster, hour, uid, namespace, pod, workload_kind, workload, node, node_pool, capacity_type,
--   instance_type, zone, gpu_model, queue, cluster_queue, podgroup, vcjob, team, alloc_kind, fractional,
--   gpu_request, mig_profile, mig_request, gpus, covered_s, gpu_hours, usd_per_gpu_hour, list_usd,
--   gr_active_avg, gr_active_max, sm_active_avg, sm_active_max, fb_used_max_mib, gpus_seen
-- description: GPUs held per pod-hour (their shares of GPUs, pod_gpu_shares, prorated for partial
--   hours) with the node's capacity type and price share, joined to what DCGM measured on the
--   pod's GPUs that hour. The shares of one known physical GPU (a HAMi device, a KAI GPU group, a
--   DRA device) never hold more than that GPU: where they add up to more in an hour they are
--   scaled down to it (gpu_hours; gpus stays the pod's own share). gr_active_avg is NULL when no
--   DCGM series was attributed to the pod (flagged as unmeasured downstream, never dropped).
WITH x AS (
    -- each pod's hours; its pod key (the samples' integer) found once per pod, not per pod-hour
    SELECT a.*, epoch(least(a.end_ts, a.hour + INTERVAL 1 HOUR) - greatest(a.start_ts, a.hour)) AS covered_s
    FROM (
        SELECT pa.*, k.pod_key,
               unnest(span_hours(pa.start_ts, pa.end_ts, $hour_from, $hour_to)) AS hour
        FROM pod_gpu_allocations pa
        LEFT JOIN pod_keys k ON k.cluster = pa.cluster AND k.namespace = pa.namespace AND k.pod = pa.pod AND k.pod <> ''
        WHERE pa.end_ts > coalesce($hour_from, '-infinity'::TIMESTAMP) AND pa.start_ts < coalesce($hour_to, 'infinity'::TIMESTAMP)
    ) a
),
keyed AS (
    SELECT cluster, uid, device_key, sum(gpus) AS gpus
    FROM pod_gpu_shares
    WHERE device_key IS NOT NULL
    GROUP BY ALL
),
kx AS (
    -- the hours of the pods holding shares of a known physical GPU only (few or none): x itself
    -- is read once, not kept for three readers
    SELECT a.cluster, a.uid, a.node, a.hour,
           epoch(least(a.end_ts, a.hour + INTERVAL 1 HOUR) - greatest(a.start_ts, a.hour)) AS covered_s
    FROM (
        SELECT pa.cluster, pa.uid, pa.node, pa.start_ts, pa.end_ts,
               unnest(span_hours(pa.start_ts, pa.end_ts, $hour_from, $hour_to)) AS hour
        FROM pod_gpu_allocations pa
        SEMI JOIN keyed k ON k.cluster = pa.cluster AND k.uid = pa.uid
        WHERE pa.end_ts > coalesce($hour_from, '-infinity'::TIMESTAMP) AND pa.start_ts < coalesce($hour_to, 'infinity'::TIMESTAMP)
    ) a
),
held AS (
    -- GPU-seconds the pods' shares of one physical GPU add up to in an hour
    SELECT x.cluster, x.node, k.device_key, x.hour, sum(k.gpus * x.covered_s) AS held_s
    FROM kx x JOIN keyed k ON k.cluster = x.cluster AND k.uid = x.uid
    GROUP BY ALL
),
nh AS NOT MATERIALIZED (
    -- the node-hours of the hours built (the joins below build on them: not every node-hour)
    SELECT cluster, node, hour, covered_s, usd_per_hour, gpu_count
    FROM node_hours
    WHERE hour >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND hour < coalesce($hour_to, 'infinity'::TIMESTAMP)
),
fit AS (
    -- one GPU holds at most the seconds its node existed that hour (the whole hour if unknown)
    SELECT h.cluster, h.node, h.device_key, h.hour,
           least(1.0, coalesce(nh.covered_s, 3600.0) / nullif(h.held_s, 0)) AS factor
    FROM held h
    LEFT JOIN nh ON nh.cluster = h.cluster AND nh.node = h.node AND nh.hour = h.hour
),
cut AS (
    SELECT x.cluster, x.uid, x.hour, sum(k.gpus * x.covered_s * (1 - f.factor)) AS cut_s
    FROM kx x
    JOIN keyed k ON k.cluster = x.cluster AND k.uid = x.uid
    JOIN fit f ON f.cluster = x.cluster AND f.node = x.node AND f.device_key = k.device_key AND f.hour = x.hour
    WHERE f.factor < 1
    GROUP BY ALL
),
u AS (
    -- per pod key and hour (integers, joined to the pods' hours on them)
    SELECT pod_key, hour,
           sum(gr_active_avg * covered_s) / nullif(sum(covered_s), 0) AS gr_active_avg,
           max(gr_active_max) AS gr_active_max,
           sum(sm_active_avg * covered_s) / nullif(sum(covered_s), 0) AS sm_active_avg,
           max(sm_active_max) AS sm_active_max,
           max(fb_used_max_mib) AS fb_used_max_mib,
           -- the rollup's natural key (gpu_key, hour, pod_key; its only writer, gpu_hourly_of,
           -- groups by it) makes each row a distinct GPU of the pod-hour
           count(*) AS gpus_seen
    FROM gpu_hourly_facts
    WHERE hour >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND hour < coalesce($hour_to, 'infinity'::TIMESTAMP)
    GROUP BY pod_key, hour
)
SELECT
    x.cluster, x.hour, x.uid, x.namespace, x.pod, x.workload_kind, x.workload, x.node, x.node_pool,
    x.capacity_type, x.instance_type, x.zone, x.gpu_model, x.queue, x.cluster_queue, x.podgroup, x.vcjob, x.team,
    x.alloc_kind, x.fractional, x.gpu_request, x.mig_profile, x.mig_request, x.gpus,
    x.covered_s,
    (x.gpus * x.covered_s - coalesce(c.cut_s, 0)) / 3600.0 AS gpu_hours,
    nh.usd_per_hour / nullif(nh.gpu_count, 0) AS usd_per_gpu_hour,
    (x.gpus * x.covered_s - coalesce(c.cut_s, 0)) / 3600.0 * nh.usd_per_hour / nullif(nh.gpu_count, 0) AS list_usd,
    u.gr_active_avg, u.gr_active_max, u.sm_active_avg, u.sm_active_max, u.fb_used_max_mib, u.gpus_seen
FROM x
LEFT JOIN u ON u.pod_key = x.pod_key AND u.hour = x.hour
LEFT JOIN nh ON nh.cluster = x.cluster AND nh.node = x.node AND nh.hour = x.hour
LEFT JOIN cut c ON c.cluster = x.cluster AND c.uid = x.uid AND c.hour = x.hour

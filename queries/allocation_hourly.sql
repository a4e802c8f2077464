-- name: allocation_hourly
-- grain: one row per pod (uid) per clock hour it held GPUs
-- materialize: table
-- depends: pod_gpu_allocations, node_hours
-- description: GPUs held per pod-hour (whole GPUs or MIG slice fractions, prorated for partial
--   hours) with the node's capacity type and price share, joined to what DCGM measured on the
--   pod's GPUs that hour. gr_active_avg is NULL when no DCGM series was attributed to the pod
--   (flagged as unmeasured downstream, never dropped).
WITH a AS (
    SELECT pa.*, unnest(generate_series(date_trunc('hour', pa.start_ts), pa.end_ts - INTERVAL 1 MICROSECOND,
                                        INTERVAL 1 HOUR)) AS hour
    FROM pod_gpu_allocations pa
),
x AS (
    SELECT a.*, epoch(least(a.end_ts, a.hour + INTERVAL 1 HOUR) - greatest(a.start_ts, a.hour)) AS covered_s
    FROM a
),
u AS (
    SELECT cluster, hour, namespace, pod,
           sum(gr_active_avg * covered_s) / nullif(sum(covered_s), 0) AS gr_active_avg,
           max(gr_active_max) AS gr_active_max,
           sum(sm_active_avg * covered_s) / nullif(sum(covered_s), 0) AS sm_active_avg,
           max(sm_active_max) AS sm_active_max,
           max(fb_used_max_mib) AS fb_used_max_mib,
           count(DISTINCT (gpu_uuid, mig_instance)) AS gpus_seen
    FROM gpu_hourly
    WHERE pod <> ''
    GROUP BY cluster, hour, namespace, pod
)
SELECT
    x.cluster, x.hour, x.uid, x.namespace, x.pod, x.workload_kind, x.workload, x.node, x.node_pool,
    x.capacity_type, x.instance_type, x.zone, x.gpu_model, x.queue, x.podgroup, x.vcjob, x.team,
    x.alloc_kind, x.gpu_request, x.mig_profile, x.mig_request, x.gpus,
    x.covered_s,
    x.gpus * x.covered_s / 3600.0 AS gpu_hours,
    nh.usd_per_hour / nullif(nh.gpu_count, 0) AS usd_per_gpu_hour,
    x.gpus * x.covered_s / 3600.0 * nh.usd_per_hour / nullif(nh.gpu_count, 0) AS list_usd,
    u.gr_active_avg, u.gr_active_max, u.sm_active_avg, u.sm_active_max, u.fb_used_max_mib, u.gpus_seen
FROM x
LEFT JOIN u ON u.cluster = x.cluster AND u.hour = x.hour AND u.namespace = x.namespace AND u.pod = x.pod
LEFT JOIN node_hours nh ON nh.cluster = x.cluster AND nh.node = x.node AND nh.hour = x.hour

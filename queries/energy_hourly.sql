-- name: energy_hourly
-- grain: one row per cluster, clock hour, node and holder (namespace, workload; NULL = no holder)
-- param: hour_from TIMESTAMP = NULL -- the first hour to build (a refresh rebuilds the hours a load touched)
-- param: hour_to TIMESTAMP = NULL -- the hour after the last to build
-- materialize: table
-- partition: hour
-- depends: pod_gpu_allocations, pod_gpu_shares
-- columns: cluster, hour, node, namespace, workload_kind, workload, queue, cluster_queue, team,
--   energy_kwh, energy_kwh_from_counter, gpus
-- description: GPU energy per holder and hour. A GPU-step's joules come from DCGM's energy counter
--   (gpu_energy_samples, DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) where scraped, else its power
--   reading x the step (DCGM_FI_DEV_POWER_USAGE; MIG instances repeat their GPU's, so the GPU
--   counts once). The pods holding it share it as they share its cost: a MIG instance its compute
--   slices / 7, a pod holding part of a GPU by time-slicing, MPS, a vGPU (HAMi, Volcano), a KAI
--   fraction or a shared DRA claim its share (pod_gpu_shares), other pods measured on one GPU
--   equal parts; never more than the GPU between them, and the rest (an idle GPU, free MIG
--   instances, shares nobody holds) has no holder. A holder is the pod DCGM names; its workload,
--   queue, team and share are those of the pod of that name that held GPUs for most of the hour
--   (pod_gpu_allocations; a name reused by a restart is the incarnation running then, the tie
--   to the one holding it later in the hour, then the larger uid); a pod no allocation covers that hour is
--   its own workload (kind Pod, team its namespace). So an hour's rows depend only on that
--   hour's samples and the allocations covering it: the refresh rebuilds only the hours a load
--   changed. The node's region (energy_rates) is looked up by energy_by.
WITH gk AS (
    -- the samples' GPU keys (a GPU or one of its MIG instances) and, as gid, the physical GPU:
    -- everything below joins and partitions integers, the names are looked up at the end
    SELECT gpu_key, cluster, gpu_uuid, mig_instance, dense_rank() OVER (ORDER BY cluster, gpu_uuid) AS gid
    FROM gpu_keys
),
gpus AS (
    SELECT DISTINCT gid, cluster, gpu_uuid FROM gk
),
s AS NOT MATERIALIZED (
    SELECT k.gid, f.gpu_key, k.mig_instance, f.ts, f.node_key, f.pod_key, f.label_key, f.step_s, f.power_w
    FROM gpu_sample_facts f JOIN gk k USING (gpu_key)
    WHERE f.ts >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND f.ts < coalesce($hour_to, 'infinity'::TIMESTAMP)
),
e AS MATERIALIZED (
    SELECT s.gid, s.ts, any_value(s.node_key) AS node_key, max(s.step_s) AS step_s,
           coalesce(any_value(c.energy_j), max(s.power_w) * max(s.step_s)) AS joules,
           any_value(c.energy_j) IS NOT NULL AS from_counter
    FROM s
    LEFT JOIN (SELECT g.gid, c.ts, c.energy_j
               FROM gpu_energy_samples c JOIN gpus g USING (cluster, gpu_uuid)
               WHERE c.ts >= coalesce($hour_from, '-infinity'::TIMESTAMP)
                 AND c.ts < coalesce($hour_to, 'infinity'::TIMESTAMP)) c
           ON c.gid = s.gid AND c.ts = s.ts
    GROUP BY s.gid, s.ts
),
held_by AS MATERIALIZED (
    -- per pod name and hour, the pod of that name whose allocation covered most of the hour (every
    -- order key clipped to the hour, so only the allocations covering it decide)
    SELECT ph.pod_key, ph.hour, a.cluster, a.uid, a.workload_kind, a.workload, a.queue, a.cluster_queue, a.team
    FROM (SELECT DISTINCT pod_key, date_trunc('hour', ts) AS hour FROM s) ph
    JOIN pod_keys k USING (pod_key)
    JOIN pod_gpu_allocations a
      ON a.cluster = k.cluster AND a.namespace = k.namespace AND a.pod = k.pod
     AND a.start_ts < ph.hour + INTERVAL 1 HOUR AND coalesce(a.end_ts, 'infinity'::TIMESTAMP) > ph.hour
    QUALIFY row_number() OVER (
        PARTITION BY ph.pod_key, ph.hour
        ORDER BY least(coalesce(a.end_ts, 'infinity'::TIMESTAMP), ph.hour + INTERVAL 1 HOUR)
                     - greatest(a.start_ts, ph.hour) DESC,
                 least(coalesce(a.end_ts, 'infinity'::TIMESTAMP), ph.hour + INTERVAL 1 HOUR) DESC,
                 greatest(a.start_ts, ph.hour) DESC, a.uid DESC) = 1
),
fractional AS (
    -- the part of one GPU that pod holds where it holds part of one (pod_gpu_shares)
    SELECT b.pod_key, b.hour, max(sh.share) AS share
    FROM held_by b
    JOIN pod_gpu_shares sh ON sh.cluster = b.cluster AND sh.uid = b.uid
    WHERE sh.kind IN ('timeslice', 'mps', 'vgpu', 'kai') OR (sh.kind = 'dra' AND sh.share < 1)
    GROUP BY ALL
),
mig AS (
    SELECT label_key, coalesce(try_cast(regexp_extract(mig_profile, '^(\d+)g', 1) AS INTEGER), 1) / 7.0 AS share
    FROM sample_labels
),
h AS (
    SELECT g.gid, g.ts, g.pod_key,
           CASE WHEN g.mig_instance >= 0 THEN m.share
                WHEN f.share IS NOT NULL THEN f.share
                ELSE 1.0 / count(*) OVER (PARTITION BY g.gpu_key, g.ts) END AS share
    FROM s g
    JOIN mig m USING (label_key)
    LEFT JOIN fractional f ON f.pod_key = g.pod_key AND f.hour = date_trunc('hour', g.ts)
    WHERE g.pod_key NOT IN (SELECT pod_key FROM pod_keys WHERE pod = '')
),
hn AS MATERIALIZED (
    -- never more than the whole GPU, whatever the labels say
    SELECT gid, ts, pod_key, share / greatest(1.0, sum(share) OVER (PARTITION BY gid, ts)) AS part FROM h
),
held AS (
    SELECT gid, ts, sum(part) AS part FROM hn GROUP BY gid, ts
),
parts AS (
    SELECT e.gid, e.ts, e.node_key, e.from_counter, hn.pod_key, e.joules * hn.part AS joules
    FROM e JOIN hn ON hn.gid = e.gid AND hn.ts = e.ts
    UNION ALL
    SELECT e.gid, e.ts, e.node_key, e.from_counter, NULL, e.joules * greatest(0.0, 1.0 - coalesce(held.part, 0))
    FROM e LEFT JOIN held ON held.gid = e.gid AND held.ts = e.ts
),
hourly AS (
    -- each GPU's joules per hour, node and holder (summed again by name below)
    SELECT gid, date_trunc('hour', ts) AS hour, node_key, pod_key, sum(joules) AS joules,
           sum(joules) FILTER (WHERE from_counter) AS joules_from_counter
    FROM parts
    WHERE joules IS NOT NULL
    GROUP BY ALL
)
SELECT g.cluster, p.hour, nk.node, pk.namespace,
       coalesce(b.workload_kind, CASE WHEN pk.pod IS NOT NULL THEN 'Pod' END) AS workload_kind,
       coalesce(b.workload, pk.pod) AS workload, b.queue, b.cluster_queue, coalesce(b.team, pk.namespace) AS team,
       sum(p.joules) / 3.6e6 AS energy_kwh,
       sum(p.joules_from_counter) / 3.6e6 AS energy_kwh_from_counter,
       count(DISTINCT p.gid) AS gpus
FROM hourly p
JOIN gpus g USING (gid)
LEFT JOIN node_keys nk USING (node_key)
LEFT JOIN pod_keys pk USING (pod_key)
LEFT JOIN held_by b ON b.pod_key = p.pod_key AND b.hour = p.hour
GROUP BY ALL

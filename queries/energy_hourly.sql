-- name: energy_hourly
-- grain: one row per cluster, clock hour, node and holder (namespace, workload; NULL = no holder)
-- materialize: table
-- depends: pod_gpu_allocations, pod_gpu_shares
-- columns: cluster, hour, node, region, namespace, workload_kind, workload, queue, cluster_queue, team,
--   energy_kwh, energy_kwh_from_counter, gpus
-- description: GPU energy per holder and hour. A GPU-step's joules come from DCGM's energy counter
--   (gpu_energy_samples, DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) where scraped, else its power
--   reading x the step (DCGM_FI_DEV_POWER_USAGE; MIG instances repeat their GPU's, so the GPU
--   counts once). The pods holding it share it as they share its cost: a MIG instance its compute
--   slices / 7, a pod holding part of a GPU by time-slicing, MPS, a vGPU (HAMi, Volcano), a KAI
--   fraction or a shared DRA claim its share (pod_gpu_shares), other pods measured on one GPU
--   equal parts; never more than the GPU between them, and the rest (an idle GPU, free MIG
--   instances, shares nobody holds) has no holder. region is the node's zone without its letter
--   (us-east-1a -> us-east-1), for energy_rates.
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
),
e AS MATERIALIZED (
    SELECT s.gid, s.ts, any_value(s.node_key) AS node_key, max(s.step_s) AS step_s,
           coalesce(any_value(c.energy_j), max(s.power_w) * max(s.step_s)) AS joules,
           any_value(c.energy_j) IS NOT NULL AS from_counter
    FROM s
    LEFT JOIN (SELECT g.gid, c.ts, c.energy_j FROM gpu_energy_samples c JOIN gpus g USING (cluster, gpu_uuid)) c
           ON c.gid = s.gid AND c.ts = s.ts
    GROUP BY s.gid, s.ts
),
fractional AS (
    -- the part of one GPU a pod holds where it holds part of one (pod_gpu_shares)
    SELECT k.pod_key, max(s.share) AS share
    FROM pods p
    JOIN pod_gpu_shares s ON s.cluster = p.cluster AND s.uid = p.uid
    JOIN pod_keys k ON k.cluster = p.cluster AND k.namespace = p.namespace AND k.pod = p.name
    WHERE s.kind IN ('timeslice', 'mps', 'vgpu', 'kai') OR (s.kind = 'dra' AND s.share < 1)
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
    LEFT JOIN fractional f USING (pod_key)
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
),
named AS (
    SELECT g.cluster, p.hour, nk.node, p.gid, pk.namespace, pk.pod, p.joules, p.joules_from_counter
    FROM hourly p
    JOIN gpus g USING (gid)
    LEFT JOIN node_keys nk USING (node_key)
    LEFT JOIN pod_keys pk USING (pod_key)
),
w AS (
    SELECT cluster, namespace, pod, arg_max(workload_kind, end_ts) AS workload_kind, arg_max(workload, end_ts) AS workload,
           arg_max(queue, end_ts) AS queue, arg_max(cluster_queue, end_ts) AS cluster_queue,
           arg_max(team, end_ts) AS team
    FROM pod_gpu_allocations
    GROUP BY ALL
)
SELECT p.cluster, p.hour, p.node,
       CASE WHEN regexp_matches(n.zone, '^[a-z]+-[a-z]+-[0-9]+[a-z]$') THEN left(n.zone, -1)
            WHEN regexp_matches(n.zone, '^[a-z]+-[a-z]+[0-9]+-[a-z]$') THEN left(n.zone, -2)
            ELSE n.zone END AS region,
       p.namespace, coalesce(w.workload_kind, CASE WHEN p.pod IS NOT NULL THEN 'Pod' END) AS workload_kind,
       coalesce(w.workload, p.pod) AS workload, w.queue, w.cluster_queue, coalesce(w.team, p.namespace) AS team,
       sum(p.joules) / 3.6e6 AS energy_kwh,
       sum(p.joules_from_counter) / 3.6e6 AS energy_kwh_from_counter,
       count(DISTINCT p.gid) AS gpus
FROM named p
LEFT JOIN w ON w.cluster = p.cluster AND w.namespace = p.namespace AND w.pod = p.pod
LEFT JOIN nodes n ON n.cluster = p.cluster AND n.node = p.node
GROUP BY ALL

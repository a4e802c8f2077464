-- name: energy_hourly
-- grain: one row per cluster, clock hour, node and holder (namespace, workload; NULL = no holder)
-- materialize: table
-- depends: pod_gpu_allocations, pod_gpu_shares
-- description: GPU energy per holder and hour. A GPU-step's joules come from DCGM's energy counter
--   (gpu_energy_samples, DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) where scraped, else its power
--   reading x the step (DCGM_FI_DEV_POWER_USAGE; MIG instances repeat their GPU's, so the GPU
--   counts once). The pods holding it share it as they share its cost: a MIG instance its compute
--   slices / 7, a pod holding part of a GPU by time-slicing, MPS, a vGPU (HAMi, Volcano), a KAI
--   fraction or a shared DRA claim its share (pod_gpu_shares), other pods measured on one GPU
--   equal parts; never more than the GPU between them, and the rest (an idle GPU, free MIG
--   instances, shares nobody holds) has no holder. region is the node's zone without its letter
--   (us-east-1a -> us-east-1), for energy_rates.
WITH e AS (
    SELECT s.cluster, s.gpu_uuid, s.ts, any_value(s.node) AS node, max(s.step_s) AS step_s,
           coalesce(any_value(c.energy_j), max(s.power_w) * max(s.step_s)) AS joules,
           any_value(c.energy_j) IS NOT NULL AS from_counter
    FROM gpu_samples s
    LEFT JOIN gpu_energy_samples c ON c.cluster = s.cluster AND c.gpu_uuid = s.gpu_uuid AND c.ts = s.ts
    GROUP BY s.cluster, s.gpu_uuid, s.ts
),
fractional AS (
    -- the part of one GPU a pod holds where it holds part of one (pod_gpu_shares)
    SELECT p.cluster, p.namespace, p.name AS pod, max(s.share) AS share
    FROM pods p
    JOIN pod_gpu_shares s ON s.cluster = p.cluster AND s.uid = p.uid
    WHERE s.kind IN ('timeslice', 'mps', 'vgpu', 'kai') OR (s.kind = 'dra' AND s.share < 1)
    GROUP BY ALL
),
h AS (
    SELECT g.cluster, g.gpu_uuid, g.ts, g.namespace, g.pod,
           CASE WHEN g.mig_instance >= 0
                THEN coalesce(try_cast(regexp_extract(g.mig_profile, '^(\d+)g', 1) AS INTEGER), 1) / 7.0
                WHEN f.share IS NOT NULL THEN f.share
                ELSE 1.0 / count(*) OVER (PARTITION BY g.cluster, g.gpu_uuid, g.ts, g.mig_instance) END AS share
    FROM gpu_samples g
    LEFT JOIN fractional f ON f.cluster = g.cluster AND f.namespace = g.namespace AND f.pod = g.pod
    WHERE g.pod <> ''
),
hn AS (
    -- never more than the whole GPU, whatever the labels say
    SELECT *, share / greatest(1.0, sum(share) OVER (PARTITION BY cluster, gpu_uuid, ts)) AS part FROM h
),
parts AS (
    SELECT e.cluster, e.ts, e.node, e.gpu_uuid, e.step_s, e.from_counter, hn.namespace, hn.pod, e.joules * hn.part AS joules
    FROM e JOIN hn ON hn.cluster = e.cluster AND hn.gpu_uuid = e.gpu_uuid AND hn.ts = e.ts
    UNION ALL
    SELECT e.cluster, e.ts, e.node, e.gpu_uuid, e.step_s, e.from_counter, NULL, NULL,
           e.joules * greatest(0.0, 1.0 - coalesce(sum(hn.part), 0))
    FROM e LEFT JOIN hn ON hn.cluster = e.cluster AND hn.gpu_uuid = e.gpu_uuid AND hn.ts = e.ts
    GROUP BY e.cluster, e.ts, e.node, e.gpu_uuid, e.step_s, e.from_counter, e.joules
),
w AS (
    SELECT cluster, namespace, pod, arg_max(workload_kind, end_ts) AS workload_kind, arg_max(workload, end_ts) AS workload,
           arg_max(queue, end_ts) AS queue, arg_max(cluster_queue, end_ts) AS cluster_queue,
           arg_max(team, end_ts) AS team
    FROM pod_gpu_allocations
    GROUP BY ALL
)
SELECT p.cluster, date_trunc('hour', p.ts) AS hour, p.node,
       CASE WHEN regexp_matches(n.zone, '^[a-z]+-[a-z]+-[0-9]+[a-z]$') THEN left(n.zone, -1)
            WHEN regexp_matches(n.zone, '^[a-z]+-[a-z]+[0-9]+-[a-z]$') THEN left(n.zone, -2)
            ELSE n.zone END AS region,
       p.namespace, coalesce(w.workload_kind, CASE WHEN p.pod IS NOT NULL THEN 'Pod' END) AS workload_kind,
       coalesce(w.workload, p.pod) AS workload, w.queue, w.cluster_queue, coalesce(w.team, p.namespace) AS team,
       sum(p.joules) / 3.6e6 AS energy_kwh,
       sum(p.joules) FILTER (WHERE p.from_counter) / 3.6e6 AS energy_kwh_from_counter,
       count(DISTINCT p.gpu_uuid) AS gpus
FROM parts p
LEFT JOIN w ON w.cluster = p.cluster AND w.namespace = p.namespace AND w.pod = p.pod
LEFT JOIN nodes n ON n.cluster = p.cluster AND n.node = p.node
WHERE p.joules IS NOT NULL
GROUP BY ALL

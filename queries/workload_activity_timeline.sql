-- name: workload_activity_timeline
-- grain: one row per step of one workload (its pods' whole-GPU steps averaged over its pods)
-- param: namespace VARCHAR = NULL -- the workload's namespace
-- param: workload VARCHAR = NULL -- the workload (Deployment, StatefulSet, Volcano Job ...)
-- param: cluster VARCHAR = NULL -- its cluster (default: the workload of that name in every cluster, together)
-- param: since TIMESTAMP = NULL -- start of the window (inclusive)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: typical_hour BOOLEAN = false -- only the steps of its typical hour (what the report draws)
-- columns: ts, step_s, gr_active, gr_active_min, gr_active_max, fb_used_mib, pcie_rx_bps, nvlink_rx_bps,
--   cpu_cores, cpu_request
-- description: the activity of one workload step by step, the picture behind an input_starved
--   finding: GR activity mean and per-step min/max, framebuffer used, PCIe and NVLink receive
--   rates (bytes/s, summed over the workload's GPUs, averaged over its pods), container CPU
--   (cores, per pod) and the pods' CPU request. Read from the pod-steps (gpu_pod_steps: a pod's
--   whole GPUs with a GR activity reading, per step), the rows the input_starved rule reads.
--   typical_hour: the steps of the clock hour whose mean GR activity is closest to the median
--   hour's among the hours with the most steps (a whole hour, not one cut by the window's
--   edge; distances within 1e-9 tie: the earliest), as reports.signals.typical_hour picks it
--   from all the steps.
WITH names AS (
    SELECT DISTINCT cluster, namespace, pod
    FROM pod_gpu_allocations
    WHERE namespace = $namespace AND workload = $workload AND ($cluster IS NULL OR cluster = $cluster)
),
per_pod AS MATERIALIZED (
    SELECT k.cluster, k.namespace, k.pod, s.ts, s.step_s, s.gr AS gr_active, s.gr_min AS gr_active_min,
           s.gr_max AS gr_active_max, s.fb_mib AS fb_used_mib, s.pcie_rx_bps, s.nvlink_rx_bps
    FROM gpu_pod_steps s
    JOIN pod_keys k USING (pod_key)
    SEMI JOIN names n ON n.cluster = k.cluster AND n.namespace = k.namespace AND n.pod = k.pod
    WHERE s.ts >= coalesce($since, '-infinity'::TIMESTAMP) AND s.ts < coalesce($until, 'infinity'::TIMESTAMP)
),
hours AS (
    -- each clock hour's mean GR activity and its steps (only asked for the typical hour)
    SELECT date_trunc('hour', ts) AS hour, avg(gr_active) AS g, count(*) AS steps
    FROM (SELECT ts, avg(gr_active) AS gr_active FROM per_pod WHERE $typical_hour GROUP BY ts)
    GROUP BY 1
),
whole AS (
    SELECT hour, g FROM hours WHERE steps = (SELECT max(steps) FROM hours)
),
typical AS (
    -- distances equal to 9 decimals (plan.model.SETTLE_DIGITS, as reports.signals.typical_hour) are
    -- equal: the earliest hour, whatever order the means were summed in
    SELECT hour FROM whole ORDER BY round(abs(g - (SELECT median(g) FROM whole)), 9) NULLS FIRST, hour LIMIT 1
),
p AS (
    SELECT * FROM per_pod
    WHERE NOT $typical_hour OR date_trunc('hour', ts) = (SELECT hour FROM typical)
)
SELECT p.ts, max(p.step_s) AS step_s, avg(p.gr_active) AS gr_active, min(p.gr_active_min) AS gr_active_min,
       max(p.gr_active_max) AS gr_active_max, avg(p.fb_used_mib) AS fb_used_mib,
       avg(p.pcie_rx_bps) AS pcie_rx_bps, avg(p.nvlink_rx_bps) AS nvlink_rx_bps,
       avg(c.cpu_cores) AS cpu_cores, avg(pd.cpu_request) AS cpu_request
FROM p
LEFT JOIN pod_cpu_samples c ON c.cluster = p.cluster AND c.namespace = p.namespace AND c.pod = p.pod AND c.ts = p.ts
LEFT JOIN (SELECT cluster, namespace, name, max(cpu_request) AS cpu_request FROM pods
           SEMI JOIN names n ON n.cluster = pods.cluster AND n.namespace = pods.namespace AND n.pod = pods.name
           GROUP BY ALL) pd
  ON pd.cluster = p.cluster AND pd.namespace = p.namespace AND pd.name = p.pod
GROUP BY p.ts
ORDER BY p.ts

-- name: workload_activity_timeline
-- grain: one row per step of one workload (its whole-GPU samples averaged over its GPUs)
-- param: namespace VARCHAR = NULL -- the workload's namespace
-- param: workload VARCHAR = NULL -- the workload (Deployment, StatefulSet, Volcano Job ...)
-- param: cluster VARCHAR = NULL -- its cluster (default: the workload of that name in every cluster, together)
-- param: since TIMESTAMP = NULL -- start of the window (inclusive)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- columns: ts, step_s, gr_active, gr_active_min, gr_active_max, fb_used_mib, pcie_rx_bps, nvlink_rx_bps,
--   cpu_cores, cpu_request
-- description: the activity of one workload step by step, the picture behind an input_starved
--   finding: GR activity mean and per-step min/max, framebuffer used, PCIe and NVLink receive
--   rates (bytes/s, summed over the workload's GPUs, averaged over its pods), container CPU
--   (cores, per pod) and the pods' CPU request. The report draws a typical hour of it.
WITH names AS (
    SELECT cluster, namespace, pod, any_value(workload) AS workload
    FROM pod_gpu_allocations
    WHERE namespace = $namespace AND workload = $workload AND ($cluster IS NULL OR cluster = $cluster)
    GROUP BY cluster, namespace, pod
),
per_pod AS (
    SELECT g.cluster, g.namespace, g.pod, g.ts, max(g.step_s) AS step_s,
           avg(g.gr_active) AS gr_active, min(coalesce(g.gr_active_min, g.gr_active)) AS gr_active_min,
           max(g.gr_active_max) AS gr_active_max, avg(g.fb_used_mib) AS fb_used_mib,
           sum(g.pcie_rx_bps) AS pcie_rx_bps, sum(g.nvlink_rx_bps) AS nvlink_rx_bps
    FROM gpu_samples g
    JOIN names n ON n.cluster = g.cluster AND n.namespace = g.namespace AND n.pod = g.pod
    WHERE g.mig_instance < 0
      AND g.ts >= coalesce($since, '-infinity'::TIMESTAMP) AND g.ts < coalesce($until, 'infinity'::TIMESTAMP)
    GROUP BY ALL
)
SELECT p.ts, max(p.step_s) AS step_s, avg(p.gr_active) AS gr_active, min(p.gr_active_min) AS gr_active_min,
       max(p.gr_active_max) AS gr_active_max, avg(p.fb_used_mib) AS fb_used_mib,
       avg(p.pcie_rx_bps) AS pcie_rx_bps, avg(p.nvlink_rx_bps) AS nvlink_rx_bps,
       avg(c.cpu_cores) AS cpu_cores, avg(pd.cpu_request) AS cpu_request
FROM per_pod p
LEFT JOIN pod_cpu_samples c ON c.cluster = p.cluster AND c.namespace = p.namespace AND c.pod = p.pod AND c.ts = p.ts
LEFT JOIN (SELECT cluster, namespace, name, max(cpu_request) AS cpu_request FROM pods GROUP BY ALL) pd
  ON pd.cluster = p.cluster AND pd.namespace = p.namespace AND pd.name = p.pod
GROUP BY p.ts
ORDER BY p.ts

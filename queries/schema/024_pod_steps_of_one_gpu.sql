-- name: 024_pod_steps_of_one_gpu
-- description: pod_steps_of (014, 019) without grouping the steps of a pod that held one whole
--   GPU in the range: such a pod has at most one sample per step (the samples' natural key is
--   GPU, step and pod), so its pod-steps are its samples as they are (the mean, max, min and sum
--   of one value are that value; gpus 1). Only pods with samples of more than one GPU in the
--   range are grouped by step. Why: grouping every pod-step was most of the rollup's cost at
--   load (a hash table with a group per pod and step: 1.5 M groups a day at 10,000 GPUs, most
--   of them one sample). The same rows as before, so gpu_pod_steps is not rebuilt.

CREATE OR REPLACE MACRO pod_steps_of(ts_from, ts_to, only_cluster) AS TABLE
WITH held AS NOT MATERIALIZED (
    SELECT f.pod_key, f.gpu_key, f.ts, f.step_s, f.gr_active, f.gr_active_max, f.gr_active_min, f.fb_used_mib,
           f.pcie_rx_bps, f.nvlink_rx_bps
    FROM gpu_sample_facts f
    WHERE f.gr_active IS NOT NULL
      AND f.ts >= coalesce(ts_from, '-infinity'::TIMESTAMP) AND f.ts < coalesce(ts_to, 'infinity'::TIMESTAMP)
      AND f.pod_key IN (SELECT pod_key FROM pod_keys WHERE pod <> '' AND (only_cluster IS NULL OR cluster = only_cluster))
      AND f.gpu_key IN (SELECT gpu_key FROM gpu_keys WHERE mig_instance < 0 AND (only_cluster IS NULL OR cluster = only_cluster))
),
several AS (  -- pods with samples of more than one GPU in the range
    SELECT pod_key FROM (SELECT DISTINCT pod_key, gpu_key FROM held) GROUP BY pod_key HAVING count(*) > 1
)
SELECT pod_key, ts, step_s, 1 AS gpus, gr_active AS gr, gr_active_max AS gr_max,
       coalesce(gr_active_min, gr_active) AS gr_min, gr_active_min < gr_active - 1e-9 AS min_below_mean,
       fb_used_mib AS fb_mib, pcie_rx_bps, nvlink_rx_bps
FROM held
WHERE pod_key NOT IN (SELECT pod_key FROM several)
UNION ALL
SELECT pod_key, ts,
       max(step_s) AS step_s,
       count(*) AS gpus,
       avg(gr_active) AS gr,
       max(gr_active_max) AS gr_max,
       min(coalesce(gr_active_min, gr_active)) AS gr_min,
       bool_or(gr_active_min < gr_active - 1e-9) AS min_below_mean,
       avg(fb_used_mib) AS fb_mib,
       sum(pcie_rx_bps) AS pcie_rx_bps,
       sum(nvlink_rx_bps) AS nvlink_rx_bps
FROM held
WHERE pod_key IN (SELECT pod_key FROM several)
GROUP BY pod_key, ts;

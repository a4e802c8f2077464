-- name: workload_input_profile
-- grain: one row per workload (cluster, namespace, kind, name) with whole-GPU DCGM samples
-- param: since TIMESTAMP = NULL -- start of the window (inclusive)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- description: whether a workload's GPUs wait for their input: the evidence the input_starved
--   rule reads. Per pod and step the pod's GPUs are averaged (GR activity mean, per-step min and
--   max; framebuffer), their PCIe and NVLink receive rates summed, and the pod's container CPU
--   (pod_cpu_samples) joined. burst_level is the p95 of the per-step max of GR activity (what
--   the GPU does when fed); duty_cycle = mean GR activity / burst_level. A step is busy when its
--   mean reaches half the burst level, idle otherwise; idle_step_fraction counts steps whose
--   max stays below 5 % (the GPU did nothing all step), mixed_step_fraction steps holding both a
--   burst (max >= half the burst level) and a stall (min below 5 %): with one sample per step
--   (files) a step cannot be mixed, on the Prometheus path min/max come from
--   min_over_time/max_over_time at the scrape resolution (min_pushed_down). Busy and idle runs
--   (consecutive steps of one pod) give the burst period (busy_run_mean_s + idle_run_mean_s) and
--   its regularity (idle_run_cv); at step resolution a period below two steps is not resolved
--   (mixed steps say so). Framebuffer steadiness: fb_cv over steps and the framebuffer in idle
--   steps against busy ones. PCIe/NVLink RX and container CPU: means in busy and idle steps,
--   coverage (share of steps that have them) and their correlation with GR activity over steps
--   (negative: busy while the GPU waits). cpu_request is the pods' CPU request (cores).
WITH names AS (
    SELECT cluster, namespace, pod, any_value(workload_kind) AS workload_kind, any_value(workload) AS workload
    FROM pod_gpu_allocations
    GROUP BY cluster, namespace, pod
),
steps AS (
    -- one row per pod and step: the pod's GPUs averaged, its receive rates summed
    SELECT n.cluster, n.namespace, n.workload_kind, n.workload, g.pod, g.ts,
           max(g.step_s) AS step_s,
           avg(g.gr_active) AS gr,
           max(g.gr_active_max) AS gr_max,
           min(coalesce(g.gr_active_min, g.gr_active)) AS gr_min,
           bool_or(g.gr_active_min < g.gr_active - 1e-9) AS min_below_mean,
           avg(g.fb_used_mib) AS fb,
           sum(g.pcie_rx_bps) AS pcie_rx,
           sum(g.nvlink_rx_bps) AS nvlink_rx,
           count(*) AS gpus
    FROM gpu_samples g
    JOIN names n ON n.cluster = g.cluster AND n.namespace = g.namespace AND n.pod = g.pod
    WHERE g.pod <> '' AND g.mig_instance < 0 AND g.gr_active IS NOT NULL
      AND g.ts >= coalesce($since, '-infinity'::TIMESTAMP) AND g.ts < coalesce($until, 'infinity'::TIMESTAMP)
    GROUP BY ALL
),
lvl AS (
    SELECT cluster, namespace, workload_kind, workload, quantile_cont(gr_max, 0.95) AS burst_level
    FROM steps
    GROUP BY ALL
),
cls AS (
    SELECT s.*, l.burst_level, c.cpu_cores,
           s.gr >= 0.5 * l.burst_level AS busy,
           s.gr_max < 0.05 AS idle_all_step,
           s.gr_min < 0.05 AND s.gr_max >= 0.5 * l.burst_level AS mixed
    FROM steps s
    JOIN lvl l USING (cluster, namespace, workload_kind, workload)
    LEFT JOIN pod_cpu_samples c ON c.cluster = s.cluster AND c.namespace = s.namespace AND c.pod = s.pod
                               AND c.ts = s.ts
),
edges AS (
    -- a new run starts where the state changes or a step is missing
    SELECT *,
           CASE WHEN lag(busy) OVER w IS DISTINCT FROM busy
                  OR ts - lag(ts) OVER w > to_seconds(step_s) THEN 1 ELSE 0 END AS new_run
    FROM cls
    WINDOW w AS (PARTITION BY cluster, namespace, pod ORDER BY ts)
),
runs AS (
    SELECT cluster, namespace, workload_kind, workload, pod, busy,
           count(*) * max(step_s) AS len_s
    FROM (SELECT *, sum(new_run) OVER (PARTITION BY cluster, namespace, pod ORDER BY ts) AS run_id FROM edges)
    GROUP BY cluster, namespace, workload_kind, workload, pod, run_id, busy
),
run_stats AS (
    SELECT cluster, namespace, workload_kind, workload,
           count(*) FILTER (WHERE busy) AS busy_runs,
           count(*) FILTER (WHERE NOT busy) AS idle_runs,
           avg(len_s) FILTER (WHERE busy) AS busy_run_mean_s,
           avg(len_s) FILTER (WHERE NOT busy) AS idle_run_mean_s,
           stddev_pop(len_s) FILTER (WHERE NOT busy) / nullif(avg(len_s) FILTER (WHERE NOT busy), 0) AS idle_run_cv
    FROM runs
    GROUP BY ALL
),
req AS (
    SELECT p.cluster, p.namespace, n.workload_kind, n.workload, median(p.cpu_request) AS cpu_request
    FROM pods p
    JOIN names n ON n.cluster = p.cluster AND n.namespace = p.namespace AND n.pod = p.name
    WHERE p.cpu_request IS NOT NULL
    GROUP BY ALL
),
agg AS (
    SELECT cluster, namespace, workload_kind, workload,
           count(*) AS pod_steps,
           count(DISTINCT ts) * max(step_s) / 3600.0 AS hours_observed,
           max(step_s) AS step_s,
           coalesce(bool_or(min_below_mean), false) AS min_pushed_down,
           any_value(burst_level) AS burst_level,
           avg(gr) AS gr_mean,
           avg(gr) / nullif(any_value(burst_level), 0) AS duty_cycle,
           avg(CASE WHEN busy THEN 1.0 ELSE 0.0 END) AS busy_step_fraction,
           avg(CASE WHEN idle_all_step THEN 1.0 ELSE 0.0 END) AS idle_step_fraction,
           avg(CASE WHEN mixed THEN 1.0 ELSE 0.0 END) AS mixed_step_fraction,
           avg(fb) AS fb_mean_mib,
           stddev_pop(fb) / nullif(avg(fb), 0) AS fb_cv,
           avg(fb) FILTER (WHERE busy) AS fb_busy_mib,
           avg(fb) FILTER (WHERE NOT busy) AS fb_idle_mib,
           avg(gr) FILTER (WHERE NOT busy) AS gr_idle_mean,
           avg(CASE WHEN pcie_rx IS NOT NULL THEN 1.0 ELSE 0.0 END) AS pcie_coverage,
           avg(pcie_rx) FILTER (WHERE busy) AS pcie_rx_busy_bps,
           avg(pcie_rx) FILTER (WHERE NOT busy) AS pcie_rx_idle_bps,
           corr(gr, pcie_rx) AS pcie_rx_gr_corr,
           avg(CASE WHEN nvlink_rx IS NOT NULL THEN 1.0 ELSE 0.0 END) AS nvlink_coverage,
           avg(nvlink_rx) FILTER (WHERE busy) AS nvlink_rx_busy_bps,
           avg(nvlink_rx) FILTER (WHERE NOT busy) AS nvlink_rx_idle_bps,
           avg(CASE WHEN cpu_cores IS NOT NULL THEN 1.0 ELSE 0.0 END) AS cpu_coverage,
           avg(cpu_cores) FILTER (WHERE busy) AS cpu_busy_cores,
           avg(cpu_cores) FILTER (WHERE NOT busy) AS cpu_idle_cores,
           max(cpu_cores) AS cpu_max_cores,
           corr(gr, cpu_cores) AS cpu_gr_corr
    FROM cls
    GROUP BY ALL
)
SELECT agg.*, run_stats.busy_runs, run_stats.idle_runs, run_stats.busy_run_mean_s, run_stats.idle_run_mean_s,
       run_stats.busy_run_mean_s + run_stats.idle_run_mean_s AS burst_period_s, run_stats.idle_run_cv,
       req.cpu_request
FROM agg
LEFT JOIN run_stats USING (cluster, namespace, workload_kind, workload)
LEFT JOIN req USING (cluster, namespace, workload_kind, workload)
ORDER BY agg.namespace, agg.workload

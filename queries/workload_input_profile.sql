-- name: workload_input_profile
-- grain: one row per workload (cluster, namespace, kind, name) with whole-GPU DCGM samples
-- param: since TIMESTAMP = NULL -- start of the window (inclusive)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- materialize: default
-- columns: cluster, namespace, workload_kind, workload, pod_steps, hours_observed, step_s, min_pushed_down,
--   burst_level, gr_mean, duty_cycle, busy_step_fraction, idle_step_fraction, mixed_step_fraction,
--   fb_mean_mib, fb_cv, fb_busy_mib, fb_idle_mib, gr_idle_mean, pcie_coverage, pcie_rx_busy_bps,
--   pcie_rx_idle_bps, pcie_rx_gr_corr, nvlink_coverage, nvlink_rx_busy_bps, nvlink_rx_idle_bps,
--   cpu_coverage, cpu_busy_cores, cpu_idle_cores, cpu_max_cores, cpu_gr_corr, busy_runs, idle_runs,
--   busy_run_mean_s, idle_run_mean_s, burst_period_s, idle_run_cv, cpu_request
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
--   The pod-steps come from gpu_pod_steps (rolled up as samples arrive, migration 014). Runs: for
--   a workload whose steps all have one length S and lie on one grid (ts = offset + k*S, what a
--   collector's range queries give), a run is a set of steps of one pod and state whose k minus
--   their rank within that pod and state is constant (one sort), and the steps observed are the
--   union of the runs' k ranges; other workloads take the general path (a new run where the
--   state changes or the previous step is more than a step away; distinct timestamps counted).
WITH names AS (
    -- a pod name reused by another workload: the newest pod's
    SELECT cluster, namespace, pod, arg_max(workload_kind, (start_ts, uid)) AS workload_kind,
           arg_max(workload, (start_ts, uid)) AS workload
    FROM pod_gpu_allocations
    GROUP BY cluster, namespace, pod
),
ids AS MATERIALIZED (
    SELECT k.pod_key, n.cluster, n.namespace, n.pod, n.workload_kind, n.workload,
           dense_rank() OVER (ORDER BY n.cluster, n.namespace, n.workload_kind, n.workload) AS wl_id
    FROM names n JOIN pod_keys k USING (cluster, namespace, pod)
),
steps AS NOT MATERIALIZED (
    SELECT i.pod_key, i.wl_id, g.ts, g.step_s, g.gr, g.gr_max, g.gr_min, g.min_below_mean,
           g.fb_mib AS fb, g.pcie_rx_bps AS pcie_rx, g.nvlink_rx_bps AS nvlink_rx
    FROM gpu_pod_steps g
    JOIN ids i USING (pod_key)
    WHERE g.ts >= coalesce($since, '-infinity'::TIMESTAMP) AND g.ts < coalesce($until, 'infinity'::TIMESTAMP)
),
lvl AS MATERIALIZED (
    SELECT wl_id, quantile_cont(gr_max, 0.95) AS burst_level,
           coalesce(min(step_s) = max(step_s) AND min(step_s) > 0
                    AND min(phase) = max(phase) AND min(phase) >= 0, false) AS on_grid
    FROM (SELECT wl_id, gr_max, step_s, epoch_us(ts) % (nullif(step_s, 0)::BIGINT * 1000000) AS phase FROM steps)
    GROUP BY wl_id
),
cpu AS (
    SELECT i.pod_key, c.ts, c.cpu_cores
    FROM pod_cpu_samples c
    JOIN ids i USING (cluster, namespace, pod)
),
cls AS NOT MATERIALIZED (
    SELECT s.*, l.burst_level, l.on_grid, c.cpu_cores,
           s.gr >= 0.5 * l.burst_level AS busy,
           s.gr_max < 0.05 AS idle_all_step,
           s.gr_min < 0.05 AND s.gr_max >= 0.5 * l.burst_level AS mixed
    FROM steps s
    JOIN lvl l USING (wl_id)
    LEFT JOIN cpu c ON c.pod_key = s.pod_key AND c.ts = s.ts
),
islands AS MATERIALIZED (
    SELECT pod_key, busy, count(*) * any_value(step_s) AS len_s, min(slot) AS lo, max(slot) AS hi
    FROM (SELECT pod_key, busy, step_s, slot, slot - row_number() OVER (PARTITION BY pod_key, busy ORDER BY slot) AS island
          FROM (SELECT pod_key, busy, step_s, epoch_us(ts) // (nullif(step_s, 0)::BIGINT * 1000000) AS slot
                FROM cls WHERE on_grid))
    GROUP BY pod_key, busy, island
),
grid_ts AS (
    SELECT wl_id, sum(greatest(hi - greatest(lo - 1, coalesce(prev_hi, lo - 1)), 0)) AS n_ts
    FROM (SELECT i.wl_id, s.lo, s.hi,
                 max(s.hi) OVER (PARTITION BY i.wl_id ORDER BY s.lo ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_hi
          FROM islands s JOIN ids i USING (pod_key))
    GROUP BY wl_id
),
other_ts AS (
    SELECT wl_id, count(DISTINCT ts) AS n_ts FROM cls WHERE NOT on_grid GROUP BY wl_id
),
edges AS (
    SELECT pod_key, ts, step_s, busy,
           CASE WHEN lag(busy) OVER w IS DISTINCT FROM busy
                  OR ts - lag(ts) OVER w > to_seconds(step_s) THEN 1 ELSE 0 END AS new_run
    FROM cls
    WHERE NOT on_grid
    WINDOW w AS (PARTITION BY pod_key ORDER BY ts)
),
runs AS (
    SELECT pod_key, busy, len_s FROM islands
    UNION ALL
    SELECT pod_key, busy, count(*) * max(step_s) AS len_s
    FROM (SELECT *, sum(new_run) OVER (PARTITION BY pod_key ORDER BY ts) AS run_id FROM edges)
    GROUP BY pod_key, run_id, busy
),
run_stats AS (
    SELECT i.wl_id,
           count(*) FILTER (WHERE busy) AS busy_runs,
           count(*) FILTER (WHERE NOT busy) AS idle_runs,
           avg(len_s) FILTER (WHERE busy) AS busy_run_mean_s,
           avg(len_s) FILTER (WHERE NOT busy) AS idle_run_mean_s,
           stddev_pop(len_s) FILTER (WHERE NOT busy) / nullif(avg(len_s) FILTER (WHERE NOT busy), 0) AS idle_run_cv
    FROM runs JOIN ids i USING (pod_key)
    GROUP BY i.wl_id
),
req AS (
    SELECT p.cluster, p.namespace, n.workload_kind, n.workload, median(p.cpu_request) AS cpu_request
    FROM pods p
    JOIN names n ON n.cluster = p.cluster AND n.namespace = p.namespace AND n.pod = p.name
    WHERE p.cpu_request IS NOT NULL
    GROUP BY ALL
),
agg AS (
    SELECT wl_id,
           count(*) AS pod_steps,
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
    GROUP BY wl_id
),
n_ts AS (
    SELECT * FROM grid_ts UNION ALL SELECT * FROM other_ts
),
workloads AS (
    SELECT DISTINCT wl_id, cluster, namespace, workload_kind, workload FROM ids
)
SELECT w.cluster, w.namespace, w.workload_kind, w.workload, agg.pod_steps,
       n_ts.n_ts::BIGINT * agg.step_s / 3600.0 AS hours_observed,
       agg.* EXCLUDE (wl_id, pod_steps),
       run_stats.busy_runs, run_stats.idle_runs, run_stats.busy_run_mean_s, run_stats.idle_run_mean_s,
       run_stats.busy_run_mean_s + run_stats.idle_run_mean_s AS burst_period_s, run_stats.idle_run_cv,
       req.cpu_request
FROM agg
JOIN workloads w USING (wl_id)
JOIN n_ts USING (wl_id)
LEFT JOIN run_stats USING (wl_id)
LEFT JOIN req USING (cluster, namespace, workload_kind, workload)
ORDER BY w.namespace, w.workload, w.cluster, w.workload_kind

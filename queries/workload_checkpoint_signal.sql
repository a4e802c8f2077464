-- name: workload_checkpoint_signal
-- grain: one row per workload (cluster, namespace, kind, name) whose GPUs report PCIe TX
-- param: since TIMESTAMP = NULL -- start of the window (inclusive)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- columns: cluster, namespace, workload_kind, workload, step_s, gpus_with_tx, burst_events,
--   gpus_with_bursts, intervals, interval_median_s, interval_cv
-- description: periodic write bursts that tell how often a job checkpoints. Saving a checkpoint
--   copies the model and optimizer state from the GPUs to the host: a burst of PCIe TX (GPU ->
--   host) well above the GPU's usual rate. A step is a burst when its PCIe TX maximum (the
--   per-step max_over_time on the Prometheus path; from files, the step's one reading) is at
--   least 4x the GPU's median rate over the window and at least 500 MB/s (a multi-GB state
--   copied within a minute; logging and metrics traffic stays far below). Consecutive burst
--   steps are one event. Per workload: the events, the median time between consecutive events
--   of one GPU (interval_median_s) and how regular they are (interval_cv = stddev / mean of
--   the intervals), the step the bursts were seen at (at most half the interval to resolve
--   it), and how many of its GPUs showed events.
WITH names AS (
    -- a pod name reused by another workload: the newest pod's
    SELECT cluster, namespace, pod, arg_max(workload_kind, (start_ts, uid)) AS workload_kind,
           arg_max(workload, (start_ts, uid)) AS workload
    FROM pod_gpu_allocations
    GROUP BY cluster, namespace, pod
),
tx AS (
    SELECT n.cluster, n.namespace, n.workload_kind, n.workload, g.gpu_uuid, g.ts, g.step_s,
           g.pcie_tx_bps, coalesce(g.pcie_tx_max_bps, g.pcie_tx_bps) AS tx_max
    FROM gpu_samples g
    JOIN names n ON n.cluster = g.cluster AND n.namespace = g.namespace AND n.pod = g.pod
    WHERE g.pod <> '' AND g.mig_instance < 0 AND g.pcie_tx_bps IS NOT NULL
      AND g.ts >= coalesce($since, '-infinity'::TIMESTAMP) AND g.ts < coalesce($until, 'infinity'::TIMESTAMP)
),
base AS (
    SELECT cluster, gpu_uuid, median(pcie_tx_bps) AS tx_median FROM tx GROUP BY ALL
),
flagged AS (
    SELECT t.*, t.tx_max >= greatest(4 * b.tx_median, 5e8) AS burst
    FROM tx t JOIN base b USING (cluster, gpu_uuid)
),
events AS (
    SELECT * FROM (
        SELECT *, lag(burst) OVER w AS prev_burst, lag(ts) OVER w AS prev_ts FROM flagged
        WINDOW w AS (PARTITION BY cluster, gpu_uuid ORDER BY ts))
    WHERE burst AND NOT (coalesce(prev_burst, false) AND ts - prev_ts <= to_seconds(step_s))
),
gaps AS (
    SELECT cluster, namespace, workload_kind, workload, gpu_uuid, step_s,
           epoch(ts - lag(ts) OVER (PARTITION BY cluster, gpu_uuid ORDER BY ts)) AS gap_s
    FROM events
),
ev AS (
    SELECT cluster, namespace, workload_kind, workload, count(*) AS burst_events,
           count(DISTINCT gpu_uuid) AS gpus_with_bursts
    FROM events GROUP BY ALL
),
gs AS (
    SELECT cluster, namespace, workload_kind, workload, count(gap_s) AS intervals,
           median(gap_s) AS interval_median_s, stddev_pop(gap_s) / nullif(avg(gap_s), 0) AS interval_cv
    FROM gaps WHERE gap_s IS NOT NULL GROUP BY ALL
),
t AS (
    SELECT cluster, namespace, workload_kind, workload, max(step_s) AS step_s,
           count(DISTINCT gpu_uuid) AS gpus_with_tx
    FROM tx GROUP BY ALL
)
SELECT t.*, coalesce(ev.burst_events, 0) AS burst_events, coalesce(ev.gpus_with_bursts, 0) AS gpus_with_bursts,
       coalesce(gs.intervals, 0) AS intervals, gs.interval_median_s, gs.interval_cv
FROM t
LEFT JOIN ev USING (cluster, namespace, workload_kind, workload)
LEFT JOIN gs USING (cluster, namespace, workload_kind, workload)
ORDER BY t.namespace, t.workload

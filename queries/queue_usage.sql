-- name: queue_usage
-- grain: one row per Volcano queue (configured, or only seen on pods)
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- columns: cluster, queue, weight, capability_gpu, deserved_gpu, guarantee_gpu, reclaimable, state, parent,
--   allocated_gpu_avg, allocated_gpu_p95, allocated_gpu_max, used_gpu_avg, pods, pending_p50_s,
--   pending_p95_s, pending_pods, weight_share, capability, deserved, guarantee, largest_pod_gpus,
--   largest_gang_gpus
-- description: each queue's quota (weight; capability, deserved and guarantee in
--   nvidia.com/gpu) against what its pods held (GPU-equivalents per hour: mean, p95, max) and
--   used (held x GR activity), how long its pods waited to be scheduled (p50/p95 s), and the
--   floors a resize must keep: the largest nvidia.com/gpu request of one pod (largest_pod_gpus)
--   and of one gang (largest_gang_gpus: a PodGroup's minResources, or a Volcano Job's
--   minAvailable pods at its largest per-pod request) among the queue's running, pending and
--   recent (seen in the window) pods, and every PodGroup and Job that is live: in the newest
--   snapshot of its kind (k8s_snapshots) and not in a terminal phase, whatever its timestamps
--   say (a Job read from a dump with no status and no creationTimestamp still counts).
WITH hourly AS (
    SELECT cluster, queue, hour, sum(gpu_hours) AS held, sum(gpu_hours * coalesce(gr_active_avg, 0)) AS used
    FROM allocation_hourly
    WHERE queue IS NOT NULL AND hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP)
    GROUP BY cluster, queue, hour
),
span AS (
    SELECT count(DISTINCT hour) AS hours FROM node_hours WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP)
),
use AS (
    SELECT cluster, queue,
           sum(held) / nullif((SELECT hours FROM span), 0) AS allocated_gpu_avg,
           quantile_cont(held, 0.95) AS allocated_gpu_p95,
           max(held) AS allocated_gpu_max,
           sum(used) / nullif((SELECT hours FROM span), 0) AS used_gpu_avg
    FROM hourly
    GROUP BY cluster, queue
),
wait AS (
    SELECT cluster, queue,
           count(*) AS pods,
           quantile_cont(epoch(scheduled - created), 0.5) AS pending_p50_s,
           quantile_cont(epoch(scheduled - created), 0.95) AS pending_p95_s
    FROM pod_gpu_allocations
    WHERE queue IS NOT NULL AND scheduled IS NOT NULL AND created IS NOT NULL
    GROUP BY cluster, queue
),
pending_now AS (
    -- pods that wanted GPUs and never got a node
    SELECT cluster, queue, count(*) AS pending_pods
    FROM pods
    WHERE queue IS NOT NULL AND (node IS NULL OR node = '') AND (cluster, uid) IN (SELECT cluster, uid FROM pod_gpu_shares)
      AND coalesce(phase, 'Pending') = 'Pending'
    GROUP BY cluster, queue
),
pod_need AS (
    SELECT cluster, queue, max(gpu_request) AS largest_pod_gpus
    FROM (SELECT cluster, queue, gpu_request FROM pod_gpu_allocations WHERE queue IS NOT NULL
          UNION ALL
          SELECT cluster, queue, gpu_request FROM pods
          WHERE queue IS NOT NULL AND (node IS NULL OR node = '') AND coalesce(phase, 'Pending') = 'Pending')
    GROUP BY ALL
),
recent AS (
    SELECT cluster, min(window_start) AS since FROM analysis_window GROUP BY ALL
),
newest AS (
    SELECT cluster, kind, observed_at FROM k8s_snapshots
),
job_tasks AS (
    SELECT v.cluster, v.queue, v.name, v.min_available,
           unnest(CAST(v.tasks AS JSON[])) AS t
    FROM vcjobs v
    LEFT JOIN recent r ON r.cluster = v.cluster
    LEFT JOIN newest s ON s.cluster = v.cluster AND s.kind = 'vcjobs'
    WHERE v.queue IS NOT NULL AND v.tasks IS NOT NULL
      AND (v.last_seen >= r.since                       -- seen alive (or finishing) in the window
           OR (coalesce(v.snapshot_at >= s.observed_at, true)  -- or live: in the newest read (or not known
               AND coalesce(v.phase, '') NOT IN ('Completed', 'Terminated', 'Failed', 'Aborted')))  -- to be older), not finished
),
job_need AS (
    SELECT cluster, queue, name,
           CASE WHEN any_value(min_available) IS NULL
                     OR any_value(min_available) >= sum(coalesce(try_cast(t->>'replicas' AS DOUBLE), 1))
                THEN sum(coalesce(try_cast(t->>'replicas' AS DOUBLE), 1) * coalesce(try_cast(t->>'gpus_per_pod' AS DOUBLE), 0))
                ELSE any_value(min_available) * max(coalesce(try_cast(t->>'gpus_per_pod' AS DOUBLE), 0)) END AS gpus
    FROM job_tasks
    GROUP BY ALL
),
gang_need AS (
    SELECT cluster, queue, max(gpus) AS largest_gang_gpus
    FROM (SELECT pg.cluster, pg.queue, try_cast(json_extract_string(pg.min_resources, '$."nvidia.com/gpu"') AS DOUBLE) AS gpus
          FROM podgroups pg
          LEFT JOIN recent r ON r.cluster = pg.cluster
          LEFT JOIN newest s ON s.cluster = pg.cluster AND s.kind = 'podgroups'
          WHERE pg.queue IS NOT NULL
            AND (pg.last_seen >= r.since
                 OR (coalesce(pg.snapshot_at >= s.observed_at, true) AND coalesce(pg.phase, '') <> 'Completed'))
          UNION ALL
          SELECT cluster, queue, gpus FROM job_need)
    GROUP BY ALL
),
names AS (
    SELECT cluster, name AS queue FROM queues
    UNION SELECT cluster, queue FROM use
)
SELECT
    names.cluster, names.queue,
    q.weight, q.capability_gpu, q.deserved_gpu, q.guarantee_gpu, q.reclaimable, q.state, q.parent,
    coalesce(use.allocated_gpu_avg, 0) AS allocated_gpu_avg,
    coalesce(use.allocated_gpu_p95, 0) AS allocated_gpu_p95,
    coalesce(use.allocated_gpu_max, 0) AS allocated_gpu_max,
    coalesce(use.used_gpu_avg, 0) AS used_gpu_avg,
    coalesce(wait.pods, 0) AS pods,
    wait.pending_p50_s, wait.pending_p95_s,
    coalesce(pending_now.pending_pods, 0) AS pending_pods,
    q.weight / nullif(sum(q.weight) OVER (PARTITION BY names.cluster), 0) AS weight_share,
    q.capability, q.deserved, q.guarantee,
    coalesce(pod_need.largest_pod_gpus, 0) AS largest_pod_gpus,
    coalesce(gang_need.largest_gang_gpus, 0) AS largest_gang_gpus
FROM names
LEFT JOIN queues q ON q.cluster = names.cluster AND q.name = names.queue
LEFT JOIN use ON use.cluster = names.cluster AND use.queue = names.queue
LEFT JOIN wait ON wait.cluster = names.cluster AND wait.queue = names.queue
LEFT JOIN pod_need ON pod_need.cluster = names.cluster AND pod_need.queue = names.queue
LEFT JOIN gang_need ON gang_need.cluster = names.cluster AND gang_need.queue = names.queue
LEFT JOIN pending_now ON pending_now.cluster = names.cluster AND pending_now.queue = names.queue
ORDER BY names.cluster, names.queue

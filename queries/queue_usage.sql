-- name: queue_usage
-- grain: one row per Volcano queue (configured, or only seen on pods)
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- description: each queue's quota (weight; capability, deserved and guarantee in
--   nvidia.com/gpu) against what its pods held (GPU-equivalents per hour: mean, p95, max) and
--   used (held x GR activity), and how long its pods waited to be scheduled (p50/p95 s).
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
    WHERE queue IS NOT NULL AND (node IS NULL OR node = '') AND coalesce(gpu_request, 0) + coalesce(mig_request, 0) > 0
      AND coalesce(phase, 'Pending') = 'Pending'
    GROUP BY cluster, queue
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
    q.capability, q.deserved, q.guarantee
FROM names
LEFT JOIN queues q ON q.cluster = names.cluster AND q.name = names.queue
LEFT JOIN use ON use.cluster = names.cluster AND use.queue = names.queue
LEFT JOIN wait ON wait.cluster = names.cluster AND wait.queue = names.queue
LEFT JOIN pending_now ON pending_now.cluster = names.cluster AND pending_now.queue = names.queue
ORDER BY names.cluster, names.queue

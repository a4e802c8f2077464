-- name: serving_latency
-- grain: one row per serving workload, model name and step
-- param: namespace VARCHAR = NULL -- only this namespace
-- param: workload VARCHAR = NULL -- only this workload
-- param: since TIMESTAMP = NULL -- start of the window (inclusive)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- description: latency percentiles per step: time to first token and inter-token latency
--   (p50, p95: the largest of the workload's pods, an upper bound of the pooled percentile),
--   tokens, requests and KV-cache use; pods mapped to workloads through their GPU allocations
--   (a pod with none is its own workload).
WITH w AS (
    SELECT cluster, namespace, pod, arg_max(workload, end_ts) AS workload
    FROM pod_gpu_allocations
    GROUP BY ALL
)
SELECT s.cluster, s.namespace, coalesce(w.workload, s.pod) AS workload, s.model_name, s.ts, max(s.step_s) AS step_s,
       count(DISTINCT s.pod) AS pods,
       sum(s.prompt_tokens) AS prompt_tokens, sum(s.generation_tokens) AS generation_tokens,
       sum(s.requests) AS requests,
       max(s.ttft_p50_s) AS ttft_p50_s, max(s.ttft_p95_s) AS ttft_p95_s,
       max(s.itl_p50_s) AS itl_p50_s, max(s.itl_p95_s) AS itl_p95_s,
       avg(s.kv_cache_usage) AS kv_cache_usage, max(s.kv_cache_usage_max) AS kv_cache_usage_max
FROM serving_samples s
LEFT JOIN w ON w.cluster = s.cluster AND w.namespace = s.namespace AND w.pod = s.pod
WHERE ($namespace IS NULL OR s.namespace = $namespace)
  AND ($workload IS NULL OR coalesce(w.workload, s.pod) = $workload)
  AND s.ts >= coalesce($since, '-infinity'::TIMESTAMP) AND s.ts < coalesce($until, 'infinity'::TIMESTAMP)
GROUP BY s.cluster, s.namespace, coalesce(w.workload, s.pod), s.model_name, s.ts
ORDER BY s.cluster, s.namespace, workload, s.model_name, s.ts

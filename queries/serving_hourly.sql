-- name: serving_hourly
-- grain: one row per cluster, clock hour, namespace, workload, model name and server an inference server reported
-- param: hour_from TIMESTAMP = NULL -- the first hour to build (a refresh rebuilds the hours a load touched)
-- param: hour_to TIMESTAMP = NULL -- the hour after the last to build
-- materialize: table
-- partition: hour
-- depends: allocation_hourly, waste_hourly
-- columns: cluster, hour, namespace, workload_kind, workload, queue, team, model_name, server, held_gpu,
--   pods, prompt_tokens, generation_tokens, tokens, requests, ttft_p95_s, itl_p95_s, kv_cache_usage_avg,
--   kv_cache_usage_max, gpu_hours, cost_usd, price_missing, gr_active_avg
-- description: tokens, requests and latency of each serving workload per hour, beside what the
--   GPUs it held cost that hour and how busy they were. Tokens count only from pods that held GPUs
--   that hour (allocation_hourly); a pod-hour that held none keeps its tokens with held_gpu false
--   and no cost. The workload-hour's cost is its share of the GPUs it held (waste_hourly: every
--   bucket but unallocated, shares scaled on oversubscribed nodes, so a GPU's dollars are counted
--   once), split over the models it served by their share of the hour's tokens (equal parts when
--   it served none). Latency is the largest per-step p95 of its pods (a conservative bound: the
--   p95 of pooled requests is never above the largest pod's).
WITH s AS (
    SELECT cluster, date_trunc('hour', ts) AS hour, namespace, pod, model_name, server,
           sum(prompt_tokens) AS prompt_tokens, sum(generation_tokens) AS generation_tokens,
           sum(requests) AS requests, max(ttft_p95_s) AS ttft_p95_s, max(itl_p95_s) AS itl_p95_s,
           max(kv_cache_usage_max) AS kv_cache_usage_max,
           sum(kv_cache_usage * step_s) / nullif(sum(step_s) FILTER (WHERE kv_cache_usage IS NOT NULL), 0)
               AS kv_cache_usage_avg,
           sum(step_s) AS reported_s
    FROM serving_samples
    WHERE ts >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND ts < coalesce($hour_to, 'infinity'::TIMESTAMP)
    GROUP BY ALL
),
held AS (
    -- the pod-hours that held GPUs and served, and the workload each pod belongs to: the pod of
    -- that name that held them longest that hour (a tie by uid, so every build picks the same one);
    -- only the pod-hours with serving samples (all this is joined to; a fleet without servers groups nothing)
    SELECT a.cluster, a.hour, a.namespace, a.pod, arg_max(a.workload_kind, {'s': a.covered_s, 'uid': a.uid}) AS workload_kind,
           arg_max(a.workload, {'s': a.covered_s, 'uid': a.uid}) AS workload,
           arg_max(a.queue, {'s': a.covered_s, 'uid': a.uid}) AS queue,
           arg_max(a.team, {'s': a.covered_s, 'uid': a.uid}) AS team
    FROM allocation_hourly a
    SEMI JOIN s ON s.cluster = a.cluster AND s.hour = a.hour AND s.namespace = a.namespace AND s.pod = a.pod
    WHERE a.hour >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND a.hour < coalesce($hour_to, 'infinity'::TIMESTAMP)
    GROUP BY a.cluster, a.hour, a.namespace, a.pod
),
served AS (
    -- the workload-hours that served (the only ones activity and cost are joined to)
    SELECT DISTINCT cluster, hour, namespace, workload_kind, workload FROM held
),
activity AS (
    SELECT a.cluster, a.hour, a.namespace, a.workload_kind, a.workload,
           sum(a.gr_active_avg * a.gpu_hours) / nullif(sum(a.gpu_hours) FILTER (WHERE a.gr_active_avg IS NOT NULL), 0)
               AS gr_active_avg
    FROM allocation_hourly a
    SEMI JOIN served w ON w.cluster = a.cluster AND w.hour = a.hour AND w.namespace = a.namespace
        AND w.workload_kind = a.workload_kind AND w.workload = a.workload
    WHERE a.hour >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND a.hour < coalesce($hour_to, 'infinity'::TIMESTAMP)
    GROUP BY ALL
),
cost AS (
    SELECT c.cluster, c.hour, c.namespace, c.workload_kind, c.workload,
           sum(c.usd) AS usd, sum(c.gpu_hours) AS gpu_hours, bool_or(c.price_missing) AS price_missing
    FROM waste_hourly c
    SEMI JOIN served w ON w.cluster = c.cluster AND w.hour = c.hour AND w.namespace = c.namespace
        AND w.workload_kind = c.workload_kind AND w.workload = c.workload
    WHERE c.bucket <> 'unallocated'
      AND c.hour >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND c.hour < coalesce($hour_to, 'infinity'::TIMESTAMP)
    GROUP BY ALL
),
attributed AS (
    SELECT s.cluster, s.hour, s.namespace, h.workload_kind, h.workload, h.queue, h.team, s.model_name, s.server,
           sum(s.prompt_tokens) AS prompt_tokens, sum(s.generation_tokens) AS generation_tokens,
           sum(s.requests) AS requests, max(s.ttft_p95_s) AS ttft_p95_s, max(s.itl_p95_s) AS itl_p95_s,
           max(s.kv_cache_usage_max) AS kv_cache_usage_max, avg(s.kv_cache_usage_avg) AS kv_cache_usage_avg,
           count(DISTINCT s.pod) AS pods
    FROM s
    JOIN held h ON h.cluster = s.cluster AND h.hour = s.hour AND h.namespace = s.namespace AND h.pod = s.pod
    GROUP BY ALL
),
shares AS (
    SELECT a.*,
           coalesce(a.prompt_tokens, 0) + coalesce(a.generation_tokens, 0) AS tokens,
           CASE WHEN sum(coalesce(a.prompt_tokens, 0) + coalesce(a.generation_tokens, 0))
                         OVER (PARTITION BY a.cluster, a.hour, a.namespace, a.workload_kind, a.workload) > 0
                THEN (coalesce(a.prompt_tokens, 0) + coalesce(a.generation_tokens, 0))
                     / sum(coalesce(a.prompt_tokens, 0) + coalesce(a.generation_tokens, 0))
                       OVER (PARTITION BY a.cluster, a.hour, a.namespace, a.workload_kind, a.workload)
                ELSE 1.0 / count(*) OVER (PARTITION BY a.cluster, a.hour, a.namespace, a.workload_kind, a.workload)
           END AS cost_share
    FROM attributed a
)
SELECT sh.cluster, sh.hour, sh.namespace, sh.workload_kind, sh.workload, sh.queue, sh.team, sh.model_name,
       sh.server, true AS held_gpu, sh.pods,
       sh.prompt_tokens, sh.generation_tokens, sh.tokens, sh.requests,
       sh.ttft_p95_s, sh.itl_p95_s, sh.kv_cache_usage_avg, sh.kv_cache_usage_max,
       c.gpu_hours * sh.cost_share AS gpu_hours,
       c.usd * sh.cost_share AS cost_usd,
       coalesce(c.price_missing, true) AS price_missing,
       act.gr_active_avg
FROM shares sh
LEFT JOIN cost c ON c.cluster = sh.cluster AND c.hour = sh.hour AND c.namespace = sh.namespace
    AND c.workload_kind = sh.workload_kind AND c.workload = sh.workload
LEFT JOIN activity act ON act.cluster = sh.cluster AND act.hour = sh.hour AND act.namespace = sh.namespace
    AND act.workload_kind = sh.workload_kind AND act.workload = sh.workload
UNION ALL
-- tokens from pods that held no GPU that hour: kept, never priced
SELECT s.cluster, s.hour, s.namespace, 'Pod', s.pod, NULL, NULL, s.model_name, s.server, false, 1,
       s.prompt_tokens, s.generation_tokens, coalesce(s.prompt_tokens, 0) + coalesce(s.generation_tokens, 0),
       s.requests, s.ttft_p95_s, s.itl_p95_s, s.kv_cache_usage_avg, s.kv_cache_usage_max,
       0.0, NULL, true, NULL
FROM s
ANTI JOIN held h ON h.cluster = s.cluster AND h.hour = s.hour AND h.namespace = s.namespace AND h.pod = s.pod

-- name: unit_economics
-- grain: one row per serving workload (cluster, namespace, workload) and model name
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: namespace VARCHAR = NULL -- only this namespace
-- description: what a million tokens cost on each deployment, on the GPU share it held, beside
--   how busy its GPUs were. usd_per_1m_tokens = cost / (prompt + generated tokens) x 1e6;
--   usd_per_1m_prompt_tokens and usd_per_1m_generated_tokens put the whole cost on one kind of
--   token (what it costs if only that kind were billed: there is no measured split of a GPU-second
--   between prefill and decode). Only pod-hours that held GPUs count (serving_hourly.held_gpu);
--   idle_hours are hours it held GPUs and served no token. ttft_p95_s and itl_p95_s are the
--   largest hourly p95 (docs/models.md, "Unit economics").
SELECT cluster, namespace, any_value(workload_kind) AS workload_kind, workload, model_name,
       any_value(server) AS server, any_value(queue) AS queue, any_value(team) AS team,
       count(DISTINCT hour) AS hours,
       count(DISTINCT hour) FILTER (WHERE tokens = 0) AS idle_hours,
       sum(prompt_tokens) AS prompt_tokens, sum(generation_tokens) AS generation_tokens, sum(tokens) AS tokens,
       sum(requests) AS requests,
       sum(tokens) / nullif(count(DISTINCT hour), 0) AS tokens_per_hour,
       sum(gpu_hours) AS gpu_hours, sum(cost_usd) AS cost_usd, bool_or(price_missing) AS price_missing,
       sum(cost_usd) / nullif(sum(tokens), 0) * 1e6 AS usd_per_1m_tokens,
       sum(cost_usd) / nullif(sum(prompt_tokens), 0) * 1e6 AS usd_per_1m_prompt_tokens,
       sum(cost_usd) / nullif(sum(generation_tokens), 0) * 1e6 AS usd_per_1m_generated_tokens,
       sum(gr_active_avg * gpu_hours) / nullif(sum(gpu_hours) FILTER (WHERE gr_active_avg IS NOT NULL), 0)
           AS gr_active_avg,
       max(ttft_p95_s) AS ttft_p95_s, max(itl_p95_s) AS itl_p95_s, max(kv_cache_usage_max) AS kv_cache_usage_max
FROM serving_hourly
WHERE held_gpu
  AND hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP)
  AND ($namespace IS NULL OR namespace = $namespace)
GROUP BY cluster, namespace, workload, model_name
ORDER BY cost_usd DESC NULLS LAST, cluster, namespace, workload, model_name

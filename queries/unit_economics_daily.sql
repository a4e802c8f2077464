-- name: unit_economics_daily
-- grain: one row per serving workload, model name and UTC day
-- param: namespace VARCHAR = NULL -- only this namespace
-- description: the trend of unit_economics: each day's tokens, cost on the GPU share held and
--   cost per million tokens (pod-hours that held GPUs only).
SELECT cluster, namespace, workload, model_name, date_trunc('day', hour) AS day,
       sum(tokens) AS tokens, sum(cost_usd) AS cost_usd, sum(gpu_hours) AS gpu_hours,
       sum(cost_usd) / nullif(sum(tokens), 0) * 1e6 AS usd_per_1m_tokens
FROM serving_hourly
WHERE held_gpu AND ($namespace IS NULL OR namespace = $namespace)
GROUP BY ALL
ORDER BY cluster, namespace, workload, model_name, day

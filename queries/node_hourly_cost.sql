-- name: node_hourly_cost
-- grain: one row per node per clock hour
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: node_pool VARCHAR = NULL -- only this node pool
-- columns: cluster, node, hour, node_pool, instance_type, capacity_type, zone, gpu_model, gpu_count,
--   usd_per_hour, covered_s, gpu_hours, cost_usd, price_missing
-- description: node cost per hour from the price catalog in force: instance type, capacity
--   type, GPUs, hourly price, covered seconds (partial hours prorated) and cost; price_missing
--   marks node-hours with no price (cost NULL, reported rather than taken as zero).
SELECT cluster, node, hour, node_pool, instance_type, capacity_type, zone, gpu_model, gpu_count,
       usd_per_hour, covered_s, gpu_hours, cost_usd, price_missing
FROM node_hours
WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP)
  AND hour < coalesce($until, 'infinity'::TIMESTAMP)
  AND ($node_pool IS NULL OR node_pool = $node_pool)
ORDER BY hour, node

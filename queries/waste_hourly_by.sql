-- name: waste_hourly_by
-- grain: one row per clock hour per cluster per group (per $by) per cost bucket
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: by VARCHAR IN (namespace, queue, cluster_queue, workload, node_pool, node, team) = namespace -- group by
-- param: namespace VARCHAR = NULL -- only this namespace
-- param: queue VARCHAR = NULL -- only this Volcano queue
-- param: node_pool VARCHAR = NULL -- only this node pool
-- param: cluster VARCHAR = NULL -- only this cluster (default: every cluster, each its own rows)
-- columns: hour, cluster, group, bucket, gpu_hours, usd
-- description: the cost buckets of waste_breakdown over time, for stacked charts of idle and
--   waste cost by namespace or queue.
SELECT
    hour,
    cluster,
    coalesce(cost_group($by, namespace, queue, workload, node_pool, node, team, cluster_queue), '(unallocated)') AS "group",
    bucket,
    sum(gpu_hours) AS gpu_hours,
    sum(usd) AS usd
FROM waste_hourly
WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP)
  AND hour < coalesce($until, 'infinity'::TIMESTAMP)
  AND ($namespace IS NULL OR namespace = $namespace)
  AND ($queue IS NULL OR queue = $queue)
  AND ($node_pool IS NULL OR node_pool = $node_pool)
  AND ($cluster IS NULL OR cluster = $cluster)
GROUP BY ALL
ORDER BY hour, "group", cluster, bucket

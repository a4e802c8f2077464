-- name: waste_breakdown
-- grain: one row per cluster and group (namespace, queue, workload, node_pool or node, per $by)
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: by VARCHAR IN (namespace, queue, cluster_queue, workload, node_pool, node, team) = namespace -- group by
-- param: namespace VARCHAR = NULL -- only this namespace
-- param: queue VARCHAR = NULL -- only this Volcano queue
-- param: node_pool VARCHAR = NULL -- only this node pool
-- param: cluster VARCHAR = NULL -- only this cluster (default: every cluster, each its own rows)
-- columns: cluster, group, used_usd, idle_usd, underused_usd, unallocated_usd, unmeasured_usd, total_usd,
--   used_gpu_hours, idle_gpu_hours, underused_gpu_hours, unallocated_gpu_hours, unmeasured_gpu_hours,
--   gpu_hours
-- description: GPU-hours and dollars per cost bucket: used, idle (allocated, <5 % active),
--   underused (allocated, the inactive share), unallocated (capacity nobody requested) and
--   unmeasured (held by pods with no DCGM series). Unallocated capacity has no namespace,
--   queue or workload and shows as the group '(unallocated)'. Columns add up to node cost.
--   Groups are per cluster (the same namespace in two clusters is two rows).
WITH g AS (
    SELECT
        cluster, cost_group($by, namespace, queue, workload, node_pool, node, team, cluster_queue) AS grp,
        bucket, gpu_hours, usd
    FROM waste_hourly
    WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP)
      AND hour < coalesce($until, 'infinity'::TIMESTAMP)
      AND ($namespace IS NULL OR namespace = $namespace)
      AND ($queue IS NULL OR queue = $queue)
      AND ($node_pool IS NULL OR node_pool = $node_pool)
      AND ($cluster IS NULL OR cluster = $cluster)
)
SELECT
    cluster,
    coalesce(grp, '(unallocated)') AS "group",
    sum(usd) FILTER (WHERE bucket = 'used') AS used_usd,
    sum(usd) FILTER (WHERE bucket = 'idle') AS idle_usd,
    sum(usd) FILTER (WHERE bucket = 'underused') AS underused_usd,
    sum(usd) FILTER (WHERE bucket = 'unallocated') AS unallocated_usd,
    sum(usd) FILTER (WHERE bucket = 'unmeasured') AS unmeasured_usd,
    sum(usd) AS total_usd,
    sum(gpu_hours) FILTER (WHERE bucket = 'used') AS used_gpu_hours,
    sum(gpu_hours) FILTER (WHERE bucket = 'idle') AS idle_gpu_hours,
    sum(gpu_hours) FILTER (WHERE bucket = 'underused') AS underused_gpu_hours,
    sum(gpu_hours) FILTER (WHERE bucket = 'unallocated') AS unallocated_gpu_hours,
    sum(gpu_hours) FILTER (WHERE bucket = 'unmeasured') AS unmeasured_gpu_hours,
    sum(gpu_hours) AS gpu_hours
FROM g
GROUP BY 1, 2
ORDER BY total_usd DESC NULLS LAST, 2, 1

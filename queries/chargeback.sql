-- name: chargeback
-- grain: one row per cluster and group (per $by), plus '(unallocated)' per cluster
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: by VARCHAR IN (namespace, queue, cluster_queue, workload, node_pool, node, team) = namespace -- group by
-- param: namespace VARCHAR = NULL -- only this namespace
-- param: queue VARCHAR = NULL -- only this Volcano queue
-- param: node_pool VARCHAR = NULL -- only this node pool
-- param: cluster VARCHAR = NULL -- only this cluster (default: every cluster, each its own rows)
-- columns: cluster, group, total_usd, used_usd, idle_usd, unmeasured_usd, gpu_hours, idle_share
-- description: what each group costs and how much of it was idle. Unlike OpenCost and
--   Kubecost, which count only unallocated capacity as idle, the idle and underused cost of
--   requested GPUs is charged to whoever requested them (idle_usd); unallocated capacity is a
--   separate row. total_usd = used_usd + idle_usd + unmeasured_usd. Groups are per cluster (the
--   same namespace in two clusters is two rows); the fleet's total is the sum over clusters.
WITH g AS (
    SELECT
        cluster, cost_group($by, namespace, queue, workload, node_pool, node, team, cluster_queue) AS grp,
        bucket, gpu_hours, usd
    FROM waste_hourly
    WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP)
      AND ($namespace IS NULL OR namespace = $namespace)
      AND ($queue IS NULL OR queue = $queue)
      AND ($node_pool IS NULL OR node_pool = $node_pool)
      AND ($cluster IS NULL OR cluster = $cluster)
)
SELECT
    cluster,
    coalesce(grp, '(unallocated)') AS "group",
    sum(usd) AS total_usd,
    coalesce(sum(usd) FILTER (WHERE bucket = 'used'), 0) AS used_usd,
    coalesce(sum(usd) FILTER (WHERE bucket IN ('idle', 'underused', 'unallocated')), 0) AS idle_usd,
    coalesce(sum(usd) FILTER (WHERE bucket = 'unmeasured'), 0) AS unmeasured_usd,
    sum(gpu_hours) AS gpu_hours,
    coalesce(sum(usd) FILTER (WHERE bucket IN ('idle', 'underused', 'unallocated')), 0) / nullif(sum(usd), 0) AS idle_share
FROM g
GROUP BY 1, 2
ORDER BY total_usd DESC NULLS LAST, 2, 1

-- name: fragmentation
-- grain: one row per clock hour per node pool (of a cluster)
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: cluster VARCHAR = NULL -- only this cluster (default: every cluster, each its own rows)
-- columns: hour, cluster, node_pool, free_gpus_partial_nodes, free_gpus_empty_nodes, partial_nodes,
--   empty_nodes, nodes, gpus
-- description: where the free GPUs are: scattered over partly used nodes (fragmented: a job
--   needing a whole node cannot use them) versus on whole empty nodes (reclaimable), per node
--   pool and hour. A node counts as empty below 0.01 GPUs allocated on average that hour.
WITH a AS (
    SELECT cluster, node, hour, sum(gpu_hours) AS alloc_gh
    FROM allocation_hourly
    GROUP BY cluster, node, hour
),
n AS (
    SELECT nh.cluster, nh.hour, coalesce(nh.node_pool, '(no pool)') AS node_pool, nh.gpu_count,
           coalesce(a.alloc_gh, 0) / nullif(nh.covered_s / 3600.0, 0) AS alloc_avg
    FROM node_hours nh
    LEFT JOIN a ON a.cluster = nh.cluster AND a.node = nh.node AND a.hour = nh.hour
    WHERE nh.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND nh.hour < coalesce($until, 'infinity'::TIMESTAMP)
      AND ($cluster IS NULL OR nh.cluster = $cluster)
)
SELECT
    hour, cluster, node_pool,
    sum(CASE WHEN alloc_avg > 0.01 THEN greatest(gpu_count - alloc_avg, 0) ELSE 0 END) AS free_gpus_partial_nodes,
    sum(CASE WHEN alloc_avg <= 0.01 THEN gpu_count ELSE 0 END) AS free_gpus_empty_nodes,
    count(*) FILTER (WHERE alloc_avg > 0.01 AND gpu_count - alloc_avg > 0.01) AS partial_nodes,
    count(*) FILTER (WHERE alloc_avg <= 0.01) AS empty_nodes,
    count(*) AS nodes,
    sum(gpu_count) AS gpus
FROM n
GROUP BY hour, cluster, node_pool
ORDER BY hour, node_pool, cluster

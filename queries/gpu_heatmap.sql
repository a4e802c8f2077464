-- name: gpu_heatmap
-- grain: one row per node (of a cluster) per clock hour
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: cluster VARCHAR = NULL -- only this cluster (default: every cluster, each its own rows)
-- columns: cluster, node, node_pool, hour, gr_active_avg, allocated_gpus, gpu_count
-- description: node-level GR engine activity per hour (mean over the node's GPUs; MIG
--   instances weighted by their compute slices / 7) and GPUs allocated that hour, for the fleet
--   utilization heatmap.
WITH u AS (
    -- by node key and hour first, then named
    SELECT n.cluster, n.node, u.hour, u.gr_active_avg
    FROM (
        SELECT node_key, hour, sum(gr_active_avg * wt) / nullif(sum(wt), 0) AS gr_active_avg
        FROM (
            SELECT h.node_key, h.hour, h.gr_active_avg,
                   CASE WHEN g.mig_instance < 0 THEN 1.0
                        ELSE coalesce(try_cast(regexp_extract(l.mig_profile, '^(\d+)g', 1) AS INTEGER), 1) / 7.0 END AS wt
            FROM gpu_hourly_facts h
            JOIN gpu_keys g USING (gpu_key)
            JOIN sample_labels l USING (label_key)
            WHERE h.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND h.hour < coalesce($until, 'infinity'::TIMESTAMP)
        )
        GROUP BY node_key, hour
    ) u
    JOIN node_keys n USING (node_key)
),
a AS (
    SELECT cluster, node, hour, sum(gpu_hours) AS allocated_gpus
    FROM allocation_hourly
    WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP)
    GROUP BY cluster, node, hour
)
SELECT nh.cluster, nh.node, nh.node_pool, nh.hour, u.gr_active_avg, coalesce(a.allocated_gpus, 0) AS allocated_gpus, nh.gpu_count
FROM node_hours nh
LEFT JOIN u ON u.cluster = nh.cluster AND u.node = nh.node AND u.hour = nh.hour
LEFT JOIN a ON a.cluster = nh.cluster AND a.node = nh.node AND a.hour = nh.hour
WHERE nh.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND nh.hour < coalesce($until, 'infinity'::TIMESTAMP)
  AND ($cluster IS NULL OR nh.cluster = $cluster)
ORDER BY nh.node_pool, nh.node, nh.cluster, nh.hour

-- name: gpu_heatmap_cells
-- grain: one row per node shown and time bin: the fleet utilization heatmap's cells
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: cluster VARCHAR = NULL -- only this cluster (default: every cluster, nodes named "cluster / node")
-- param: max_nodes INTEGER = 200 -- nodes shown at most: those with the most idle allocated GPU-hours
-- param: max_cells INTEGER = 4800 -- nodes x time bins at most: the bins widen to stay within it
-- columns: n, node, pool, t0, gr_active_avg, allocated_gpus, nodes, bin_hours, first_hour, last_hour
-- description: gpu_heatmap's node-hours cut down in the warehouse to what the heatmap draws: the
--   max_nodes nodes with the most idle allocated GPU-hours (sum of allocated GPUs x (1 - GR
--   active), ties by name), numbered n from 0 in (pool, node) order, and per node and time bin
--   (t0: start of a bin of bin_hours hours counted from 1970-01-01, the smallest of 1, 2, 3, 4, 6,
--   8, 12, 24, 48, 72, 168 hours that cuts first_hour..last_hour into at most max_cells / nodes
--   shown bins) the mean of its hours' GR activity and allocated GPUs. nodes: how many nodes the
--   window holds; first_hour, last_hour: its first and last hour; pool '(no pool)' when unknown.
--   The same cells as reports.charts.heatmap_cells of the gpu_heatmap frame (one reduction, two
--   places: a notebook's own frames are cut in Python).
WITH labels AS (
    -- a MIG instance counts for its compute slices / 7 of a GPU (once per label set, not per row)
    SELECT label_key, coalesce(try_cast(regexp_extract(mig_profile, '^(\d+)g', 1) AS INTEGER), 1) / 7.0 AS mig_wt
    FROM sample_labels
),
u AS (
    -- gpu_heatmap's node-hour activity: by node key and hour first, then named
    SELECT n.cluster, n.node, u.hour, u.gr_active_avg
    FROM (
        SELECT h.node_key, h.hour,
               sum(h.gr_active_avg * CASE WHEN g.mig_instance < 0 THEN 1.0 ELSE l.mig_wt END)
                   / nullif(sum(CASE WHEN g.mig_instance < 0 THEN 1.0 ELSE l.mig_wt END), 0) AS gr_active_avg
        FROM gpu_hourly_facts h
        JOIN gpu_keys g USING (gpu_key)
        JOIN labels l USING (label_key)
        WHERE h.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND h.hour < coalesce($until, 'infinity'::TIMESTAMP)
        GROUP BY h.node_key, h.hour
    ) u
    JOIN node_keys n USING (node_key)
),
a AS (
    SELECT cluster, node, hour, sum(gpu_hours) AS allocated_gpus
    FROM allocation_hourly
    WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP)
    GROUP BY cluster, node, hour
),
node_hours AS (
    SELECT nh.cluster, nh.node, nh.node_pool, nh.hour, u.gr_active_avg, coalesce(a.allocated_gpus, 0) AS allocated_gpus
    FROM node_hours nh
    LEFT JOIN u ON u.cluster = nh.cluster AND u.node = nh.node AND u.hour = nh.hour
    LEFT JOIN a ON a.cluster = nh.cluster AND a.node = nh.node AND a.hour = nh.hour
    WHERE nh.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND nh.hour < coalesce($until, 'infinity'::TIMESTAMP)
      AND ($cluster IS NULL OR nh.cluster = $cluster)
),
span AS (
    SELECT count(DISTINCT cluster) AS clusters, min(hour) AS first_hour, max(hour) AS last_hour FROM node_hours
),
per_node AS (
    SELECT nh.cluster, nh.node,
           CASE WHEN s.clusters > 1 THEN nh.cluster || ' / ' || nh.node ELSE nh.node END AS name,
           coalesce(min(nh.node_pool), '(no pool)') AS pool,
           coalesce(sum(nh.allocated_gpus * (1 - nh.gr_active_avg)), 0) AS idle_alloc
    FROM node_hours nh, span s
    GROUP BY ALL
),
shown AS (
    SELECT cluster, node, name, pool, row_number() OVER (ORDER BY pool, name) - 1 AS n
    FROM (SELECT * FROM per_node ORDER BY idle_alloc DESC, name LIMIT $max_nodes)
),
bins AS (
    SELECT s.first_hour, s.last_hour, (SELECT count(*) FROM per_node) AS nodes,
           coalesce(
               (SELECT min(h) FROM unnest([1, 2, 3, 4, 6, 8, 12, 24, 48, 72, 168]) t(h)
                WHERE ceil(span_h / h) <= max_bins),
               greatest(168, ceil(span_h / max_bins)::INTEGER)) AS bin_hours
    FROM (SELECT *, greatest(1.0, epoch(last_hour - first_hour) / 3600 + 1) AS span_h,
                 greatest(1, $max_cells // nullif((SELECT count(*) FROM shown), 0)) AS max_bins
          FROM span) s
)
SELECT sh.n, sh.name AS node, sh.pool,
       TIMESTAMP '1970-01-01' + to_hours((floor(epoch(nh.hour) / (3600 * b.bin_hours)) * b.bin_hours)::BIGINT) AS t0,
       avg(nh.gr_active_avg) AS gr_active_avg, avg(nh.allocated_gpus) AS allocated_gpus,
       b.nodes, b.bin_hours, b.first_hour, b.last_hour
FROM node_hours nh
JOIN shown sh ON sh.cluster = nh.cluster AND sh.node = nh.node
CROSS JOIN bins b
GROUP BY ALL
ORDER BY sh.n, t0

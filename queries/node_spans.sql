-- name: node_spans
-- grain: one row per GPU node of the inventory that existed in its cluster's window
-- materialize: table
-- depends: analysis_window
-- key: cluster, node
-- span: t0, t1
-- columns: cluster, node, instance_type, capacity_type, node_pool, zone, gpu_model, gpu_count, mig_config,
--   catalog, t0, t1, on_demand_usd_per_hour, spot_usd_per_hour, usd_per_hour
-- description: each GPU node's time in the window [t0, t1) and its hourly price from the catalog
--   in force: spot nodes at the spot price, others on demand; a node whose instance type has no
--   price (or a spot node with no spot price) keeps usd_per_hour NULL (price_missing downstream),
--   never taken as zero. First seen, clipped to the window start; last seen plus a step (the node
--   lives until the next step at least), clipped to the window end. node_hours splits it by hour.
WITH w AS (SELECT * FROM analysis_window),
n AS (
    SELECT
        nd.cluster, nd.node, nd.instance_type, nd.capacity_type, nd.node_pool, nd.zone,
        nd.gpu_model, coalesce(nd.gpu_count, 0) AS gpu_count, nd.mig_config, w.catalog,
        greatest(coalesce(nd.first_seen, w.window_start), w.window_start) AS t0,
        -- last_seen is the last sample; the node lives until the next step at least
        least(coalesce(nd.last_seen + to_seconds(w.step_s), w.window_end), w.window_end) AS t1
    FROM nodes nd
    JOIN w ON w.cluster = nd.cluster
    WHERE coalesce(nd.gpu_count, 0) > 0
),
priced AS (
    SELECT
        n.*,
        coalesce(pi.on_demand_usd_per_hour, pg.on_demand_usd_per_hour / pg.gpu_count * n.gpu_count) AS on_demand_usd_per_hour,
        coalesce(pi.spot_usd_per_hour, pg.spot_usd_per_hour / pg.gpu_count * n.gpu_count) AS spot_usd_per_hour
    FROM n
    -- by instance type first; else a per-GPU-model row (instance_type '') scaled to the node
    LEFT JOIN prices pi
      ON pi.catalog = n.catalog
     AND pi.instance_type = n.instance_type
    LEFT JOIN prices pg
      ON pg.catalog = n.catalog
     AND pg.instance_type = ''
     AND pg.gpu_model = n.gpu_model
     AND pg.gpu_count > 0
    WHERE n.t1 > n.t0
)
SELECT *,
    CASE WHEN capacity_type = 'spot' THEN spot_usd_per_hour ELSE on_demand_usd_per_hour END AS usd_per_hour
FROM priced

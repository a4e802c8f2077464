-- name: node_hours
-- grain: one row per node per clock hour the node existed in the window
-- materialize: table
-- depends: analysis_window
-- columns: cluster, node, hour, instance_type, capacity_type, node_pool, zone, gpu_model, gpu_count,
--   mig_config, on_demand_usd_per_hour, covered_s, usd_per_hour, price_missing, cost_usd, gpu_hours
-- description: node presence per hour with its hourly price from the catalog in force:
--   spot nodes at the spot price, others on demand; a node whose instance type has no price
--   (or a spot node with no spot price) keeps usd_per_hour NULL and price_missing = true, so
--   a missing price is reported, never taken as zero. Partial hours are prorated (covered_s).
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
h AS (
    SELECT n.*, unnest(generate_series(date_trunc('hour', n.t0), n.t1 - INTERVAL 1 MICROSECOND, INTERVAL 1 HOUR)) AS hour
    FROM n
    WHERE n.t1 > n.t0
),
priced AS (
    SELECT
        h.*,
        coalesce(pi.on_demand_usd_per_hour, pg.on_demand_usd_per_hour / pg.gpu_count * h.gpu_count) AS on_demand_usd_per_hour,
        coalesce(pi.spot_usd_per_hour, pg.spot_usd_per_hour / pg.gpu_count * h.gpu_count) AS spot_usd_per_hour
    FROM h
    -- by instance type first; else a per-GPU-model row (instance_type '') scaled to the node
    LEFT JOIN prices pi
      ON pi.catalog = h.catalog
     AND pi.instance_type = h.instance_type
    LEFT JOIN prices pg
      ON pg.catalog = h.catalog
     AND pg.instance_type = ''
     AND pg.gpu_model = h.gpu_model
     AND pg.gpu_count > 0
),
final AS (
    SELECT *,
        CASE WHEN capacity_type = 'spot' THEN spot_usd_per_hour ELSE on_demand_usd_per_hour END AS usd_per_hour
    FROM priced
)
SELECT
    cluster, node, hour, instance_type, capacity_type, node_pool, zone, gpu_model, gpu_count, mig_config,
    on_demand_usd_per_hour,
    epoch(least(t1, hour + INTERVAL 1 HOUR) - greatest(t0, hour)) AS covered_s,
    usd_per_hour,
    usd_per_hour IS NULL AS price_missing,
    usd_per_hour * epoch(least(t1, hour + INTERVAL 1 HOUR) - greatest(t0, hour)) / 3600.0 AS cost_usd,
    gpu_count * epoch(least(t1, hour + INTERVAL 1 HOUR) - greatest(t0, hour)) / 3600.0 AS gpu_hours
FROM final

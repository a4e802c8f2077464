-- name: node_hours
-- grain: one row per node per clock hour the node existed in the window
-- param: hour_from TIMESTAMP = NULL -- the first hour to build (a refresh rebuilds the hours a load touched)
-- param: hour_to TIMESTAMP = NULL -- the hour after the last to build
-- materialize: table
-- partition: hour
-- depends: node_spans
-- columns: cluster, node, hour, instance_type, capacity_type, node_pool, zone, gpu_model, gpu_count,
--   mig_config, on_demand_usd_per_hour, covered_s, usd_per_hour, price_missing, cost_usd, gpu_hours
-- description: node presence per hour with its hourly price (node_spans: the catalog in force,
--   spot nodes at the spot price, others on demand; a node whose instance type has no price, or
--   a spot node with no spot price, keeps usd_per_hour NULL and price_missing = true, so a
--   missing price is reported, never taken as zero). Partial hours are prorated (covered_s).
WITH h AS (
    SELECT n.*,
           unnest(span_hours(n.t0, n.t1, $hour_from, $hour_to)) AS hour
    FROM node_spans n
    WHERE n.t1 > coalesce($hour_from, '-infinity'::TIMESTAMP) AND n.t0 < coalesce($hour_to, 'infinity'::TIMESTAMP)
)
SELECT
    cluster, node, hour, instance_type, capacity_type, node_pool, zone, gpu_model, gpu_count, mig_config,
    on_demand_usd_per_hour,
    epoch(least(t1, hour + INTERVAL 1 HOUR) - greatest(t0, hour)) AS covered_s,
    usd_per_hour,
    usd_per_hour IS NULL AS price_missing,
    usd_per_hour * epoch(least(t1, hour + INTERVAL 1 HOUR) - greatest(t0, hour)) / 3600.0 AS cost_usd,
    gpu_count * epoch(least(t1, hour + INTERVAL 1 HOUR) - greatest(t0, hour)) / 3600.0 AS gpu_hours
FROM h

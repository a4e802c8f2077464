-- name: instance_prices
-- grain: one row per instance type (or GPU model row) in the price catalog in force
-- depends: analysis_window
-- columns: catalog, instance_type, gpu_model, gpu_count, on_demand_usd_per_hour, spot_usd_per_hour, region,
--   source, as_of
-- description: on-demand and spot hourly prices of the catalog the cost models use, with its
--   source and date, for rules that price a change (spot migration).
SELECT p.catalog, p.instance_type, p.gpu_model, p.gpu_count, p.on_demand_usd_per_hour, p.spot_usd_per_hour,
       p.region, p.source, p.as_of
FROM prices p
WHERE p.catalog = (SELECT any_value(catalog) FROM analysis_window)
ORDER BY p.instance_type

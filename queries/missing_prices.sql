-- name: missing_prices
-- grain: one row per instance type and capacity type with node-hours but no price
-- columns: cluster, instance_type, capacity_type, gpu_model, nodes, node_hours, catalog
-- description: what the price catalog in force cannot price (an instance type it lacks, or a
--   spot node when the catalog has no spot price). Those node-hours have cost NULL; add the
--   prices with `gpuinsight collect prices` to fix it.
SELECT cluster, coalesce(instance_type, '(unknown)') AS instance_type, capacity_type, gpu_model,
       count(DISTINCT node) AS nodes, sum(covered_s) / 3600.0 AS node_hours,
       (SELECT any_value(catalog) FROM analysis_window) AS catalog
FROM node_hours
WHERE price_missing
GROUP BY ALL
ORDER BY node_hours DESC

-- name: fleet_summary
-- grain: one row for the whole fleet (or the one cluster asked for) over the window
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: cluster VARCHAR = NULL -- only this cluster (default: the whole fleet)
-- columns: clusters, gpus, nodes, window_start, window_end, hours, gpu_hours, allocated_gpu_hours,
--   used_gpu_hours, total_usd, used_usd, idle_usd, underused_usd, unallocated_usd, unmeasured_usd,
--   monthly_spend_usd, monthly_waste_usd, unpriced_node_hours, unmatched_gpus, unmatched_gpu_hours,
--   unmatched_usd, unmatched_unpriced_gpus, catalog, catalog_as_of
-- description: the headline numbers: clusters, GPUs, nodes, window, GPU-hours (capacity, allocated,
--   used), cost by bucket, monthly run rates (730 h; each cluster's cost over its own hours of
--   data, then summed), and the price catalog they came from. gpus counts the inventory's GPUs
--   plus the GPUs DCGM measured that no GPU node holds (unmatched_gpus, never silently left
--   out); their GPU-hours in the window and list price (where the catalog knows their model)
--   are given apart, since no node cost, allocation or bucket includes them.
WITH wh AS (SELECT * FROM waste_hourly WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP)
                                        AND ($cluster IS NULL OR cluster = $cluster)),
nh AS (SELECT * FROM node_hours WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP)
                                  AND ($cluster IS NULL OR cluster = $cluster)),
-- measured GPUs no node of the inventory holds, with their hours in the window (one per GPU-hour)
um AS (
    SELECT u.cluster, u.gpu_uuid, u.usd_per_gpu_hour, max(h.covered_s) / 3600.0 AS gpu_hours
    FROM unmatched_gpus u
    JOIN gpu_keys g ON g.cluster = u.cluster AND g.gpu_uuid = u.gpu_uuid
    JOIN gpu_hourly_facts h USING (gpu_key)
    WHERE h.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND h.hour < coalesce($until, 'infinity'::TIMESTAMP)
      AND ($cluster IS NULL OR u.cluster = $cluster)
    GROUP BY u.cluster, u.gpu_uuid, u.usd_per_gpu_hour, h.hour
),
w AS (SELECT min(window_start) AS window_start, max(window_end) AS window_end, any_value(catalog) AS catalog,
             any_value(catalog_as_of) AS catalog_as_of FROM analysis_window
      WHERE $cluster IS NULL OR cluster = $cluster),
-- run rates per cluster: its cost over its own span inside [since, until)
rate AS (
    SELECT sum(c.usd * 730.0 / nullif(c.hours, 0)) AS monthly_spend_usd,
           sum(c.waste * 730.0 / nullif(c.hours, 0)) AS monthly_waste_usd
    FROM (
        SELECT x.cluster, sum(x.usd) AS usd,
               coalesce(sum(x.usd) FILTER (WHERE x.bucket IN ('idle', 'underused', 'unallocated')), 0) AS waste,
               any_value(window_hours(a.window_start, a.window_end, $since, $until)) AS hours
        FROM wh x
        JOIN analysis_window a ON a.cluster = x.cluster
        GROUP BY x.cluster
    ) c
)
SELECT
    (SELECT string_agg(DISTINCT cluster, ', ' ORDER BY cluster) FROM nh) AS clusters,
    coalesce((SELECT sum(gpu_count)::DOUBLE FROM (SELECT DISTINCT cluster, node, gpu_count FROM nh)), 0)
        + (SELECT count(DISTINCT (cluster, gpu_uuid)) FROM um) AS gpus,
    (SELECT count(DISTINCT (cluster, node)) FROM nh) AS nodes,
    greatest(w.window_start, coalesce($since, w.window_start)) AS window_start,
    least(w.window_end, coalesce($until, w.window_end)) AS window_end,
    window_hours(w.window_start, w.window_end, $since, $until) AS hours,
    (SELECT sum(gpu_hours) FROM nh) AS gpu_hours,
    (SELECT sum(gpu_hours) FROM wh WHERE bucket <> 'unallocated') AS allocated_gpu_hours,
    (SELECT sum(gpu_hours) FROM wh WHERE bucket = 'used') AS used_gpu_hours,
    (SELECT sum(usd) FROM wh) AS total_usd,
    (SELECT coalesce(sum(usd), 0) FROM wh WHERE bucket = 'used') AS used_usd,
    (SELECT coalesce(sum(usd), 0) FROM wh WHERE bucket = 'idle') AS idle_usd,
    (SELECT coalesce(sum(usd), 0) FROM wh WHERE bucket = 'underused') AS underused_usd,
    (SELECT coalesce(sum(usd), 0) FROM wh WHERE bucket = 'unallocated') AS unallocated_usd,
    (SELECT coalesce(sum(usd), 0) FROM wh WHERE bucket = 'unmeasured') AS unmeasured_usd,
    (SELECT monthly_spend_usd FROM rate) AS monthly_spend_usd,
    (SELECT monthly_waste_usd FROM rate) AS monthly_waste_usd,
    (SELECT sum(covered_s) / 3600.0 FROM nh WHERE price_missing) AS unpriced_node_hours,
    (SELECT count(DISTINCT (cluster, gpu_uuid)) FROM um) AS unmatched_gpus,
    (SELECT coalesce(sum(gpu_hours), 0) FROM um) AS unmatched_gpu_hours,
    (SELECT sum(gpu_hours * usd_per_gpu_hour) FROM um) AS unmatched_usd,
    (SELECT count(DISTINCT (cluster, gpu_uuid)) FROM um WHERE usd_per_gpu_hour IS NULL) AS unmatched_unpriced_gpus,
    w.catalog,
    w.catalog_as_of
FROM w

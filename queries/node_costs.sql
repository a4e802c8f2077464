-- name: node_costs
-- grain: one row per GPU node that existed in the window
-- depends: node_hours, analysis_window
-- columns: cluster, node, gpu_count, usd_per_hour, cost_usd_in_window, avg_usd_per_hour, present_at_end
-- description: what each node costs, for the savings ledger: its hourly price at the end of
--   its life in the window (NULL when the catalog has none), its average cost per hour over the
--   window, GPUs, and whether it is still present at the end of the window. A saving touching a
--   node never exceeds the larger of the two rates.
WITH last AS (
    SELECT nh.*, row_number() OVER (PARTITION BY cluster, node ORDER BY hour DESC) AS rn
    FROM node_hours nh
),
spent AS (
    SELECT cluster, node, sum(cost_usd) AS cost_usd_in_window
    FROM node_hours
    GROUP BY cluster, node
)
SELECT l.cluster, l.node, l.gpu_count, l.usd_per_hour, s.cost_usd_in_window,
       s.cost_usd_in_window / nullif(w.hours, 0) AS avg_usd_per_hour,
       l.hour + INTERVAL 1 HOUR >= w.window_end AS present_at_end
FROM last l
JOIN spent s ON s.cluster = l.cluster AND s.node = l.node
JOIN analysis_window w ON w.cluster = l.cluster
WHERE l.rn = 1
ORDER BY l.cluster, l.node

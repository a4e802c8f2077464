-- name: cluster_summary
-- grain: one row per cluster over the window
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- columns: cluster, hours, gpu_hours, allocated_gpu_hours, total_usd
-- description: each cluster's own headline GPU-hours and cost, as fleet_summary gives them for the
--   whole fleet: its hours of data inside [since, until), its GPU-hours (capacity and allocated)
--   and what they cost. What a finding about one cluster quotes (the GPUs it leaves unallocated, its
--   average price of a GPU-hour) comes from here, never from the fleet: two clusters' prices and
--   spare capacity are not each other's.
WITH wh AS (
    SELECT cluster, sum(gpu_hours) FILTER (WHERE bucket <> 'unallocated') AS allocated_gpu_hours,
           sum(usd) AS total_usd
    FROM waste_hourly
    WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP)
    GROUP BY cluster
),
nh AS (
    SELECT cluster, sum(gpu_hours) AS gpu_hours
    FROM node_hours
    WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP)
    GROUP BY cluster
)
SELECT a.cluster,
       window_hours(a.window_start, a.window_end, $since, $until) AS hours,
       nh.gpu_hours,
       wh.allocated_gpu_hours,
       wh.total_usd
FROM analysis_window a
LEFT JOIN nh ON nh.cluster = a.cluster
LEFT JOIN wh ON wh.cluster = a.cluster
ORDER BY a.cluster

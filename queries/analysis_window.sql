-- name: analysis_window
-- grain: one row per cluster: the time span the warehouse holds data for it
-- materialize: table
-- depends: pod_gpu_shares
-- columns: cluster, window_start, window_end, step_s, hours, catalog, catalog_as_of
-- description: start and end of each cluster's loaded data (from its GPU samples, else its
--   GPU pods' lifetimes), its sample step, and the price catalog in force (the most recently
--   loaded one, the same for every cluster). Every cost model reads its cluster's window and
--   the catalog from here, so clusters with different spans (or an imported trace years
--   older) never stretch each other's node-hours.
WITH s AS (
    -- per GPU first (an integer key), then per cluster
    SELECT g.cluster, min(f.t0) AS t0, max(f.t1) AS t1, max(f.step_s) AS step_s
    FROM (SELECT gpu_key, min(ts) AS t0, max(ts + to_seconds(step_s)) AS t1, max(step_s) AS step_s
          FROM gpu_sample_facts
          GROUP BY gpu_key) f
    JOIN gpu_keys g USING (gpu_key)
    GROUP BY g.cluster
),
p AS (
    SELECT cluster, min(coalesce(started, scheduled, created)) AS t0, max(coalesce(finished, last_seen)) AS t1
    FROM pods
    WHERE (cluster, uid) IN (SELECT cluster, uid FROM pod_gpu_shares)
    GROUP BY cluster
),
names AS (
    SELECT cluster FROM s UNION SELECT cluster FROM p
),
c AS (
    SELECT catalog, as_of
    FROM prices
    ORDER BY loaded_at DESC NULLS LAST, catalog
    LIMIT 1
)
SELECT
    names.cluster,
    coalesce(s.t0, p.t0) AS window_start,
    coalesce(s.t1, p.t1) AS window_end,
    coalesce(s.step_s, 300) AS step_s,
    epoch(coalesce(s.t1, p.t1) - coalesce(s.t0, p.t0)) / 3600.0 AS hours,
    c.catalog,
    c.as_of AS catalog_as_of
FROM names
LEFT JOIN s ON s.cluster = names.cluster
LEFT JOIN p ON p.cluster = names.cluster
LEFT JOIN c ON true
WHERE coalesce(s.t0, p.t0) IS NOT NULL

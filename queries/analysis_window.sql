-- name: analysis_window
-- grain: one row: the time span the warehouse holds data for
-- materialize: table
-- description: start and end of the loaded data (from GPU samples, else pod lifetimes), the
--   sample step, and the price catalog in force (the most recently loaded one). Every cost
--   model reads its window and catalog from here so all figures agree.
WITH s AS (
    SELECT min(ts) AS t0, max(ts + to_seconds(step_s)) AS t1, max(step_s) AS step_s
    FROM gpu_samples
),
p AS (
    SELECT min(coalesce(started, scheduled, created)) AS t0,
           max(coalesce(finished, last_seen)) AS t1
    FROM pods
    WHERE coalesce(gpu_request, 0) + coalesce(mig_request, 0) > 0
),
c AS (
    SELECT catalog, as_of
    FROM prices
    ORDER BY loaded_at DESC NULLS LAST, catalog
    LIMIT 1
)
SELECT
    coalesce(s.t0, p.t0) AS window_start,
    coalesce(s.t1, p.t1) AS window_end,
    coalesce(s.step_s, 300) AS step_s,
    epoch(coalesce(s.t1, p.t1) - coalesce(s.t0, p.t0)) / 3600.0 AS hours,
    (SELECT catalog FROM c) AS catalog,
    (SELECT as_of FROM c) AS catalog_as_of
FROM s, p

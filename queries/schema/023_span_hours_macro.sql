-- name: 023_span_hours_macro
-- description: the hours a time span [t0, t1) touches, within [hour_from, hour_to) when a refresh
--   rebuilds only some hours (NULL bounds: every hour). One definition for the hourly models
--   that spread a span over its hours (node_hours: node presence, allocation_hourly: pod GPU
--   allocations), so a span's first and last partial hours are cut the same way in both.

CREATE OR REPLACE MACRO span_hours(t0, t1, hour_from, hour_to) AS
    generate_series(greatest(date_trunc('hour', t0), coalesce(hour_from, date_trunc('hour', t0))),
                    least(t1, coalesce(hour_to, t1)) - INTERVAL 1 MICROSECOND,
                    INTERVAL 1 HOUR);

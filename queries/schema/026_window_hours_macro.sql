-- name: 026_window_hours_macro
-- description: the hours of a cluster's data window [window_start, window_end) inside the window a
--   report asks for [since, until) (NULL bounds: the whole of it). One definition for the summaries
--   that divide by it (cluster_summary, fleet_summary's window and its per-cluster run rates), so a
--   cluster's run rate and the hours a report shows beside it are cut the same way.

CREATE OR REPLACE MACRO window_hours(window_start, window_end, since, until) AS
    epoch(least(window_end, coalesce(until, window_end)) - greatest(window_start, coalesce(since, window_start))) / 3600.0;

-- name: rollup_gpu_hourly
-- grain: one row per GPU (or MIG instance) per clock hour per holder pod
-- param: hour_from TIMESTAMP = NULL -- first hour to rebuild
-- param: hour_to TIMESTAMP = NULL -- last hour to rebuild (inclusive)
-- description: rebuilds gpu_hourly from gpu_samples for the hours a load touched (the caller
--   deletes those hours first, in the same transaction). Means are weighted by each sample's
--   step; covered_s is capped at the hour.
INSERT INTO gpu_hourly
SELECT
    cluster,
    date_trunc('hour', ts) AS hour,
    gpu_uuid, mig_instance, mig_profile, namespace, pod,
    any_value(node) AS node,
    any_value(model_name) AS model_name,
    count(*) AS samples,
    least(sum(step_s), 3600) AS covered_s,
    sum(gr_active * step_s) / nullif(sum(step_s) FILTER (WHERE gr_active IS NOT NULL), 0) AS gr_active_avg,
    max(coalesce(gr_active_max, gr_active)) AS gr_active_max,
    sum(sm_active * step_s) / nullif(sum(step_s) FILTER (WHERE sm_active IS NOT NULL), 0) AS sm_active_avg,
    max(coalesce(sm_active_max, sm_active)) AS sm_active_max,
    sum(gpu_util * step_s) / nullif(sum(step_s) FILTER (WHERE gpu_util IS NOT NULL), 0) AS gpu_util_avg,
    sum(fb_used_mib * step_s) / nullif(sum(step_s) FILTER (WHERE fb_used_mib IS NOT NULL), 0) AS fb_used_avg_mib,
    max(coalesce(fb_used_max_mib, fb_used_mib)) AS fb_used_max_mib,
    min(fb_free_mib) AS fb_free_min_mib,
    sum(power_w * step_s) / nullif(sum(step_s) FILTER (WHERE power_w IS NOT NULL), 0) AS power_avg_w
FROM gpu_samples
WHERE ts >= coalesce($hour_from, '-infinity'::TIMESTAMP)
  AND ts < coalesce($hour_to, 'infinity'::TIMESTAMP - INTERVAL 1 HOUR) + INTERVAL 1 HOUR
GROUP BY cluster, date_trunc('hour', ts), gpu_uuid, mig_instance, mig_profile, namespace, pod

-- name: rollup_gpu_hourly
-- grain: one row per GPU (or MIG instance) per clock hour per holder pod
-- param: hour_from TIMESTAMP = NULL -- first hour to rebuild
-- param: hour_to TIMESTAMP = NULL -- last hour to rebuild (inclusive)
-- param: cluster VARCHAR = NULL -- only this cluster's hours (NULL: every cluster)
-- columns: cluster, hour, gpu_uuid, mig_instance, mig_profile, namespace, pod, node, model_name, samples,
--   covered_s, gr_active_avg, gr_active_max, sm_active_avg, sm_active_max, gpu_util_avg, fb_used_avg_mib,
--   fb_used_max_mib, fb_free_min_mib, power_avg_w
-- description: rebuilds gpu_hourly from gpu_samples for the hours a load touched (the caller
--   deletes those hours first, in the same transaction), for the cluster the load was about:
--   collecting one cluster never re-aggregates another's samples. Means are weighted by each sample's
--   step; covered_s is capped at the hour. Loaders fill the *_max columns (the value itself
--   for raw samples), so the max is taken over them alone.
INSERT INTO gpu_hourly
SELECT
    cluster,
    date_trunc('hour', ts) AS hour,
    gpu_uuid, mig_instance, arg_max(mig_profile, ts) AS mig_profile, namespace, pod,
    any_value(node) AS node,
    any_value(model_name) AS model_name,
    count(*) AS samples,
    least(sum(step_s), 3600) AS covered_s,
    -- step-weighted means; weighted_avg skips NULL values with their weights
    weighted_avg(gr_active, step_s) AS gr_active_avg,
    max(gr_active_max) AS gr_active_max,
    weighted_avg(sm_active, step_s) AS sm_active_avg,
    max(sm_active_max) AS sm_active_max,
    weighted_avg(gpu_util, step_s) AS gpu_util_avg,
    weighted_avg(fb_used_mib, step_s) AS fb_used_avg_mib,
    max(fb_used_max_mib) AS fb_used_max_mib,
    min(fb_free_mib) AS fb_free_min_mib,
    weighted_avg(power_w, step_s) AS power_avg_w
FROM gpu_samples
WHERE ts >= coalesce($hour_from, '-infinity'::TIMESTAMP)
  AND ts < coalesce($hour_to, 'infinity'::TIMESTAMP - INTERVAL 1 HOUR) + INTERVAL 1 HOUR
  AND ($cluster IS NULL OR cluster = $cluster)
GROUP BY cluster, date_trunc('hour', ts), gpu_uuid, mig_instance, namespace, pod

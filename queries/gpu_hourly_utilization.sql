-- name: gpu_hourly_utilization
-- grain: one row per GPU (or MIG instance) per clock hour per holder pod
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: node VARCHAR = NULL -- only this node
-- columns: cluster, hour, node, gpu_uuid, mig_instance, mig_profile, model_name, namespace, pod,
--   gr_active_avg, gr_active_max, sm_active_avg, sm_active_max, gpu_util_avg, fb_used_avg_mib,
--   fb_used_max_mib, fb_free_min_mib, power_avg_w, samples, covered_s
-- description: what each GPU did each hour, from the DCGM rollup: GR engine and SM activity
--   (mean and max, 0..1), framebuffer used max (MiB), power mean (W), seconds covered by
--   samples, and the pod holding it ('' when unallocated).
SELECT
    cluster, hour, node, gpu_uuid, mig_instance, mig_profile, model_name, namespace, pod,
    gr_active_avg, gr_active_max, sm_active_avg, sm_active_max, gpu_util_avg,
    fb_used_avg_mib, fb_used_max_mib, fb_free_min_mib, power_avg_w, samples, covered_s
FROM gpu_hourly
WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP)
  AND hour < coalesce($until, 'infinity'::TIMESTAMP)
  AND ($node IS NULL OR node = $node)
ORDER BY hour, node, gpu_uuid, mig_instance

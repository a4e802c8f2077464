-- name: placement_current
-- grain: one row per pod holding GPUs at the end of the window
-- materialize: table
-- depends: pod_gpu_allocations, analysis_window
-- description: the current placement the binpack rule plans moves over: pod, node, GPUs
--   held (whole-GPU equivalents), MIG profile, gang (Volcano PodGroup or Job: moved whole or
--   not at all), workload, zone, pool and GPU model of its node.
SELECT
    a.cluster, a.uid, a.namespace, a.pod, a.workload_kind, a.workload, a.node, a.node_pool, a.zone,
    a.gpu_model, a.capacity_type, a.gpus, a.gpu_request, a.mig_profile, a.mig_request, a.production,
    coalesce(a.podgroup, a.vcjob) AS gang, a.queue, a.labels
FROM pod_gpu_allocations a
JOIN analysis_window w ON w.cluster = a.cluster
WHERE a.end_ts >= w.window_end
ORDER BY a.node, a.namespace, a.pod

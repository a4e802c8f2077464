-- name: workload_sample_stats
-- grain: one row per workload (cluster, namespace, kind, name) with DCGM samples attributed
-- materialize: table
-- depends: pod_gpu_allocations
-- description: each workload's sample statistics over everything loaded (the sample_stats
--   macro, migration 006, as a struct `st`), computed once per load so that the rules and the
--   report do not sort the raw samples again; workload_gpu_profile reads it when no window is
--   given and computes the same macro over the window otherwise.
WITH names AS (
    SELECT cluster, namespace, pod, any_value(workload_kind) AS workload_kind, any_value(workload) AS workload
    FROM pod_gpu_allocations
    GROUP BY cluster, namespace, pod
)
SELECT n.cluster, n.namespace, n.workload_kind, n.workload,
       sample_stats(g.gr_active, g.gr_active_max, g.sm_active, g.sm_active_max, g.fb_used_mib, g.fb_used_max_mib,
                    g.fb_free_mib, g.step_s) AS st
FROM gpu_samples g
JOIN names n ON n.cluster = g.cluster AND n.namespace = g.namespace AND n.pod = g.pod
WHERE g.pod <> ''  -- unallocated GPUs have no workload: skip them before the join
GROUP BY n.cluster, n.namespace, n.workload_kind, n.workload

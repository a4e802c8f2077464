-- name: workload_sample_stats
-- grain: one row per workload (cluster, namespace, kind, name) with DCGM samples attributed
-- materialize: table
-- depends: pod_gpu_allocations
-- columns: cluster, namespace, workload_kind, workload, st
-- description: each workload's sample statistics over everything loaded (a struct `st`: the
--   sample_stats_core and sample_stats_tails aggregates put together by sample_stats_of,
--   migration 015; two aggregates of two exact quantiles each, which fit a memory limit where
--   one of four did not), computed once per load so that the rules and the report do not sort
--   the raw samples again; workload_gpu_profile reads it when no window is given and computes
--   the same over the window otherwise.
WITH names AS (
    SELECT cluster, namespace, pod, any_value(workload_kind) AS workload_kind, any_value(workload) AS workload
    FROM pod_gpu_allocations
    GROUP BY cluster, namespace, pod
),
attributed AS NOT MATERIALIZED (
    -- read twice, not stored: a materialized copy of every sample would be the biggest thing here
    SELECT n.cluster, n.namespace, n.workload_kind, n.workload, g.gr_active, g.gr_active_max, g.sm_active,
           g.sm_active_max, g.fb_used_mib, g.fb_used_max_mib, g.fb_free_mib, g.step_s
    FROM gpu_samples g
    JOIN names n ON n.cluster = g.cluster AND n.namespace = g.namespace AND n.pod = g.pod
    WHERE g.pod <> ''  -- unallocated GPUs have no workload: skip them before the join
),
core AS (
    SELECT cluster, namespace, workload_kind, workload,
           sample_stats_core(gr_active, gr_active_max, sm_active, sm_active_max, fb_used_mib, fb_used_max_mib,
                             fb_free_mib, step_s) AS core
    FROM attributed
    GROUP BY cluster, namespace, workload_kind, workload
),
tails AS (
    SELECT cluster, namespace, workload_kind, workload,
           sample_stats_tails(gr_active, gr_active_max, sm_active, sm_active_max, fb_used_mib) AS tails
    FROM attributed
    GROUP BY cluster, namespace, workload_kind, workload
)
SELECT cluster, namespace, workload_kind, workload, sample_stats_of(core, tails) AS st
FROM core
JOIN tails USING (cluster, namespace, workload_kind, workload)

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
    -- a pod name reused by another workload: the newest pod's
    SELECT cluster, namespace, pod, arg_max(workload_kind, (start_ts, uid)) AS workload_kind,
           arg_max(workload, (start_ts, uid)) AS workload
    FROM pod_gpu_allocations
    GROUP BY cluster, namespace, pod
),
ids AS MATERIALIZED (
    -- pods by their key (the samples' integer), workloads by a number: the aggregates below group
    -- integers, not four strings
    SELECT k.pod_key, n.cluster, n.namespace, n.workload_kind, n.workload,
           dense_rank() OVER (ORDER BY n.cluster, n.namespace, n.workload_kind, n.workload) AS wl_id
    FROM names n JOIN pod_keys k USING (cluster, namespace, pod)
),
attributed AS NOT MATERIALIZED (
    -- read twice, not stored: a materialized copy of every sample would be the biggest thing here
    SELECT i.wl_id, g.gr_active, g.gr_active_max, g.sm_active,
           g.sm_active_max, g.fb_used_mib, g.fb_used_max_mib, g.fb_free_mib, g.step_s
    FROM gpu_sample_facts g
    JOIN ids i USING (pod_key)
),
core AS (
    SELECT wl_id,
           sample_stats_core(gr_active, gr_active_max, sm_active, sm_active_max, fb_used_mib, fb_used_max_mib,
                             fb_free_mib, step_s) AS core
    FROM attributed
    GROUP BY wl_id
),
tails AS (
    SELECT wl_id, sample_stats_tails(gr_active, gr_active_max, sm_active, sm_active_max, fb_used_mib) AS tails
    FROM attributed
    GROUP BY wl_id
),
workloads AS (
    SELECT DISTINCT wl_id, cluster, namespace, workload_kind, workload FROM ids
)
SELECT w.cluster, w.namespace, w.workload_kind, w.workload, sample_stats_of(core, tails) AS st
FROM core
JOIN tails USING (wl_id)
JOIN workloads w USING (wl_id)

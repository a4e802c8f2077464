-- name: pod_gpu_allocations
-- grain: one row per pod (uid) that held GPUs on a node in the window
-- materialize: table
-- depends: analysis_window
-- description: who held which GPUs, when. gpus is in whole-GPU equivalents: nvidia.com/gpu
--   counts 1 each; a MIG slice counts compute_slices/7 of its GPU (1g.10gb = 1/7). The
--   interval is clipped to the window; a pod still running (seen within two steps of the
--   end, or only in a dump) ends at the window end; a pod that vanished ends one step after
--   its last sample. Whether a pod is production is a rule setting, not SQL: the priority
--   class, labels, annotations and namespace it is decided from are passed on (see
--   docs/rules.md, "Production"). team is the pod's team label, else its namespace.
WITH w AS (SELECT * FROM analysis_window),
p AS (
    SELECT
        p.*,
        coalesce(p.gpu_request, 0) AS whole_gpus,
        coalesce(p.mig_request, 0) AS mig_slices,
        coalesce(p.started, p.scheduled, p.created) AS t_start,
        -- alive within a step of the end (or only seen in a dump) = still running at the end
        coalesce(p.finished,
                 CASE WHEN p.last_seen >= w.window_end - to_seconds(2 * w.step_s) THEN w.window_end END,
                 p.last_seen + to_seconds(w.step_s),
                 w.window_end) AS t_end
    FROM pods p
    JOIN w ON w.cluster = p.cluster
    WHERE p.node IS NOT NULL AND p.node <> ''
      AND coalesce(p.gpu_request, 0) + coalesce(p.mig_request, 0) > 0
)
SELECT
    p.cluster, p.uid, p.namespace, p.name AS pod,
    coalesce(p.workload_kind, 'Pod') AS workload_kind,
    coalesce(p.workload, p.name) AS workload,
    p.node, n.node_pool, n.capacity_type, n.instance_type, n.zone,
    coalesce(n.gpu_model, '') AS gpu_model,
    p.queue, p.podgroup, p.vcjob, p.priority_class, p.phase,
    p.whole_gpus AS gpu_request, p.mig_profile, p.mig_slices AS mig_request,
    p.whole_gpus + p.mig_slices * coalesce(
        mp.compute_slices, try_cast(regexp_extract(p.mig_profile, '^(\d+)g', 1) AS INTEGER), 1) / 7.0 AS gpus,
    CASE WHEN p.mig_slices > 0 THEN 'mig' ELSE 'gpu' END AS alloc_kind,
    greatest(p.t_start, w.window_start) AS start_ts,
    least(p.t_end, w.window_end) AS end_ts,
    p.created, p.scheduled, p.started, p.finished,
    coalesce(json_extract_string(p.labels, '$.team'), p.namespace) AS team,
    p.labels, p.annotations
FROM p
JOIN w ON w.cluster = p.cluster
LEFT JOIN nodes n ON n.cluster = p.cluster AND n.node = p.node
LEFT JOIN mig_profiles mp
  ON mp.gpu_model = n.gpu_model
 AND mp.profile = p.mig_profile
WHERE least(p.t_end, w.window_end) > greatest(p.t_start, w.window_start)

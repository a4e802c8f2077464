-- name: pod_gpu_allocations
-- grain: one row per pod (uid) that held GPUs on a node in the window
-- materialize: table
-- depends: analysis_window, pod_gpu_shares, kueue_pod_queues
-- description: who held which GPUs, when. gpus is in whole-GPU equivalents, the sum of the pod's
--   pod_gpu_shares: nvidia.com/gpu counts 1 each (1/replicas on a time-sliced or MPS node); a MIG
--   slice counts compute_slices/7 of its GPU (1g.10gb = 1/7); HAMi, Volcano vGPU, KAI fractions
--   and DRA claims their share. alloc_kind says what granted it (gpu, mig, timeslice, mps, vgpu,
--   kai, dra; the largest when several); fractional = the pod holds part of a GPU it shares
--   with others (time-slicing, MPS, vGPU, KAI, a shared claim): it is already shared. The
--   interval is clipped to the window; a pod still running (seen within two steps of the
--   end, or only in a dump) ends at the window end; a pod that vanished ends one step after
--   its last sample. Whether a pod is production is a rule setting, not SQL: the priority
--   class, labels, annotations and namespace it is decided from are passed on (see
--   docs/rules.md, "Production"). team is the pod's team label, else its namespace.
--   cluster_queue is the Kueue ClusterQueue the pod was admitted to (kueue_pod_queues).
WITH w AS (SELECT * FROM analysis_window),
s AS (
    SELECT cluster, uid, sum(gpus) AS gpus, arg_max(kind, {'gpus': gpus, 'kind': kind}) AS alloc_kind,  -- a tie by its name: the same every run
           bool_or(kind IN ('timeslice', 'mps', 'vgpu', 'kai') OR (kind = 'dra' AND share < 1)) AS fractional,
           string_agg(DISTINCT basis, '; ' ORDER BY basis) AS share_basis
    FROM pod_gpu_shares
    GROUP BY cluster, uid
),
p AS (
    SELECT
        p.*,
        s.gpus AS share_gpus, s.alloc_kind, s.fractional, s.share_basis,
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
    JOIN s ON s.cluster = p.cluster AND s.uid = p.uid
    WHERE p.node IS NOT NULL AND p.node <> ''
)
SELECT
    p.cluster, p.uid, p.namespace, p.name AS pod,
    coalesce(p.workload_kind, 'Pod') AS workload_kind,
    coalesce(p.workload, p.name) AS workload,
    p.node, n.node_pool, n.capacity_type, n.instance_type, n.zone,
    coalesce(n.gpu_model, '') AS gpu_model,
    p.queue, kq.cluster_queue, p.podgroup, p.vcjob, p.priority_class, p.phase,
    p.whole_gpus AS gpu_request, p.mig_profile, p.mig_slices AS mig_request,
    p.share_gpus AS gpus, p.alloc_kind, p.fractional, p.share_basis,
    greatest(p.t_start, w.window_start) AS start_ts,
    least(p.t_end, w.window_end) AS end_ts,
    p.created, p.scheduled, p.started, p.finished,
    coalesce(json_extract_string(p.labels, '$.team'), p.namespace) AS team,
    p.labels, p.annotations
FROM p
JOIN w ON w.cluster = p.cluster
LEFT JOIN nodes n ON n.cluster = p.cluster AND n.node = p.node
LEFT JOIN kueue_pod_queues kq ON kq.cluster = p.cluster AND kq.uid = p.uid
WHERE least(p.t_end, w.window_end) > greatest(p.t_start, w.window_start)

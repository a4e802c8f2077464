-- name: placement_current
-- grain: one row per pod holding GPUs at the end of the window
-- materialize: table
-- depends: pod_gpu_allocations, analysis_window
-- columns: cluster, uid, namespace, pod, workload_kind, workload, node, node_pool, zone, gpu_model,
--   capacity_type, gpus, gpu_request, mig_profile, mig_request, alloc_kind, fractional, gang, gang_pods,
--   gang_min_member, queue, priority_class, labels, annotations, gpu_indices
-- description: the current placement the binpack and consolidation rules plan over: pod, node,
--   GPUs held (whole-GPU equivalents), MIG profile, gang (Volcano PodGroup or Job: moved whole
--   or not at all) with its minMember / minAvailable (NULL when neither is known) and how many
--   of its pods hold GPUs now, workload, zone, pool and GPU model of its node, and the pod's
--   priority class, labels and annotations (the production classifier reads them). alloc_kind and
--   fractional say whether the pod already shares its GPU (time-slicing, MPS, vGPU, KAI, a shared
--   DRA claim): such pods are not moved or consolidated as if they held whole GPUs. gpu_indices:
--   the GPU indices DCGM last saw the pod on (whole GPUs in the last three steps of the window;
--   NULL when DCGM does not say, e.g. a dump-only cluster): which GPU of a node may be
--   repartitioned without touching a pod that stays.
WITH cur AS (
    SELECT a.*, coalesce(a.podgroup, a.vcjob) AS gang
    FROM pod_gpu_allocations a
    JOIN analysis_window w ON w.cluster = a.cluster
    WHERE a.end_ts >= w.window_end
),
sizes AS (
    SELECT cluster, namespace, gang, count(*) AS gang_pods
    FROM cur
    WHERE gang IS NOT NULL
    GROUP BY ALL
),
idx AS (
    SELECT g.cluster, n.node, p.namespace, p.pod, list(DISTINCT l.gpu_index ORDER BY l.gpu_index) AS gpu_indices
    FROM gpu_sample_facts s
    JOIN gpu_keys g USING (gpu_key)
    JOIN pod_keys p USING (pod_key)
    JOIN node_keys n USING (node_key)
    JOIN sample_labels l USING (label_key)
    JOIN analysis_window w ON w.cluster = g.cluster
    WHERE s.ts >= w.window_end - to_seconds(3 * w.step_s)
      AND p.pod <> '' AND g.mig_instance < 0 AND l.gpu_index IS NOT NULL
    GROUP BY ALL
)
SELECT
    c.cluster, c.uid, c.namespace, c.pod, c.workload_kind, c.workload, c.node, c.node_pool, c.zone,
    c.gpu_model, c.capacity_type, c.gpus, c.gpu_request, c.mig_profile, c.mig_request, c.alloc_kind, c.fractional,
    c.gang, s.gang_pods, coalesce(pg.min_member, vj.min_available) AS gang_min_member,
    c.queue, c.priority_class, c.labels, c.annotations, idx.gpu_indices
FROM cur c
LEFT JOIN sizes s ON s.cluster = c.cluster AND s.namespace = c.namespace AND s.gang = c.gang
LEFT JOIN podgroups pg ON pg.cluster = c.cluster AND pg.namespace = c.namespace AND pg.name = c.podgroup
LEFT JOIN vcjobs vj ON vj.cluster = c.cluster AND vj.namespace = c.namespace AND vj.name = c.vcjob
LEFT JOIN idx ON idx.cluster = c.cluster AND idx.node = c.node AND idx.namespace = c.namespace AND idx.pod = c.pod
ORDER BY c.node, c.namespace, c.pod

-- name: disruption_controls
-- grain: one row per workload that held GPUs in the window
-- columns: cluster, namespace, workload_kind, workload, vcjob, pod_labels, pods, max_retry, min_available,
--   policies, tasks, pdb_selectors
-- description: what says a workload tolerates interruption: its Volcano Job lifecycle
--   policies (job- and task-level; e.g. PodEvicted -> RestartTask), maxRetry and minAvailable,
--   the PodDisruptionBudget selectors of its namespace and a sample of its pod labels (the
--   spot rule matches them), and how many replicas it runs.
WITH a AS (
    SELECT cluster, namespace, workload_kind, workload,
           any_value(vcjob) FILTER (WHERE vcjob IS NOT NULL) AS vcjob,
           any_value(labels) AS pod_labels,
           count(DISTINCT uid) AS pods
    FROM pod_gpu_allocations
    GROUP BY cluster, namespace, workload_kind, workload
),
pdb AS (
    SELECT cluster, namespace, list(selector) AS pdb_selectors
    FROM pdbs
    GROUP BY cluster, namespace
)
SELECT a.*, v.max_retry, v.min_available, v.policies, v.tasks, pdb.pdb_selectors
FROM a
LEFT JOIN vcjobs v ON v.cluster = a.cluster AND v.namespace = a.namespace AND v.name = coalesce(a.vcjob, a.workload)
LEFT JOIN pdb ON pdb.cluster = a.cluster AND pdb.namespace = a.namespace
ORDER BY a.namespace, a.workload

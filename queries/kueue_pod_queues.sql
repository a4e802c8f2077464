-- name: kueue_pod_queues
-- grain: one row per pod (uid) that Kueue admitted to a ClusterQueue
-- materialize: table
-- columns: cluster, uid, cluster_queue, workload, podset
-- key: cluster, uid
-- description: which Kueue ClusterQueue (and Workload) a pod's GPUs are charged to: its
--   kueue.x-k8s.io/cluster-queue-name label (Kueue >= 0.13 sets it), else its LocalQueue
--   (kueue.x-k8s.io/queue-name label, then the LocalQueue's clusterQueue), else the Workload that
--   owns it (the pod and deployment integrations: one Workload per pod) or shares its owner (the
--   Job integration: Workload and pods owned by the Job); that Workload's admission, else its
--   queueName's LocalQueue. podset is the kueue.x-k8s.io/podset label (NULL if absent).
WITH wl AS (
    SELECT w.cluster, w.namespace, w.name, w.owner_kind, w.owner_name, w.owner_uid,
           coalesce(w.cluster_queue, lq.cluster_queue) AS cluster_queue
    FROM kueue_workloads w
    LEFT JOIN kueue_local_queues lq ON lq.cluster = w.cluster AND lq.namespace = w.namespace AND lq.name = w.queue_name
),
p AS (
    SELECT p.cluster, p.uid, p.namespace, p.owner_kind, p.owner_name,
           json_extract_string(p.labels, '$."kueue.x-k8s.io/cluster-queue-name"') AS cq_label,
           json_extract_string(p.labels, '$."kueue.x-k8s.io/queue-name"') AS lq_label,
           json_extract_string(p.labels, '$."kueue.x-k8s.io/podset"') AS podset
    FROM pods p
    WHERE p.labels IS NOT NULL
      AND (json_exists(p.labels, '$."kueue.x-k8s.io/cluster-queue-name"')
           OR json_exists(p.labels, '$."kueue.x-k8s.io/queue-name"')
           OR EXISTS (SELECT 1 FROM kueue_workloads w WHERE w.cluster = p.cluster
                      AND (w.owner_uid = p.uid OR (w.namespace = p.namespace AND w.owner_kind = p.owner_kind
                                                   AND w.owner_name = p.owner_name))))
),
joined AS (
    SELECT p.cluster, p.uid, p.podset,
           coalesce(w1.name, w2.name) AS workload,
           coalesce(p.cq_label, lq.cluster_queue, w1.cluster_queue, w2.cluster_queue) AS cluster_queue
    FROM p
    LEFT JOIN kueue_local_queues lq ON lq.cluster = p.cluster AND lq.namespace = p.namespace AND lq.name = p.lq_label
    LEFT JOIN wl w1 ON w1.cluster = p.cluster AND w1.owner_kind = 'Pod' AND w1.owner_uid = p.uid
    LEFT JOIN wl w2 ON w2.cluster = p.cluster AND w2.namespace = p.namespace AND w2.owner_kind <> 'Pod'
                   AND w2.owner_kind = p.owner_kind AND w2.owner_name = p.owner_name
)
SELECT cluster, uid, any_value(cluster_queue) AS cluster_queue, any_value(workload) AS workload,
       any_value(podset) AS podset
FROM joined
WHERE cluster_queue IS NOT NULL
GROUP BY cluster, uid

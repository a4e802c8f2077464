-- name: scaled_workloads
-- grain: one row per KEDA ScaledObject
-- columns: cluster, namespace, scaled_object, target_api_version, target_kind, target_name, min_replicas,
--   max_replicas, idle_replicas, trigger_types, paused, scales_to_zero
-- description: the workloads KEDA already scales (scaleTargetRef; kind Deployment and
--   apiVersion apps/v1 when unset, as KEDA defaults them), with minReplicaCount,
--   maxReplicaCount, idleReplicaCount, the trigger types and whether scaling is paused. A
--   workload listed here is not offered a new ScaledObject (a second one would fight the first
--   over the same HPA).
SELECT cluster, namespace, name AS scaled_object, target_api_version, target_kind, target_name, min_replicas,
       max_replicas, idle_replicas, trigger_types, paused,
       coalesce(idle_replicas, min_replicas) = 0 AS scales_to_zero
FROM scaled_objects
ORDER BY cluster, namespace, target_name

-- name: ray_groups
-- grain: one row per Ray cluster group (the head, or one worker group) whose pods held GPUs
-- param: since TIMESTAMP = NULL -- start of the window (inclusive)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- columns: cluster, namespace, ray_cluster, ray_group, node_type, workload_kind, workload, pods,
--   gpus_per_pod, gpu_hours, cost_usd, hours_held, gr_mean, gr_hourly_max_p95, gr_max, node_gpu_hours,
--   configured, owner_kind, owner_name, autoscaling, autoscaler_version, idle_timeout_s, upgrade_strategy,
--   head_gpus, group_index, replicas, min_replicas, max_replicas, num_of_hosts, configured_gpus_per_pod,
--   group_idle_timeout_s
-- description: KubeRay clusters as the GPUs saw them. Pods belong to a Ray cluster and group by
--   their labels (ray.io/cluster, ray.io/group, ray.io/node-type; kube-state-metrics spells them
--   label_ray_io_*), else by an owning RayCluster (the group is then unknown, ''). Per group:
--   GPU-hours and their list cost, how they split over nodes (node_gpu_hours), pods seen and
--   GPUs per pod, GR activity (time-weighted mean; p95 and max of the hourly max), and what the
--   RayCluster asks for: replicas, minReplicas, maxReplicas, the group's index in
--   workerGroupSpecs, the autoscaler (enableInTreeAutoscaling, its version and idle timeout,
--   the group's own idleTimeoutSeconds), the head's GPU request; and its owner (a RayJob or a
--   RayService, from the RayCluster's owner reference or KubeRay's originated-from labels).
--   configured is false when no RayCluster object was loaded for the pods.
WITH p AS (
    SELECT pa.cluster, pa.uid, pa.namespace,
           coalesce(json_extract_string(pa.labels, '$."ray.io/cluster"'),
                    json_extract_string(pa.labels, '$.ray_io_cluster'),
                    CASE WHEN pa.workload_kind = 'RayCluster' THEN pa.workload END) AS ray_cluster,
           coalesce(json_extract_string(pa.labels, '$."ray.io/group"'),
                    json_extract_string(pa.labels, '$.ray_io_group'), '') AS ray_group,
           coalesce(json_extract_string(pa.labels, '$."ray.io/node-type"'),
                    json_extract_string(pa.labels, '$.ray_io_node_type')) AS node_type,
           pa.workload_kind, pa.workload, pa.gpus
    FROM pod_gpu_allocations pa
),
rp AS (SELECT * FROM p WHERE ray_cluster IS NOT NULL),
a AS (
    SELECT rp.cluster, rp.namespace, rp.ray_cluster, rp.ray_group, rp.node_type, rp.workload_kind, rp.workload,
           rp.uid, rp.gpus, ah.hour, ah.node, ah.gpu_hours, ah.list_usd, ah.covered_s, ah.gr_active_avg,
           ah.gr_active_max
    FROM rp
    JOIN allocation_hourly ah ON ah.cluster = rp.cluster AND ah.uid = rp.uid
    WHERE ah.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND ah.hour < coalesce($until, 'infinity'::TIMESTAMP)
),
hourly AS (
    SELECT cluster, namespace, ray_cluster, ray_group, hour, max(gr_active_max) AS act_max
    FROM a GROUP BY ALL
),
act AS (
    SELECT cluster, namespace, ray_cluster, ray_group,
           quantile_cont(act_max, 0.95) AS gr_hourly_max_p95, max(act_max) AS gr_max
    FROM hourly GROUP BY ALL
),
g AS (
    SELECT cluster, namespace, ray_cluster, ray_group,
           mode(node_type) AS node_type, any_value(workload_kind) AS workload_kind, any_value(workload) AS workload,
           count(DISTINCT uid) AS pods, max(gpus) AS gpus_per_pod,
           sum(gpu_hours) AS gpu_hours, sum(list_usd) AS cost_usd, count(DISTINCT hour) AS hours_held,
           sum(gr_active_avg * covered_s) / nullif(sum(covered_s) FILTER (WHERE gr_active_avg IS NOT NULL), 0)
               AS gr_mean
    FROM a GROUP BY ALL
),
by_node AS (
    SELECT cluster, namespace, ray_cluster, ray_group,
           list({'node': node, 'gpu_hours': gh, 'cost_usd': usd} ORDER BY node) AS node_gpu_hours
    FROM (SELECT cluster, namespace, ray_cluster, ray_group, node, sum(gpu_hours) AS gh, sum(list_usd) AS usd
          FROM a GROUP BY ALL)
    GROUP BY ALL
),
wg AS (
    SELECT rc.cluster, rc.namespace, rc.name AS ray_cluster, w.value ->> 'group' AS ray_group,
           (w.value ->> 'index')::INTEGER AS group_index,
           (w.value ->> 'replicas')::INTEGER AS replicas,
           (w.value ->> 'min_replicas')::INTEGER AS min_replicas,
           (w.value ->> 'max_replicas')::BIGINT AS max_replicas,
           (w.value ->> 'num_of_hosts')::INTEGER AS num_of_hosts,
           (w.value ->> 'gpus_per_pod')::DOUBLE AS configured_gpus_per_pod,
           (w.value ->> 'idle_timeout_s')::INTEGER AS group_idle_timeout_s
    FROM rayclusters rc, json_each(coalesce(rc.worker_groups, '[]')) w
)
SELECT g.cluster, g.namespace, g.ray_cluster, g.ray_group,
       coalesce(g.node_type, CASE WHEN g.ray_group = 'headgroup' THEN 'head' END) AS node_type,
       g.workload_kind, g.workload, g.pods, g.gpus_per_pod, g.gpu_hours, g.cost_usd, g.hours_held,
       g.gr_mean, act.gr_hourly_max_p95, act.gr_max, by_node.node_gpu_hours,
       rc.name IS NOT NULL AS configured,
       rc.owner_kind, rc.owner_name, rc.autoscaling, rc.autoscaler_version, rc.idle_timeout_s,
       rc.upgrade_strategy, rc.head_gpus,
       wg.group_index, wg.replicas, wg.min_replicas, wg.max_replicas, wg.num_of_hosts, wg.configured_gpus_per_pod,
       wg.group_idle_timeout_s
FROM g
JOIN act USING (cluster, namespace, ray_cluster, ray_group)
LEFT JOIN by_node USING (cluster, namespace, ray_cluster, ray_group)
LEFT JOIN rayclusters rc ON rc.cluster = g.cluster AND rc.namespace = g.namespace AND rc.name = g.ray_cluster
LEFT JOIN wg ON wg.cluster = g.cluster AND wg.namespace = g.namespace AND wg.ray_cluster = g.ray_cluster
            AND wg.ray_group = g.ray_group
ORDER BY g.cost_usd DESC NULLS LAST, g.namespace, g.ray_cluster, g.ray_group

-- name: gpu_nodes_held_by_cpu_pods
-- grain: one row per GPU node that pods asking for no GPU kept up while no pod held any of its GPUs
-- columns: cluster, node, node_pool, node_pool_kind, instance_type, gpu_model, gpu_count, gpu_tainted,
--   taints, held_hours_touched, held_hours, held_usd, window_hours, usd_per_hour, present_at_end, pods,
--   gpu_workloads
-- description: the node-hours an autoscaler could have removed but for pods that need no GPU: hours
--   of a GPU node in which no pod held a GPU share (allocation_hourly) while at least one pod
--   with no GPU share ran on it. DaemonSet pods (they run on every node and never keep one up)
--   and static pods (owned by the Node) do not count. held_s per node-hour is the longest
--   such pod's overlap (a lower bound of their union); held_usd its part of the node's cost.
--   pods lists the holders by workload; gpu_workloads the workloads that held the node's GPUs in
--   the window (they must tolerate a GPU taint); gpu_tainted whether the node already carries a
--   NoSchedule / NoExecute taint with "gpu" in its key (then the holders tolerate it).
WITH w AS (SELECT * FROM analysis_window),
gpu_nodes AS (
    SELECT n.cluster, n.node, n.node_pool, n.node_pool_kind, n.instance_type, n.gpu_model, n.gpu_count, n.taints,
           coalesce(list_bool_or([lower(t->>'key') LIKE '%gpu%' AND t->>'effect' IN ('NoSchedule', 'NoExecute')
                                  FOR t IN CAST(coalesce(n.taints, '[]') AS JSON[])]), false) AS gpu_tainted
    FROM nodes n
    WHERE coalesce(n.gpu_count, 0) > 0
),
cpu_pods AS (
    SELECT p.cluster, p.uid, p.namespace, coalesce(p.workload_kind, 'Pod') AS workload_kind,
           coalesce(p.workload, p.name) AS workload, p.node,
           greatest(coalesce(p.started, p.scheduled, p.created), w.window_start) AS t0,
           least(coalesce(p.finished,
                          CASE WHEN p.last_seen >= w.window_end - to_seconds(2 * w.step_s) THEN w.window_end END,
                          p.last_seen + to_seconds(w.step_s), w.window_end), w.window_end) AS t1
    FROM pods p
    JOIN w ON w.cluster = p.cluster
    JOIN gpu_nodes g ON g.cluster = p.cluster AND g.node = p.node
    WHERE NOT EXISTS (SELECT 1 FROM pod_gpu_shares s WHERE s.cluster = p.cluster AND s.uid = p.uid)
      AND coalesce(p.owner_kind, '') NOT IN ('DaemonSet', 'Node')
      AND coalesce(p.workload_kind, '') <> 'DaemonSet'
      AND coalesce(p.phase, 'Running') IN ('Running', 'Pending', 'Unknown', 'Succeeded', 'Failed')
      AND coalesce(p.started, p.scheduled, p.created) IS NOT NULL
),
overlap AS (
    SELECT c.cluster, c.node, nh.hour, c.namespace, c.workload_kind, c.workload, c.uid,
           epoch(least(c.t1, nh.hour + INTERVAL 1 HOUR) - greatest(c.t0, nh.hour)) AS s
    FROM cpu_pods c
    JOIN node_hours nh ON nh.cluster = c.cluster AND nh.node = c.node
                      AND nh.hour < c.t1 AND nh.hour + INTERVAL 1 HOUR > c.t0
),
gpu_held AS (
    SELECT cluster, node, hour, sum(gpu_hours) AS gh FROM allocation_hourly GROUP BY ALL
),
held AS (
    SELECT o.cluster, o.node, o.hour, least(max(o.s), any_value(nh.covered_s)) AS held_s,
           any_value(nh.cost_usd) * least(max(o.s), any_value(nh.covered_s)) / nullif(any_value(nh.covered_s), 0) AS held_usd
    FROM overlap o
    JOIN node_hours nh ON nh.cluster = o.cluster AND nh.node = o.node AND nh.hour = o.hour
    LEFT JOIN gpu_held g ON g.cluster = o.cluster AND g.node = o.node AND g.hour = o.hour
    WHERE coalesce(g.gh, 0) <= 1e-9 AND o.s > 0
    GROUP BY ALL
),
holders AS (
    SELECT o.cluster, o.node,
           list({'namespace': namespace, 'workload_kind': workload_kind, 'workload': workload, 'pods': pods}
                ORDER BY namespace, workload) AS pods
    FROM (SELECT o.cluster, o.node, o.namespace, o.workload_kind, o.workload, count(DISTINCT o.uid) AS pods
          FROM overlap o JOIN held h ON h.cluster = o.cluster AND h.node = o.node AND h.hour = o.hour
          GROUP BY ALL) o
    GROUP BY ALL
),
gpu_wl AS (
    SELECT cluster, node, list(DISTINCT {'namespace': namespace, 'kind': workload_kind, 'name': workload}) AS gpu_workloads
    FROM pod_gpu_allocations
    GROUP BY ALL
),
last AS (
    SELECT cluster, node, arg_max(usd_per_hour, hour) AS usd_per_hour, max(hour) AS last_hour
    FROM node_hours GROUP BY ALL
)
SELECT g.cluster, g.node, g.node_pool, g.node_pool_kind, g.instance_type, g.gpu_model, g.gpu_count, g.gpu_tainted,
       g.taints,
       count(*) AS held_hours_touched, sum(h.held_s) / 3600.0 AS held_hours, sum(h.held_usd) AS held_usd,
       any_value(w.hours) AS window_hours, any_value(l.usd_per_hour) AS usd_per_hour,
       any_value(l.last_hour) + INTERVAL 1 HOUR >= any_value(w.window_end) AS present_at_end,
       any_value(ho.pods) AS pods, any_value(gw.gpu_workloads) AS gpu_workloads
FROM held h
JOIN gpu_nodes g ON g.cluster = h.cluster AND g.node = h.node
JOIN w ON w.cluster = h.cluster
LEFT JOIN holders ho ON ho.cluster = h.cluster AND ho.node = h.node
LEFT JOIN gpu_wl gw ON gw.cluster = h.cluster AND gw.node = h.node
LEFT JOIN last l ON l.cluster = h.cluster AND l.node = h.node
GROUP BY g.cluster, g.node, g.node_pool, g.node_pool_kind, g.instance_type, g.gpu_model, g.gpu_count, g.gpu_tainted,
         g.taints
ORDER BY held_usd DESC NULLS LAST, g.node

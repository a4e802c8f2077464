-- name: nodes_current
-- grain: one row per GPU node present at the end of the window
-- depends: node_hours, placement_current
-- columns: cluster, node, node_pool, zone, capacity_type, instance_type, gpu_model, gpu_count, mig_config,
--   is_mig, sharing_strategy, device_plugin_config, gpus_held, pods, fractional_pods, usd_per_hour,
--   on_demand_usd_per_hour, node_pool_kind, labels
-- description: the nodes binpack and consolidation can move work between or free: pool, zone,
--   capacity type, GPU model and count, MIG configuration (is_mig: a MIG layout is applied;
--   `all-disabled`, the GPU operator's default on MIG-capable nodes that do not run MIG, is not
--   MIG), GPU sharing (strategy and the device-plugin config label), GPUs held now and how many
--   of its pods hold a fraction of a shared GPU (fractional_pods: such a node is not planned as
--   if it held whole GPUs), the hourly price (NULL when the catalog has none).
WITH last AS (
    SELECT nh.*, row_number() OVER (PARTITION BY cluster, node ORDER BY hour DESC) AS rn
    FROM node_hours nh
),
held AS (
    SELECT cluster, node, sum(gpus) AS gpus_held, count(*) AS pods,
           count(*) FILTER (WHERE fractional) AS fractional_pods
    FROM placement_current
    GROUP BY cluster, node
)
SELECT l.cluster, l.node, l.node_pool, l.zone, l.capacity_type, l.instance_type, l.gpu_model, l.gpu_count,
       l.mig_config,
       coalesce(l.mig_config, '') NOT IN ('', 'all-disabled')
           OR len(list_filter(coalesce(json_keys(n.capacity), []::VARCHAR[]),
                              lambda k: k LIKE 'nvidia.com/mig-%' OR k LIKE 'nvidia\_com\_mig\_%' ESCAPE '\')) > 0 AS is_mig,
       n.sharing_strategy,
       json_extract_string(n.labels, '$."nvidia.com/device-plugin.config"') AS device_plugin_config,
       coalesce(h.gpus_held, 0) AS gpus_held, coalesce(h.pods, 0) AS pods,
       coalesce(h.fractional_pods, 0) AS fractional_pods,
       l.usd_per_hour, l.on_demand_usd_per_hour, n.node_pool_kind, n.labels
FROM last l
JOIN analysis_window w ON w.cluster = l.cluster AND l.hour + INTERVAL 1 HOUR >= w.window_end
LEFT JOIN held h ON h.cluster = l.cluster AND h.node = l.node
LEFT JOIN nodes n ON n.cluster = l.cluster AND n.node = l.node
WHERE l.rn = 1
ORDER BY l.node_pool, l.node

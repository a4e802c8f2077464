-- name: mig_capacity
-- grain: one row per MIG-partitioned node per MIG profile it advertises
-- depends: placement_current
-- columns: cluster, node, gpu_model, zone, node_pool, profile, capacity, held, free
-- description: MIG instances each node advertises (capacity nvidia.com/mig-<profile>, as the
--   device plugin's mixed strategy names them; sanitised kube-state-metrics names accepted)
--   against the instances held by pods now: free instances a right-sized workload can move to.
WITH cap AS (
    SELECT n.cluster, n.node, n.gpu_model, n.zone, n.node_pool, k AS resource,
           try_cast(json_extract_string(n.capacity, '$."' || k || '"') AS DOUBLE) AS capacity
    FROM nodes n, unnest(json_keys(n.capacity)) AS t(k)
    WHERE n.capacity IS NOT NULL AND (k LIKE 'nvidia.com/mig-%' OR k LIKE 'nvidia\_com\_mig\_%' ESCAPE '\')
),
named AS (
    SELECT *,
           CASE WHEN resource LIKE 'nvidia.com/mig-%' THEN substr(resource, 16)
                ELSE regexp_replace(substr(resource, 16), '^(\d+g)_', '\1.') END AS profile
    FROM cap
),
held AS (
    SELECT cluster, node, mig_profile AS profile, sum(mig_request) AS held
    FROM placement_current
    WHERE mig_profile IS NOT NULL
    GROUP BY ALL
)
SELECT named.cluster, named.node, named.gpu_model, named.zone, named.node_pool, named.profile,
       named.capacity, coalesce(held.held, 0) AS held, named.capacity - coalesce(held.held, 0) AS free
FROM named
LEFT JOIN held ON held.cluster = named.cluster AND held.node = named.node AND held.profile = named.profile
ORDER BY named.node, named.profile

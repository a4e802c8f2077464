-- name: unmatched_gpus
-- grain: one row per GPU DCGM measured that is not counted on a GPU node of the inventory
-- materialize: table
-- depends: analysis_window, node_hours
-- columns: cluster, gpu_uuid, node_hint, placed_on, reason, gpu_model, model_name, first_seen, last_seen,
--   gpu_hours, usd_per_gpu_hour, list_usd, price_basis
-- description: GPUs that dcgm-exporter reported but that no node of the inventory holds: the
--   exporter did not name a known node (Hostname is the exporter pod's name, or missing, and
--   kube_pod_info cannot place it), or the node is known but has no GPU count. They are never
--   left out of the fleet totals (fleet_summary counts them) and are priced per GPU where the
--   catalog in force knows their model: its per-GPU-model row, else the cheapest on-demand
--   price per GPU of an instance type with that GPU (a lower bound). node_hint is what the
--   exporter said; a node loaded later under that name places the GPU without reloading.
WITH w AS (SELECT * FROM analysis_window),
counted AS (SELECT DISTINCT cluster, node FROM node_hours),
g AS (
    SELECT g.cluster, g.gpu_uuid, g.node, g.node_hint, g.gpu_model, g.model_name, g.first_seen, g.last_seen,
           coalesce(g.node, hinted.node) AS placed_on
    FROM gpus g
    LEFT JOIN nodes hinted ON hinted.cluster = g.cluster AND hinted.node = g.node_hint AND g.node IS NULL
),
u AS (
    SELECT g.*,
           CASE WHEN g.placed_on IS NULL THEN 'no known node'
                ELSE 'node not in the GPU inventory (no GPU count)' END AS reason
    FROM g
    LEFT JOIN counted c ON c.cluster = g.cluster AND c.node = g.placed_on
    WHERE c.node IS NULL
),
-- one figure per physical GPU and hour (MIG instances and pods sharing a GPU repeat it)
hours AS (
    SELECT g.cluster, g.gpu_uuid, h.hour, max(h.covered_s) AS covered_s
    FROM u
    JOIN gpu_keys g ON g.cluster = u.cluster AND g.gpu_uuid = u.gpu_uuid
    JOIN gpu_hourly_facts h USING (gpu_key)
    GROUP BY ALL
),
per_gpu AS (
    SELECT cluster, gpu_uuid, sum(covered_s) / 3600.0 AS gpu_hours FROM hours GROUP BY ALL
),
model_price AS (
    SELECT p.gpu_model,
           coalesce(min(p.on_demand_usd_per_hour / p.gpu_count) FILTER (WHERE p.instance_type = ''),
                    min(p.on_demand_usd_per_hour / p.gpu_count)) AS usd_per_gpu_hour,
           CASE WHEN count(*) FILTER (WHERE p.instance_type = '') > 0 THEN 'per-GPU-model row'
                ELSE 'cheapest instance type with this GPU' END AS price_basis
    FROM prices p
    WHERE p.catalog = (SELECT any_value(catalog) FROM w) AND p.gpu_count > 0
    GROUP BY p.gpu_model
)
SELECT u.cluster, u.gpu_uuid, u.node_hint, u.placed_on, u.reason, u.gpu_model, u.model_name,
       u.first_seen, u.last_seen, coalesce(pg.gpu_hours, 0) AS gpu_hours,
       mp.usd_per_gpu_hour, coalesce(pg.gpu_hours, 0) * mp.usd_per_gpu_hour AS list_usd, mp.price_basis
FROM u
LEFT JOIN per_gpu pg ON pg.cluster = u.cluster AND pg.gpu_uuid = u.gpu_uuid
LEFT JOIN model_price mp ON mp.gpu_model = u.gpu_model
ORDER BY gpu_hours DESC, u.gpu_uuid

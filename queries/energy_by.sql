-- name: energy_by
-- grain: one row per cluster and group (per $by), plus '(no holder)' for GPUs nobody held
-- param: by VARCHAR IN (namespace, queue, cluster_queue, workload, node_pool, node, team) = namespace -- group by
-- param: since TIMESTAMP = NULL -- start of the window (inclusive)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: cluster VARCHAR = NULL -- only this cluster (default: every cluster, each its own rows)
-- columns: cluster, group, energy_kwh, usd, kg_co2e, share_from_counter
-- description: GPU energy per team, namespace, queue or workload (energy_hourly), priced with the
--   region's $/kWh and carbon intensity (energy_rates; '*' where the region is not listed).
--   In the cloud the energy is inside the instance price: usd is what that energy is worth at the
--   rate, not a cost on top (docs/models.md, "Energy"). Groups are per cluster (the same
--   namespace in two clusters is two rows). A node's region is its zone without its letter
--   (us-east-1a -> us-east-1).
WITH r AS (SELECT * FROM energy_rates),
n AS (
    SELECT cluster, node, node_pool,
           CASE WHEN regexp_matches(zone, '^[a-z]+-[a-z]+-[0-9]+[a-z]$') THEN left(zone, -1)
                WHEN regexp_matches(zone, '^[a-z]+-[a-z]+[0-9]+-[a-z]$') THEN left(zone, -2)
                ELSE zone END AS region
    FROM nodes
),
x AS (
    SELECT e.*, coalesce(r.usd_per_kwh, d.usd_per_kwh) AS usd_per_kwh,
           coalesce(r.kg_co2e_per_kwh, d.kg_co2e_per_kwh) AS kg_co2e_per_kwh,
           n.node_pool
    FROM energy_hourly e
    LEFT JOIN n ON n.cluster = e.cluster AND n.node = e.node
    LEFT JOIN r ON r.region = n.region
    LEFT JOIN r d ON d.region = '*'
    WHERE e.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND e.hour < coalesce($until, 'infinity'::TIMESTAMP)
      AND ($cluster IS NULL OR e.cluster = $cluster)
)
SELECT cluster,
       coalesce(cost_group($by, namespace, queue, workload, node_pool, node, team, cluster_queue), '(no holder)')
           AS "group",
       sum(energy_kwh) AS energy_kwh,
       sum(energy_kwh * usd_per_kwh) AS usd,
       sum(energy_kwh * kg_co2e_per_kwh) AS kg_co2e,
       sum(energy_kwh_from_counter) / nullif(sum(energy_kwh), 0) AS share_from_counter
FROM x
GROUP BY 1, 2
ORDER BY energy_kwh DESC NULLS LAST, 2, 1

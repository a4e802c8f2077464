-- name: gang_network_topology
-- grain: one row per Volcano Job or PodGroup that sets spec.networkTopology
-- columns: cluster, namespace, gang, source, network_topology
-- description: the network topology constraint a gang already asks Volcano for (mode hard or
--   soft, highestTierAllowed or highestTierName), from the Job's spec or its PodGroup's; the
--   topology rule does not recommend what is already asked.
SELECT cluster, namespace, name AS gang, 'VolcanoJob' AS source, network_topology
FROM vcjobs
WHERE network_topology IS NOT NULL
UNION ALL
SELECT cluster, namespace, name AS gang, 'PodGroup' AS source, json_extract(spec, '$.networkTopology') AS network_topology
FROM podgroups
WHERE json_extract(spec, '$.networkTopology') IS NOT NULL
ORDER BY cluster, namespace, gang

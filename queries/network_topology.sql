-- name: network_topology
-- grain: one row per Volcano HyperNode
-- columns: cluster, name, tier, tier_name, members
-- description: the network topology Volcano's network-topology-aware scheduling uses
--   (topology.volcano.sh/v1alpha1 HyperNodes): each HyperNode's tier (1 = the tightest group of
--   nodes, e.g. the nodes under one leaf switch), tier name and members (Nodes or HyperNodes
--   chosen by exact name, regular expression or labels). The topology rule and binpack resolve
--   which domains a node belongs to from these, else from node labels (docs/rules.md, "topology").
SELECT cluster, name, tier, tier_name, members
FROM hypernodes
ORDER BY cluster, tier, name

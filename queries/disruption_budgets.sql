-- name: disruption_budgets
-- grain: one row per PodDisruptionBudget
-- columns: cluster, namespace, name, selector, min_available, max_unavailable
-- description: the PodDisruptionBudgets binpack respects when it plans evictions: namespace,
--   label selector and minAvailable / maxUnavailable (an integer or a percentage, as written).
SELECT cluster, namespace, name, selector, min_available, max_unavailable
FROM pdbs
ORDER BY cluster, namespace, name

-- name: 004_cost_group_macro
-- description: cost_group(by, ...): the one definition of "group costs by namespace | queue |
--   workload | node_pool | node | team" that waste_breakdown, waste_hourly_by and chargeback
--   share. Holders without a queue show as '(no queue)'; unallocated capacity has no holder
--   (NULL), which the queries label '(unallocated)'.

CREATE OR REPLACE MACRO cost_group(by_dim, g_namespace, g_queue, g_workload, g_node_pool, g_node, g_team) AS
    CASE by_dim
        WHEN 'namespace' THEN g_namespace
        WHEN 'queue' THEN coalesce(g_queue, CASE WHEN g_namespace IS NOT NULL THEN '(no queue)' END)
        WHEN 'workload' THEN g_namespace || '/' || g_workload
        WHEN 'node_pool' THEN coalesce(g_node_pool, '(no pool)')
        WHEN 'node' THEN g_node
        WHEN 'team' THEN g_team
        ELSE error('by must be one of namespace, queue, workload, node_pool, node, team')
    END;

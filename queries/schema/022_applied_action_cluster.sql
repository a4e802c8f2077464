-- name: 022_applied_action_cluster
-- description: the cluster each audited action changed, as a column: one plan can change several
--   clusters whose objects share kind, namespace and name, and `target` alone does not tell them
--   apart. Rows recorded before it take the cluster their recorded action named (NULL when the
--   action predates clusters in actions).

ALTER TABLE applied_actions ADD COLUMN IF NOT EXISTS cluster VARCHAR;

UPDATE applied_actions
SET cluster = nullif(json_extract_string(applied, '$.action.cluster'), '')
WHERE cluster IS NULL;

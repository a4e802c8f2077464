-- name: 016_finding_cluster
-- description: the cluster of each stored recommendation (its `cluster` field, design.md
--   "Recommendation objects"): the same namespace and workload in two clusters are two findings.
--   Rows stored before it have NULL (their plans did not say).

ALTER TABLE recommendations ADD COLUMN IF NOT EXISTS cluster VARCHAR;

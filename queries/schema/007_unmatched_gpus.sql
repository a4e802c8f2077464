-- name: 007_unmatched_gpus
-- description: gpus.node_hint: what the exporter said about the node of a GPU that could not be
--   matched to a known node (its Hostname/hostname, or the scrape address), so the
--   unmatched_gpus model can list it, match it against nodes loaded later, and fleet_summary
--   can count it instead of leaving it out of the totals.

ALTER TABLE gpus ADD COLUMN IF NOT EXISTS node_hint VARCHAR;

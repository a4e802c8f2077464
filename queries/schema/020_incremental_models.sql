-- name: 020_incremental_models
-- description: what a refresh has to rebuild. Every load of samples notes here the hours its
--   rollups rebuilt, in the transaction that stored them; a rebuild from scratch of the fleet
--   tables notes everything (both bounds NULL). A refresh rebuilds the models partitioned by hour
--   (partition: hour) for those hours and for the hours whose pods or nodes changed, then empties
--   this table (sql/incremental.py, docs/models.md "Incremental refresh").

CREATE TABLE IF NOT EXISTS model_pending (
    hour_from  TIMESTAMP,                -- [hour_from, hour_to); both NULL: everything
    hour_to    TIMESTAMP
);

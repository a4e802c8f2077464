-- name: 005_model_state
-- description: which definitions the materialized models were last built from (a hash of their
--   SQL), so a warehouse opened by a newer gpuinsight rebuilds them before answering.

CREATE TABLE IF NOT EXISTS model_state (
    fingerprint  VARCHAR NOT NULL,
    built_at     TIMESTAMP NOT NULL
);

-- name: 008_reviewed_plans
-- description: plans saved for review (`recommend --save-plan FILE`): the SHA-256 of the plan's
--   canonical JSON and that content, so `recommend --plan FILE --apply` applies a file only when it
--   is exactly what was reviewed, and can show where an edited file differs.

CREATE TABLE IF NOT EXISTS reviewed_plans (
    plan_id      VARCHAR NOT NULL PRIMARY KEY,
    sha256       VARCHAR NOT NULL,     -- hex digest of the canonical JSON (sorted keys, no spaces)
    content      JSON NOT NULL,        -- the plan as reviewed (secrets are never in a plan)
    saved_to     VARCHAR,              -- the file written at review
    saved_at     TIMESTAMP NOT NULL
);

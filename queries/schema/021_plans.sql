-- name: 021_plans
-- description: the plans stored (`recommend --save-plan`, `recommend --apply`, `demo`) with what
--   `report` needs to render one again without running the rules: the window it judged, the
--   price catalog, the fleet's monthly spend, its clusters and its notes. Its findings are the
--   rows of `recommendations` with its plan_id.

CREATE TABLE IF NOT EXISTS plans (
    plan_id            VARCHAR NOT NULL PRIMARY KEY,
    created_at         TIMESTAMP NOT NULL,
    catalog            VARCHAR,
    window_start       TIMESTAMP,
    window_end         TIMESTAMP,
    spend_monthly_usd  DOUBLE,
    clusters           JSON,            -- sorted cluster names
    notes              JSON,            -- the plan's notes, in order
    findings           BIGINT,
    monthly_savings_usd DOUBLE,
    stored_at          TIMESTAMP NOT NULL
);

"""Plans in the warehouse: the plans stored (``recommend --save-plan``, ``--apply``, ``demo``) with
what a report needs to render one again (its window, catalog, spend, clusters and notes), and the
review records a plan file is checked against before it is applied.

``plans`` holds one row per stored plan; ``recommendations`` one row per finding with its whole
object (actions included). A plan stored twice under one id is replaced, in one transaction.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import polars as pl

from gpuinsight.errors import BadInput
from gpuinsight.plan.io import canonical, first_difference, plan_digest, plan_to_json
from gpuinsight.plan.model import Plan, Recommendation, finding_order

if TYPE_CHECKING:
    from gpuinsight.warehouse import Warehouse


def _naive_utc(when: datetime | None) -> datetime | None:
    if when is None:
        return None
    return when.astimezone(UTC).replace(tzinfo=None) if when.tzinfo else when


def store_plan(wh: Warehouse, plan: Plan) -> None:
    """Keep the plan (``plans``) and its recommendations with their actions (``recommendations``),
    in one transaction (inside a write session: its transaction)."""
    created = _naive_utc(plan.created_at)
    head = pl.DataFrame([{
        "plan_id": plan.plan_id, "created_at": created, "catalog": plan.catalog,
        "window_start": _naive_utc(plan.window[0]), "window_end": _naive_utc(plan.window[1]),
        "spend_monthly_usd": plan.spend_monthly_usd, "clusters": json.dumps(plan.clusters),
        "notes": json.dumps(plan.notes), "findings": len(plan.recommendations),
        "monthly_savings_usd": plan.total_monthly_savings_usd, "stored_at": _naive_utc(datetime.now(UTC)),
    }], schema={"plan_id": pl.Utf8, "created_at": pl.Datetime("us"), "catalog": pl.Utf8,
                "window_start": pl.Datetime("us"), "window_end": pl.Datetime("us"), "spend_monthly_usd": pl.Float64,
                "clusters": pl.Utf8, "notes": pl.Utf8, "findings": pl.Int64, "monthly_savings_usd": pl.Float64,
                "stored_at": pl.Datetime("us")})
    with wh.transaction():
        wh.merge("plans", head, ["plan_id"])
        if not plan.recommendations:
            return
        frame = pl.DataFrame([
            {"plan_id": plan.plan_id, "id": r.id, "rule": r.rule, "cluster": r.cluster, "namespace": r.namespace,
             "workload": r.workload, "node": r.node, "queue": r.queue, "title": r.title,
             "monthly_savings_usd": r.monthly_savings_usd, "confidence": r.confidence,
             "body": json.dumps(r.to_dict(), default=str), "created_at": created}
            for r in plan.recommendations
        ], infer_schema_length=None)  # early rows may all have a null queue or node
        wh.merge("recommendations", frame, ["plan_id", "id"])


def stored_plan(wh: Warehouse, plan_id: str | None = None) -> Plan | None:
    """The plan stored under ``plan_id`` (default: the one made last), as it was stored; None when
    there is none (plans stored before the ``plans`` table have no window or notes: none either).
    Read back as stored, not checked as an edited plan file is (applying one checks it)."""
    sql = "SELECT * FROM plans" + (" WHERE plan_id = ?" if plan_id else "") + " ORDER BY created_at DESC, plan_id DESC LIMIT 1"
    head = wh.sql(sql, [plan_id] if plan_id else None)
    if not head.height:
        return None
    row = head.row(0, named=True)
    bodies = wh.sql("SELECT body FROM recommendations WHERE plan_id = ?",
                    [row["plan_id"]]).get_column("body").to_list()
    recs = sorted((Recommendation.from_dict(json.loads(b)) for b in bodies), key=finding_order)  # the plan's order
    return Plan(plan_id=row["plan_id"], created_at=row["created_at"].replace(tzinfo=UTC), catalog=row["catalog"],
                window=(row["window_start"], row["window_end"]), recommendations=recs,
                notes=json.loads(row["notes"] or "[]"), spend_monthly_usd=row["spend_monthly_usd"],
                clusters=json.loads(row["clusters"] or "[]"))


def record_review(wh: Warehouse, plan: Plan, saved_to: str | None = None) -> str:
    """Record the plan as reviewed (``recommend --save-plan``); returns its digest."""
    digest = plan_digest(plan)
    with wh.transaction() as con:
        con.execute("DELETE FROM reviewed_plans WHERE plan_id = ?", [plan.plan_id])
        con.execute("INSERT INTO reviewed_plans VALUES (?, ?, ?, ?, ?)",
                    [plan.plan_id, digest, canonical(plan_to_json(plan)), saved_to,
                     datetime.now(UTC).replace(tzinfo=None)])
    return digest


def was_reviewed(wh: Warehouse, plan: Plan) -> bool:
    """Was a plan with this id saved for review in this warehouse (whatever its content)?"""
    return bool(wh.sql("SELECT count(*) FROM reviewed_plans WHERE plan_id = ?", [plan.plan_id]).item())


def check_reviewed(wh: Warehouse, plan: Plan, name: str) -> str:
    """Refuse a plan that is not exactly the one recorded at review; returns the digest."""
    rows = wh.sql("SELECT sha256, content, saved_at FROM reviewed_plans WHERE plan_id = ?", [plan.plan_id]).rows()
    digest = plan_digest(plan)
    if not rows:
        raise BadInput(f"{name}: plan_id: plan {plan.plan_id} was never saved for review in this warehouse (save it with "
                       f"`gpuinsight recommend --save-plan FILE`, review the file, then apply it)")
    recorded, content, saved_at = rows[0]
    if recorded != digest:
        diff = first_difference(json.loads(content), plan_to_json(plan)) or "formatting only"
        raise BadInput(f"{name}: not the plan reviewed on {saved_at:%Y-%m-%d %H:%M} UTC (sha256 {recorded[:12]}, "
                       f"this file {digest[:12]}): {diff}; to apply an edited plan, record it with "
                       f"`gpuinsight recommend --plan FILE --save-plan FILE`")
    return digest


__all__ = ["check_reviewed", "record_review", "store_plan", "stored_plan", "was_reviewed"]

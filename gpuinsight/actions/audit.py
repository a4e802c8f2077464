"""The audit trail in the warehouse: ``applied_actions`` (one row per action of an apply)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpuinsight.actions.clusters import action_cluster
from gpuinsight.errors import GpuInsightError
from gpuinsight.plan.store import store_plan

if TYPE_CHECKING:
    from gpuinsight.plan import Plan
    from gpuinsight.warehouse import Warehouse

# Statuses: dry-run-ok (checked, not yet applied), applied, failed, dry-run-failed, not-applied
# (the apply stopped before it), refused (drift), rolled-back, irreversible (evictions).
OPERATIONS = {"k8s-apply": "apply", "k8s-label": "label", "k8s-patch": "patch", "cordon": "cordon", "uncordon": "uncordon",
              "drain": "drain"}


@dataclass
class Step:
    seq: int
    target: str
    operation: str
    status: str
    message: str = ""


@dataclass
class ApplyResult:
    plan_id: str
    steps: list[Step] = field(default_factory=list)

    @property
    def applied(self) -> list[Step]:
        return [s for s in self.steps if s.status in ("applied", "rolled-back")]

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for step in self.steps:
            counts[step.status] = counts.get(step.status, 0) + 1
        parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing to do"
        return f"{self.plan_id}: {parts}"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def operation(action: dict[str, Any]) -> str:
    if action.get("type") == "aws-eks":
        return f"eks:{action.get('call')}"
    return OPERATIONS.get(str(action.get("type")), str(action.get("type")))


def next_seq(wh: Warehouse, plan_id: str) -> int:
    row = wh.sql("SELECT coalesce(max(seq), 0) AS s FROM applied_actions WHERE plan_id = ?", [plan_id]).row(0)
    return int(row[0]) + 1


def record(wh: Warehouse, plan_id: str, seq: int, action: dict[str, Any], status: str, message: str = "",
           previous: Any = None, applied: Any = None) -> Step:
    with wh.transaction() as con:
        con.execute("DELETE FROM applied_actions WHERE plan_id = ? AND seq = ?", [plan_id, seq])
        con.execute(
            "INSERT INTO applied_actions (plan_id, seq, recommendation_id, cluster, target, operation, previous,"
            " applied, status, message, applied_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [plan_id, seq, action.get("recommendation"), action_cluster(action) or None, action.get("target"),
             operation(action),
             json.dumps(previous, default=str), json.dumps({"action": action, **(applied or {})}, default=str),
             status, message, _now()])
    return Step(seq, str(action.get("target")), operation(action), status, message)


def set_status(wh: Warehouse, plan_id: str, seq: int, status: str, message: str) -> None:
    with wh.transaction() as con:
        con.execute("UPDATE applied_actions SET status = ?, message = ?, applied_at = ? WHERE plan_id = ? AND seq = ?",
                    [status, message, _now(), plan_id, seq])


def rows(wh: Warehouse, plan_id: str, statuses: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    out = []
    for row in wh.sql("SELECT * FROM applied_actions WHERE plan_id = ? ORDER BY seq", [plan_id]).to_dicts():
        if statuses is None or row["status"] in statuses:
            row["previous"] = json.loads(row["previous"]) if row.get("previous") else None
            row["applied"] = json.loads(row["applied"]) if row.get("applied") else {}
            out.append(row)
    return out


def save_recommendations(wh: Warehouse, plan: Plan) -> None:
    """Keep the applied plan (with its actions) next to the audit rows."""
    store_plan(wh, plan)


def recorded(wh: Warehouse, run: Callable[[], ApplyResult]) -> ApplyResult:
    """Run an apply or a rollback, then write its audit rows (each committed as the change it
    records happened) into the file before the result is reported. After a failure the rows are
    committed all the same; the checkpoint is tried, and its own failure never hides the first."""
    try:
        result = run()
    except BaseException:
        with contextlib.suppress(GpuInsightError):
            wh.checkpoint()
        raise
    wh.checkpoint()
    return result

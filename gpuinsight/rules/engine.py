"""Run the rules: fetch the frames they name, evaluate in order, attach actions, store the plan."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from gpuinsight.errors import BadInput
from gpuinsight.rules.base import Plan, Recommendation
from gpuinsight.rules.registry import ALL_RULES, CLAIMS_WORKLOADS

if TYPE_CHECKING:
    from gpuinsight.api import GpuInsight
    from gpuinsight.warehouse import Warehouse


def frames_for(gi: GpuInsight, names: set[str]) -> dict[str, pl.DataFrame]:
    return {name: gi.query(name) for name in sorted(names)}


def needed_frames() -> set[str]:
    names: set[str] = {"analysis_window"}
    for rule in ALL_RULES:
        names.update(rule.needs)
    return names


def resolve_all(settings: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    settings = settings or {}
    unknown = set(settings) - {r.name for r in ALL_RULES}
    if unknown:
        raise BadInput(f"unknown rule(s) in settings: {sorted(unknown)}")
    try:
        return {rule.name: rule.resolve_settings(settings.get(rule.name)) for rule in ALL_RULES}
    except (ValueError, TypeError) as exc:
        raise BadInput(str(exc)) from exc


def evaluate_rules(frames: dict[str, pl.DataFrame], settings: dict[str, dict[str, Any]] | None = None,
                   *, only: set[str] | None = None) -> list[Recommendation]:
    """Pure: frames in, recommendations out (sorted by monthly saving, largest first)."""
    resolved = resolve_all(settings)
    frames = dict(frames)
    recs: list[Recommendation] = []
    for rule_cls in ALL_RULES:
        if only and rule_cls.name not in only:
            continue
        found = rule_cls().evaluate(frames, resolved[rule_cls.name])
        recs.extend(found)
        if rule_cls.name in CLAIMS_WORKLOADS and found and "workload_gpu_profile" in frames:
            claimed = {(r.namespace, r.workload) for r in found}
            prof = frames["workload_gpu_profile"]
            keep = [(ns, wl) not in claimed for ns, wl in zip(prof["namespace"], prof["workload"], strict=True)]
            frames["workload_gpu_profile"] = prof.filter(pl.Series(keep, dtype=pl.Boolean))
    recs.sort(key=lambda r: (-r.monthly_savings_usd, r.rule, r.id))
    return recs


def run_rules(gi: GpuInsight, settings: dict[str, dict[str, Any]] | None = None) -> Plan:
    resolve_all(settings)  # bad settings fail before any query runs
    frames = frames_for(gi, needed_frames())
    recs = evaluate_rules(frames, settings)
    w = frames["analysis_window"]
    now = datetime.now(UTC)
    plan = Plan(plan_id=Plan.new_id(now), created_at=now, catalog=w["catalog"].max() if w.height else None,
                window=(w["window_start"].min(), w["window_end"].max()) if w.height else (None, None),
                recommendations=recs)
    attach_actions(gi, plan)
    store_plan(gi.wh, plan)
    return plan


def attach_actions(gi: GpuInsight, plan: Plan) -> None:
    """Fill each recommendation's ``actions`` with the concrete changes (actions package)."""
    try:
        from gpuinsight.actions.plan import actions_for_plan
    except ImportError:  # the action builders are optional for analysis-only installs
        plan.notes.append("action builders unavailable: recommendations carry no actions")
        return
    actions_for_plan(gi.wh, plan)


def store_plan(wh: Warehouse, plan: Plan) -> None:
    """Keep the plan's recommendations (with their actions) in ``recommendations``, one merge."""
    if not plan.recommendations:
        return
    created = plan.created_at.astimezone(UTC).replace(tzinfo=None) if plan.created_at.tzinfo else plan.created_at
    frame = pl.DataFrame([
        {"plan_id": plan.plan_id, "id": r.id, "rule": r.rule, "namespace": r.namespace, "workload": r.workload,
         "node": r.node, "queue": r.queue, "title": r.title, "monthly_savings_usd": r.monthly_savings_usd,
         "confidence": r.confidence, "body": json.dumps(r.to_dict(), default=str), "created_at": created}
        for r in plan.recommendations
    ], infer_schema_length=None)  # early rows may all have a null queue or node
    wh.merge("recommendations", frame, ["plan_id", "id"])

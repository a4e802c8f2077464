"""Run the rules: fetch the frames they name, evaluate in order, attach actions, store the plan."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from gpuinsight.errors import BadInput
from gpuinsight.rules.base import Plan, Recommendation
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.ledger import Ledger
from gpuinsight.rules.production import ProductionClassifier
from gpuinsight.rules.registry import ALL_RULES, KINDS, SETTING_GROUPS

if TYPE_CHECKING:
    from gpuinsight.api import GpuInsight
    from gpuinsight.warehouse import Warehouse


def frames_for(gi: GpuInsight, names: set[str]) -> dict[str, pl.DataFrame]:
    return {name: gi.query(name) for name in sorted(names)}


def needed_frames() -> set[str]:
    names: set[str] = {"analysis_window", "node_costs", "nodes_current", "network_topology"}
    for rule in ALL_RULES:
        names.update(rule.needs)
    return names


def resolve_all(settings: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    settings = settings or {}
    unknown = set(settings) - {r.name for r in SETTING_GROUPS}
    if unknown:
        raise BadInput(f"unknown rule(s) in settings: {sorted(unknown)}; known: {[r.name for r in SETTING_GROUPS]}")
    try:
        return {rule.name: rule.resolve_settings(settings.get(rule.name)) for rule in SETTING_GROUPS}
    except (ValueError, TypeError) as exc:
        raise BadInput(str(exc)) from exc


def topology_label_settings(resolved: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The label keys of each topology level, from the topology rule's settings."""
    topo = resolved.get("topology") or {}
    return {level: topo[f"{level}_labels"] for level in ("nvlink", "rack", "block") if f"{level}_labels" in topo}


def evaluate_plan(frames: dict[str, pl.DataFrame], settings: dict[str, dict[str, Any]] | None = None,
                  *, only: set[str] | None = None) -> tuple[list[Recommendation], PlanContext]:
    """Pure: frames in, recommendations out (largest saving first), with the plan's ledger.

    Rules run in the ledger's order, each claiming what it saves; every finding's evidence
    gets its ``saving_basis`` and its claims per node, and the ledger's invariants are checked
    (a violation is a bug and raises :class:`gpuinsight.rules.ledger.LedgerError`)."""
    resolved = resolve_all(settings)
    ctx = PlanContext(Ledger.from_frames(frames), ProductionClassifier.from_settings(resolved["production"]),
                      topology_labels=topology_label_settings(resolved), settings=resolved)
    recs: list[Recommendation] = []
    for rule_cls in ALL_RULES:
        if only and not ({rule_cls.name} | {k.name for k in rule_cls.kinds}) & only:
            continue
        recs.extend(r for r in rule_cls().evaluate(frames, resolved[rule_cls.name], ctx)
                    if not only or r.rule in only or rule_cls.name in only)
    ids = [r.id for r in recs]
    if len(set(ids)) != len(ids):
        raise AssertionError(f"duplicate finding ids in a plan: {sorted({i for i in ids if ids.count(i) > 1})}")
    known = frame_clusters(frames)
    strays = sorted({f"{r.id} ({r.cluster})" for r in recs if known and r.cluster not in known})
    if strays:
        raise AssertionError(f"findings of a cluster the frames do not hold: {strays}")
    for rec in recs:
        rec.evidence["saving_basis"] = KINDS[rec.rule].saving_basis
        rec.evidence["claims"] = ctx.ledger.evidence_for(rec.id)
    ctx.ledger.check({r.id: r.monthly_savings_usd for r in recs})
    # equal savings: by what the findings are about (not by id, a hash), so the same stack in
    # two clusters lists its findings, and emits its steps, in the same order in each
    recs.sort(key=lambda r: (-r.monthly_savings_usd, r.rule, r.cluster, r.namespace or "", r.workload or "",
                             r.node or "", r.queue or "", r.id))
    return recs, ctx


def frame_clusters(frames: dict[str, pl.DataFrame]) -> list[str]:
    """The clusters the frames hold data for (the analysis window has a row per cluster)."""
    w = frames.get("analysis_window")
    if w is None or "cluster" not in w.columns:
        return []
    return sorted({str(c) for c in w.get_column("cluster").to_list() if c})


def evaluate_rules(frames: dict[str, pl.DataFrame], settings: dict[str, dict[str, Any]] | None = None,
                   *, only: set[str] | None = None) -> list[Recommendation]:
    """Pure: frames in, recommendations out (sorted by monthly saving, largest first)."""
    return evaluate_plan(frames, settings, only=only)[0]


def run_rules(gi: GpuInsight, settings: dict[str, dict[str, Any]] | None = None) -> Plan:
    resolve_all(settings)  # bad settings fail before any query runs
    frames = frames_for(gi, needed_frames())
    recs, ctx = evaluate_plan(frames, settings)
    w = frames["analysis_window"]
    now = datetime.now(UTC)
    plan = Plan(plan_id=Plan.new_id(now), created_at=now, catalog=w["catalog"].max() if w.height else None,
                window=(w["window_start"].min(), w["window_end"].max()) if w.height else (None, None),
                recommendations=recs, spend_monthly_usd=round(ctx.ledger.spend_monthly_usd(), 2),
                clusters=frame_clusters(frames))
    plan.notes.extend(ctx.notes)
    basis = plan.savings_by_basis
    plan.notes.append("savings ledger: " + ", ".join(f"{k} ${v:,.0f}/month" for k, v in sorted(basis.items()))
                      + f" of a ${plan.spend_monthly_usd:,.0f}/month spend; each node and GPU-hour counted once")
    if len(plan.clusters) > 1:
        plan.notes.append("savings per cluster: " + ", ".join(
            f"{c} ${v:,.0f}/month" for c, v in plan.savings_by_cluster().items()))
    attach_actions(gi, plan)
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
        {"plan_id": plan.plan_id, "id": r.id, "rule": r.rule, "cluster": r.cluster, "namespace": r.namespace, "workload": r.workload,
         "node": r.node, "queue": r.queue, "title": r.title, "monthly_savings_usd": r.monthly_savings_usd,
         "confidence": r.confidence, "body": json.dumps(r.to_dict(), default=str), "created_at": created}
        for r in plan.recommendations
    ], infer_schema_length=None)  # early rows may all have a null queue or node
    wh.merge("recommendations", frame, ["plan_id", "id"])

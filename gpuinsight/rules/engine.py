"""Evaluate the rules: frames in, a plan out. Pure: nothing here reads the warehouse or a cluster
(:meth:`gpuinsight.api.GpuInsight.recommend` fetches the frames, attaches the actions and stores).

The rules run in the savings ledger's order (:data:`gpuinsight.rules.registry.ALL_RULES`), each
claiming what it saves; every finding's evidence gets its kind's ``saving_basis`` and its claims
per node, and the ledger's invariants are checked (a violation is a bug and raises
:class:`gpuinsight.rules.ledger.LedgerError`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import polars as pl

from gpuinsight.errors import BadInput
from gpuinsight.plan import Plan, Recommendation, kind_of
from gpuinsight.plan.model import finding_order
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.ledger import Ledger
from gpuinsight.rules.production import ProductionClassifier
from gpuinsight.rules.registry import ALL_RULES, SETTING_GROUPS
from gpuinsight.rules.settings import Resolved

# frames the engine itself reads, whatever the rules declare: the window (hours, catalog, the
# clusters judged), the ledger's node costs, and what the plan's topology is built from
ENGINE_FRAMES = ("analysis_window", "node_costs", "nodes_current", "network_topology")

Settings = Mapping[str, Mapping[str, Any]]


def needed_frames() -> set[str]:
    """Every SQL model a plan reads: the engine's and each rule's declared ``needs``."""
    names: set[str] = set(ENGINE_FRAMES)
    for rule in ALL_RULES:
        names.update(rule.needs)
    return names


class DeclaredFrames(Mapping[str, pl.DataFrame]):
    """The frames one rule may read: its declared ``needs`` and the engine's. Reading any other
    is a bug in the rule (it would depend on a model :func:`needed_frames` may not fetch) and
    raises; a declared frame the caller did not give reads as absent."""

    def __init__(self, frames: Mapping[str, pl.DataFrame], rule: str, declared: Iterable[str]) -> None:
        self._frames, self._rule = frames, rule
        self._declared = frozenset(declared) | frozenset(ENGINE_FRAMES)

    def __getitem__(self, name: str) -> pl.DataFrame:
        if name not in self._declared:
            raise AssertionError(f"rule {self._rule} reads the model {name!r} it does not declare in its needs")
        return self._frames[name]

    def __iter__(self) -> Iterator[str]:
        return (n for n in self._frames if n in self._declared)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def resolve_all(settings: Settings | None) -> dict[str, Resolved]:
    """Every settings group resolved (read-only), or BadInput naming the unknown group or the
    setting and why its value is refused."""
    settings = settings or {}
    unknown = set(settings) - {r.name for r in SETTING_GROUPS}
    if unknown:
        raise BadInput(f"unknown rule(s) in settings: {sorted(unknown)}; known: {[r.name for r in SETTING_GROUPS]}")
    try:
        return {rule.name: rule.resolve_settings(settings.get(rule.name)) for rule in SETTING_GROUPS}
    except (ValueError, TypeError) as exc:
        raise BadInput(str(exc)) from exc


def evaluate_plan(frames: Mapping[str, pl.DataFrame], settings: Settings | None = None,
                  *, only: set[str] | None = None) -> tuple[list[Recommendation], PlanContext]:
    """Pure: frames in, recommendations out (in the plan's order), with the plan's context (its
    ledger). ``only``: the rules or kinds to run (the others are skipped)."""
    resolved = resolve_all(settings)
    ctx = PlanContext(Ledger.from_frames(frames), ProductionClassifier.from_settings(resolved["production"]),
                      settings=resolved)
    recs: list[Recommendation] = []
    for rule_cls in ALL_RULES:
        if only and not ({rule_cls.name} | {k.name for k in rule_cls.kinds}) & only:
            continue
        view = DeclaredFrames(frames, rule_cls.name, rule_cls.needs)
        recs.extend(r for r in rule_cls().evaluate(view, resolved[rule_cls.name], ctx)
                    if not only or r.rule in only or rule_cls.name in only)
    ids = [r.id for r in recs]
    if len(set(ids)) != len(ids):
        raise AssertionError(f"duplicate finding ids in a plan: {sorted({i for i in ids if ids.count(i) > 1})}")
    known = frame_clusters(frames)
    strays = sorted({f"{r.id} ({r.cluster})" for r in recs if known and r.cluster not in known})
    if strays:
        raise AssertionError(f"findings of a cluster the frames do not hold: {strays}")
    for rec in recs:
        rec.evidence["saving_basis"] = kind_of(rec.rule).saving_basis
        rec.evidence["claims"] = ctx.ledger.evidence_for(rec.id)
    ctx.ledger.check({r.id: r.monthly_savings_usd for r in recs})
    recs.sort(key=finding_order)
    return recs, ctx


def frame_clusters(frames: Mapping[str, pl.DataFrame]) -> list[str]:
    """The clusters the frames hold data for (the analysis window has a row per cluster)."""
    w = frames.get("analysis_window")
    if w is None or "cluster" not in w.columns:
        return []
    return sorted({str(c) for c in w.get_column("cluster").to_list() if c})


def evaluate_rules(frames: Mapping[str, pl.DataFrame], settings: Settings | None = None,
                   *, only: set[str] | None = None) -> list[Recommendation]:
    """Pure: frames in, recommendations out (sorted by monthly saving, largest first)."""
    return evaluate_plan(frames, settings, only=only)[0]


def make_plan(frames: Mapping[str, pl.DataFrame], settings: Settings | None = None, *,
              now: datetime | None = None) -> Plan:
    """Pure: the plan of the rules over ``frames`` (no actions yet): its id and time, the window
    and catalog it judged, the fleet's spend the ledger checked it against, and its notes."""
    recs, ctx = evaluate_plan(frames, settings)
    w = frames["analysis_window"]
    now = now or datetime.now(UTC)
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
    return plan

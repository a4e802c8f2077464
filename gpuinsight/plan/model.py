"""The recommendation object (design.md, "Recommendation objects") and the plan that holds them.

A recommendation is one finding of one kind (:mod:`gpuinsight.plan.kinds`) about one target in
one cluster, with its saving per 730-hour month, its evidence and the actions that carry it out.
A plan is the recommendations of one run of the rules with what they were judged on: the window,
the price catalog, the fleet's spend and the notes the run made.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpuinsight.config import DEFAULT_CLUSTER
from gpuinsight.plan.ids import finding_id
from gpuinsight.plan.kinds import RULE_NAMES

if TYPE_CHECKING:
    import polars as pl

# every dollar figure of a plan is per month of this many hours (the run rate of the window)
HOURS_PER_MONTH = 730.0
# a figure is first rounded to this many decimals, then to its own (steady_round): the last bits
# a parallel sum's order leaves are far below it, every digit a figure shows far above it
SETTLE_DIGITS = 9


def steady_round(x: float, digits: int) -> float:
    """``round(x, digits)`` of a figure the models summed from floats, the same whatever order the
    sum took: first to 9 decimals, which drops the last bits the order leaves (DuckDB adds in
    parallel, and an incremental refresh stores rows in another order than a build from
    scratch), so a value on a half-way digit (2.115, reached as 2.1149999999999998) rounds one
    way every time instead of flipping between runs."""
    return round(round(x, max(digits, SETTLE_DIGITS)), digits)


def steady_round_expr(expr: pl.Expr, digits: int) -> pl.Expr:
    """:func:`steady_round` of a polars column (a chart's figures, a tie between means)."""
    return expr.round(max(digits, SETTLE_DIGITS)).round(digits)


@dataclass
class Recommendation:
    rule: str
    title: str
    namespace: str | None = None
    workload: str | None = None
    node: str | None = None
    queue: str | None = None
    current: dict[str, Any] = field(default_factory=dict)
    proposed: dict[str, Any] = field(default_factory=dict)
    monthly_savings_usd: float = 0.0
    confidence: float = 0.5
    evidence: dict[str, Any] = field(default_factory=dict)
    actions: list[dict[str, Any]] = field(default_factory=list)
    # What the change touches, for the action builders: {"kind", "namespace", "name", ..., "cluster"}
    target: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    # the cluster the finding is about (the --cluster name its data was loaded under): its
    # namespaces, workloads, nodes and queues are that cluster's, and so are its actions
    cluster: str = DEFAULT_CLUSTER

    def __post_init__(self) -> None:
        if self.rule not in RULE_NAMES:
            raise ValueError(f"unknown rule {self.rule!r}")
        if not isinstance(self.cluster, str) or not self.cluster:
            raise ValueError(f"{self.rule} finding: cluster {self.cluster!r} is not a non-empty string")
        if not self.id:
            self.id = finding_id(self.rule, self.cluster, self.namespace, self.workload, self.node, self.queue)
        if self.target:  # the target names its cluster too (what the builders and apply read)
            own = self.target.get("cluster")
            if own is None:
                self.target["cluster"] = self.cluster
            elif own != self.cluster:
                raise ValueError(f"finding {self.id}: target.cluster {own!r} is not its cluster {self.cluster!r}")
        self.monthly_savings_usd = steady_round(float(self.monthly_savings_usd), 2)
        self.confidence = steady_round(min(1.0, max(0.0, float(self.confidence))), 3)

    def to_dict(self) -> dict[str, Any]:
        """The contract's object; its nested values are this recommendation's own (not copies)."""
        order = ["id", "rule", "cluster", "namespace", "workload", "node", "queue", "title", "current", "proposed",
                 "monthly_savings_usd", "confidence", "evidence", "actions", "target"]
        return {k: getattr(self, k) for k in order}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recommendation:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def finding_order(r: Recommendation) -> tuple[Any, ...]:
    """A plan's order: largest saving first; equal savings by what the findings are about (not by
    id, a hash), so the same stack in two clusters lists its findings, and emits its steps, in the
    same order in each."""
    return (-r.monthly_savings_usd, r.rule, r.cluster, r.namespace or "", r.workload or "", r.node or "",
            r.queue or "", r.id)


def target_of(r: Any) -> str:
    """A short description of what a finding is about (the CLI table and the report both show it).

    A finding with ``node`` set is node-level (design.md): it is credited to its node and node
    pool, never to a workload that happens to run there.
    """
    if getattr(r, "node", None):
        proposed = getattr(r, "proposed", None) or {}
        evidence = getattr(r, "evidence", None) or {}
        freed = [n for n in (proposed.get("nodes_freed") or []) if n != r.node]
        label = f"node {r.node}" + (f" + {len(freed)} more" if freed else "")
        pool = evidence.get("pool") or proposed.get("node_pool")
        return f"{label} (pool {pool})" if pool else label
    if getattr(r, "workload", None):
        return f"{r.namespace}/{r.workload}" if getattr(r, "namespace", None) else str(r.workload)
    for attr, prefix in (("queue", "queue "), ("namespace", "namespace ")):
        if getattr(r, attr, None):
            return prefix + str(getattr(r, attr))
    return "fleet"


@dataclass
class Plan:
    plan_id: str
    created_at: datetime
    catalog: str | None
    window: tuple[datetime | None, datetime | None]
    recommendations: list[Recommendation]
    notes: list[str] = field(default_factory=list)
    # the fleet's monthly spend the savings ledger checked the plan against (None: not known)
    spend_monthly_usd: float | None = None
    # the clusters whose data the plan judged (sorted; a cluster with no finding is one too);
    # always holds the clusters of its recommendations
    clusters: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.clusters = sorted(set(self.clusters) | {r.cluster for r in self.recommendations})

    def of_cluster(self, cluster: str) -> Plan:
        """The part of the plan about ``cluster`` (same id, time and notes; its findings only)."""
        return Plan(self.plan_id, self.created_at, self.catalog, self.window,
                    [r for r in self.recommendations if r.cluster == cluster], list(self.notes),
                    self.spend_monthly_usd if self.clusters == [cluster] else None, [cluster])

    def by_cluster(self) -> dict[str, list[Recommendation]]:
        """The recommendations per cluster (every cluster of the plan, in name order)."""
        out: dict[str, list[Recommendation]] = {c: [] for c in self.clusters}
        for r in self.recommendations:
            out.setdefault(r.cluster, []).append(r)
        return out

    def savings_by_cluster(self) -> dict[str, float]:
        """Monthly savings per cluster (they add up to :attr:`total_monthly_savings_usd`, to the cent)."""
        return {c: round(sum(r.monthly_savings_usd for r in recs), 2) for c, recs in self.by_cluster().items()}

    @property
    def total_monthly_savings_usd(self) -> float:
        return round(sum(r.monthly_savings_usd for r in self.recommendations), 2)

    @property
    def savings_by_basis(self) -> dict[str, float]:
        """Monthly savings per ``evidence.saving_basis``: nodes released, GPUs returned, ..."""
        out: dict[str, float] = {}
        for r in self.recommendations:
            basis = str(r.evidence.get("saving_basis") or "unknown")
            out[basis] = round(out.get(basis, 0.0) + r.monthly_savings_usd, 2)
        return out

    def to_json_obj(self) -> list[dict[str, Any]]:
        """The fixed interface: a JSON array of recommendation objects."""
        return [r.to_dict() for r in self.recommendations]

    @staticmethod
    def new_id(now: datetime | None = None) -> str:
        """``plan-YYYYMMDD-HHMMSS`` (UTC): lower case, so it is a valid id (``^[a-z0-9-]+$``),
        file name and label value as it is."""
        now = (now or datetime.now(UTC)).astimezone(UTC)
        return "plan-" + now.strftime("%Y%m%d-%H%M%S")

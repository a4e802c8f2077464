"""The rule interface and the recommendation object (design.md, "Recommendation objects").

A rule is a pure function of DataFrames: it names the SQL models it needs, declares its
settings (with defaults and help, shown by the CLI), the finding kinds it emits (each with its
action builder and the typed schema of its ``proposed`` / ``target``), and turns frames into
recommendations, claiming what it saves in the plan's savings ledger. Rules never talk to
Prometheus, Kubernetes or AWS.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

import polars as pl

from gpuinsight.config import DEFAULT_CLUSTER

if TYPE_CHECKING:
    from gpuinsight.rules.context import PlanContext
    from gpuinsight.rules.typed import Schema, Target

RULE_NAMES = ("idle", "mig", "mps", "timeslice", "spot", "binpack", "queue", "ray", "input_starved", "scale_to_zero",
              "topology", "cpu_pods_on_gpu_nodes")
HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    help: str
    # the inclusive range of a numeric setting: a value outside it, or not a number of the
    # default's type (an int setting takes whole numbers only), is refused
    bounds: tuple[float, float] | None = None

    def coerce(self, value: Any) -> Any:
        kind = type(self.default)
        if isinstance(value, str) and not isinstance(self.default, str):
            if isinstance(self.default, bool):
                return value.lower() in ("1", "true", "yes")
            try:
                value = kind(value)
            except ValueError:
                raise ValueError(f"setting {self.name}: {value!r} is not a {kind.__name__}") from None
        if self.bounds is None:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and value != int(value)):
            raise ValueError(f"setting {self.name}: {value!r} is not {'a whole number' if kind is int else 'a number'}")
        low, high = self.bounds
        if not low <= value <= high:
            raise ValueError(f"setting {self.name}: {value!r} is outside {low:g}..{high:g}")
        return kind(value)


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
        self.monthly_savings_usd = round(float(self.monthly_savings_usd), 2)
        self.confidence = round(min(1.0, max(0.0, float(self.confidence))), 3)

    def to_dict(self) -> dict[str, Any]:
        """The contract's object; its nested values are this recommendation's own (not copies)."""
        order = ["id", "rule", "cluster", "namespace", "workload", "node", "queue", "title", "current", "proposed",
                 "monthly_savings_usd", "confidence", "evidence", "actions", "target"]
        return {k: getattr(self, k) for k in order}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recommendation:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


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


def stable_id(rule: str, *parts: str | None) -> str:
    """A hash of a name and some parts: the same parts, the same id, across runs."""
    key = "|".join([rule, *[p or "" for p in parts]])
    # ids are DNS-label-like (plan files check them): scale_to_zero -> scale-to-zero-<hash>
    return f"{rule.replace('_', '-')}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def finding_id(rule: str, cluster: str, *target: str | None) -> str:
    """The id of a finding: the same finding, the same id, across runs (design.md: a hash of
    the rule and its target). The target's cluster is part of it: the same namespace and
    workload in two clusters are two findings. Every rule makes its ids here."""
    if not cluster:
        raise ValueError(f"{rule} finding: an id needs the cluster")
    return stable_id(rule, cluster, *target)


@dataclass(frozen=True)
class FindingKind:
    """One kind of finding (the ``rule`` field of a recommendation) and everything about it:
    the module that builds its actions (``refs(rec, state)`` and ``build(rec, state)``), the
    schemas of its ``proposed`` and ``target``, and the basis of its saving."""

    name: str
    builder: str
    proposed: type[Schema]
    target: type[Target]
    saving_basis: str

    def validate(self, rec: dict[str, Any], where: str) -> None:
        """Check a recommendation (as read from a plan file) against this kind's schemas."""
        self.proposed.check(rec.get("proposed") or {}, f"{where}.proposed")
        self.target.check(rec.get("target") or {}, f"{where}.target")


class Rule:
    """Subclass per rule: set ``name``, ``needs`` (SQL model names), ``settings`` and ``kinds``."""

    name: ClassVar[str]
    summary: ClassVar[str]
    needs: ClassVar[tuple[str, ...]]
    settings: ClassVar[tuple[Setting, ...]] = ()
    kinds: ClassVar[tuple[FindingKind, ...]] = ()

    @classmethod
    def resolve_settings(cls, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        overrides = overrides or {}
        known = {s.name: s for s in cls.settings}
        unknown = set(overrides) - set(known)
        if unknown:
            raise ValueError(f"rule {cls.name}: unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
        return {s.name: s.coerce(overrides.get(s.name, s.default)) for s in cls.settings}

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        raise NotImplementedError


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

"""``topology``: a gang spread over more network domains than it needs (not priced)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinsight.plan.kind import Evidence, FindingKind, figure, words
from gpuinsight.plan.schema import (
    LABEL_KEY,
    Schema,
    WorkloadTarget,
    integer,
    list_of,
    mapping,
    optional,
    spec,
    text,
)


@dataclass
class TopologyProposed(Schema):
    level: str = spec(text())                      # node | nvlink | rack | block | tier<N>
    domain: str = spec(text())
    placement: list[dict[str, Any]] = spec(list_of(mapping, non_empty=True))
    mode: str = spec(text(choices=("soft", "hard")), "soft")
    volcano_tier: int | None = spec(optional(integer(1)), None)     # networkTopology.highestTierAllowed
    topology_key: str | None = spec(optional(text(LABEL_KEY)), None)  # pod affinity on this label
    gang_label: dict[str, Any] | None = spec(optional(mapping), None)  # the pods' label the affinity selects


@dataclass
class TopologyEvidence(Evidence):
    """Where the gang runs, where it could, and what each 1 % of slowdown costs."""

    pods: int | None = figure()
    spread: str | None = words()
    tightest_feasible: str | None = words()
    feasible_domain: str | None = words()
    nvlink_reach: str | None = words()
    topology_source: str | None = words()
    gang_gpu_cost_usd_per_month: float | None = figure()
    usd_per_month_per_pct_slowdown: float | None = figure()


TOPOLOGY = FindingKind("topology", "network topology", "#455a64", "slowdown_risk", TopologyProposed, WorkloadTarget,
                       TopologyEvidence)

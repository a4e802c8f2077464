"""``spot``: interruption-tolerant work moved from on-demand to spot capacity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinsight.plan.kind import Evidence, FindingKind, figure, words
from gpuinsight.plan.schema import DNS_NAME, Schema, WorkloadTarget, list_of, number, optional, spec, text


def _type_name(value: Any, where: str) -> None:
    if value is not None:
        text()(value, where)


@dataclass
class SpotProposed(Schema):
    node_pool: str = spec(text(DNS_NAME))
    capacity_type: str = spec(text(choices=("spot",)), "spot")
    from_node_pool: str | None = spec(optional(text()), None)
    node_pool_kind: str = spec(text(choices=("karpenter", "eks-nodegroup")), "karpenter")
    instance_types: list[str | None] = spec(list_of(_type_name), [])
    gpu_model: str | None = spec(optional(text()), None)
    usd_per_gpu_hour: float = spec(number, 0.0)


@dataclass
class SpotEvidence(Evidence):
    """What an interruption costs: the work since the last checkpoint, or a task, redone."""

    checkpoint_interval_min: float | None = figure()
    checkpoint_basis: str | None = words()
    expected_rework_gpu_hours_per_month: float | None = figure()
    rework_without_checkpoints_gpu_hours_per_month: float | None = figure()


SPOT = FindingKind("spot", "spot capacity", "#00897b", "price_difference", SpotProposed, WorkloadTarget,
                   SpotEvidence)

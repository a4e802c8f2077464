"""``idle``: a workload that holds GPUs and does not use them: scale it to zero, or give periodic
work a schedule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinsight.plan.kind import Evidence, FindingKind
from gpuinsight.plan.schema import Schema, WorkloadTarget, integer, list_of, optional, schema, spec, text


@dataclass
class Schedule(Schema):
    active_hours_utc: list[int] = spec(list_of(integer(0, 23), non_empty=True))
    timezone: str = spec(text(choices=("UTC",)), "UTC")


@dataclass
class IdleProposed(Schema):
    replicas: int = spec(integer(0, 0))
    reason: str = spec(text(choices=("idle", "periodic")), "idle")
    schedule: dict[str, Any] | None = spec(optional(schema(Schedule)), None)


IDLE = FindingKind("idle", "idle reclaim", "#c62828", "gpus_returned", IdleProposed, WorkloadTarget, Evidence)

"""``mps`` and ``timeslice``: small workloads sharing whole GPUs of a node given one sharing
configuration (MPS for production, time-slicing for other work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinsight.plan.kind import Evidence, FindingKind
from gpuinsight.plan.kinds.binpack import Move
from gpuinsight.plan.kinds.mig import check_evictions
from gpuinsight.plan.kinds.server_memory import ServerMemory
from gpuinsight.plan.schema import (
    DNS_NAME,
    LABEL_VALUE,
    Schema,
    Target,
    integer,
    list_of,
    number,
    optional,
    schema,
    spec,
    text,
    workload,
)


@dataclass
class SharedProposed(Schema):
    replicas: int = spec(integer(2, 64))
    config_name: str = spec(text(LABEL_VALUE))
    node: str | None = spec(optional(text(DNS_NAME)), None)
    group: list[str] = spec(list_of(text()), [])
    gpus_freed: float = spec(number, 0.0)
    evict: list[dict[str, Any]] = spec(list_of(schema(Move)), [])  # whole pods moved off the host first
    server_memory: dict[str, Any] | None = spec(optional(schema(ServerMemory)), None)
    extra_checks = (check_evictions,)


@dataclass
class MpsProposed(SharedProposed):
    sharing: str = spec(text(choices=("mps",)), "mps")


@dataclass
class TimeslicingProposed(SharedProposed):
    sharing: str = spec(text(choices=("time-slicing",)), "time-slicing")


@dataclass
class SharedGroupTarget(Target):
    workloads: list[dict[str, Any]] = spec(list_of(workload, non_empty=True))
    kind: str = spec(text(choices=("SharedGroup",)), "SharedGroup")
    member: dict[str, Any] | None = spec(optional(workload), None)


MPS = FindingKind("mps", "MPS sharing", "#6a1b9a", "gpus_returned", MpsProposed, SharedGroupTarget, Evidence)
TIMESLICE = FindingKind("timeslice", "time-slicing", "#ab47bc", "gpus_returned", TimeslicingProposed,
                        SharedGroupTarget, Evidence)

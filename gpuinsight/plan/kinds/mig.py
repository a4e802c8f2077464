"""``mig``: a small workload moved onto a MIG slice (of a free instance, or of a GPU partitioned
for it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinsight.migparted import check_entries
from gpuinsight.plan.kind import Evidence, FindingKind
from gpuinsight.plan.kinds.binpack import Move
from gpuinsight.plan.kinds.server_memory import ServerMemory
from gpuinsight.plan.schema import (
    DNS_LABEL,
    DNS_NAME,
    LABEL_VALUE,
    MIG_PROFILE,
    Schema,
    WorkloadTarget,
    bad,
    boolean,
    integer,
    list_of,
    mapping,
    number,
    optional,
    schema,
    spec,
    text,
)


def _resource_matches(data: dict[str, Any], where: str) -> None:
    if "resource" in data and data["resource"] != f"nvidia.com/mig-{data.get('mig_profile')}":
        raise bad(f"{where}.resource", f"{data['resource']!r} does not match mig_profile {data.get('mig_profile')!r}")


def check_evictions(data: dict[str, Any], where: str) -> None:
    """Each pod moved off a host first names the node it leaves (``from``, a Python keyword)."""
    for i, move in enumerate(data.get("evict") or []):
        text(DNS_NAME)(move.get("from") if isinstance(move, dict) else None, f"{where}.evict[{i}].from")


def _check_layout(data: dict[str, Any], where: str) -> None:
    if data.get("node_layout"):
        check_entries(data["node_layout"], f"{where}.node_layout")


@dataclass
class StoppedPod(Schema):
    """A small workload's pod stopped before its GPU is repartitioned (it restarts on its slice)."""

    namespace: str = spec(text(DNS_LABEL))
    pod: str = spec(text(DNS_NAME))
    workload: str = spec(text(DNS_NAME))


@dataclass
class MigProposed(Schema):
    mig_profile: str = spec(text(MIG_PROFILE))
    node_mig_config: str = spec(text(LABEL_VALUE))
    resource: str = spec(text(), "")
    count: int = spec(integer(1), 1)
    gpu_model: str | None = spec(optional(text()), None)
    node: str | None = spec(optional(text(DNS_NAME)), None)
    repartition: bool = spec(boolean, False)  # the node is to get node_mig_config (else it runs it)
    group: list[str] = spec(list_of(text()), [])
    gpus_freed: float = spec(number, 0.0)
    # the device plugin's strategy on the node: mixed (slices are nvidia.com/mig-<profile>, a node
    # may keep GPUs whole) or single (every GPU one named layout, slices stay nvidia.com/gpu)
    strategy: str = spec(text(choices=("mixed", "single")), "mixed")
    gpu_index: int | None = spec(optional(integer(0, 63)), None)  # the GPU partitioned (mixed)
    node_layout: list[dict[str, Any]] = spec(list_of(mapping), [])  # the node's mig-parted entries
    evict: list[dict[str, Any]] = spec(list_of(schema(Move)), [])  # whole pods moved off the node first
    stop_first: list[dict[str, Any]] = spec(list_of(schema(StoppedPod)), [])
    server_memory: dict[str, Any] | None = spec(optional(schema(ServerMemory)), None)
    extra_checks = (_resource_matches, check_evictions, _check_layout)


MIG = FindingKind("mig", "MIG slice", "#1565c0", "gpus_returned", MigProposed, WorkloadTarget, Evidence)

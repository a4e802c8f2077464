"""``cpu_pods_on_gpu_nodes``: GPU nodes kept up by pods that ask for no GPU: taint the pool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinsight.plan.kind import FindingKind
from gpuinsight.plan.kinds.binpack import NodeEvidence
from gpuinsight.plan.schema import (
    DNS_NAME,
    Schema,
    Target,
    boolean,
    list_of,
    mapping,
    optional,
    spec,
    text,
    workload,
)


@dataclass
class CpuPodsProposed(Schema):
    taint: dict[str, Any] = spec(mapping)
    nodes: list[str] = spec(list_of(text(DNS_NAME), non_empty=True))
    node_pool: str | None = spec(optional(text()), None)
    node_pool_kind: str | None = spec(optional(text()), None)
    tolerate: list[dict[str, Any]] = spec(list_of(workload), [])     # GPU workloads that get the toleration
    holders: list[dict[str, Any]] = spec(list_of(mapping), [])      # the CPU-only workloads kept off
    already_tainted: bool = spec(boolean, False)


@dataclass
class NodePoolTarget(Target):
    kind: str = spec(text(choices=("NodePool", "NodeGroup", "Node")))
    name: str = spec(text())


CPU_PODS = FindingKind("cpu_pods_on_gpu_nodes", "CPU pods on GPU nodes", "#8d6e63", "nodes_released",
                       CpuPodsProposed, NodePoolTarget, NodeEvidence)

"""The keys of what a plan is about, each naming its cluster: the same namespace, workload, pod or
node name in two clusters is two things. Typed records, never concatenated strings (a budget
key is written ``pdb:cluster/namespace/name`` only where it is shown)."""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class NodeKey(NamedTuple):
    cluster: str
    node: str


class PoolKey(NamedTuple):
    """A pool the planners move work within: nodes of one cluster, node pool, zone and GPU model
    (a pool's fields may be unknown: None)."""

    cluster: str
    node_pool: str | None
    zone: str | None
    gpu_model: str | None


class WorkloadKey(NamedTuple):
    cluster: str
    namespace: str
    workload: str


class PodKey(NamedTuple):
    cluster: str
    namespace: str
    pod: str


class BudgetKind(Enum):
    """What caps the evictions of a set of pods."""

    PDB = "pdb"     # a PodDisruptionBudget
    GANG = "gang"   # the elastic part of a gang (pods beyond its minMember)


class BudgetKey(NamedTuple):
    """A disruption budget: a PodDisruptionBudget, or an elastic gang, of one namespace of one cluster."""

    kind: BudgetKind
    cluster: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.cluster}/{self.namespace}/{self.name}"

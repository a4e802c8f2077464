"""What a finding does to the fleet that later rules of the same plan must plan around.

A rule that makes a finding records its effects on the plan's context
(:meth:`gpuinsight.rules.context.PlanContext.record`); later rules ask the context typed
questions (is this pod still on its node, how many GPUs of this node are partitioned for shared
work, how many evictions of this budget are used) and never read another rule's state. Each
effect is a small frozen record keyed by cluster-aware keys (:mod:`gpuinsight.keys`); the
context keeps them in order with the finding that caused them, so a plan's effects can be listed
(tests, and explaining why a later rule left something alone).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuinsight.keys import BudgetKey, NodeKey, PodKey, WorkloadKey


@dataclass(frozen=True)
class PodLeaves:
    """A pod leaves its node for GPUs shared with other work (a MIG slice, an MPS / time-slicing host)."""

    pod: PodKey


@dataclass(frozen=True)
class WorkloadLeaves:
    """Every pod of a workload leaves its node: scaled away, or its Ray cluster deleted."""

    workload: WorkloadKey


@dataclass(frozen=True)
class GpusPartitioned:
    """Some GPUs of a node are partitioned with MIG for shared work (the others stay whole)."""

    node: NodeKey
    gpus: float


@dataclass(frozen=True)
class SharingHost:
    """A node gets one sharing configuration for all its GPUs (MPS, time-slicing or one MIG layout)."""

    node: NodeKey


@dataclass(frozen=True)
class PodsMoved:
    """Pods of a workload (a gang, or a pod) evicted from one node and placed on another (the same
    node: a gang restarted where it is); each eviction counted against its disruption budgets."""

    workload: WorkloadKey
    pods: tuple[PodKey, ...]
    from_node: str
    to_node: str
    evictions: tuple[BudgetKey, ...] = ()   # a budget once per pod evicted under it


Effect = PodLeaves | WorkloadLeaves | GpusPartitioned | SharingHost | PodsMoved


@dataclass(frozen=True)
class Recorded:
    """An effect, with the finding (its id) that causes it."""

    finding: str
    effect: Effect

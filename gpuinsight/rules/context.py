"""What the rules of one plan share: the savings ledger, the production classifier, the models'
rows (typed, once per plan), and the effects of earlier findings (:mod:`gpuinsight.rules.effects`:
pods scaled away, nodes turned into MIG or shared-GPU hosts, pods moved), recorded by the rule
that makes a finding and read by later rules through the typed questions below."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuinsight.keys import BudgetKey, NodeKey, PodKey, WorkloadKey
from gpuinsight.rules.common import num, window_hours
from gpuinsight.rules.effects import (
    Effect,
    GpusPartitioned,
    PodLeaves,
    PodsMoved,
    Recorded,
    SharingHost,
    WorkloadLeaves,
)
from gpuinsight.rules.ledger import Ledger
from gpuinsight.rules.production import DEFAULT, ProductionClassifier
from gpuinsight.rules.settings import Resolved
from gpuinsight.rules.topology_domains import Topology, build_topology
from gpuinsight.sql.rows import Row, typed_rows

TOPOLOGY_LEVELS = ("nvlink", "rack", "block")


@dataclass
class PlanContext:
    ledger: Ledger = field(default_factory=Ledger)
    production: ProductionClassifier = DEFAULT
    # every rule's resolved settings (the pool planner reads binpack's: which pods may move)
    settings: Mapping[str, Resolved] = field(default_factory=dict)
    # what the rules say about the plan as a whole (the plan's notes), each once
    notes: list[str] = field(default_factory=list)
    _effects: list[Recorded] = field(default_factory=list, repr=False)
    # what the effects say, indexed as they are recorded (a later record of the same key wins)
    _pod_leaves: dict[PodKey, str] = field(default_factory=dict, repr=False)
    _workload_leaves: dict[WorkloadKey, str] = field(default_factory=dict, repr=False)
    _hosts: set[NodeKey] = field(default_factory=set, repr=False)
    _partitioned: dict[NodeKey, float] = field(default_factory=dict, repr=False)
    _evictions: dict[BudgetKey, int] = field(default_factory=dict, repr=False)
    _relocated: dict[WorkloadKey, dict[str, str]] = field(default_factory=dict, repr=False)
    _pod_node: dict[PodKey, str] = field(default_factory=dict, repr=False)
    _moved_off_by: dict[PodKey, str] = field(default_factory=dict, repr=False)
    _topology: Topology | None = field(default=None, repr=False)
    _rows: dict[tuple[str, tuple[str, ...]], list[Row]] = field(default_factory=dict, repr=False)
    _verdicts: dict[tuple[Any, ...], tuple[bool, str]] = field(default_factory=dict, repr=False)

    def note(self, text: str) -> None:
        """Say something about the plan as a whole (its notes), once."""
        if text not in self.notes:
            self.notes.append(text)

    def rule_settings(self, name: str) -> Resolved:
        """A rule's resolved settings (the engine resolves every group before the first rule runs)."""
        return self.settings[name]

    def rows(self, frames: Mapping[str, Any], name: str, *, without: tuple[str, ...] = ()) -> list[Row]:
        """A model's frame as its typed rows (:mod:`gpuinsight.sql.rows`), converted once per plan.
        ``without``: columns left None (a nested column costs a Python object per element; a rule
        that reads one for a few rows asks :meth:`cell` for those)."""
        frame = frames.get(name)  # asked every time: a rule's frames refuse a model it does not declare
        key = (name, without)
        if key not in self._rows:
            self._rows[key] = typed_rows(name, frame.drop(without, strict=False) if frame is not None and without else frame)
        return self._rows[key]

    @staticmethod
    def cell(frames: Mapping[str, Any], name: str, index: int, column: str) -> Any:
        """One value of a model's frame (row ``index``, as :meth:`rows` numbers them), as a typed
        row holds it (None when the frame has no such column)."""
        frame = frames[name]
        return frame.select(column).row(index)[0] if column in frame.columns else None

    def topology(self, frames: Mapping[str, Any]) -> Topology:
        """Every current node's network domains (HyperNodes, else labels), built once per plan."""
        if self._topology is None:
            topo = self.settings.get("topology") or {}
            labels = {lvl: topo[f"{lvl}_labels"] for lvl in TOPOLOGY_LEVELS if f"{lvl}_labels" in topo}
            self._topology = build_topology(self.rows(frames, "nodes_current"), self.rows(frames, "network_topology"),
                                            labels)
        return self._topology

    def is_production(self, row: Any) -> tuple[bool, str]:
        """(production, why) of a pod or workload row (a model with namespace, priority_class,
        labels and annotations)."""
        key = (row.namespace, row.priority_class, str(row.labels), str(row.annotations))
        if key not in self._verdicts:
            self._verdicts[key] = self.production.classify(row.namespace, row.priority_class, row.labels,
                                                           row.annotations)
        return self._verdicts[key]

    # -- effects ------------------------------------------------------------------------------
    def record(self, finding: str, *effects: Effect) -> None:
        """What ``finding`` does that later rules plan around (in the order the plan makes them)."""
        for e in effects:
            self._effects.append(Recorded(finding, e))
            if isinstance(e, PodLeaves):
                self._pod_leaves[e.pod] = finding
            elif isinstance(e, WorkloadLeaves):
                self._workload_leaves[e.workload] = finding
            elif isinstance(e, SharingHost):
                self._hosts.add(e.node)
            elif isinstance(e, GpusPartitioned):
                self._partitioned[e.node] = self._partitioned.get(e.node, 0.0) + e.gpus
            elif isinstance(e, PodsMoved):
                self._relocated.setdefault(e.workload, {})[e.from_node] = e.to_node
                for pod in e.pods:
                    self._pod_node[pod] = e.to_node
                    if e.to_node != e.from_node:
                        self._moved_off_by[pod] = finding
                for budget in e.evictions:
                    self._evictions[budget] = self._evictions.get(budget, 0) + 1
            else:
                raise TypeError(f"not an effect: {e!r}")

    @property
    def effects(self) -> tuple[Recorded, ...]:
        """Every effect of the plan so far, in order, each with the finding that causes it."""
        return tuple(self._effects)

    def effects_of(self, finding: str) -> list[Effect]:
        return [r.effect for r in self._effects if r.finding == finding]

    def leaves_by(self, pod: PodKey, workload: WorkloadKey) -> str | None:
        """The finding that takes the pod off its node (scaled away, onto shared GPUs, moved), if any."""
        return self._pod_leaves.get(pod) or self._workload_leaves.get(workload) or self._moved_off_by.get(pod)

    def pod_leaves(self, pod: PodKey) -> str | None:
        """The finding that moves the pod onto shared GPUs, if any."""
        return self._pod_leaves.get(pod)

    def workload_leaves(self, workload: WorkloadKey) -> str | None:
        """The finding that takes every pod of the workload off its node, if any."""
        return self._workload_leaves.get(workload)

    def is_gone(self, pod: PodKey, workload: WorkloadKey) -> bool:
        """The pod no longer holds whole GPUs where it is or was moved to (it left, or its workload did)."""
        return pod in self._pod_leaves or workload in self._workload_leaves

    def node_after_moves(self, pod: PodKey, node: str) -> str:
        """Where the pod (now on ``node``) is after this plan's moves."""
        return self._pod_node.get(pod, node)

    def was_moved(self, pod: PodKey) -> bool:
        """An earlier finding evicted the pod already (it is not moved again)."""
        return pod in self._pod_node

    def relocation(self, workload: WorkloadKey) -> Mapping[str, str]:
        """Where this plan moves the workload's pods: from node -> to node (empty: not moved)."""
        return self._relocated.get(workload, {})

    def is_sharing_host(self, node: NodeKey) -> bool:
        return node in self._hosts

    def partitioned_gpus(self, node: NodeKey) -> float:
        """GPUs of the node this plan partitions with MIG for shared work."""
        return self._partitioned.get(node, 0.0)

    def evictions_used(self, budget: BudgetKey) -> int:
        """Evictions earlier findings of the plan make under the budget."""
        return self._evictions.get(budget, 0)

    # -- claims -------------------------------------------------------------------------------
    def claim_workload_hours(self, finding: str, workload: WorkloadKey, node_gpu_hours: Iterable[Mapping[str, Any]],
                             frames: Mapping[str, Any], share: float = 1.0) -> float:
        """Claim ``share`` of what the workload's GPUs cost per hour on each node it used in the
        window (``node_gpu_hours``: its allocated dollars and GPU-hours per node / window hours);
        returns the dollars per hour granted."""
        return self._claim_parts(finding, workload, node_gpu_hours, frames, share, returns_gpus=True)

    def claim_price_difference(self, finding: str, workload: WorkloadKey, node_gpu_hours: Iterable[Mapping[str, Any]],
                               frames: Mapping[str, Any], fraction: float) -> float:
        """Claim ``fraction`` of the workload's cost per hour (a cheaper price for the same GPUs),
        on the nodes its pods are on after this plan's moves; no GPUs are returned."""
        return self._claim_parts(finding, workload, node_gpu_hours, frames, fraction, returns_gpus=False)

    def claim_workload_time(self, finding: str, workload: WorkloadKey, node_gpu_hours: Iterable[Mapping[str, Any]],
                            frames: Mapping[str, Any], share: float) -> float:
        """Claim ``share`` of the workload's cost per hour as time its GPUs stop costing (the same
        work done sooner); no GPUs are returned to the pool in space."""
        return self._claim_parts(finding, workload, node_gpu_hours, frames, share, returns_gpus=False)

    def _claim_parts(self, finding: str, workload: WorkloadKey, node_gpu_hours: Iterable[Mapping[str, Any]],
                     frames: Mapping[str, Any], share: float, *, returns_gpus: bool) -> float:
        hours = window_hours(frames, workload.cluster)
        if not hours or share <= 0:
            return 0.0
        cluster = workload.cluster
        moved = self.relocation(workload)
        granted = 0.0
        for part in node_gpu_hours or []:
            node = moved.get(str(part["node"]), str(part["node"]))
            usd_h, gpus = num(part.get("cost_usd")) / hours, num(part.get("gpu_hours")) / hours
            self.ledger.account((cluster, node), usd_h, gpus)
            granted += self.ledger.claim(finding, (cluster, node), usd_h * share, gpus * share if returns_gpus else 0.0)
        self.ledger.claim_workload(*workload, finding)
        return granted

"""What the rules of one plan share: the savings ledger, the production classifier, and what
earlier rules changed (pods scaled away, nodes turned into MIG or shared-GPU hosts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuinsight.rules.common import num, rows, window_hours
from gpuinsight.rules.ledger import Ledger
from gpuinsight.rules.production import DEFAULT, ProductionClassifier
from gpuinsight.rules.topology_domains import Topology, build_topology


@dataclass
class PlanContext:
    ledger: Ledger = field(default_factory=Ledger)
    production: ProductionClassifier = DEFAULT
    # pods (cluster, namespace, pod) an earlier finding takes off their node, and nodes it
    # repurposes (MIG layout, device-plugin sharing config): binpack plans around both
    # (cluster, namespace, pod) and (cluster, namespace, workload) -> the finding that takes them away
    pods_leaving: dict[tuple[str, str, str], str] = field(default_factory=dict)
    workloads_leaving: dict[tuple[str, str, str], str] = field(default_factory=dict)
    hosts: set[tuple[str, str]] = field(default_factory=set)   # nodes given a sharing config as a whole
    # (cluster, node) -> GPUs of it partitioned with MIG for shared work (the rest stays whole)
    shared_gpus: dict[tuple[str, str], float] = field(default_factory=dict)
    # budget (``pdb:cluster/ns/name``, ``gang:cluster/ns/name``) -> evictions earlier findings of the plan make
    evictions: dict[str, int] = field(default_factory=dict)
    # every rule's resolved settings (the pool planner reads binpack's: which pods may move)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    # binpack's moves: (cluster, namespace, workload) -> {from node: to node}
    relocated: dict[tuple[str, str, str], dict[str, str]] = field(default_factory=dict)
    # ... and per pod: (cluster, namespace, pod) -> the node it moves to
    pods_moved: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # pods an earlier finding moves off their node (to make room for shared GPUs) -> that finding
    moved_by: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # the label keys of each topology level (the topology rule's settings; binpack reads them too)
    topology_labels: dict[str, Any] = field(default_factory=dict)
    # what the rules say about the plan as a whole (the plan's notes), each once
    notes: list[str] = field(default_factory=list)
    _topology: Topology | None = field(default=None, repr=False)
    _rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False)
    _verdicts: dict[tuple[Any, ...], tuple[bool, str]] = field(default_factory=dict, repr=False)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def rule_settings(self, name: str) -> dict[str, Any]:
        """A rule's resolved settings: the plan's, else the rule's defaults."""
        if name not in self.settings:
            from gpuinsight.rules.registry import SETTING_GROUPS

            rule = next(r for r in SETTING_GROUPS if r.name == name)
            self.settings[name] = rule.resolve_settings()
        return self.settings[name]

    def rows(self, frames: dict[str, Any], name: str) -> list[dict[str, Any]]:
        """A frame as row dicts, converted once per plan (read-only: rules copy before changing)."""
        if name not in self._rows:
            self._rows[name] = rows(frames.get(name))
        return self._rows[name]

    def topology(self, frames: dict[str, Any]) -> Topology:
        """Every current node's network domains (HyperNodes, else labels), built once per plan."""
        if self._topology is None:
            self._topology = build_topology(self.rows(frames, "nodes_current"), self.rows(frames, "network_topology"),
                                            self.topology_labels)
        return self._topology

    def is_production(self, row: dict[str, Any]) -> tuple[bool, str]:
        key = (row.get("namespace"), row.get("priority_class"), str(row.get("labels")), str(row.get("annotations")))
        if key not in self._verdicts:
            self._verdicts[key] = self.production.classify_row(row)
        return self._verdicts[key]

    def claim_workload_hours(self, finding: str, row: dict[str, Any], frames: dict[str, Any],
                             share: float = 1.0) -> float:
        """Claim ``share`` of what the workload's GPUs cost per hour on each node it used in the
        window (its allocated dollars / window hours); returns the dollars per hour granted."""
        return self._claim_parts(finding, row, frames, share, returns_gpus=True)

    def claim_price_difference(self, finding: str, row: dict[str, Any], frames: dict[str, Any],
                               fraction: float) -> float:
        """Claim ``fraction`` of the workload's cost per hour (a cheaper price for the same GPUs),
        on the nodes its pods are on after this plan's moves; no GPUs are returned."""
        return self._claim_parts(finding, row, frames, fraction, returns_gpus=False)

    def claim_workload_time(self, finding: str, row: dict[str, Any], frames: dict[str, Any],
                            share: float) -> float:
        """Claim ``share`` of the workload's cost per hour as time its GPUs stop costing (the same
        work done sooner); no GPUs are returned to the pool in space."""
        return self._claim_parts(finding, row, frames, share, returns_gpus=False)

    def _claim_parts(self, finding: str, row: dict[str, Any], frames: dict[str, Any], share: float,
                     *, returns_gpus: bool) -> float:
        hours = window_hours(frames, row.get("cluster"))
        if not hours or share <= 0:
            return 0.0
        cluster = str(row.get("cluster") or "")
        key = (cluster, str(row["namespace"]), str(row["workload"]))
        moved = self.relocated.get(key, {})
        granted = 0.0
        for part in row.get("node_gpu_hours") or []:
            node = moved.get(str(part["node"]), str(part["node"]))
            usd_h, gpus = num(part.get("cost_usd")) / hours, num(part.get("gpu_hours")) / hours
            self.ledger.account((cluster, node), usd_h, gpus)
            granted += self.ledger.claim(finding, (cluster, node), usd_h * share, gpus * share if returns_gpus else 0.0)
        self.ledger.claim_workload(*key, finding)
        return granted

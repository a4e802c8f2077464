"""Which network domains a node sits in, tightest first: node, NVLink domain, rack, block, zone.

Shared by the topology rule (is a gang spread wider than it needs?) and binpack (keep a moved
gang within the tightest domain). Read from, in this order of authority:

1. **Volcano HyperNodes** (``topology.volcano.sh/v1alpha1``), where the cluster has any: they
   are the topology Volcano's network-topology-aware scheduling places gangs by. A node's
   domains are the HyperNodes that hold it, directly or through member HyperNodes, by tier
   (tier 1 tightest). Members are chosen by exact name, regular expression (anchored, as
   Volcano matches it) or labels.
2. **Node labels**, tightest level first (settings, docs/rules.md "topology"): the multi-node
   NVLink domain (``nvidia.com/gpu.clique`` from the GPU operator on GB200/GB300 NVL systems;
   NVIDIA Topograph's ``network.topology.nvidia.com/accelerator``), the rack / leaf switch
   (``network.topology.nvidia.com/leaf``, EKS's ``topology.k8s.aws/network-node-layer-3``, GKE's
   ``cloud.google.com/gce-topology-subblock``, ``topology.kubernetes.io/rack``), the block /
   spine (``.../spine``, ``network-node-layer-2``, ``gce-topology-block``,
   ``topology.kubernetes.io/block``) and the zone (``topology.kubernetes.io/zone``).

The NVLink reach of a node's GPUs comes from its GPU product: NVL72-class products (GB200,
GB300) share NVLink across nodes of one clique, HGX/SXM boards (H100/H200/B200 SXM, A100 SXM)
within the node, PCIe cards (L4, L40S, A10G, T4, H100 PCIe) not at all.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuinsight.kubelabels import label_map, selector_matches
from gpuinsight.sql.rows import Row, key_cluster

# level names, tightest first; "node" and "zone" are always known. A label-derived domain is
# named "<label key>=<value>" (the key is what a pod affinity's topologyKey needs).
LEVELS = ("node", "nvlink", "rack", "block", "zone")
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"

DEFAULT_LABELS = {
    "nvlink": "nvidia.com/gpu.clique,network.topology.nvidia.com/accelerator",
    "rack": ("network.topology.nvidia.com/leaf,topology.k8s.aws/network-node-layer-3,"
             "cloud.google.com/gce-topology-subblock,topology.kubernetes.io/rack"),
    "block": ("network.topology.nvidia.com/spine,topology.k8s.aws/network-node-layer-2,"
              "cloud.google.com/gce-topology-block,topology.kubernetes.io/block"),
}


def nvlink_reach(product: str | None, model: str | None = None) -> str:
    """``multi-node`` (NVL72-class), ``node`` (HGX/SXM board) or ``none`` (PCIe cards)."""
    text = f"{product or ''} {model or ''}".upper()
    if re.search(r"GB[23]00|NVL72|NVL36", text):
        return "multi-node"
    if "PCIE" in text or re.search(r"\b(L4|L40S?|A10G?|T4|A30|A2|L20|RTX)\b", text.replace("-", " ")):
        return "none"
    if re.search(r"SXM|HBM3|H200|B200|B100|H800|HGX|GH200|A100|H100|V100", text):
        return "node"
    return "none"


def csv(value: Any) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        return tuple(str(v).strip() for v in value if str(v).strip())
    return tuple(v.strip() for v in str(value or "").split(",") if v.strip())


@dataclass
class NodeDomains:
    """A node's domains, tightest first: (level, domain id, Volcano tier or None)."""

    node: str
    path: list[tuple[str, str, int | None]] = field(default_factory=list)
    source: str = "labels"          # hypernodes | labels
    nvlink: str = "none"

    def domain(self, level: str) -> str | None:
        for lvl, dom, _ in self.path:
            if lvl == level:
                return dom
        return None

    def levels(self) -> list[str]:
        return [lvl for lvl, _, _ in self.path]


@dataclass
class Topology:
    nodes: dict[tuple[str, str], NodeDomains]   # (cluster, node) -> domains
    levels: list[str]                            # the levels known in this fleet, tightest first
    tiers: dict[str, int] = field(default_factory=dict)   # hypernode level name -> Volcano tier

    def of(self, cluster: str, node: str) -> NodeDomains:
        return self.nodes.get((cluster, node)) or NodeDomains(node, [("node", node, None)])

    def span(self, cluster: str, nodes: Iterable[str]) -> str:
        """The tightest level whose domain holds all ``nodes`` ("zone" or wider: "cluster")."""
        nodes = sorted(set(nodes))
        if len(nodes) <= 1:
            return "node"
        doms = [self.of(cluster, n) for n in nodes]
        for level in self.levels[1:]:
            values = {d.domain(level) for d in doms}
            if None not in values and len(values) == 1:
                return level
        return "cluster"

    def rank(self, level: str) -> int:
        order = [*self.levels, "cluster"]
        return order.index(level) if level in order else len(order)


def _label_path(n: Row, labels: dict[str, str], keys: dict[str, tuple[str, ...]],
                reach: str) -> list[tuple[str, str, int | None]]:
    path: list[tuple[str, str, int | None]] = [("node", str(n.node), None)]
    for level in ("nvlink", "rack", "block"):
        if level == "nvlink" and reach != "multi-node":
            continue  # a clique label on a board without cross-node NVLink means nothing for placement
        key = next((k for k in keys.get(level, ()) if labels.get(k)), None)
        if key:
            path.append((level, f"{key}={labels[key]}", None))
    zone = n.zone or labels.get(ZONE_LABEL)
    if zone:
        path.append(("zone", f"{ZONE_LABEL}={zone}", None))
    return path


def _selects(member: dict[str, Any], name: str, labels: dict[str, str]) -> bool:
    sel = member.get("selector") or {}
    if "exactMatch" in sel:
        return (sel["exactMatch"] or {}).get("name") == name
    if "regexMatch" in sel:
        try:
            return re.fullmatch((sel["regexMatch"] or {}).get("pattern") or "", name) is not None
        except re.error:
            return False
    if "labelMatch" in sel:  # an empty labelMatch selects every node
        return selector_matches(sel["labelMatch"], labels, empty_matches=True)
    return False


def _hypernode_paths(nodes: list[Row], hypernodes: list[Any]) -> dict[str, list[tuple[str, str, int | None]]]:
    """node -> [(level "tier<N>", hypernode, N)] for every HyperNode (``network_topology`` rows)
    holding it, tightest first."""
    members = {h.name: json.loads(h.members) if isinstance(h.members, str) else (h.members or []) for h in hypernodes}
    tier = {h.name: int(h.tier or 0) for h in hypernodes}
    # node members named exactly (the usual form) through an index; the others tried per node
    exact: dict[str, set[str]] = defaultdict(set)
    other: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for h, ms in members.items():
        for m in ms:
            if m.get("type") != "Node":
                continue
            sel = m.get("selector") or {}
            if "exactMatch" in sel:
                named = (sel["exactMatch"] or {}).get("name")
                if isinstance(named, str):
                    exact[named].add(h)
            else:
                other[h].append(m)
    direct: dict[str, set[str]] = {}
    for n in nodes:
        labels = label_map(n.labels)
        name = str(n.node)
        direct[name] = set(exact.get(name, ())) | {h for h, ms in other.items()
                                                   if any(_selects(m, name, labels) for m in ms)}
    parents: dict[str, set[str]] = {h: {p for p, ms in members.items()
                                        if any(m.get("type") == "HyperNode" and _selects(m, h, {}) for m in ms)}
                                    for h in members}
    out: dict[str, list[tuple[str, str, int | None]]] = {}
    for name, held in direct.items():
        seen: set[str] = set()
        todo = list(held)
        while todo:
            h = todo.pop()
            if h not in seen:
                seen.add(h)
                todo += parents.get(h, ())
        out[name] = sorted(((f"tier{tier[h]}", h, tier[h]) for h in seen), key=lambda t: (t[2], t[1]))
    return out


def build_topology(nodes: list[Row], hypernodes: list[Any] | None = None,
                   label_keys: dict[str, Any] | None = None) -> Topology:
    """Every node's domains; ``nodes`` are typed rows of ``nodes_current`` (node, zone, labels,
    gpu_model), ``hypernodes`` of ``network_topology``."""
    keys = {level: csv(v) for level, v in {**DEFAULT_LABELS, **(label_keys or {})}.items()}
    by_cluster: dict[str, list[Row]] = {}
    for n in nodes:
        by_cluster.setdefault(key_cluster(n), []).append(n)
    hn_by_cluster: dict[str, list[Row]] = {}
    for h in hypernodes or []:
        hn_by_cluster.setdefault(key_cluster(h), []).append(h)
    out: dict[tuple[str, str], NodeDomains] = {}
    tier_levels: set[int] = set()
    label_levels: set[str] = {"node"}
    for cluster, members in by_cluster.items():
        hpaths = _hypernode_paths(members, hn_by_cluster.get(cluster, [])) if hn_by_cluster.get(cluster) else {}
        for n in members:
            labels = label_map(n.labels)
            reach = nvlink_reach(labels.get("nvidia.com/gpu.product"), n.gpu_model)
            name = str(n.node)
            if hpaths.get(name):
                path = [("node", name, None), *hpaths[name]]
                zone = n.zone or labels.get(ZONE_LABEL)
                if zone:
                    path.append(("zone", f"{ZONE_LABEL}={zone}", None))
                tier_levels |= {t for _, _, t in path if t is not None}
                out[(cluster, name)] = NodeDomains(name, path, "hypernodes", reach)
            else:
                path = _label_path(n, labels, keys, reach)
                label_levels |= {lvl for lvl, _, _ in path}
                out[(cluster, name)] = NodeDomains(name, path, "labels", reach)
    levels = ["node"]
    levels += [f"tier{t}" for t in sorted(tier_levels)]
    levels += [lvl for lvl in LEVELS[1:] if lvl in label_levels and lvl not in levels]
    if "zone" not in levels:
        levels.append("zone")
    # a hypernode tier and a label level are not comparable: a fleet mixing them is ordered
    # tiers first (they are what Volcano schedules by), then labels
    return Topology(out, levels, {f"tier{t}": t for t in tier_levels})

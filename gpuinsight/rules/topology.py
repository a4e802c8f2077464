"""TopologyRule: multi-node gangs spread wider than they need to be.

A gang's collective operations (all-reduce, all-gather) run at the speed of its slowest link:
ranks on one node talk over NVLink (on HGX/SXM boards), ranks in one rack through one leaf
switch, ranks in different racks or zones across the spine. A running gang whose pods span a
wider domain than one that could hold it now (same GPU model, free GPUs plus the gang's own) is
reported with its current and its tightest feasible placement, found by first-fit decreasing
inside each candidate domain (a placement it finds is real; it may miss one an exhaustive search
would find, never invents one).

The domains come from Volcano HyperNodes where the cluster has them, else from node labels
(:mod:`gpuinsight.rules.topology_domains`, settings below). How much the spread slows the gang
is not measured, so it is **not priced** (``monthly_savings_usd`` 0, ``saving_basis``
``slowdown_risk``): the evidence gives the gang's monthly GPU cost and what each 1 % of slowdown
costs, for a person to weigh. The change asks the scheduler for the tighter domain on the next
start: a Volcano Job gets ``spec.networkTopology`` (mode hard, the HyperNode tier) where
HyperNodes exist, else its pods a required pod affinity on the domain's label key.

Gangs binpack moves are left out (binpack already places them within the tightest domain it
can), as are gangs another finding scales away and gangs that already ask for a network
topology at least as tight.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from gpuinsight.keys import NodeKey, PodKey, WorkloadKey
from gpuinsight.plan import Recommendation, finding_id
from gpuinsight.plan.kinds.topology import TOPOLOGY, TopologyProposed
from gpuinsight.plan.schema import (
    WorkloadTarget,
)
from gpuinsight.rules.base import Rule
from gpuinsight.rules.common import (
    cluster_of,
    evidence_confidence,
    monthly,
    num,
    pct,
    window_hours,
    workload_ref,
)
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.settings import FRACTION, Setting
from gpuinsight.rules.topology_domains import DEFAULT_LABELS, HOSTNAME_LABEL, Topology
from gpuinsight.sql.rows import Row, key_cluster


@dataclass
class _Pod:
    name: str
    node: str
    gpus: float


class TopologyRule(Rule):
    name = "topology"
    summary = ("Multi-node gangs spread across racks or zones while a tighter placement existed: evidence "
               "of the slowdown risk (not priced) and the scheduler constraint that keeps the next start tight.")
    needs = ("placement_current", "nodes_current", "workload_gpu_profile", "network_topology",
             "gang_network_topology", "analysis_window")
    settings = (
        Setting("nvlink_labels", DEFAULT_LABELS["nvlink"],
                "Node labels naming a multi-node NVLink domain, first found wins (comma-separated)."),
        Setting("rack_labels", DEFAULT_LABELS["rack"], "Node labels naming the rack / leaf switch."),
        Setting("block_labels", DEFAULT_LABELS["block"], "Node labels naming the block / spine."),
        Setting("min_activity", 0.05, "Only gangs at least this busy (mean GR activity): an idle gang is not slowed.",
                bounds=FRACTION),
        Setting("mode", "soft", "Ask the scheduler softly (prefer the domain, start anyway when it is full) or "
                                "hard (wait for room in it).", choices=("soft", "hard")),
        Setting("confidence_hypernodes", 0.8, "Confidence when the domains come from Volcano HyperNodes.",
                bounds=FRACTION),
        Setting("confidence_labels", 0.7, "Confidence when they come from node labels.", bounds=FRACTION),
        Setting("full_confidence_hours", 72.0, "Hours of evidence that give full confidence."),
    )
    kinds = (TOPOLOGY,)

    @classmethod
    def resolve_settings(cls, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        resolved = super().resolve_settings(overrides)
        if resolved["mode"] not in ("soft", "hard"):
            raise ValueError(f"rule topology: mode must be soft or hard, not {resolved['mode']!r}")
        return resolved

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        topo = ctx.topology(frames)
        nodes = {n.node_key: n for n in ctx.rows(frames, "nodes_current")}
        profiles = {r.workload_key: r for r in ctx.rows(frames, "workload_gpu_profile")}
        # a gang's constraint, by its gang name or its workload's (a Volcano job names both)
        asked = {(key_cluster(g), g.namespace, g.gang): g for g in ctx.rows(frames, "gang_network_topology")}
        held: dict[NodeKey, float] = defaultdict(float)
        gangs: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
        for p in ctx.rows(frames, "placement_current"):
            node = ctx.node_after_moves(p.pod_key, p.node)
            held[NodeKey(p.pod_key.cluster, node)] += num(p.gpus)
            if p.gang and not p.mig_profile:
                gangs[(p.pod_key.cluster, p.namespace, p.gang)].append(p._replace(node=node))
        out = []
        hosts: dict[tuple[Any, ...], _Hosts] = {}  # the nodes a gang of each cluster, model and price terms may use
        for (cluster, ns, gang), pods in sorted(gangs.items()):
            wl = str(pods[0].workload)
            if len(pods) < 2 or len({p.node for p in pods}) < 2:
                continue
            workload = WorkloadKey(cluster, ns, wl)
            if ctx.relocation(workload) or ctx.workload_leaves(workload):
                continue
            if any(ctx.pod_leaves(PodKey(cluster, ns, p.pod)) for p in pods):
                continue
            r = profiles.get(workload)
            if r is None or num(r.gr_mean) < settings["min_activity"]:
                continue
            rec = self._gang(cluster, ns, gang, wl, pods, r, topo, nodes, held, asked, frames, settings, ctx, hosts)
            if rec is not None:
                out.append(rec)
        return out

    def _gang(self, cluster: str, ns: str, gang: str, wl: str, pods: list[Row], r: Any,
              topo: Topology, nodes: dict[NodeKey, Row], held: dict[NodeKey, float],
              asked: dict[tuple[str, str, str], Any], frames: dict[str, pl.DataFrame],
              settings: dict[str, Any], ctx: PlanContext, hosts: dict[tuple[Any, ...], _Hosts]
              ) -> Recommendation | None:
        current = topo.span(cluster, [p.node for p in pods])
        model = pods[0].gpu_model
        mine = [_Pod(p.pod, p.node, num(p.gpus)) for p in pods]
        own: dict[str, float] = defaultdict(float)
        for p in mine:
            own[p.node] += p.gpus
        terms = (cluster, model, pods[0].capacity_type)
        eligible = hosts.get(terms)
        if eligible is None:  # the same for every gang of these terms: nothing here changes while the rule runs
            eligible = hosts[terms] = _Hosts(_eligible_hosts(cluster, model, pods[0].capacity_type, nodes, held, ctx))
        free = {name: max(0.0, rest + own.get(name, 0.0)) for name, rest in eligible.rest}
        best = tightest_fit(topo, cluster, mine, free, current, eligible.domains)
        if best is None:
            return None
        level, domain, placement = best
        tier = topo.tiers.get(level)
        constraint = asked.get((cluster, ns, gang)) or asked.get((cluster, ns, wl))
        if constraint is not None and _asks_at_least(constraint, tier):
            return None
        key = None if tier else label_key(topo, level, domain)
        if tier is None and key is None:
            return None  # no way to ask the scheduler for this domain
        hours = window_hours(frames, cluster)
        cost_month = monthly(num(r.cost_usd) / hours) if hours else 0.0
        src = topo.of(cluster, pods[0].node).source
        rid = finding_id(TOPOLOGY.name, cluster_of(r), ns, wl, None, None)
        gang_label = ({"volcano.sh/job-name": wl} if r.workload_kind == "VolcanoJob"
                      else {"scheduling.k8s.io/group-name": gang})
        conf = evidence_confidence(num(r.hours_held), settings["full_confidence_hours"],
                                   cap=settings[f"confidence_{src}"])
        spans = {p.name: [d for _, d, _ in topo.of(cluster, p.node).path] for p in mine}
        spread = spread_label(topo, cluster, current, mine)
        return Recommendation(
            rule=TOPOLOGY.name, id=rid, cluster=cluster_of(r), namespace=ns, workload=wl, queue=r.queue,
            title=(f"{ns}/{wl}: gang of {len(mine)} pods spans {spread} while "
                   f"{level_label(level)} {domain} could hold it: ask the scheduler for it on the next start "
                   "(slowdown risk, not priced)"),
            current={"pods": len(mine), "nodes": len({p.node for p in mine}), "span": current},
            proposed=TopologyProposed(level, domain, placement, settings["mode"], tier, key, gang_label).to_dict(),
            monthly_savings_usd=0.0,
            confidence=conf,
            evidence={
                "gang": gang, "pods": len(mine), "gpus": round(sum(p.gpus for p in mine), 3),
                "gpu_model": model, "nvlink_reach": topo.of(cluster, pods[0].node).nvlink,
                "current_span": current, "spread": spread, "tightest_feasible": level, "feasible_domain": domain,
                "domains_per_pod": spans, "topology_source": src,
                "levels_known": list(topo.levels),
                "gang_mean_activity_pct": pct(r.gr_mean),
                "gang_gpu_cost_usd_per_month": round(cost_month, 2),
                "usd_per_month_per_pct_slowdown": round(cost_month / 100.0, 2),
                "pricing": ("not priced: the slowdown of a spread gang depends on how much of its step time is "
                            "communication, which DCGM does not show; each 1 % of slowdown costs the figure above"),
                "existing_constraint": json.loads(constraint.network_topology) if constraint and isinstance(
                    constraint.network_topology, str) else None,
            },
            target=WorkloadTarget(**workload_ref(r)).to_dict(),
        )


@dataclass
class _Hosts:
    """The nodes gangs of one cluster, GPU model and price terms may be placed on: each with its
    GPUs free of other pods and of the plan's sharing, and (filled as levels are asked) the nodes
    of each domain per level."""

    rest: list[tuple[str, float]]
    domains: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)


def _eligible_hosts(cluster: str, model: Any, capacity_type: Any, nodes: dict[NodeKey, Row],
                    held: dict[NodeKey, float], ctx: PlanContext) -> list[tuple[str, float]]:
    """(node, GPUs left once what other pods hold and the plan shares is taken) of the whole-GPU
    nodes of ``cluster`` with the gang's model and price terms that the plan keeps."""
    out = []
    for key, n in nodes.items():
        c, name = key
        if c != cluster or n.gpu_model != model or n.is_mig or ctx.ledger.is_released(key):
            continue
        if n.capacity_type != capacity_type:  # same price terms
            continue
        if (n.sharing_strategy or "none") not in ("none", "") or n.device_plugin_config:
            continue
        if ctx.is_sharing_host(key):  # a sharing host of this plan: its GPUs are shared
            continue
        shared = ctx.partitioned_gpus(key)  # GPUs this plan partitions for shared work
        out.append((name, num(n.gpu_count) - held[key] - shared))
    return out


def tightest_fit(topo: Topology, cluster: str, pods: list[_Pod], free: dict[str, float],
                 current: str, domains: dict[str, list[tuple[str, list[str]]]] | None = None,
                 ) -> tuple[str, str, list[dict[str, Any]]] | None:
    """The tightest domain, strictly tighter than ``current``, that can hold every pod (first fit
    decreasing over its nodes' free GPUs), preferring the domain that keeps most pods in place.
    ``domains``: the nodes of ``free`` per domain of each level, kept across calls on the same nodes."""
    for level in topo.levels[:topo.rank(current)]:
        grouped = domains.get(level) if domains is not None else None
        if grouped is None:
            groups: dict[str, list[str]] = defaultdict(list)
            for node in free:
                dom = node if level == "node" else topo.of(cluster, node).domain(level)
                if dom is not None:
                    groups[dom].append(node)
            grouped = sorted(groups.items())
            if domains is not None:
                domains[level] = grouped
        options = []
        need = sum(p.gpus for p in pods) - 1e-9 * len(pods)
        for dom, members in grouped:
            if sum(free[n] for n in members) < need:
                continue  # first fit cannot place more GPUs than the domain has free
            placement = first_fit(pods, {n: free[n] for n in members})
            if placement is not None:
                stay = sum(1 for p in pods if placement[p.name] == p.node)
                options.append((-stay, dom, placement))
        if options:
            _, dom, placement = min(options, key=lambda o: (o[0], o[1]))
            return level, dom, [{"pod": p.name, "from": p.node, "to": placement[p.name]} for p in pods]
    return None


def first_fit(pods: list[_Pod], capacity: dict[str, float]) -> dict[str, str] | None:
    """Pods (largest first) onto the nodes; a pod stays on its node when that node is in the set."""
    left = dict(capacity)
    out: dict[str, str] = {}
    for p in sorted(pods, key=lambda p: (-p.gpus, p.name)):
        order = ([p.node] if p.node in left else []) + sorted(n for n in left if n != p.node)
        target = next((n for n in order if left[n] + 1e-9 >= p.gpus), None)
        if target is None:
            return None
        left[target] -= p.gpus
        out[p.name] = target
    return out


def label_key(topo: Topology, level: str, domain: str) -> str | None:
    """The node label whose value names ``domain`` (a pod affinity's topologyKey); None for a
    HyperNode tier (asked through Volcano's networkTopology instead)."""
    if level == "node":
        return HOSTNAME_LABEL
    if level in topo.tiers or "=" not in domain:
        return None
    return domain.split("=", 1)[0]


def _asks_at_least(constraint: Row, tier: int | None) -> bool:
    """A ``gang_network_topology`` row already asks (hard) for this HyperNode tier or a tighter one."""
    nt = constraint.network_topology
    nt = json.loads(nt) if isinstance(nt, str) else (nt or {})
    if (nt.get("mode") or "hard") != "hard":
        return False
    allowed = nt.get("highestTierAllowed")
    return tier is not None and allowed is not None and int(allowed) <= tier


def level_label(level: str) -> str:
    return {"node": "node", "nvlink": "NVLink domain", "rack": "rack", "block": "block", "zone": "zone"}.get(
        level, f"{level.replace('tier', 'tier-')} HyperNode")


def spread_label(topo: Topology, cluster: str, current: str, pods: list[_Pod]) -> str:
    """``2 racks (rack-a, rack-b)``: the domains the gang's pods sit in one level below its span."""
    below = topo.levels[max(0, topo.rank(current) - 1)]
    doms = sorted({(p.node if below == "node" else topo.of(cluster, p.node).domain(below)) or p.node for p in pods})
    return f"{len(doms)} {level_label(below)}s ({', '.join(doms[:4])}{' ...' if len(doms) > 4 else ''})"

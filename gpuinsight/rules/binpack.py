"""BinpackRule: move work off lightly used nodes so whole nodes can be released.

Greedy, fewest moves first: try to empty the nodes holding the fewest GPUs, moving each gang
(Volcano PodGroup / Job) whole onto the fullest other node of the same pool, zone and GPU
model that has room (best fit). A gang with pods on a node that is not being emptied is never
split: such a node is skipped. MIG nodes and MIG pods stay put. Each plan reports its gap to
the pool's capacity bound (GPUs held / GPUs per node) and to the exact optimum of an ILP
(HiGHS) where the pool is small enough to solve quickly.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import polars as pl

from gpuinsight.rules.base import Recommendation, Rule, Setting
from gpuinsight.rules.common import monthly, num, rows
from gpuinsight.rules.pack_bound import Unit, optimal_nodes


class BinpackRule(Rule):
    name = "binpack"
    summary = "Consolidate GPU pods to free whole nodes (gang-safe, same pool/zone/model)."
    needs = ("placement_current", "nodes_current")
    settings = (
        Setting("max_moves_per_node", 4, "Most gangs/pods moved to free one node."),
        Setting("include_production", True, "Allow moving production pods (they restart once)."),
        Setting("confidence", 0.7, "Confidence of a plan (placement is observed, savings need the node released)."),
    )

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any]) -> list[Recommendation]:
        placement = rows(frames.get("placement_current"))
        nodes = [n for n in rows(frames.get("nodes_current")) if not n.get("mig_config") and num(n.get("gpu_count")) > 0]
        pods_on: dict[str, list[dict[str, Any]]] = defaultdict(list)
        gang_nodes: dict[str, set[str]] = defaultdict(set)
        for p in placement:
            pods_on[p["node"]].append(p)
            if p.get("gang"):
                gang_nodes[f"{p['namespace']}/{p['gang']}"].add(p["node"])
        out: list[Recommendation] = []
        pools: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for n in nodes:
            pools[(n.get("node_pool"), n.get("zone"), n.get("gpu_model"))].append(n)
        for (pool, zone, model), members in pools.items():
            free = {n["node"]: num(n["gpu_count"]) - num(n["gpus_held"]) for n in members}
            freed: list[str] = []
            lower_bound = math.ceil(sum(num(n["gpus_held"]) for n in members) / max(num(members[0]["gpu_count"]), 1))
            for n in sorted(members, key=lambda x: (num(x["gpus_held"]), x["node"])):
                units = movable_units(pods_on.get(n["node"], []), gang_nodes, settings)
                if not units or units is None:
                    continue
                if len(units) > settings["max_moves_per_node"]:
                    continue
                plan = place(units, n["node"], free, set(freed), members)
                if plan is None:
                    continue
                for move in plan:
                    free[move["to"]] -= move["gpus"]
                free[n["node"]] = num(n["gpu_count"])
                freed.append(n["node"])
                usd = num(n.get("usd_per_hour"))
                out.append(Recommendation(
                    rule="binpack", node=n["node"],
                    namespace=plan[0]["namespace"] if len({m["namespace"] for m in plan}) == 1 else None,
                    workload=plan[0]["workload"] if len(plan) == 1 else None,
                    title=(f"Move {len(plan)} gang(s)/pod(s) holding {num(n['gpus_held']):g} GPU(s) off {n['node']} "
                           f"onto other {pool} nodes and release it"),
                    current={"node": n["node"], "gpus_held": num(n["gpus_held"]), "gpu_count": num(n["gpu_count"])},
                    proposed={"moves": plan, "nodes_freed": [n["node"]], "node_pool": pool},
                    monthly_savings_usd=monthly(usd),
                    confidence=settings["confidence"] if usd else 0.3,
                    evidence={
                        "node_gpus": num(n["gpu_count"]), "gpus_held": num(n["gpus_held"]),
                        "node_usd_per_hour": round(usd, 4), "pool": pool, "zone": zone, "gpu_model": model,
                        "pool_nodes": len(members), "pool_lower_bound_nodes": lower_bound,
                        "gap_to_lower_bound_nodes": None,  # filled below, once the pool is planned
                    },
                    target={"kind": "NodeSet", "nodes": [n["node"]]},
                ))
            used_after = len(members) - len(freed)
            optimal = pool_optimum(members, pods_on, gang_nodes)
            for rec in out:
                if rec.evidence.get("pool") == pool and rec.evidence.get("zone") == zone:
                    rec.evidence["gap_to_lower_bound_nodes"] = used_after - lower_bound
                    rec.evidence["pool_optimal_nodes"] = optimal
                    rec.evidence["gap_to_optimal_nodes"] = None if optimal is None else used_after - optimal
        return out


def pool_optimum(members: list[dict[str, Any]], pods_on: dict[str, list[dict[str, Any]]],
                 gang_nodes: dict[str, set[str]]) -> int | None:
    """Fewest nodes of this pool that could hold its current work (exact ILP; None if too big)."""
    index = {m["node"]: i for i, m in enumerate(members)}
    units: dict[str, Unit] = {}
    for m in members:
        for p in pods_on.get(m["node"], []):
            gang = f"{p['namespace']}/{p['gang']}" if p.get("gang") else None
            pinned = bool(p.get("mig_profile")) or (gang is not None and len(gang_nodes[gang]) > 1)
            key = f"{m['node']}/{p['pod']}" if pinned or gang is None else gang
            prev = units.get(key)
            units[key] = Unit((prev.gpus if prev else 0.0) + num(p.get("gpus")),
                              index[m["node"]] if pinned else None)
    return optimal_nodes(list(units.values()), [num(m["gpu_count"]) for m in members])


def movable_units(pods: list[dict[str, Any]], gang_nodes: dict[str, set[str]],
                  settings: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The node's pods grouped into gangs (move whole or not at all); None if not movable."""
    units: dict[str, dict[str, Any]] = {}
    for p in pods:
        if p.get("mig_profile") or (p.get("production") and not settings["include_production"]):
            return None
        key = f"{p['namespace']}/{p['gang']}" if p.get("gang") else f"{p['namespace']}/pod/{p['pod']}"
        if p.get("gang") and len(gang_nodes[key]) > 1:
            return None  # the gang also runs elsewhere: moving part of it would split it
        u = units.setdefault(key, {"namespace": p["namespace"], "workload": p.get("workload"),
                                   "gang": p.get("gang"), "pods": [], "gpus": 0.0, "largest_pod": 0.0})
        u["pods"].append(p["pod"])
        u["gpus"] += num(p.get("gpus"))
        u["largest_pod"] = max(u["largest_pod"], num(p.get("gpus")))
    return list(units.values())


def place(units: list[dict[str, Any]], source: str, free: dict[str, float], freed: set[str],
          members: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Best-fit each unit (largest first) onto one target node; None if any does not fit."""
    trial = dict(free)
    plan = []
    for u in sorted(units, key=lambda x: -x["gpus"]):
        targets = [m["node"] for m in members
                   if m["node"] != source and m["node"] not in freed and trial[m["node"]] >= u["gpus"] - 1e-9
                   and num(m["gpus_held"]) > 0]
        if not targets:
            return None
        best = min(targets, key=lambda t: (trial[t] - u["gpus"], t))
        trial[best] -= u["gpus"]
        plan.append({"namespace": u["namespace"], "workload": u["workload"], "gang": u["gang"], "pods": u["pods"],
                     "from": source, "to": best, "gpus": round(u["gpus"], 3)})
    return plan

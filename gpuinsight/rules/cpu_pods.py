"""CpuPodsOnGpuNodesRule: GPU nodes that pods asking for no GPU keep up.

An autoscaler (Karpenter, the cluster autoscaler, EKS managed node groups under it) removes a
node whose pods could all run elsewhere; DaemonSet pods do not count. A GPU node whose GPUs no
pod holds but where a Deployment's CPU-only pod runs stays up, at the price of its GPUs
(aws/karpenter-provider-aws #8447, #5798). The ``gpu_nodes_held_by_cpu_pods`` model gives
those node-hours; one finding per node pool (or node without one) of at least
``min_held_hours`` of them. The fix keeps CPU-only pods off GPU nodes: a ``nvidia.com/gpu``
NoSchedule taint on the pool (Karpenter NodePool template, EKS node group) and the matching
toleration on the GPU workloads that run there (the ExtendedResourceToleration admission plugin
adds it to pods asking ``nvidia.com/gpu`` where it is on; the explicit one does no harm). Where
the nodes carry a GPU taint already, the holders tolerate it: the finding says so and changes
nothing by itself. Never a DaemonSet: they are neither holders nor changed.

The saving is the held node-hours' cost as a run rate, claimed on each node in the savings
ledger (so binpack or idle findings releasing the same node never count it twice).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import polars as pl

from gpuinsight.plan import Recommendation, finding_id
from gpuinsight.plan.kinds.cpu_pods import CPU_PODS, CpuPodsProposed, NodePoolTarget
from gpuinsight.rules.base import Rule
from gpuinsight.rules.common import cluster_of, monthly, num
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.settings import FRACTION, Setting
from gpuinsight.sql.rows import Row

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
POOL_KINDS = ("karpenter", "eks-nodegroup")


class CpuPodsOnGpuNodesRule(Rule):
    name = "cpu_pods_on_gpu_nodes"
    summary = ("GPU nodes kept up by pods that ask for no GPU: taint the GPU pool and tolerate it on the GPU "
               "workloads, so the autoscaler can remove the nodes.")
    needs = ("gpu_nodes_held_by_cpu_pods",)
    settings = (
        Setting("min_held_hours", 2.0, "Node-hours (summed over the pool) CPU-only pods kept up before it is a "
                                       "finding: a pod briefly landing on an empty GPU node is not one."),
        Setting("confidence", 0.6, "Confidence when an autoscaler manages the pool (Karpenter, EKS node group).",
                bounds=FRACTION),
    )
    kinds = (CPU_PODS,)

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        groups: dict[tuple[str, str, str | None], list[Row]] = defaultdict(list)
        for r in ctx.rows(frames, "gpu_nodes_held_by_cpu_pods"):
            pool = r.node_pool
            key = (cluster_of(r), pool or r.node, r.node_pool_kind if pool else None)
            groups[key].append(r)
        out = []
        for (cluster, name, pool_kind), nodes in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            held_hours = sum(num(n.held_hours) for n in nodes)
            if held_hours < settings["min_held_hours"]:
                continue
            out.append(self._finding(cluster, name, pool_kind, nodes, settings, ctx))
        return out

    def _finding(self, cluster: str, name: str, pool_kind: str | None, nodes: list[Row],
                 settings: dict[str, Any], ctx: PlanContext) -> Recommendation:
        pooled = pool_kind is not None
        target_kind = {"karpenter": "NodePool", "eks-nodegroup": "NodeGroup"}.get(pool_kind or "", "Node")
        rid = finding_id(CPU_PODS.name, cluster, None, None, f"{target_kind}/{name}", None)
        saving = 0.0
        for n in nodes:
            hours = num(n.window_hours)
            rate = num(n.held_usd) / hours if hours else 0.0
            if not n.present_at_end or n.gpu_tainted:
                continue  # gone by now, or the taint is there already: nothing this change releases
            key = n.node_key  # the ledger's node key
            ctx.ledger.account(key, num(n.usd_per_hour), num(n.gpu_count),
                               price_known=n.usd_per_hour is not None)
            saving += ctx.ledger.claim(rid, key, rate)
        holders: dict[tuple[str, str, str], int] = defaultdict(int)
        for n in nodes:
            for p in n.pods or []:
                holders[(p["namespace"], p["workload_kind"], p["workload"])] += int(num(p.get("pods"), 1))
        gpu_wl = sorted({(w["kind"], w["namespace"], w["name"]) for n in nodes for w in n.gpu_workloads or []
                         if w.get("kind") not in ("DaemonSet", None)})
        tainted = any(n.gpu_tainted for n in nodes)
        held_hours = sum(num(n.held_hours) for n in nodes)
        held_usd = sum(num(n.held_usd) for n in nodes)
        top = sorted(holders.items(), key=lambda kv: -kv[1])
        names = ", ".join(f"{ns}/{wl}" for (ns, _, wl), _ in top[:3]) + (" ..." if len(top) > 3 else "")
        what = f"pool {name}" if pooled else f"node {name}"
        if tainted:
            title = (f"GPU {what}: pods asking for no GPU ({names}) tolerate its GPU taint and kept "
                     f"{held_hours:.0f} node-hour(s) up: drop their blanket toleration or give them a nodeSelector")
        else:
            title = (f"GPU {what}: pods asking for no GPU ({names}) kept {len(nodes)} node(s) up for "
                     f"{held_hours:.0f} node-hour(s) with no GPU in use: taint the pool nvidia.com/gpu:NoSchedule")
        return Recommendation(
            rule=CPU_PODS.name, id=rid, cluster=cluster, node=nodes[0].node if len(nodes) == 1 else None,
            title=title,
            current={"taints": nodes[0].taints or [], "held_node_hours": round(held_hours, 2)},
            proposed=CpuPodsProposed(
                taint=dict(GPU_TAINT), node_pool=name if pooled else None, node_pool_kind=pool_kind,
                nodes=sorted(n.node for n in nodes),
                tolerate=[{"kind": k, "namespace": ns, "name": wl} for k, ns, wl in gpu_wl],
                holders=[{"namespace": ns, "workload_kind": k, "workload": wl, "pods": c} for (ns, k, wl), c in top],
                already_tainted=tainted).to_dict(),
            monthly_savings_usd=monthly(saving),
            confidence=(settings["confidence"] if pooled else settings["confidence"] / 2) if not tainted else 0.3,
            evidence={
                "held_node_hours": round(held_hours, 2), "held_usd_in_window": round(held_usd, 2),
                "window_hours": round(max(num(n.window_hours) for n in nodes), 2),
                "nodes": [{"node": n.node, "held_hours": round(num(n.held_hours), 2),
                           "held_usd": round(num(n.held_usd), 2), "gpu_model": n.gpu_model,
                           "gpus": n.gpu_count, "present_at_end": bool(n.present_at_end)}
                          for n in nodes],
                "pool": name if pooled else None, "pool_kind": pool_kind, "gpu_taint_present": tainted,
                "alternative": "a nodeSelector (or required node affinity) on the CPU-only workloads that keeps "
                               "them on CPU nodes",
                "autoscaler_note": None if pooled else "no node pool label: nothing may remove the node even "
                                                       "when it is free",
            },
            target=NodePoolTarget(target_kind, name).to_dict(),
        )

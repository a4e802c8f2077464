"""cpu_pods_on_gpu_nodes: keep pods that ask for no GPU off a GPU pool, so the autoscaler can
remove its free nodes.

1. ``workload`` phase: each GPU workload of the pool gets the toleration of the GPU taint merged
   into its own (a server-side apply of its pod template's tolerations, or a manifest patch for a
   Volcano Job; never a DaemonSet), so it keeps landing on the pool once tainted.
2. ``scale-down`` phase: the taint ``nvidia.com/gpu=true:NoSchedule`` on the pool: a server-side
   apply of the Karpenter NodePool's ``spec.template.spec.taints`` (the pool's own taints kept:
   the list is atomic), or EKS ``update_nodegroup_config`` with ``taints.addOrUpdateTaints``. A
   NoSchedule taint evicts nothing: the CPU-only pods leave when they next restart, or when
   Karpenter replaces the drifted nodes (within the pool's disruption budgets). A node without a
   pool gets a note (a taint on a node is lost with it).

Where the pool is tainted already, the CPU-only pods tolerate the taint: a note names them.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.builders.common import fail, patchable, pin_workload
from gpuinsight.actions.patching import get
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds import CPU_PODS

# the finding kinds this module builds the actions of
BUILDS = (CPU_PODS,)

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TAINTS = "/spec/template/spec/taints"


def _taint(rec: Recommendation) -> dict[str, str]:
    taint = rec.proposed.get("taint")
    if not isinstance(taint, dict) or not taint.get("key") or taint.get("effect") not in ("NoSchedule", "NoExecute"):
        raise fail(rec, "proposed.taint", "a taint with a key and effect NoSchedule or NoExecute is needed")
    return {k: str(taint[k]) for k in ("key", "value", "effect") if taint.get(k) is not None}


def _workloads(rec: Recommendation) -> list[Ref]:
    out = []
    for i, w in enumerate(rec.proposed.get("tolerate") or []):
        if not isinstance(w, dict) or not w.get("kind") or not w.get("name") or not w.get("namespace"):
            raise fail(rec, f"proposed.tolerate[{i}]", "a workload needs kind, namespace and name")
        if w["kind"] != "DaemonSet":
            out.append(Ref(str(w["kind"]), str(w["namespace"]), str(w["name"])))
    return out


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    pool = rec.proposed.get("node_pool")
    found = [r for r in _workloads(rec) if patchable(r)]
    if pool and rec.proposed.get("node_pool_kind") == "karpenter":
        found.append(Ref("NodePool", None, str(pool)))
    return found


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    taint = _taint(rec)
    holders = ", ".join(f"{h.get('namespace')}/{h.get('workload')}" for h in rec.proposed.get("holders") or [])
    if rec.proposed.get("already_tainted"):
        return [model.note(f"the GPU nodes {', '.join(rec.proposed.get('nodes') or [])} are tainted already, and "
                           f"pods asking for no GPU tolerate it ({holders}): remove their blanket toleration, or "
                           "give them a nodeSelector that keeps them on CPU nodes", rec.id)]
    toleration = {**TOLERATION, "key": taint["key"], "effect": taint["effect"]}
    actions = [pin_workload(state, ref, {}, [toleration], f"tolerate the GPU taint {taint['key']}")
               for ref in _workloads(rec)]
    pool, kind = rec.proposed.get("node_pool"), rec.proposed.get("node_pool_kind")
    why = f"keep pods asking for no GPU ({holders}) off the GPU nodes so they can be removed when free"
    if pool and kind == "karpenter":
        actions.append(_nodepool_taint(rec, state, Ref("NodePool", None, str(pool)), taint, why))
    elif pool and kind == "eks-nodegroup":
        spec = (state.node_pools.get(str(pool)) or {}).get("spec") or {}
        cluster = spec.get("clusterName") or state.cluster
        eks_taint = {"key": taint["key"], "value": taint.get("value", ""),
                     "effect": {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}[taint["effect"]]}
        actions.append(model.eks("update_nodegroup_config",
                                 {"clusterName": cluster, "nodegroupName": str(pool),
                                  "taints": {"addOrUpdateTaints": [eks_taint]}}, "scale-down",
                                 f"EKS {cluster}: taint node group {pool} {taint['key']}={taint.get('value', '')}:"
                                 f"{taint['effect']} to {why}", observed={"taints": spec.get("taints")}))
    else:
        nodes = " ".join(rec.proposed.get("nodes") or [])
        actions.append(model.note(f"no node pool to taint: `kubectl taint nodes {nodes} {taint['key']}="
                                  f"{taint.get('value', '')}:{taint['effect']}` to {why} (a node's own taint is lost "
                                  "when it is replaced: taint the group that creates it instead)", rec.id))
    return actions


def _nodepool_taint(rec: Recommendation, state: ClusterState, ref: Ref, taint: dict[str, str],
                    why: str) -> dict[str, Any]:
    current = state.get(ref)
    if current is None or not state.is_known(ref, TAINTS):
        return model.note(f"NodePool {ref.name}: its taints were not observed; add {taint['key']}="
                          f"{taint.get('value', '')}:{taint['effect']} to spec.template.spec.taints to {why}", ref.key)
    taints = copy.deepcopy(get(current, TAINTS) or [])
    if any(t.get("key") == taint["key"] and t.get("effect") == taint["effect"] for t in taints):
        return model.note(f"NodePool {ref.name} has the taint {taint['key']} already", ref.key)
    taints.append(dict(taint))
    cfg = ref.skeleton() | {"spec": {"template": {"spec": {"taints": taints}}}}
    return model.k8s_apply(cfg, "scale-down", f"NodePool {ref.name}: add taint {taint['key']}={taint.get('value', '')}:"
                           f"{taint['effect']} to {why}; Karpenter replaces the drifted nodes within the pool's "
                           "disruption budgets", state.observe(ref, [TAINTS]))

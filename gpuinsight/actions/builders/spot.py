"""spot: move an interruption-tolerant workload to spot capacity.

Karpenter: a new NodePool copied from the on-demand pool's spec with ``capacity-type In [spot]``,
a ``gpuinsight.io/spot`` NoSchedule taint (only workloads that tolerate it land there) and GPU
limits; the on-demand pool's empty nodes are consolidated away by Karpenter itself.
EKS managed node groups: ``create_nodegroup(capacityType=SPOT)`` copied from the on-demand group,
then ``update_nodegroup_config`` lowering the on-demand group by the nodes only this workload used.
In both cases the workload's pod templates (every GPU task of a Volcano Job) get a nodeSelector
naming the new pool (its capacity type and its name: another spot pool may hold other GPUs) and
the spot toleration merged into the tolerations they already have (the new pool
keeps the source pool's taints, e.g. ``nvidia.com/gpu``, so dropping a toleration would leave the
pods Pending). A Deployment, StatefulSet or CronJob is changed in place (server-side apply of
the selector entry and the merged list). A Volcano Job's spec cannot change once submitted (its
admission webhook refuses it), so its change is a ``manifest-patch``: the exact JSON patch for
the manifest it is next submitted from. Without the live (or dumped) pod templates the merge
cannot be computed, and the step is a note saying so rather than a patch that would replace them
(both through ``common.pin_workload``, which the sharing builder uses too).
"""

from __future__ import annotations

import copy
from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.builders.common import ceil_div, fail, gpus_of, pin_workload, readable, workload_ref
from gpuinsight.actions.redact import redact
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds import SPOT

# the finding kinds this module builds the actions of
BUILDS = (SPOT,)

TAINT_KEY = "gpuinsight.io/spot"
TOLERATION = {"key": TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
CAPACITY_REQ = "karpenter.sh/capacity-type"
INSTANCE_REQ = "node.kubernetes.io/instance-type"
EKS_COPY = ("subnets", "nodeRole", "amiType", "diskSize", "labels", "remoteAccess", "tags")


def _pools(rec: Recommendation) -> tuple[str, str, str]:
    new, old = rec.proposed.get("node_pool"), rec.proposed.get("from_node_pool")
    kind = rec.proposed.get("node_pool_kind", "karpenter")
    if not isinstance(new, str) or not new:
        raise fail(rec, "proposed.node_pool", "missing")
    if kind not in ("karpenter", "eks-nodegroup"):
        raise fail(rec, "proposed.node_pool_kind", f"{kind!r} is not karpenter or eks-nodegroup")
    return new, (old if isinstance(old, str) else ""), kind


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    new, old, kind = _pools(rec)
    out = readable([workload_ref(rec, rec.target)])
    if kind == "karpenter":
        out += [Ref("NodePool", None, new)] + ([Ref("NodePool", None, old)] if old else [])
    return out


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    new, old, kind = _pools(rec)
    ref = workload_ref(rec, rec.target)
    existing = state.node_pools.get(new)
    actions: list[dict[str, Any]] = []
    if kind == "karpenter":
        if existing is None or "spot" not in (existing.get("capacity_types") or []):
            actions += _karpenter_pool(rec, state, ref, new, old)
        # the new pool by name: capacity-type alone would also match other spot pools (other GPUs)
        selector = {CAPACITY_REQ: "spot", "karpenter.sh/nodepool": new}
    else:
        if existing is None:
            actions += _eks_groups(rec, state, ref, new, old)
        selector = {"eks.amazonaws.com/capacityType": "SPOT", "eks.amazonaws.com/nodegroup": new}
    actions.append(pin_workload(state, ref, selector, [TOLERATION], f"run on spot nodes of {new}"))
    if kind == "karpenter":
        actions.append(model.note(f"on-demand pool {old or '?'}: Karpenter consolidates the nodes {ref.key} "
                                  f"leaves empty", f"NodePool/{old}"))
    return actions


def _types(rec: Recommendation) -> list[str]:
    return [str(t) for t in rec.proposed.get("instance_types") or [] if t]


def _source_pool(rec: Recommendation, state: ClusterState, old: str) -> dict[str, Any]:
    pool = state.node_pools.get(old) if old else None
    if pool is None or not pool.get("spec"):
        raise fail(rec, "proposed.from_node_pool", f"node pool {old!r} is not in the warehouse "
                                                   f"(collect kubernetes first) so it cannot be copied")
    return pool


def _without_credentials(doc: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``doc`` without the entries that look like credentials (a plan is stored and reviewed as
    text, so they are not copied; the note names them so a person can add them to the copy)."""
    dropped: list[str] = []

    def walk(node: Any, where: str) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if redact({key: value}) != {key: value} and not isinstance(value, dict | list):
                    dropped.append(f"{where}.{key}".lstrip("."))
                    continue
                out[key] = walk(value, f"{where}.{key}")
            return out
        if isinstance(node, list):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(node)]
        return node

    return walk(copy.deepcopy(doc), ""), dropped


def _clean_spec(rec: Recommendation, state: ClusterState, old: str) -> tuple[dict[str, Any], list[str]]:
    """A fresh copy of pool ``old``'s spec without credentials: cleaned once per pool and plan
    (every spot finding of a pool copies the same spec; the credential check walks all of it)."""
    spec = _source_pool(rec, state, old)["spec"]
    key = f"spot.clean_spec:{old}"
    cached = state.planned.get(key)
    if cached is None or cached[0] is not spec:
        cached = (spec, *_without_credentials(spec))
        state.planned[key] = cached
    return copy.deepcopy(cached[1]), list(cached[2])


def _karpenter_pool(rec: Recommendation, state: ClusterState, ref: Ref, new: str, old: str) -> list[dict[str, Any]]:
    spec, dropped = _clean_spec(rec, state, old)
    notes = [model.note(f"new NodePool {new}: not copied from {old} because they look like credentials: "
                        f"{', '.join(dropped)}; add them by hand if the new nodes need them", f"NodePool/{new}")
             ] if dropped else []
    spec.pop("replicas", None)  # a static pool cannot become a dynamic one; the copy is dynamic
    tmpl = spec.setdefault("template", {}).setdefault("spec", {})
    reqs = [r for r in tmpl.get("requirements") or [] if r.get("key") != CAPACITY_REQ]
    reqs.append({"key": CAPACITY_REQ, "operator": "In", "values": ["spot"]})
    types = _types(rec)
    if types:
        reqs = [r for r in reqs if r.get("key") != INSTANCE_REQ]
        reqs.append({"key": INSTANCE_REQ, "operator": "In", "values": [str(t) for t in types]})
    tmpl["requirements"] = reqs
    taint = {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}
    tmpl["taints"] = [t for t in tmpl.get("taints") or [] if t.get("key") != TAINT_KEY] + [taint]
    limit = rec.proposed.get("gpu_limit") or (spec.get("limits") or {}).get("nvidia.com/gpu")
    if limit is None:
        limit = max(8, 2 * ceil_div(gpus_of(state, ref), 1))
    spec["limits"] = {**(spec.get("limits") or {}), "nvidia.com/gpu": str(limit)}
    spec["weight"] = min(100, int(spec.get("weight") or 0) + 10)
    obj = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
           "metadata": {"name": new, "labels": {"app.kubernetes.io/managed-by": "gpuinsight"}}, "spec": spec}
    observed = {"exists": False, "fields": {}}
    return [model.k8s_apply(obj, "node-pool", f"new NodePool {new}: copy of {old} on spot capacity"
                            f"{' ' + ','.join(types) if types else ''}, taint {TAINT_KEY}, GPU limit {limit}",
                            observed), *notes]


def _eks_groups(rec: Recommendation, state: ClusterState, ref: Ref, new: str, old: str) -> list[dict[str, Any]]:
    src = _source_pool(rec, state, old)["spec"]
    cluster = src.get("clusterName") or state.cluster
    per_node = max(1, int(next((n.get("gpu_count") or 0 for n in state.nodes.values()
                                if n.get("node_pool") == old and n.get("gpu_count")), 1)))
    nodes_needed = max(1, ceil_div(gpus_of(state, ref), per_node))
    scaling = src.get("scalingConfig") or {}
    args: dict[str, Any] = {"clusterName": cluster, "nodegroupName": new, "capacityType": "SPOT",
                            "instanceTypes": _types(rec) or list(src.get("instanceTypes") or []),
                            "scalingConfig": {"minSize": 0, "maxSize": max(nodes_needed, int(scaling.get("maxSize") or 1)),
                                              "desiredSize": nodes_needed}}
    copied, dropped = _without_credentials({k: src[k] for k in EKS_COPY if src.get(k)})
    args.update(copied)
    notes = [model.note(f"new node group {new}: not copied from {old} because they look like credentials: "
                        f"{', '.join(dropped)}; add them by hand if the new nodes need them", f"aws:eks/{new}")
             ] if dropped else []
    args["taints"] = [t for t in src.get("taints") or [] if t.get("key") != TAINT_KEY] + [
        {"key": TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE"}]
    actions = [model.eks("create_nodegroup", args, "node-pool",
                         f"EKS {cluster}: new SPOT node group {new} ({nodes_needed} nodes) copied from {old}",
                         copy_from=old, observed={"exists": False}), *notes]
    mine = {(p["namespace"], p["name"]) for p in state.workload_pods(ref.namespace or "", ref.kind, ref.name)}
    pool_nodes = [n for n, row in state.nodes.items() if row.get("node_pool") == old]
    freed = [n for n in pool_nodes if (pods := [p for p in state.pods_on(n) if (p.get("gpu_request") or 0) > 0])
             and all((p["namespace"], p["name"]) in mine for p in pods)]
    if freed and "desiredSize" in scaling:
        desired = max(0, int(scaling["desiredSize"]) - len(freed))
        new_scaling = {"minSize": min(int(scaling.get("minSize") or 0), desired), "desiredSize": desired}
        actions.append(model.eks("update_nodegroup_config", {"clusterName": cluster, "nodegroupName": old,
                                                              "scalingConfig": new_scaling}, "scale-down",
                                 f"EKS {cluster}: on-demand group {old} desiredSize {scaling['desiredSize']} -> "
                                 f"{desired} ({len(freed)} node(s) only ran {ref.key}; EKS drains them)",
                                 observed={"scalingConfig": scaling}))
    elif freed:
        actions.append(model.note(f"on-demand group {old}: {len(freed)} node(s) only ran {ref.key}; its scaling "
                                  f"config was not observed, so lower desiredSize by hand", f"aws:eks/{cluster}/{old}"))
    return actions

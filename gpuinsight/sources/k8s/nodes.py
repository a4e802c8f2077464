"""Node -> ``nodes`` row: instance type, capacity type, node pool, GPU model/count, sharing."""

from __future__ import annotations

import math
from typing import Any

from gpuinsight.gpumodels import canonical_gpu_model
from gpuinsight.sources.k8s.common import (
    GPU,
    MapContext,
    get_list,
    get_str,
    get_time,
    is_gpu_resource,
    require_str,
    resource_list,
    str_map,
    to_json,
)

INSTANCE_TYPE = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
ZONE = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
KARPENTER_POOL = "karpenter.sh/nodepool"
KARPENTER_CAPACITY = "karpenter.sh/capacity-type"
EKS_NODEGROUP = "eks.amazonaws.com/nodegroup"
EKS_CAPACITY = "eks.amazonaws.com/capacityType"
_EKS_CAPACITY = {"ON_DEMAND": "on-demand", "SPOT": "spot", "CAPACITY_BLOCK": "reserved"}
SHARING = "nvidia.com/gpu.sharing-strategy"


def _first(labels: dict[str, str], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if labels.get(key):
            return labels[key]
    return None


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def capacity_type(labels: dict[str, str]) -> str | None:
    """on-demand | spot | reserved from Karpenter's or EKS' label (None if neither)."""
    value = labels.get(KARPENTER_CAPACITY)
    if value:
        return value.lower()
    value = labels.get(EKS_CAPACITY)
    if value:
        return _EKS_CAPACITY.get(value.upper(), value.lower())
    if labels.get("cloud.google.com/gke-spot") == "true" or labels.get("node.kubernetes.io/lifecycle") == "spot":
        return "spot"
    return None


def node_pool(labels: dict[str, str]) -> tuple[str | None, str | None]:
    if labels.get(KARPENTER_POOL):
        return labels[KARPENTER_POOL], "karpenter"
    if labels.get(EKS_NODEGROUP):
        return labels[EKS_NODEGROUP], "eks-nodegroup"
    return None, None


def gpu_model_of(labels: dict[str, str]) -> tuple[str | None, str | None]:
    """(canonical model, product label as given). MIG products (``...-MIG-1g.10gb``) are cut
    at ``-MIG-`` first: their memory figures are per slice, not per GPU."""
    product = labels.get("nvidia.com/gpu.product")
    if product:
        base, _, _ = product.partition("-MIG-")
        memory = None if "-MIG-" in product else _num(labels.get("nvidia.com/gpu.memory"))
        return canonical_gpu_model(base, memory), product
    name = labels.get("karpenter.k8s.aws/instance-gpu-name")
    if name:
        return canonical_gpu_model(name, _num(labels.get("karpenter.k8s.aws/instance-gpu-memory"))), None
    return None, None


def gpu_count_of(labels: dict[str, str], capacity: dict[str, float], instance_type: str | None) -> int | None:
    """Physical GPUs. Under the MIG single strategy and time-slicing, ``nvidia.com/gpu.count``
    and the capacity count devices or replicas, so the instance's own figure comes first."""
    karpenter = _num(labels.get("karpenter.k8s.aws/instance-gpu-count"))
    if karpenter is not None:
        return int(karpenter)
    if instance_type:
        from gpuinsight.sources.prices import instance_gpu_facts

        facts = instance_gpu_facts().get(instance_type)
        if facts:
            return facts[1]
    product = labels.get("nvidia.com/gpu.product") or ""
    count = _num(labels.get("nvidia.com/gpu.count"))
    if "-MIG-" in product and count:
        # single strategy: count = MIG devices; each uses slices.gi of the 7 compute slices
        slices = _num(labels.get("nvidia.com/gpu.slices.gi")) or 1.0
        return max(1, math.ceil(count * slices / 7 - 1e-9))
    if count is not None:
        return int(count)
    advertised = capacity.get(GPU)
    if advertised:
        replicas = _num(labels.get("nvidia.com/gpu.replicas")) or 1.0
        return max(1, int(round(advertised / max(replicas, 1.0))))
    if any(k.startswith("nvidia.com/mig-") and v > 0 for k, v in capacity.items()):
        return None  # MIG mixed strategy without a count label: unknown
    return 0 if labels.get("nvidia.com/gpu.present") != "true" else None


def node_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    labels = str_map(obj, "metadata", "labels")
    raw_capacity = resource_list(obj, "status", "capacity")
    capacity = {k: v for k, v in raw_capacity.items() if "/" in k or k in ("cpu", "memory")}
    instance_type = _first(labels, INSTANCE_TYPE)
    pool, pool_kind = node_pool(labels)
    model, product = gpu_model_of(labels)
    count = gpu_count_of(labels, raw_capacity, instance_type)
    has_gpu = bool(count) or any(is_gpu_resource(k) and v > 0 for k, v in raw_capacity.items())
    sharing = labels.get(SHARING) or ("none" if has_gpu else None)
    for cond in get_list(obj, "status", "conditions"):
        if isinstance(cond, dict):
            ctx.observe(get_time(cond, "lastHeartbeatTime"))
            ctx.observe(get_time(cond, "lastTransitionTime"))
    created = get_time(obj, "metadata", "creationTimestamp")
    ctx.observe(created)
    return {
        "cluster": ctx.cluster,
        "node": name,
        "instance_type": instance_type,
        "capacity_type": capacity_type(labels),
        "node_pool": pool,
        "node_pool_kind": pool_kind,
        "gpu_model": model,
        "gpu_product": product,
        "gpu_count": count,
        "mig_config": labels.get("nvidia.com/mig.config"),
        "sharing_strategy": sharing,
        "zone": _first(labels, ZONE),
        "provider_id": get_str(obj, "spec", "providerID"),
        "labels": to_json(labels),
        "capacity": to_json(capacity),
        "first_seen": created,
        "last_seen": None,
        "_alive": True,
    }


def eks_nodegroup_rows(node_rows: list[dict[str, Any]], ctx: MapContext) -> list[dict[str, Any]]:
    """EKS managed node groups as seen through their nodes' labels (no EKS API call), so the
    rules see every node pool; a real describe_nodegroup loader may overwrite them."""
    groups: dict[str, dict[str, set[str]]] = {}
    for row in node_rows:
        if row["node_pool_kind"] != "eks-nodegroup":
            continue
        g = groups.setdefault(row["node_pool"], {"capacity": set(), "types": set()})
        if row["capacity_type"]:
            g["capacity"].add(row["capacity_type"])
        if row["instance_type"]:
            g["types"].add(row["instance_type"])
    return [
        {
            "cluster": ctx.cluster,
            "name": name,
            "kind": "eks-nodegroup",
            "capacity_types": to_json(sorted(g["capacity"])),
            "limits": None,
            "consolidation_policy": None,
            "spec": to_json({"instanceTypes": sorted(g["types"]), "derivedFrom": "node labels"}),
            "last_seen": None,
            "_alive": True,
        }
        for name, g in sorted(groups.items())
    ]

"""Node -> ``nodes`` row: instance type, capacity type, node pool, GPU model/count, sharing.

:func:`node_facts` is the one reading of node labels: the kubectl-dump / API path and the
kube-state-metrics path (:mod:`gpuinsight.sources.prom.ksm`, after turning its sanitised label
names back into these keys) both use it, so they agree on pools, capacity types and models.
"""

from __future__ import annotations

import math
from typing import Any

from gpuinsight.gpumodels import MEMORY_MIB, canonical_gpu_model
from gpuinsight.sources.k8s.common import (
    GPU,
    GPU_SHARED,
    MapContext,
    MapError,
    get_list,
    get_str,
    get_time,
    is_gpu_resource,
    require_str,
    resource_list,
    str_map,
    to_json,
)
from gpuinsight.sources.k8s.shares import node_devices

INSTANCE_TYPE = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
ZONE = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
KARPENTER_POOL = "karpenter.sh/nodepool"
KARPENTER_CAPACITY = "karpenter.sh/capacity-type"
EKS_NODEGROUP = "eks.amazonaws.com/nodegroup"
EKS_CAPACITY = "eks.amazonaws.com/capacityType"
_EKS_CAPACITY = {"ON_DEMAND": "on-demand", "SPOT": "spot", "CAPACITY_BLOCK": "reserved"}
SHARING = "nvidia.com/gpu.sharing-strategy"
REPLICAS = "nvidia.com/gpu.replicas"
# GKE's GPU sharing (time-sharing / mps with a client count per GPU) and MIG partitions
GKE_SHARING = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
GKE_PARTITION = "cloud.google.com/gke-gpu-partition-size"
# The node-pool label of each platform, first match wins: Karpenter (v1beta1+, and the
# Provisioner of v0.x), EKS managed node groups, GKE node pools, AKS agent pools (the
# prefixed label since 2021, the bare one before).
POOL_LABELS: tuple[tuple[str, str], ...] = (
    (KARPENTER_POOL, "karpenter"), ("karpenter.sh/provisioner-name", "karpenter"),
    (EKS_NODEGROUP, "eks-nodegroup"), ("cloud.google.com/gke-nodepool", "gke-nodepool"),
    ("kubernetes.azure.com/agentpool", "aks-agentpool"), ("agentpool", "aks-agentpool"),
)
# Spot / preemptible markers of platforms without Karpenter's or EKS' capacity-type label.
SPOT_LABELS: tuple[tuple[str, str], ...] = (
    ("cloud.google.com/gke-spot", "true"), ("cloud.google.com/gke-preemptible", "true"),
    ("kubernetes.azure.com/scalesetpriority", "spot"), ("node.kubernetes.io/lifecycle", "spot"),
)
GPU_LABELS = ("nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.count", REPLICAS, GKE_SHARING,
              GKE_CLIENTS, GKE_PARTITION,
              "nvidia.com/gpu.slices.gi", "nvidia.com/gpu.present", "nvidia.com/mig.config", "nvidia.com/mig.strategy",
              SHARING, "karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-gpu-memory",
              "karpenter.k8s.aws/instance-gpu-count", "cloud.google.com/gke-accelerator")
# Every label key the node facts read (kube-state-metrics needs them allow-listed).
KNOWN_NODE_LABELS: tuple[str, ...] = (*INSTANCE_TYPE, *ZONE, KARPENTER_CAPACITY, EKS_CAPACITY,
                                      *(k for k, _ in POOL_LABELS), *(k for k, _ in SPOT_LABELS), *GPU_LABELS)


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
    if any(labels.get(k, "").lower() == v for k, v in SPOT_LABELS):
        return "spot"
    return None


def node_pool(labels: dict[str, str]) -> tuple[str | None, str | None]:
    """(pool name, pool kind) from the platform's node-pool label."""
    for key, kind in POOL_LABELS:
        if labels.get(key):
            return labels[key], kind
    return None, None


def zone_of_provider(provider_id: str | None) -> str | None:
    """The zone in a provider ID: ``aws:///us-east-1a/i-0abc`` and ``gce://project/us-east1-c/name``."""
    if not provider_id:
        return None
    scheme, _, rest = provider_id.partition("://")
    parts = rest.strip("/").split("/")
    if scheme == "aws" and len(parts) == 2:
        return parts[0] or None
    if scheme == "gce" and len(parts) == 3:
        return parts[1] or None
    return None


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
    accelerator = labels.get("cloud.google.com/gke-accelerator")  # e.g. nvidia-tesla-t4, nvidia-l4
    if accelerator:
        return canonical_gpu_model(accelerator.lower().removeprefix("nvidia-").removeprefix("tesla-").upper()), None
    return None, None


def gpu_replicas(labels: dict[str, str]) -> float | None:
    """Devices advertised per physical GPU under time-slicing or MPS: the device plugin's
    ``nvidia.com/gpu.replicas`` (1, or 0 under MIG, when nothing is shared) or GKE's client count."""
    for key in (REPLICAS, GKE_CLIENTS):
        value = _num(labels.get(key))
        if value is not None and value > 1:
            return value
    return None


def slices_of(profile: str | None) -> int | None:
    """Compute slices (of 7) of a MIG profile name (``1g.5gb`` -> 1)."""
    head = (profile or "").partition("g.")[0]
    return int(head) if head.isdigit() and 0 < int(head) <= 7 else None


def gpu_count_of(labels: dict[str, str], capacity: dict[str, float], instance_type: str | None,
                 facts: dict[str, tuple[str, int]] | None = None, devices: int | None = None) -> int | None:
    """Physical GPUs. Under the MIG single strategy, time-slicing, GKE sharing and HAMi,
    ``nvidia.com/gpu.count`` or the capacity count devices, replicas or vGPUs, so the instance's
    own figure comes first, then the devices a vGPU device plugin registered (``devices``)."""
    karpenter = _num(labels.get("karpenter.k8s.aws/instance-gpu-count"))
    if karpenter is not None:
        return int(karpenter)
    fact = _instance_facts(instance_type, facts)
    if fact:
        return fact[1]
    if devices is not None:
        return devices
    product = labels.get("nvidia.com/gpu.product") or ""
    count = _num(labels.get("nvidia.com/gpu.count"))
    if "-MIG-" in product and count:
        # single strategy: count = MIG devices; each uses slices.gi of the 7 compute slices
        slices = _num(labels.get("nvidia.com/gpu.slices.gi")) or 1.0
        return max(1, math.ceil(count * slices / 7 - 1e-9))
    if count is not None:
        return int(count)
    advertised = capacity.get(GPU) or capacity.get(GPU_SHARED)
    if advertised:
        slices = slices_of(labels.get(GKE_PARTITION))
        if slices:  # GKE advertises each MIG partition as one nvidia.com/gpu
            return max(1, math.ceil(advertised * slices / 7 - 1e-9))
        return max(1, int(round(advertised / (gpu_replicas(labels) or 1.0))))
    if any(k.startswith("nvidia.com/mig-") and v > 0 for k, v in capacity.items()):
        return None  # MIG mixed strategy without a count label: unknown
    named = labels.get("nvidia.com/gpu.present") == "true" or gpu_model_of(labels)[0] is not None
    return None if named else 0  # labels say GPUs are there, but not how many: unknown


def _instance_facts(instance_type: str | None, facts: dict[str, tuple[str, int]] | None) -> tuple[str, int] | None:
    """(GPU model, GPU count) of an instance type from the price catalogs (the loaded ones, then
    the shipped default)."""
    if not instance_type:
        return None
    if facts and instance_type in facts:
        return facts[instance_type]
    from gpuinsight.sources.prices import instance_gpu_facts

    return instance_gpu_facts().get(instance_type)


def node_facts(labels: dict[str, str], capacity: dict[str, float],
               facts: dict[str, tuple[str, int]] | None = None,
               devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Instance type, capacity type, pool, GPU model/product/count/memory, MIG, sharing (strategy,
    replicas per GPU, GKE partition) and zone of a node from its labels and capacity (Kubernetes
    resource names) and the devices a vGPU device plugin registered. Without GPU labels the
    model comes from the instance type via the price catalog (``facts``, else the shipped one)."""
    instance_type = _first(labels, INSTANCE_TYPE)
    pool, pool_kind = node_pool(labels)
    model, product = gpu_model_of(labels)
    if model is None:
        fact = _instance_facts(instance_type, facts)
        model = fact[0] if fact and fact[1] else None
    if model is None and devices and devices[0].get("type"):  # HAMi registers "NVIDIA-Tesla V100-PCIE-32GB"
        model = canonical_gpu_model(devices[0]["type"], devices[0].get("memory_mib"))
    count = gpu_count_of(labels, capacity, instance_type, facts, len(devices) if devices else None)
    has_gpu = bool(count) or any(is_gpu_resource(k) and v > 0 for k, v in capacity.items())
    replicas = gpu_replicas(labels)
    if replicas is None and capacity.get(GPU_SHARED) and count:
        replicas = capacity[GPU_SHARED] / count  # renameByDefault without the replicas label
    strategy = labels.get(SHARING) or labels.get(GKE_SHARING)
    if devices and not strategy:
        strategy = "hami" if devices[0].get("scheme") == "hami" else "volcano-vgpu"
    return {
        "instance_type": instance_type,
        "capacity_type": capacity_type(labels),
        "node_pool": pool,
        "node_pool_kind": pool_kind,
        "gpu_model": model,
        "gpu_product": product,
        "gpu_count": count,
        "mig_config": labels.get("nvidia.com/mig.config"),
        "sharing_strategy": strategy or ("none" if has_gpu else None),
        "gpu_replicas": replicas,
        "gpu_partition": labels.get(GKE_PARTITION),
        "gpu_memory_mib": gpu_memory_of(labels, model, devices),
        "zone": _first(labels, ZONE),
    }


def gpu_memory_of(labels: dict[str, str], model: str | None, devices: list[dict[str, Any]] | None) -> float | None:
    """One GPU's memory (MiB): what a vGPU device plugin registered, else GPU feature discovery's
    ``nvidia.com/gpu.memory`` (per MIG slice on single-strategy MIG nodes: not used there),
    Karpenter's instance figure, else the model's."""
    registered = [d["memory_mib"] for d in devices or [] if d.get("memory_mib")]
    if registered:
        return max(registered)
    product = labels.get("nvidia.com/gpu.product") or ""
    for key in ("nvidia.com/gpu.memory", "karpenter.k8s.aws/instance-gpu-memory"):
        value = _num(labels.get(key))
        if value and not (key == "nvidia.com/gpu.memory" and "-MIG-" in product):
            return value
    return float(MEMORY_MIB[model]) if model in MEMORY_MIB else None


def node_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    labels = str_map(obj, "metadata", "labels")
    raw_capacity = resource_list(obj, "status", "capacity")
    capacity = {k: v for k, v in raw_capacity.items() if "/" in k or k in ("cpu", "memory")}
    devices = node_devices(str_map(obj, "metadata", "annotations"))
    facts = node_facts(labels, raw_capacity, ctx.instance_facts, devices)
    provider_id = get_str(obj, "spec", "providerID")
    for cond in get_list(obj, "status", "conditions"):
        if isinstance(cond, dict):
            ctx.observe(get_time(cond, "lastHeartbeatTime"))
            ctx.observe(get_time(cond, "lastTransitionTime"))
    created = get_time(obj, "metadata", "creationTimestamp")
    ctx.observe(created)
    return {
        "cluster": ctx.cluster,
        "node": name,
        **facts,
        "zone": facts["zone"] or zone_of_provider(provider_id),
        "provider_id": provider_id,
        "labels": to_json(labels),
        "capacity": to_json(capacity),
        "gpu_devices": to_json(devices) if devices else None,
        "taints": to_json(taints(obj)),
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


def taints(obj: dict[str, Any]) -> list[dict[str, str]]:
    """The node's taints (key, value, effect): which pods it keeps off."""
    out = []
    for i, t in enumerate(get_list(obj, "spec", "taints")):
        if not isinstance(t, dict):
            raise MapError(f"spec.taints[{i}]", "expected an object")
        out.append({k: str(t[k]) for k in ("key", "value", "effect") if t.get(k) is not None})
    return out

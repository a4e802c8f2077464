"""Volcano objects -> rows: Queue (``queues``), PodGroup (``podgroups``), Job (``vcjobs``),
HyperNode (``hypernodes``: the network topology tiers of network-topology-aware scheduling)."""

from __future__ import annotations

from typing import Any

from gpuinsight.sources.k8s.common import (
    GPU,
    MapContext,
    MapError,
    get_bool,
    get_int,
    get_list,
    get_map,
    get_str,
    get_time,
    owner_ref,
    require_str,
    resource_list,
    to_json,
)
from gpuinsight.sources.k8s.pods import effective_gpu_requests, mig_of
from gpuinsight.sources.plausible import MAX_DEVICES_PER_CLUSTER

ALIVE_PODGROUP = ("Pending", "Running", "Inqueue", "Unknown")
DONE_JOB = ("Completed", "Terminated", "Failed", "Aborted")


def queue_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    spec = get_map(obj, "spec")
    # cluster-wide resource lists; bounds from the Queue CRD (weight 1..65535)
    capability = resource_list(spec, "capability", gpu_limit=MAX_DEVICES_PER_CLUSTER)
    deserved = resource_list(spec, "deserved", gpu_limit=MAX_DEVICES_PER_CLUSTER)
    guarantee = resource_list(spec, "guarantee", "resource", gpu_limit=MAX_DEVICES_PER_CLUSTER)
    allocated = resource_list(obj, "status", "allocated", gpu_limit=MAX_DEVICES_PER_CLUSTER)
    ctx.observe(get_time(obj, "metadata", "creationTimestamp"))
    reclaimable = get_bool(spec, "reclaimable")
    return {
        "cluster": ctx.cluster,
        "name": name,
        "weight": get_int(obj, "spec", "weight", lo=1, hi=65535) if spec.get("weight") is not None else 1,
        "capability": to_json(capability) if "capability" in spec else None,
        "deserved": to_json(deserved) if "deserved" in spec else None,
        "guarantee": to_json(guarantee) if get_map(spec, "guarantee").get("resource") is not None else None,
        "capability_gpu": capability.get(GPU),
        "deserved_gpu": deserved.get(GPU),
        "guarantee_gpu": guarantee.get(GPU),
        # Volcano's admission webhook defaults an unset reclaimable to true
        "reclaimable": True if reclaimable is None else reclaimable,
        "parent": get_str(spec, "parent"),
        "state": get_str(obj, "status", "state"),
        "allocated": to_json(allocated) if get_map(obj, "status").get("allocated") is not None else None,
        "allocated_gpu": allocated.get(GPU),
        "last_seen": None,
        "spec": to_json(spec),
        "_alive": True,
    }


def podgroup_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    spec = get_map(obj, "spec")
    owner = owner_ref(obj) or {}
    created = get_time(obj, "metadata", "creationTimestamp")
    ctx.observe(created)
    for cond in get_list(obj, "status", "conditions"):
        if isinstance(cond, dict):
            ctx.observe(get_time(cond, "lastTransitionTime"))
    phase = get_str(obj, "status", "phase")
    return {
        "cluster": ctx.cluster,
        "namespace": get_str(obj, "metadata", "namespace") or "default",
        "name": name,
        "uid": get_str(obj, "metadata", "uid"),
        "queue": get_str(spec, "queue"),
        "min_member": get_int(obj, "spec", "minMember", lo=0),
        "min_resources": to_json(resource_list(spec, "minResources", gpu_limit=MAX_DEVICES_PER_CLUSTER))
        if "minResources" in spec else None,
        "phase": phase,
        "owner_kind": owner.get("kind"),
        "owner_name": owner.get("name"),
        "created": created,
        "last_seen": None,
        "spec": to_json(spec),
        "_alive": phase in ALIVE_PODGROUP or phase is None,
    }


def _task(task: Any, i: int) -> dict[str, Any]:
    if not isinstance(task, dict):
        raise MapError(f"spec.tasks[{i}]", "expected an object")
    pod_spec = get_map(task, "template", "spec")
    requests = effective_gpu_requests(pod_spec, f"spec.tasks[{i}].template.spec")
    mig_profile, mig_count = mig_of(requests)
    return {
        "name": get_str(task, "name") or f"task-{i}",
        "replicas": get_int(task, "replicas", lo=0, where=f"spec.tasks[{i}]") if task.get("replicas") is not None
        else 1,
        "min_available": get_int(task, "minAvailable", lo=0, where=f"spec.tasks[{i}]"),
        "gpus_per_pod": requests.get(GPU, 0.0),
        "mig_profile": mig_profile,
        "mig_per_pod": mig_count,
        "gpu_requests": requests,
        "policies": get_list(task, "policies"),
    }


def vcjob_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    spec = get_map(obj, "spec")
    tasks = [_task(t, i) for i, t in enumerate(get_list(spec, "tasks"))]
    created = get_time(obj, "metadata", "creationTimestamp")
    ctx.observe(created)
    status = get_map(obj, "status")
    changed = get_time(status, "state", "lastTransitionTime")
    ctx.observe(changed)
    phase = get_str(status, "state", "phase")
    policies = {"job": get_list(spec, "policies"),
                "tasks": {t["name"]: t["policies"] for t in tasks if t["policies"]}}
    return {
        "cluster": ctx.cluster,
        "namespace": get_str(obj, "metadata", "namespace") or "default",
        "name": name,
        "uid": get_str(obj, "metadata", "uid"),
        "queue": get_str(spec, "queue") or "default",
        "min_available": get_int(obj, "spec", "minAvailable", lo=0),
        "max_retry": get_int(obj, "spec", "maxRetry", lo=0) if spec.get("maxRetry") is not None else 3,
        "policies": to_json(policies),
        "tasks": to_json(tasks),
        "phase": phase,
        "retry_count": get_int(obj, "status", "retryCount", lo=0) or 0,
        "network_topology": to_json(get_map(spec, "networkTopology")) if spec.get("networkTopology") else None,
        "created": created,
        # a finished Job was last alive when it reached that phase
        "last_seen": changed if phase in DONE_JOB else None,
        "_alive": phase not in DONE_JOB,
    }


HYPERNODE_MEMBER_TYPES = ("Node", "HyperNode")
HYPERNODE_SELECTORS = ("exactMatch", "regexMatch", "labelMatch")


def hypernode_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    """A HyperNode (topology.volcano.sh/v1alpha1, cluster-scoped): its tier (the CRD requires
    one, >= 0) and members, each a Node or HyperNode chosen by exactly one of exactMatch,
    regexMatch or labelMatch (the CRD's validation rules)."""
    name = require_str(obj, "metadata", "name")
    tier = get_int(obj, "spec", "tier", lo=0)
    if tier is None:
        raise MapError("spec.tier", "missing (the HyperNode CRD requires it)")
    members = []
    for i, m in enumerate(get_list(obj, "spec", "members")):
        where = f"spec.members[{i}]"
        if not isinstance(m, dict):
            raise MapError(where, "expected an object")
        kind = get_str(m, "type")
        if kind not in HYPERNODE_MEMBER_TYPES:
            raise MapError(f"{where}.type", f"{kind!r} is not one of {', '.join(HYPERNODE_MEMBER_TYPES)}")
        sel = get_map(m, "selector")
        chosen = [k for k in HYPERNODE_SELECTORS if k in sel]
        if len(chosen) != 1:
            raise MapError(f"{where}.selector", "needs exactly one of exactMatch, regexMatch, labelMatch")
        members.append({"type": kind, "selector": {chosen[0]: sel[chosen[0]]}})
    ctx.observe(get_time(obj, "metadata", "creationTimestamp"))
    return {
        "cluster": ctx.cluster,
        "name": name,
        "tier": tier,
        "tier_name": get_str(obj, "spec", "tierName"),
        "members": to_json(members),
        "last_seen": None,
        "_alive": True,
    }

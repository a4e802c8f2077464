"""Kueue objects -> rows: ClusterQueue (``kueue_cluster_queues``: quotas per flavor and
resource, cohort, usage), LocalQueue, ResourceFlavor and Workload (``kueue_workloads``: what it
asks per pod set, where it was admitted and with what usage, and whether it finished).

Both served versions read alike: ``kueue.x-k8s.io/v1beta1`` and ``v1beta2`` (which renames
``spec.cohort`` to ``spec.cohortName``); the CRDs are vendored in ``tests/fixtures/kueue``.
"""

from __future__ import annotations

from typing import Any

from gpuinsight.sources.k8s.common import (
    MapContext,
    MapError,
    get_bool,
    get_int,
    get_list,
    get_map,
    get_str,
    get_time,
    gpu_quantity,
    is_device_resource,
    owner_ref,
    parse_quantity,
    require_str,
    str_map,
    to_json,
)
from gpuinsight.sources.k8s.pods import effective_gpu_requests
from gpuinsight.sources.plausible import MAX_DEVICES_PER_CLUSTER

GROUP = "kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"
# Workload conditions (kueue apis: WorkloadQuotaReserved, WorkloadAdmitted, WorkloadFinished ...)
TERMINAL_STATES = ("Finished",)


def _quantity(value: Any, name: str, where: str) -> float:
    """A quota or usage quantity; device resources (nvidia.com/gpu) are whole and cluster-sized."""
    if is_device_resource(name):
        return gpu_quantity(value, where, MAX_DEVICES_PER_CLUSTER)
    return parse_quantity(value, where)


def _optional(res: dict[str, Any], key: str, name: str, where: str) -> float | None:
    return None if res.get(key) is None else _quantity(res[key], name, f"{where}.{key}")


def _flavor_list(obj: Any, path: tuple[str, ...], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """``[{name, resources: [{name, <keys>}]}]`` (flavorsUsage, flavorsReservation) flattened."""
    out = []
    for i, fl in enumerate(get_list(obj, *path)):
        where = f"{'.'.join(path)}[{i}]"
        if not isinstance(fl, dict):
            raise MapError(where, "expected an object")
        flavor = require_str(fl, "name")
        for j, res in enumerate(get_list(fl, "resources")):
            if not isinstance(res, dict):
                raise MapError(f"{where}.resources[{j}]", "expected an object")
            name = require_str(res, "name")
            row: dict[str, Any] = {"flavor": flavor, "resource": name}
            for k in keys:
                row[k] = _optional(res, k, name, f"{where}.resources[{j}]")
            out.append(row)
    return out


def clusterqueue_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    spec = get_map(obj, "spec")
    quotas = []
    for g, group in enumerate(get_list(spec, "resourceGroups")):
        where = f"spec.resourceGroups[{g}]"
        if not isinstance(group, dict):
            raise MapError(where, "expected an object")
        for f, fl in enumerate(get_list(group, "flavors")):
            fwhere = f"{where}.flavors[{f}]"
            if not isinstance(fl, dict):
                raise MapError(fwhere, "expected an object")
            flavor = require_str(fl, "name")
            for r, res in enumerate(get_list(fl, "resources")):
                rwhere = f"{fwhere}.resources[{r}]"
                if not isinstance(res, dict):
                    raise MapError(rwhere, "expected an object")
                rname = require_str(res, "name")
                if res.get("nominalQuota") is None:
                    raise MapError(f"{rwhere}.nominalQuota", "missing (the ClusterQueue CRD requires it)")
                quotas.append({"group": g, "flavor": flavor, "resource": rname,
                               "nominal": _quantity(res["nominalQuota"], rname, f"{rwhere}.nominalQuota"),
                               "borrowing_limit": _optional(res, "borrowingLimit", rname, rwhere),
                               "lending_limit": _optional(res, "lendingLimit", rname, rwhere)})
    status = get_map(obj, "status")
    ctx.observe(get_time(obj, "metadata", "creationTimestamp"))
    return {
        "cluster": ctx.cluster,
        "name": name,
        "cohort": get_str(spec, "cohortName") or get_str(spec, "cohort"),
        "quotas": to_json(quotas),
        "usage": to_json(_flavor_list(status, ("flavorsUsage",), ("total", "borrowed"))),
        "reservation": to_json(_flavor_list(status, ("flavorsReservation",), ("total", "borrowed"))),
        "pending_workloads": get_int(status, "pendingWorkloads", lo=0, where="status"),
        "admitted_workloads": get_int(status, "admittedWorkloads", lo=0, where="status"),
        "stop_policy": get_str(spec, "stopPolicy"),
        "api_version": get_str(obj, "apiVersion"),
        "spec": to_json(spec),
        "last_seen": None,
        "_alive": True,
    }


def localqueue_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    ctx.observe(get_time(obj, "metadata", "creationTimestamp"))
    return {
        "cluster": ctx.cluster,
        "namespace": get_str(obj, "metadata", "namespace") or "default",
        "name": require_str(obj, "metadata", "name"),
        "cluster_queue": get_str(obj, "spec", "clusterQueue"),
        "last_seen": None,
        "_alive": True,
    }


def resourceflavor_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    ctx.observe(get_time(obj, "metadata", "creationTimestamp"))
    taints = get_list(obj, "spec", "nodeTaints")
    return {
        "cluster": ctx.cluster,
        "name": require_str(obj, "metadata", "name"),
        "node_labels": to_json(str_map(obj, "spec", "nodeLabels")),
        "node_taints": to_json(taints) if taints else None,
        "last_seen": None,
        "_alive": True,
    }


def _conditions(obj: dict[str, Any], ctx: MapContext) -> dict[str, tuple[bool, Any]]:
    out = {}
    for i, cond in enumerate(get_list(obj, "status", "conditions")):
        if not isinstance(cond, dict):
            raise MapError(f"status.conditions[{i}]", "expected an object")
        ts = get_time(cond, "lastTransitionTime")
        ctx.observe(ts)
        out[str(cond.get("type"))] = (str(cond.get("status")) == "True", ts)
    return out


def workload_state(conditions: dict[str, tuple[bool, Any]], active: bool | None) -> str:
    """Finished (terminal), Admitted, QuotaReserved, Evicted, Inactive, else Pending."""
    for state in ("Finished", "Admitted", "QuotaReserved"):
        if conditions.get(state, (False, None))[0]:
            return state
    if active is False:
        return "Inactive"
    if conditions.get("Evicted", (False, None))[0]:
        return "Evicted"
    return "Pending"


def workload_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    spec = get_map(obj, "spec")
    pod_sets = []
    for i, ps in enumerate(get_list(spec, "podSets")):
        where = f"spec.podSets[{i}]"
        if not isinstance(ps, dict):
            raise MapError(where, "expected an object")
        requests = effective_gpu_requests(get_map(ps, "template", "spec"), f"{where}.template.spec")
        pod_sets.append({"name": get_str(ps, "name") or "main",
                         "count": get_int(ps, "count", lo=0, where=where) if ps.get("count") is not None else 1,
                         "min_count": get_int(ps, "minCount", lo=0, where=where),
                         "requests": requests})
    # a workload not admitted yet: what Kueue computed it needs, after resource transformations
    # (status.resourceRequests: the totals of all pods of each pod set)
    for i, rr in enumerate(get_list(obj, "status", "resourceRequests")):
        where = f"status.resourceRequests[{i}]"
        if not isinstance(rr, dict):
            raise MapError(where, "expected an object")
        totals = {str(k): _quantity(v, str(k), f"{where}.resources.{k}") for k, v in get_map(rr, "resources").items()}
        for ps in pod_sets:
            if ps["name"] == (get_str(rr, "name") or "main"):
                ps["totals"] = totals
    usage = []
    admission = get_map(obj, "status", "admission")
    for i, psa in enumerate(get_list(admission, "podSetAssignments")):
        where = f"status.admission.podSetAssignments[{i}]"
        if not isinstance(psa, dict):
            raise MapError(where, "expected an object")
        flavors = str_map(psa, "flavors")
        for res, qty in get_map(psa, "resourceUsage").items():
            usage.append({"pod_set": get_str(psa, "name") or "main", "flavor": flavors.get(str(res)),
                          "resource": str(res), "quantity": _quantity(qty, str(res), f"{where}.resourceUsage.{res}")})
    conditions = _conditions(obj, ctx)
    state = workload_state(conditions, get_bool(spec, "active"))
    owner = owner_ref(obj) or {}
    created = get_time(obj, "metadata", "creationTimestamp")
    ctx.observe(created)
    reserved = conditions.get("QuotaReserved") or conditions.get("Admitted") or (False, None)
    finished = conditions.get("Finished", (False, None))
    return {
        "cluster": ctx.cluster,
        "namespace": get_str(obj, "metadata", "namespace") or "default",
        "name": name,
        "uid": get_str(obj, "metadata", "uid"),
        "queue_name": get_str(spec, "queueName"),
        "cluster_queue": get_str(admission, "clusterQueue"),
        "state": state,
        "pod_sets": to_json(pod_sets),
        "usage": to_json(usage),
        "owner_kind": owner.get("kind"),
        "owner_name": owner.get("name"),
        "owner_uid": owner.get("uid"),
        "priority": get_int(spec, "priority", where="spec"),
        "created": created,
        "admitted_at": reserved[1] if reserved[0] else None,
        "finished_at": finished[1] if finished[0] else None,
        "last_seen": finished[1] if finished[0] else None,
        "_alive": state not in TERMINAL_STATES,
    }

"""Karpenter NodePool (``node_pools``), PodDisruptionBudget (``pdbs``) and Event (``events``)."""

from __future__ import annotations

from typing import Any

from gpuinsight.sources.k8s.common import (
    MapContext,
    MapError,
    get_int,
    get_list,
    get_map,
    get_str,
    get_time,
    require_str,
    resource_list,
    to_json,
)
from gpuinsight.sources.plausible import MAX_DEVICES_PER_CLUSTER

CAPACITY_TYPES = ("on-demand", "reserved", "spot")
DEFAULT_CONSOLIDATION = "WhenEmptyOrUnderutilized"


def capacity_types(requirements: list[Any]) -> list[str]:
    """Capacity types a NodePool may launch (Karpenter: on-demand when not constrained)."""
    allowed: set[str] | None = None
    for i, req in enumerate(requirements):
        if not isinstance(req, dict):
            raise MapError(f"spec.template.spec.requirements[{i}]", "expected an object")
        if req.get("key") != "karpenter.sh/capacity-type":
            continue
        values = {str(v) for v in get_list(req, "values")}
        op = req.get("operator")
        current = set(CAPACITY_TYPES) if allowed is None else allowed
        if op == "In":
            allowed = current & values
        elif op == "NotIn":
            allowed = current - values
        elif op == "Exists":
            allowed = current
        elif op == "DoesNotExist":
            allowed = set()
    return sorted(allowed) if allowed is not None else ["on-demand"]


def nodepool_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    spec = get_map(obj, "spec")
    requirements = get_list(spec, "template", "spec", "requirements")
    ctx.observe(get_time(obj, "metadata", "creationTimestamp"))
    return {
        "cluster": ctx.cluster,
        "name": name,
        "kind": "karpenter",
        "capacity_types": to_json(capacity_types(requirements)),
        "limits": to_json(resource_list(spec, "limits", gpu_limit=MAX_DEVICES_PER_CLUSTER)) if "limits" in spec else None,
        # the CRD defaults it server-side; older v1beta1 pools say WhenUnderutilized
        "consolidation_policy": get_str(spec, "disruption", "consolidationPolicy") or DEFAULT_CONSOLIDATION,
        "spec": to_json(spec),
        "last_seen": None,
        "_alive": True,
    }


def _int_or_str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise MapError(f"spec.{key}", f"expected an integer or a percentage, got {value!r}")
    return str(value)


def pdb_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    spec = get_map(obj, "spec")
    ctx.observe(get_time(obj, "metadata", "creationTimestamp"))
    return {
        "cluster": ctx.cluster,
        "namespace": get_str(obj, "metadata", "namespace") or "default",
        "name": name,
        "selector": to_json(get_map(spec, "selector")),
        "min_available": _int_or_str(spec, "minAvailable"),
        "max_unavailable": _int_or_str(spec, "maxUnavailable"),
        "last_seen": None,
        "_alive": True,
    }


def event_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    """core/v1 Event (``kubectl get events``); events.k8s.io/v1 field names are accepted too."""
    uid = require_str(obj, "metadata", "uid")
    involved = get_map(obj, "involvedObject") or get_map(obj, "regarding")
    event_time = get_time(obj, "eventTime")
    first = (get_time(obj, "firstTimestamp") or get_time(obj, "deprecatedFirstTimestamp") or event_time
             or get_time(obj, "metadata", "creationTimestamp"))
    last = (get_time(obj, "lastTimestamp") or get_time(obj, "deprecatedLastTimestamp")
            or get_time(obj, "series", "lastObservedTime") or event_time or first)
    ctx.observe(last)
    count = (get_int(obj, "count", lo=0) or get_int(obj, "deprecatedCount", lo=0)
             or get_int(obj, "series", "count", lo=0) or 1)
    return {
        "cluster": ctx.cluster,
        "uid": uid,
        "namespace": get_str(obj, "metadata", "namespace") or get_str(involved, "namespace"),
        "involved_kind": get_str(involved, "kind"),
        "involved_name": get_str(involved, "name"),
        "involved_uid": get_str(involved, "uid"),
        "reason": get_str(obj, "reason"),
        "type": get_str(obj, "type"),
        "message": get_str(obj, "message") or get_str(obj, "note"),
        "first_ts": first,
        "last_ts": last,
        "count": count,
    }

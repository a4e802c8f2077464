"""DRA ResourceClaim (``resource.k8s.io``) -> ``resource_claims``: the devices the scheduler
allocated (``status.allocation.devices.results``: driver, pool, device) and the pods the claim
is reserved for (``status.reservedFor``). A claim several pods reserve is one device shared by
them (the ``pod_gpu_shares`` model splits it evenly)."""

from __future__ import annotations

from typing import Any

from gpuinsight.sources.k8s.common import (
    MapContext,
    MapError,
    get_list,
    get_str,
    get_time,
    require_str,
    to_json,
)


def resourceclaim_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    devices = []
    for i, res in enumerate(get_list(obj, "status", "allocation", "devices", "results")):
        where = f"status.allocation.devices.results[{i}]"
        if not isinstance(res, dict):
            raise MapError(where, "expected an object")
        devices.append({"request": get_str(res, "request"), "driver": require_str(res, "driver"),
                        "pool": require_str(res, "pool"), "device": require_str(res, "device")})
    reserved = []
    for i, ref in enumerate(get_list(obj, "status", "reservedFor")):
        if not isinstance(ref, dict):
            raise MapError(f"status.reservedFor[{i}]", "expected an object")
        reserved.append({"resource": get_str(ref, "resource"), "name": get_str(ref, "name"),
                         "uid": get_str(ref, "uid")})
    created = get_time(obj, "metadata", "creationTimestamp")
    ctx.observe(created)
    return {
        "cluster": ctx.cluster,
        "namespace": get_str(obj, "metadata", "namespace") or "default",
        "name": name,
        "uid": get_str(obj, "metadata", "uid"),
        "devices": to_json(devices),
        "reserved_for": to_json(reserved),
        "created": created,
        "last_seen": None,
        "_alive": True,
    }

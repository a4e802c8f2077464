"""Pod -> ``pods`` row: owning workload, GPU requests, Volcano queue/podgroup/job, timeline."""

from __future__ import annotations

import re
from typing import Any

from gpuinsight.sources.k8s.common import (
    GPU,
    MIG_PREFIX,
    MapContext,
    MapError,
    get_list,
    get_map,
    get_str,
    get_time,
    gpu_quantity,
    is_device_resource,
    is_gpu_resource,
    owner_ref,
    parse_quantity,
    require_str,
    str_map,
    to_json,
)
from gpuinsight.sources.k8s.shares import pod_claims
from gpuinsight.sources.plausible import MAX_DEVICES_PER_OBJECT

QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
QUEUE_LABEL = "volcano.sh/queue-name"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
GROUP_LABEL_PLUGINS = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins coscheduling
JOB_LABEL = "volcano.sh/job-name"
DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)

# ReplicaSet suffixes come from rand.SafeEncodeString's alphabet (no vowels, no 0/1/3).
_RS_SUFFIX = re.compile(r"^(?P<base>.+)-[bcdfghjklmnpqrstvwxz2456789]{5,10}$")
_CRONJOB_JOB = re.compile(r"^(?P<base>.+)-(?P<minute>\d{8})$")
_CRONJOB_MINUTES = (26_000_000, 40_000_000)  # 2019..2046; keeps date suffixes (20260701) out
ALIVE_PHASES = ("Pending", "Running", "Unknown")


def resolve_workload(
    pod_name: str, labels: dict[str, str], owner: dict[str, Any] | None
) -> tuple[str | None, str | None, str, str]:
    """(owner_kind, owner_name, workload_kind, workload) for a pod."""
    if owner is None:
        if labels.get(JOB_LABEL):
            return None, None, "VolcanoJob", labels[JOB_LABEL]
        return None, None, "Pod", pod_name
    kind = str(owner.get("kind") or "")
    name = str(owner.get("name") or "")
    if not kind or not name:
        raise MapError("metadata.ownerReferences", "owner reference lacks kind or name")
    api = str(owner.get("apiVersion") or "")
    if api.startswith("batch.volcano.sh/") and kind == "Job":
        return kind, name, "VolcanoJob", name
    if kind == "ReplicaSet":
        h = labels.get("pod-template-hash")
        if h and name.endswith("-" + h) and len(name) > len(h) + 1:
            return kind, name, "Deployment", name[: -len(h) - 1]
        m = _RS_SUFFIX.match(name)
        if h is None and m:
            return kind, name, "Deployment", m.group("base")
        return kind, name, "ReplicaSet", name
    if kind == "Job" and api.startswith("batch/"):
        m = _CRONJOB_JOB.match(name)
        if m and _CRONJOB_MINUTES[0] <= int(m.group("minute")) <= _CRONJOB_MINUTES[1]:
            # a CronJob names its Jobs <cronjob>-<scheduled time in minutes since the epoch>
            return kind, name, "CronJob", m.group("base")
        return kind, name, "Job", name
    return kind, name, kind, name


def container_resources(container: dict[str, Any], where: str) -> dict[str, float]:
    """Requests, with limits standing in for unset requests (as the API server defaults
    extended resources)."""
    requests = get_map(container, "resources", "requests")
    limits = get_map(container, "resources", "limits")
    out: dict[str, float] = {}
    for name in set(requests) | set(limits):
        raw = requests[name] if name in requests else limits[name]
        src = "requests" if name in requests else "limits"
        path = f"{where}.resources.{src}.{name}"
        out[str(name)] = (gpu_quantity(raw, path, MAX_DEVICES_PER_OBJECT) if is_device_resource(str(name))
                          else parse_quantity(raw, path))
    return out


def effective_gpu_requests(spec: dict[str, Any], where: str = "spec") -> dict[str, float]:
    """GPU resources the scheduler reserves for a pod: the sum over app containers (plus
    restartable init "sidecars"), or the largest plain init container if that is larger."""
    total: dict[str, float] = {}
    init_max: dict[str, float] = {}
    for i, c in enumerate(get_list(spec, "containers")):
        if not isinstance(c, dict):
            raise MapError(f"{where}.containers[{i}]", "expected an object")
        for k, v in container_resources(c, f"{where}.containers[{i}]").items():
            if is_gpu_resource(k):
                total[k] = total.get(k, 0.0) + v
    for i, c in enumerate(get_list(spec, "initContainers")):
        if not isinstance(c, dict):
            raise MapError(f"{where}.initContainers[{i}]", "expected an object")
        sidecar = c.get("restartPolicy") == "Always"
        for k, v in container_resources(c, f"{where}.initContainers[{i}]").items():
            if not is_gpu_resource(k):
                continue
            if sidecar:
                total[k] = total.get(k, 0.0) + v
            else:
                init_max[k] = max(init_max.get(k, 0.0), v)
    for k, v in init_max.items():
        total[k] = max(total.get(k, 0.0), v)
    return {k: v for k, v in sorted(total.items()) if v}


def container_gpu_resources(spec: dict[str, Any], where: str = "spec") -> list[dict[str, float]]:
    """Each running container's GPU resources (app containers and restartable sidecars): the
    per-container view HAMi and Volcano vGPU requests need (memory and cores are per vGPU)."""
    out = []
    for group in ("containers", "initContainers"):
        for i, c in enumerate(get_list(spec, group)):
            if not isinstance(c, dict) or (group == "initContainers" and c.get("restartPolicy") != "Always"):
                continue
            res = {k: v for k, v in container_resources(c, f"{where}.{group}[{i}]").items() if is_gpu_resource(k)}
            if res:
                out.append(res)
    return out


def cpu_request(spec: dict[str, Any], where: str = "spec") -> float | None:
    """Cores the pod's app containers request (limits standing in for an unset request); None
    when no container says."""
    total, said = 0.0, False
    for i, c in enumerate(get_list(spec, "containers")):
        if isinstance(c, dict):
            res = container_resources(c, f"{where}.containers[{i}]")
            if "cpu" in res:
                total, said = total + res["cpu"], True
    return total if said else None


def mig_of(requests: dict[str, float]) -> tuple[str | None, float | None]:
    migs = {k[len(MIG_PREFIX):]: v for k, v in requests.items() if k.startswith(MIG_PREFIX) and v > 0}
    if not migs:
        return None, None
    profile = max(sorted(migs), key=lambda p: migs[p])
    return profile, migs[profile]


def _timeline(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    status = get_map(obj, "status")
    scheduled = None
    for i, cond in enumerate(get_list(status, "conditions")):
        if not isinstance(cond, dict):
            raise MapError(f"status.conditions[{i}]", "expected an object")
        ts = get_time(cond, "lastTransitionTime")
        ctx.observe(ts)
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            scheduled = ts
    starts, ends, states = [], [], []
    for group in ("initContainerStatuses", "containerStatuses"):
        for i, cs in enumerate(get_list(status, group)):
            if not isinstance(cs, dict):
                raise MapError(f"status.{group}[{i}]", "expected an object")
            state = get_map(cs, "state")
            running, terminated = get_map(state, "running"), get_map(state, "terminated")
            for part in (running, terminated):
                ts = get_time(part, "startedAt")
                if ts is not None:
                    starts.append(ts)
            fin = get_time(terminated, "finishedAt")
            if fin is not None:
                ends.append(fin)
            if group == "containerStatuses":
                states.append("terminated" if terminated else ("running" if running else "waiting"))
    for ts in starts + ends:
        ctx.observe(ts)
    phase = get_str(status, "phase")
    start_time = get_time(obj, "status", "startTime")  # read (and checked) even where container states say when
    started = min(starts) if starts else start_time
    ctx.observe(started)
    done = phase in ("Succeeded", "Failed") or (bool(states) and all(s == "terminated" for s in states))
    finished = max(ends) if (done and ends) else None
    return {"scheduled": scheduled, "started": started, "finished": finished, "phase": phase,
            "_alive": phase in ALIVE_PHASES and not done}


def pod_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    uid = require_str(obj, "metadata", "uid")
    namespace = get_str(obj, "metadata", "namespace") or "default"
    labels = str_map(obj, "metadata", "labels")
    annotations = str_map(obj, "metadata", "annotations")
    spec = get_map(obj, "spec")
    owner_kind, owner_name, workload_kind, workload = resolve_workload(name, labels, owner_ref(obj))
    requests = effective_gpu_requests(spec)
    mig_profile, mig_request = mig_of(requests)
    claims = pod_claims(container_gpu_resources(spec), annotations, labels, namespace)
    created = get_time(obj, "metadata", "creationTimestamp")
    ctx.observe(created)
    timeline = _timeline(obj, ctx)
    finished = timeline["finished"]
    return {
        "cluster": ctx.cluster,
        "uid": uid,
        "namespace": namespace,
        "name": name,
        "owner_kind": owner_kind,
        "owner_name": owner_name,
        "workload_kind": workload_kind,
        "workload": workload,
        "node": get_str(spec, "nodeName"),
        "gpu_request": requests.get(GPU, 0.0),
        "mig_profile": mig_profile,
        "mig_request": mig_request,
        "gpu_requests": to_json(requests),
        "gpu_shares": to_json(claims) if claims else None,
        "cpu_request": cpu_request(spec),
        "queue": annotations.get(QUEUE_ANNOTATION) or labels.get(QUEUE_LABEL)
        or annotations.get(QUEUE_LABEL),
        "podgroup": annotations.get(GROUP_ANNOTATION) or labels.get(GROUP_LABEL_PLUGINS),
        "vcjob": labels.get(JOB_LABEL) or annotations.get(JOB_LABEL)
        or (owner_name if workload_kind == "VolcanoJob" else None),
        "priority_class": get_str(spec, "priorityClassName"),
        "scheduler": get_str(spec, "schedulerName"),
        "created": created,
        "scheduled": timeline["scheduled"],
        "started": timeline["started"],
        "finished": finished,
        "last_seen": None if timeline["_alive"] else finished,
        "phase": timeline["phase"],
        "labels": to_json(labels),
        "annotations": to_json({k: v for k, v in annotations.items() if k not in DROPPED_ANNOTATIONS}),
        "source": ctx.source,
        "_alive": timeline["_alive"],
    }

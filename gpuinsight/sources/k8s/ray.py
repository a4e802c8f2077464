"""KubeRay objects -> rows: RayCluster (``rayclusters``), RayJob (``rayjobs``), RayService
(``rayservices``); and KEDA ScaledObject (``scaled_objects``).

Ray pods are attributed to their cluster and group by their own labels (``ray.io/cluster``,
``ray.io/group``, ``ray.io/node-type``), which the pod mapper keeps; these rows say how each
cluster and worker group is configured (replicas, min/max, the autoscaler and its idle
timeout, the GPUs each pod template asks for) and who owns it. Defaults are the CRDs'
(ray-project/kuberay ``ray.io_rayclusters.yaml``: replicas 0, minReplicas 0, maxReplicas
2147483647, numOfHosts 1; KEDA ``keda.sh_scaledobjects.yaml``: minReplicaCount 0,
maxReplicaCount 100).
"""

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
    str_map,
    to_json,
)
from gpuinsight.sources.k8s.pods import effective_gpu_requests

INT32_MAX = 2_147_483_647
RAY_OWNERS = ("RayJob", "RayService")
KEDA_PAUSED = ("autoscaling.keda.sh/paused", "autoscaling.keda.sh/paused-replicas")


def worker_groups(spec: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The worker groups of a RayCluster spec (``where`` prefixes field paths in messages)."""
    out = []
    for i, group in enumerate(get_list(spec, "workerGroupSpecs")):
        at = f"{where}.workerGroupSpecs[{i}]"
        if not isinstance(group, dict):
            raise MapError(at, "expected an object")
        name = get_str(group, "groupName")
        if not name:
            raise MapError(f"{at}.groupName", "missing")
        requests = effective_gpu_requests(get_map(group, "template", "spec"), f"{at}.template.spec")
        out.append({
            "group": name,
            "index": i,
            "replicas": get_int(group, "replicas", lo=0, where=at) or 0,
            "min_replicas": get_int(group, "minReplicas", lo=0, where=at) or 0,
            "max_replicas": get_int(group, "maxReplicas", lo=0, where=at)
            if group.get("maxReplicas") is not None else INT32_MAX,
            "num_of_hosts": get_int(group, "numOfHosts", lo=1, where=at) or 1,
            "gpus_per_pod": requests.get(GPU, 0.0),
            "gpu_requests": requests,
            "idle_timeout_s": get_int(group, "idleTimeoutSeconds", lo=0, where=at),
            "suspend": bool(get_bool(group, "suspend")),
        })
    return out


def cluster_spec_facts(spec: dict[str, Any], where: str) -> dict[str, Any]:
    """What a RayCluster spec (a RayCluster's, or a RayJob's / RayService's embedded one) says
    about GPUs and scaling."""
    head = effective_gpu_requests(get_map(spec, "headGroupSpec", "template", "spec"),
                                  f"{where}.headGroupSpec.template.spec")
    return {
        "autoscaling": bool(get_bool(spec, "enableInTreeAutoscaling")),
        "autoscaler_version": get_str(spec, "autoscalerOptions", "version"),
        "idle_timeout_s": get_int(spec, "autoscalerOptions", "idleTimeoutSeconds", lo=0, where=where),
        "upgrade_strategy": get_str(spec, "upgradeStrategy", "type"),
        "suspend": bool(get_bool(spec, "suspend")),
        "head_gpus": head.get(GPU, 0.0),
        "worker_groups": to_json(worker_groups(spec, where)),
    }


def _owner(obj: dict[str, Any]) -> tuple[str | None, str | None]:
    ref = owner_ref(obj) or {}
    kind = ref.get("kind")
    if kind in RAY_OWNERS and str(ref.get("apiVersion") or "").startswith("ray.io/"):
        return str(kind), str(ref.get("name") or "") or None
    labels = str_map(obj, "metadata", "labels")  # KubeRay labels what it creates for a RayJob/RayService
    crd, name = labels.get("ray.io/originated-from-crd"), labels.get("ray.io/originated-from-cr-name")
    if crd in RAY_OWNERS and name:
        return crd, name
    return None, None


def raycluster_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    spec = get_map(obj, "spec")
    if "headGroupSpec" not in spec:
        raise MapError("spec.headGroupSpec", "missing (the RayCluster CRD requires it)")
    created = get_time(obj, "metadata", "creationTimestamp")
    ctx.observe(created)
    ctx.observe(get_time(obj, "status", "lastUpdateTime"))
    owner_kind, owner_name = _owner(obj)
    return {
        "cluster": ctx.cluster,
        "namespace": get_str(obj, "metadata", "namespace") or "default",
        "name": name,
        "uid": get_str(obj, "metadata", "uid"),
        "owner_kind": owner_kind,
        "owner_name": owner_name,
        **cluster_spec_facts(spec, "spec"),
        "state": get_str(obj, "status", "state"),
        "created": created,
        "last_seen": None,
        "spec": to_json(spec),
        "_alive": True,
    }


def rayjob_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    spec = get_map(obj, "spec")
    created = get_time(obj, "metadata", "creationTimestamp")
    start, end = get_time(obj, "status", "startTime"), get_time(obj, "status", "endTime")
    for ts in (created, start, end):
        ctx.observe(ts)
    if spec.get("rayClusterSpec") is not None:  # shape-checked like a RayCluster's; stored there
        cluster_spec_facts(get_map(spec, "rayClusterSpec"), "spec.rayClusterSpec")
    return {
        "cluster": ctx.cluster,
        "namespace": get_str(obj, "metadata", "namespace") or "default",
        "name": name,
        "uid": get_str(obj, "metadata", "uid"),
        "ray_cluster": get_str(obj, "status", "rayClusterName"),
        "uses_existing": bool(get_map(spec, "clusterSelector")),
        "shutdown_after_finish": bool(get_bool(spec, "shutdownAfterJobFinishes")),
        "ttl_after_finish_s": get_int(spec, "ttlSecondsAfterFinished", lo=0) or 0,
        "deletion_strategy": spec.get("deletionStrategy") is not None,
        "submission_mode": get_str(spec, "submissionMode") or "K8sJobMode",
        "job_status": get_str(obj, "status", "jobStatus"),
        "deployment_status": get_str(obj, "status", "jobDeploymentStatus"),
        "start_time": start,
        "end_time": end,
        "created": created,
        "last_seen": None,
        "spec": to_json({k: v for k, v in spec.items() if k != "rayClusterSpec"}),
        "_alive": True,
    }


def rayservice_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    spec = get_map(obj, "spec")
    created = get_time(obj, "metadata", "creationTimestamp")
    ctx.observe(created)
    ctx.observe(get_time(obj, "status", "lastUpdateTime"))
    config = get_map(spec, "rayClusterConfig")
    return {
        "cluster": ctx.cluster,
        "namespace": get_str(obj, "metadata", "namespace") or "default",
        "name": name,
        "uid": get_str(obj, "metadata", "uid"),
        "active_cluster": get_str(obj, "status", "activeServiceStatus", "rayClusterName"),
        "pending_cluster": get_str(obj, "status", "pendingServiceStatus", "rayClusterName"),
        "worker_groups": to_json(worker_groups(config, "spec.rayClusterConfig")),
        "created": created,
        "last_seen": None,
        "_alive": True,
    }


def scaledobject_row(obj: dict[str, Any], ctx: MapContext) -> dict[str, Any]:
    name = require_str(obj, "metadata", "name")
    spec = get_map(obj, "spec")
    target = get_map(spec, "scaleTargetRef")
    target_name = get_str(target, "name")
    if not target_name:
        raise MapError("spec.scaleTargetRef.name", "missing (the ScaledObject CRD requires it)")
    triggers = get_list(spec, "triggers")
    types = []
    for i, trig in enumerate(triggers):
        if not isinstance(trig, dict) or not get_str(trig, "type"):
            raise MapError(f"spec.triggers[{i}].type", "missing")
        types.append(get_str(trig, "type"))
    annotations = str_map(obj, "metadata", "annotations")
    created = get_time(obj, "metadata", "creationTimestamp")
    ctx.observe(created)
    return {
        "cluster": ctx.cluster,
        "namespace": get_str(obj, "metadata", "namespace") or "default",
        "name": name,
        "target_api_version": get_str(target, "apiVersion") or "apps/v1",
        "target_kind": get_str(target, "kind") or "Deployment",
        "target_name": target_name,
        "min_replicas": get_int(spec, "minReplicaCount", lo=0) if spec.get("minReplicaCount") is not None else 0,
        "max_replicas": get_int(spec, "maxReplicaCount", lo=1) if spec.get("maxReplicaCount") is not None else 100,
        "idle_replicas": get_int(spec, "idleReplicaCount", lo=0),
        "trigger_types": to_json(types),
        "paused": any(annotations.get(k, "").lower() not in ("", "false") for k in KEDA_PAUSED),
        "created": created,
        "last_seen": None,
        "_alive": True,
    }

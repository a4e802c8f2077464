"""KubeRay (RayCluster, RayJob) and KEDA (ScaledObject) objects of the end-of-window snapshot.

Shaped like KubeRay's samples (ray-project/kuberay ``ray-operator/config/samples``) and what the
operator writes into status; every object validates against its CRD (the tests check it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import k8s
from .spec import RAY_JOB_END_H, WORKLOADS, WorkloadDef

if TYPE_CHECKING:
    from .kubectl import Snapshot

RAY_VERSION = "2.52.0"
# batch-infer runs the in-tree autoscaler (v1, Ray's default 60 s idle timeout) with minReplicas at
# its replicas; the other clusters have fixed replicas; worker groups may grow to these maxima
AUTOSCALED = ("batch-infer",)
MAX_REPLICAS = {"batch-infer": 8}


def _container(wd: WorkloadDef) -> dict[str, Any]:
    req, lim = k8s.pod_resources(wd)
    return {"image": wd.image, "name": wd.container_name, "resources": {"limits": lim, "requests": req}}


def _cpu_head() -> dict[str, Any]:
    return {"image": f"rayproject/ray:{RAY_VERSION}", "name": "ray-head",
            "ports": [{"containerPort": 6379, "name": "gcs"}, {"containerPort": 8265, "name": "dashboard"},
                      {"containerPort": 10001, "name": "client"}],
            "resources": {"limits": {"cpu": "2", "memory": "8Gi"}, "requests": {"cpu": "2", "memory": "8Gi"}}}


def cluster_spec(name: str, groups: list[WorkloadDef]) -> dict[str, Any]:
    head = next((g for g in groups if g.ray_group == "headgroup"), None)
    head_container = _container(head) if head else _cpu_head()
    spec: dict[str, Any] = {
        "rayVersion": RAY_VERSION,
        "enableInTreeAutoscaling": name in AUTOSCALED,
        "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"},
                          "template": {"spec": {"containers": [head_container]}}},
        "workerGroupSpecs": [],
    }
    if name in AUTOSCALED:
        spec["autoscalerOptions"] = {"upscalingMode": "Default"}
    for g in groups:
        if g.ray_group == "headgroup":
            continue
        n = len(g.pods)
        spec["workerGroupSpecs"].append({
            "groupName": g.ray_group, "replicas": n, "minReplicas": n, "maxReplicas": MAX_REPLICAS.get(name, n),
            "rayStartParams": {}, "template": {"spec": {"containers": [_container(g)],
                                                        "tolerations": [k8s.GPU_TAINT | {"operator": "Equal"}]}}})
    return spec


def _clusters(s: Snapshot) -> dict[tuple[int, str, str], list[tuple[dict[str, Any], WorkloadDef]]]:
    out: dict[tuple[int, str, str], list[tuple[dict[str, Any], WorkloadDef]]] = {}
    for wl in s.workloads:
        wd = WORKLOADS[wl["template"]]
        if wd.kind == "RayCluster":
            out.setdefault((wl["cell"], wl["namespace"], wl["name"]), []).append((wl, wd))
    return out


def _job_name(wd: WorkloadDef, wl: dict[str, Any]) -> str:
    return wd.ray_job + wl["name"][len(wd.name):]  # the cell suffix of its cluster


def raycluster_objects(s: Snapshot) -> list[dict[str, Any]]:
    out = []
    for (_, ns, name), members in _clusters(s).items():
        wl, wd = members[0]
        spec = cluster_spec(wd.name, [m[1] for m in members])
        labels = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": _job_name(wd, wl)} \
            if wd.ray_job else {}
        meta: dict[str, Any] = {"creationTimestamp": k8s.iso(wl["created_s"]), "generation": 1, "name": name,
                                "namespace": ns, "resourceVersion": s.rv(), "uid": wl["owner_uid"]}
        if labels:
            meta["labels"] = labels
            meta["ownerReferences"] = [{"apiVersion": "ray.io/v1", "blockOwnerDeletion": True, "controller": True,
                                        "kind": "RayJob", "name": _job_name(wd, wl),
                                        "uid": s.uid("rayjob", ns, _job_name(wd, wl))}]
        workers = sum(len(m[1].pods) for m in members if m[1].ray_group != "headgroup")
        gpus = sum(len(m[1].pods) * m[1].gpus_per_pod for m in members)
        status = {"availableWorkerReplicas": workers, "desiredGPU": str(gpus), "desiredWorkerReplicas": workers,
                  "lastUpdateTime": k8s.iso(s.t - 60), "maxWorkerReplicas": sum(
                      g["maxReplicas"] for g in spec["workerGroupSpecs"]), "minWorkerReplicas": workers,
                  "observedGeneration": 1, "readyWorkerReplicas": workers, "state": "ready"}
        out.append({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": spec,
                    "status": status})
    return out


def rayjob_objects(s: Snapshot) -> list[dict[str, Any]]:
    out = []
    for (_, ns, name), members in _clusters(s).items():
        wl, wd = members[0]
        if not wd.ray_job:
            continue
        job = _job_name(wd, wl)
        start = wl["created_s"] - 5
        end = s.fleet.spec.start_s + int(RAY_JOB_END_H * 3600)
        meta = {"creationTimestamp": k8s.iso(start), "generation": 1, "name": job, "namespace": ns,
                "resourceVersion": s.rv(), "uid": s.uid("rayjob", ns, job)}
        spec = {"entrypoint": "python /home/ray/jobs/embed_corpus.py --shard all", "submissionMode": "K8sJobMode",
                "rayClusterSpec": cluster_spec(wd.name, [m[1] for m in members])}
        status = {"dashboardURL": f"{name}-head-svc.{ns}.svc.cluster.local:8265", "endTime": k8s.iso(end),
                  "jobDeploymentStatus": "Complete", "jobId": f"{job}-{name[-5:]}", "jobStatus": "SUCCEEDED",
                  "message": "Job finished successfully.", "observedGeneration": 1, "rayClusterName": name,
                  "startTime": k8s.iso(start), "succeeded": 1}
        out.append({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "spec": spec, "status": status})
    return out


def scaledobject_objects(s: Snapshot) -> list[dict[str, Any]]:
    """The ScaledObjects KEDA already has: scaling on request rate, but never below one replica."""
    out = []
    for wl in s.workloads:
        wd = WORKLOADS[wl["template"]]
        if not wd.scaled_object:
            continue
        query = (f'sum(rate(nginx_ingress_controller_requests{{exported_namespace="{wl["namespace"]}",'
                 f'service="{wl["name"]}"}}[2m]))')
        meta = {"creationTimestamp": k8s.iso(wl["created_s"] + 600), "generation": 1, "name": wl["name"],
                "namespace": wl["namespace"], "resourceVersion": s.rv(), "uid": s.uid("scaledobject", wl["uid"])}
        spec = {"maxReplicaCount": 2, "minReplicaCount": 1, "scaleTargetRef": {"name": wl["name"]},
                "triggers": [{"metadata": {"query": query, "serverAddress": "http://prometheus-operated.monitoring."
                                                                            "svc:9090", "threshold": "20"},
                              "type": "prometheus"}]}
        status = {"conditions": [{"message": "ScaledObject is defined correctly and is ready for scaling",
                                  "reason": "ScaledObjectReady", "status": "True", "type": "Ready"}],
                  "hpaName": f"keda-hpa-{wl['name']}", "originalReplicaCount": 1, "scaleTargetGVKR": {
                      "group": "apps", "kind": "Deployment", "resource": "deployments", "version": "v1"},
                  "scaleTargetKind": "apps/v1.Deployment"}
        out.append({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": meta, "spec": spec,
                    "status": status})
    return out

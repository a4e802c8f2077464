"""Kubernetes facts shared by the kube-state-metrics series and the kubectl dumps.

Labels, annotations, owners and resource quantities are defined once here, so the metrics
and the JSON objects describe the same cluster.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from .spec import EKS_NODEGROUP, INSTANCE_TYPES, MIG_FB_MIB, MIG_PROFILE, WORKLOADS, WorkloadDef

REGION = "us-east-1"
ZONE_IDS = {"us-east-1a": "use1-az4", "us-east-1b": "use1-az6"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}

#: --metric-labels-allowlist / --metric-annotations-allowlist of the sample's kube-state-metrics
KSM_NODE_LABELS = ("node.kubernetes.io/instance-type", "karpenter.sh/capacity-type", "karpenter.sh/nodepool",
                   "eks.amazonaws.com/capacityType", "eks.amazonaws.com/nodegroup", "nvidia.com/gpu.product",
                   "nvidia.com/gpu.count", "nvidia.com/mig.config", "nvidia.com/mig.strategy",
                   "topology.kubernetes.io/zone")
KSM_POD_LABELS = ("app", "env", "volcano.sh/job-name", "volcano.sh/queue-name", "ray.io/cluster", "ray.io/group",
                  "ray.io/node-type")
KSM_POD_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/queue-name",
                       "gpuinsight.io/checkpoint-interval")


def iso(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ksm_name(prefix: str, key: str) -> str:
    """kube-state-metrics label name: invalid chars -> '_', camelCase -> snake_case, prefixed."""
    s = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return f"{prefix}_{s}"


def ksm_resource(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def quantity(q: str) -> float:
    """Kubernetes quantity -> number (cores or bytes)."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3}
    for u, f in units.items():
        if q.endswith(u):
            return float(q[: -len(u)]) * f
    return float(q)


# ----------------------------------------------------------------------------- nodes


def node_labels(n: dict[str, Any]) -> dict[str, str]:
    it = INSTANCE_TYPES[n["instance_type"]]
    fam, size = it.name.split(".")
    zone = n["zone"]
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": it.name,
        "beta.kubernetes.io/os": "linux", "failure-domain.beta.kubernetes.io/region": REGION,
        "failure-domain.beta.kubernetes.io/zone": zone, "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": n["name"], "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": it.name, "topology.k8s.aws/zone-id": ZONE_IDS[zone],
        "topology.kubernetes.io/region": REGION, "topology.kubernetes.io/zone": zone,
        "nvidia.com/cuda.driver-version.full": n["driver"], "nvidia.com/gpu.count": str(it.gpu_count),
        "nvidia.com/gpu.family": it.family, "nvidia.com/gpu.machine": it.name,
        "nvidia.com/gpu.memory": str(it.fb_mib), "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": it.product, "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/mig.capable": str(it.mig_capable).lower(),
        "nvidia.com/mps.capable": "false",
    }
    if n["pool_kind"] == "karpenter":
        labels.update({
            "karpenter.k8s.aws/ec2nodeclass": "gpu", "karpenter.k8s.aws/instance-cpu": str(it.vcpu),
            "karpenter.k8s.aws/instance-family": fam, "karpenter.k8s.aws/instance-gpu-count": str(it.gpu_count),
            "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
            "karpenter.k8s.aws/instance-gpu-memory": str(it.fb_mib),
            "karpenter.k8s.aws/instance-gpu-name": it.gpu_model.lower(),
            "karpenter.k8s.aws/instance-memory": str(it.memory_mib), "karpenter.k8s.aws/instance-size": size,
            "karpenter.sh/capacity-type": n["capacity_type"], "karpenter.sh/initialized": "true",
            "karpenter.sh/nodepool": n["pool"], "karpenter.sh/registered": "true",
        })
    else:
        labels.update({
            "eks.amazonaws.com/capacityType": "ON_DEMAND" if n["capacity_type"] == "on-demand" else "SPOT",
            "eks.amazonaws.com/nodegroup": EKS_NODEGROUP,
            "eks.amazonaws.com/nodegroup-image": "ami-0f5d42a1c3b7e9d20",
            "eks.amazonaws.com/sourceLaunchTemplateId": "lt-0a6c2e1f4b9d83c57",
            "eks.amazonaws.com/sourceLaunchTemplateVersion": "3",
        })
    if n["mig"]:
        p = f"nvidia.com/mig-{MIG_PROFILE}"
        labels.update({
            "nvidia.com/mig.config": f"all-{MIG_PROFILE}", "nvidia.com/mig.config.state": "success",
            "nvidia.com/mig.strategy": "mixed", f"{p}.count": "7", f"{p}.engines.copy": "1",
            f"{p}.memory": str(MIG_FB_MIB), f"{p}.multiprocessors": "16", f"{p}.slices.ci": "1",
            f"{p}.slices.gi": "1",
        })
    return dict(sorted(labels.items()))


def node_resources(n: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) as Kubernetes quantities."""
    it = INSTANCE_TYPES[n["instance_type"]]
    max_pods = 58 if it.vcpu <= 4 else (234 if it.vcpu < 96 else 737)
    mem_ki = it.memory_mib * 1024 * 97 // 100
    reserved_ki = (255 + 11 * max_pods + 100) * 1024
    cap = {"cpu": str(it.vcpu), "ephemeral-storage": "104845292Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
           "memory": f"{mem_ki}Ki", "pods": str(max_pods)}
    alloc = {**cap, "cpu": f"{it.vcpu * 1000 - 80 - int(2.5 * it.vcpu)}m", "ephemeral-storage": "95551679124",
             "memory": f"{mem_ki - reserved_ki}Ki"}
    if n["mig"]:
        gpu = {"nvidia.com/gpu": "0", f"nvidia.com/mig-{MIG_PROFILE}": "7"}
    else:
        gpu = {"nvidia.com/gpu": str(it.gpu_count)}
    return dict(sorted({**cap, **gpu}.items())), dict(sorted({**alloc, **gpu}.items()))


# ----------------------------------------------------------------------------- pods


def wdef(pod: dict[str, Any]) -> WorkloadDef:
    return WORKLOADS[pod["template"]]


def pod_labels(pod: dict[str, Any], wl: dict[str, Any]) -> dict[str, str]:
    wd = wdef(pod)
    if wd.kind == "RayCluster":
        return ray_pod_labels(wd, wl)
    labels = {"app": wl["name"]}
    if wd.env:
        labels["env"] = wd.env
    if wd.kind == "Deployment":
        labels["pod-template-hash"] = wl["rs_hash"]
    elif wd.kind == "StatefulSet":
        labels.update({"apps.kubernetes.io/pod-index": str(pod["replica"]),
                       "controller-revision-hash": f"{wl['name']}-{wl['revision']}",
                       "statefulset.kubernetes.io/pod-name": pod["name"]})
    else:
        labels.update({"volcano.sh/job-name": wl["name"], "volcano.sh/job-namespace": wl["namespace"],
                       "volcano.sh/queue-name": wl["queue"], "volcano.sh/task-index": str(pod["replica"]),
                       "volcano.sh/task-spec": wd.task})
    return dict(sorted(labels.items()))


def ray_pod_labels(wd: WorkloadDef, wl: dict[str, Any]) -> dict[str, str]:
    """The labels KubeRay puts on the pods of a RayCluster (utils/constant.go)."""
    head = wd.ray_group == "headgroup"
    origin = ("RayJob", wd.ray_job) if wd.ray_job else ("RayCluster", wl["name"])
    labels = {"app.kubernetes.io/created-by": "kuberay-operator", "app.kubernetes.io/name": "kuberay",
              "ray.io/cluster": wl["name"], "ray.io/group": wd.ray_group, "ray.io/identifier":
              f"{wl['name']}-{'head' if head else 'worker'}", "ray.io/is-ray-node": "yes",
              "ray.io/node-type": "head" if head else "worker", "ray.io/originated-from-cr-name": origin[1],
              "ray.io/originated-from-crd": origin[0]}
    return dict(sorted(labels.items()))


def pod_annotations(pod: dict[str, Any], wl: dict[str, Any]) -> dict[str, str]:
    wd = wdef(pod)
    if wd.kind == "RayCluster":  # not scheduled by Volcano: no PodGroup, no queue
        return {"ray.io/ft-enabled": "false"}
    ann = {"scheduling.k8s.io/group-name": wl["podgroup"]}
    if wd.kind == "VolcanoJob":
        ann.update({"volcano.sh/job-name": wl["name"], "volcano.sh/job-version": "0",
                    "volcano.sh/queue-name": wl["queue"], "volcano.sh/task-index": str(pod["replica"]),
                    "volcano.sh/task-spec": wd.task, "volcano.sh/template-uid": f"{wl['name']}-{wd.task}"})
    else:
        ann["scheduling.volcano.sh/queue-name"] = wl["queue"]
    ann.update(wd.annotations)
    return dict(sorted(ann.items()))


def pod_resources(wd: WorkloadDef) -> tuple[dict[str, str], dict[str, str]]:
    """(requests, limits) of the workload's single container."""
    gpu = {wd.resource: str(wd.gpus_per_pod)}
    return ({"cpu": wd.cpu, "memory": wd.memory, **gpu}, {"memory": wd.memory, **gpu})


def pod_owner(pod: dict[str, Any], wl: dict[str, Any]) -> dict[str, Any]:
    wd = wdef(pod)
    api = {"Deployment": "apps/v1", "StatefulSet": "apps/v1", "VolcanoJob": "batch.volcano.sh/v1alpha1",
           "RayCluster": "ray.io/v1"}
    return {"apiVersion": api[wd.kind], "kind": wl["owner_kind"], "name": wl["owner_name"],
            "uid": wl["owner_uid"], "controller": True, "blockOwnerDeletion": True}


def priority(wd: WorkloadDef) -> int:
    return {"production-high": 1000000, "dev-low": 100}.get(wd.priority_class, 0)

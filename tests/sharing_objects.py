"""The real published objects of GPU sharing and Kueue (tests/fixtures/real/k8s, cited in
tests/fixtures/real/SOURCES.md), and what a cluster adds to them once they run: the pods a
Deployment's ReplicaSet creates from its template, with the node HAMi's scheduler chose and the
device it wrote into ``hami.io/vgpu-devices-allocated`` (HAMi docs/develop/protocol.md), and the
Workload Kueue's pod integration keeps for each (Kueue site/content/en/docs/concepts/workload.md,
docs/tasks/run/deployment.md: one Workload per pod of a Deployment)."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

REAL = Path(__file__).parent / "fixtures" / "real" / "k8s"
T0 = datetime(2026, 11, 1)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((REAL / name).read_text(encoding="utf-8")) if d]


def of_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o.get("kind") == kind]


def protocol_lines() -> dict[str, str]:
    """HAMi's protocol.md annotations: the node register and the scheduler's decision."""
    out = {}
    for line in (REAL / "hami-protocol-annotations.txt").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition(": ")
        out[key] = value
    return out


def uid(*parts: str) -> str:
    h = hashlib.sha256("/".join(parts).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def hami_node(name: str = "node67-4v100", **labels: str) -> dict[str, Any]:
    """HAMi protocol.md's node: two V100 registered (split count 10 each), so the device plugin
    advertises 20 nvidia.com/gpu."""
    register = protocol_lines()["hami.io/node-nvidia-register"]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": uid("node", name), "creationTimestamp": iso(T0 - timedelta(days=30)),
                         "labels": {"gpu": "on", **labels},
                         "annotations": {"hami.io/node-nvidia-register": register,
                                         "hami.io/node-handshake": "Reported 2026-11-01 00:00:00 +0000 UTC"}},
            "status": {"capacity": {"cpu": "64", "memory": "263573504Ki", "nvidia.com/gpu": "20"}}}


def running_pod(name: str, namespace: str, spec: dict[str, Any], node: str, *, labels: dict[str, str] | None = None,
                annotations: dict[str, str] | None = None, owner: dict[str, Any] | None = None,
                start: datetime = T0) -> dict[str, Any]:
    """A pod as the API shows it once scheduled and running."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid("pod", namespace, name),
                            "creationTimestamp": iso(start), "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    spec = {**copy.deepcopy(spec), "nodeName": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running", "startTime": iso(start),
                       "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(start)}],
                       "containerStatuses": [{"name": c["name"], "state": {"running": {"startedAt": iso(start)}}}
                                             for c in spec.get("containers", [])]}}


def deployment_pods(deploy: dict[str, Any], node: str, devices: list[str]) -> list[dict[str, Any]]:
    """The Deployment's replicas, each on ``node`` with the HAMi device of ``devices`` (in turn)."""
    tmpl = deploy["spec"]["template"]
    rs_hash = "6d4f9c7b8d"
    ns = deploy["metadata"]["namespace"]
    rs = f"{deploy['metadata']['name']}-{rs_hash}"
    labels = {**tmpl["metadata"].get("labels", {}), "pod-template-hash": rs_hash,
              # Kueue's deployment integration propagates the queue label to the pods it manages
              **{k: v for k, v in deploy["metadata"].get("labels", {}).items() if k.startswith("kueue.x-k8s.io/")},
              "kueue.x-k8s.io/managed": "true"}
    out = []
    for i in range(int(deploy["spec"].get("replicas", 1))):
        name = f"{rs}-{'bcdfg'[i]}x2k{i}"
        ctr = tmpl["spec"]["containers"][0]["resources"]["limits"]
        alloc = f"{devices[i % len(devices)]},NVIDIA,{ctr['nvidia.com/gpumem']},{ctr['nvidia.com/gpucores']}:;"
        out.append(running_pod(name, ns, {**tmpl["spec"], "schedulerName": "hami-scheduler"}, node, labels=labels,
                               annotations={"hami.io/vgpu-devices-allocated": alloc, "hami.io/vgpu-node": node,
                                            "hami.io/bind-phase": "success"},
                               owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                                      "uid": uid("rs", ns, rs), "controller": True}))
    return out


def pod_workload(pod: dict[str, Any], cluster_queue: str, flavor: str, *, admitted: bool = True,
                 api_version: str = "kueue.x-k8s.io/v1beta1") -> dict[str, Any]:
    """The Workload of a plain pod (Kueue's pod integration), admitted to ``cluster_queue``."""
    meta = pod["metadata"]
    name = f"pod-{meta['name']}-{meta['uid'][:5]}"
    limits = pod["spec"]["containers"][0]["resources"].get("limits", {})
    spec = {"containers": [{k: v for k, v in c.items() if k in ("name", "image", "resources")}
                           for c in pod["spec"]["containers"]]}
    wl: dict[str, Any] = {
        "apiVersion": api_version, "kind": "Workload",
        "metadata": {"name": name, "namespace": meta["namespace"], "uid": uid("wl", name),
                     "creationTimestamp": meta["creationTimestamp"],
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
                                          "controller": True}]},
        "spec": {"queueName": meta["labels"].get("kueue.x-k8s.io/queue-name"),
                 "podSets": [{"name": "main", "count": 1, "template": {"spec": spec}}]},
        "status": {"conditions": []},
    }
    if admitted:
        wl["status"]["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": [{
            "name": "main", "count": 1, "flavors": {r: flavor for r in limits},
            "resourceUsage": {r: str(v) for r, v in limits.items()}}]}
        wl["status"]["conditions"] = [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": meta["creationTimestamp"]}
            for t in ("QuotaReserved", "Admitted")]
    return wl


def kueue_hami_cluster(devices: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Kueue's HAMi example (ResourceFlavor, ClusterQueue hami-queue, LocalQueue, Deployment of 3)
    running on HAMi protocol.md's node: objects by dump stem."""
    objs = docs("kueue-hami.yaml")
    deploy = of_kind(objs, "Deployment")[0]
    node = hami_node()
    register = protocol_lines()["hami.io/node-nvidia-register"]
    first = register.split(",", 1)[0]
    pods = deployment_pods(deploy, node["metadata"]["name"], devices or [first])
    return {"nodes": [node], "pods": pods,
            "resourceflavors": of_kind(objs, "ResourceFlavor"), "clusterqueues": of_kind(objs, "ClusterQueue"),
            "localqueues": of_kind(objs, "LocalQueue"),
            "workloads": [pod_workload(p, "hami-queue", "hami-flavor") for p in pods]}


def write_dump(folder: Path, objs: dict[str, list[dict[str, Any]]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for stem, items in objs.items():
        doc = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
        (folder / f"{stem}.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return folder


def v100_catalog(folder: Path, usd_per_gpu_hour: float = 2.0) -> Path:
    """An on-prem catalog: an amortised price per V100 and per A100-40GB (instance type empty)."""
    path = folder / "onprem.csv"
    path.write_text("instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour\n"
                    f",V100,1,{usd_per_gpu_hour},\n,A100-40GB,1,{usd_per_gpu_hour},\n", encoding="utf-8")
    return path

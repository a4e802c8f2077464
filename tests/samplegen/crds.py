"""Volcano (Job, PodGroup, Queue) and Karpenter (NodePool) objects of the end-of-window snapshot."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from . import k8s
from .spec import INSTANCE_TYPES, NODE_POOLS, QUEUES, WORKLOADS, QueueDef, cell_suffix

if TYPE_CHECKING:
    from .kubectl import Snapshot

_KEYS = ("cpu", "memory")


def _meta(s: Snapshot, name: str, created: int, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"creationTimestamp": k8s.iso(created), "generation": 1, "name": name,
                         "resourceVersion": s.rv(), "uid": extra.pop("uid", None) or s.uid(name, created)}
    if namespace:
        m["namespace"] = namespace
    m.update(extra)
    return m


def _fmt_qty(v: float, unit: str) -> str:
    if unit == "memory":
        return f"{int(v) // 2**30}Gi" if v % 2**30 == 0 else f"{int(v) // 2**20}Mi"
    return str(int(v)) if v == int(v) else f"{int(round(v * 1000))}m"


def _requests(pods: list[dict[str, Any]]) -> dict[str, str]:
    total: Counter[str] = Counter()
    for p in pods:
        req, _ = k8s.pod_resources(k8s.wdef(p))
        for r, q in req.items():
            total[r] += k8s.quantity(q)
    return {r: _fmt_qty(v, r) for r, v in sorted(total.items())}


def _job_pods(s: Snapshot) -> dict[int, list[dict[str, Any]]]:
    by: dict[int, list[dict[str, Any]]] = {}
    for p in s.pods:
        by.setdefault(p["workload"], []).append(p)
    return by


def _owner_ref(kind: str, api: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api, "blockOwnerDeletion": True, "controller": True, "kind": kind, "name": name,
            "uid": uid}


def vcjob_objects(s: Snapshot) -> list[dict[str, Any]]:
    from .kubectl import TOLERATIONS, container_spec

    out = []
    by = _job_pods(s)
    for i, wl in enumerate(s.workloads):
        wd = WORKLOADS[wl["template"]]
        pods = by.get(i, [])
        if wd.kind != "VolcanoJob" or (wd.lifecycle == "nightly" and not pods):
            continue
        n = len(wd.pods)
        created = min(p["created_s"] for p in pods) - 1 if wd.lifecycle == "nightly" else wl["created_s"]
        if wd.lifecycle == "restart" or wd.job_policy == "RestartTask":
            policies = [{"action": "RestartTask", "event": "PodEvicted"}, {"action": "RestartTask", "event": "PodFailed"}]
            min_avail, max_retry = (1 if wd.lifecycle == "restart" else n), 10
        else:
            policies = [{"action": "RestartJob", "event": "PodEvicted"}]
            min_avail, max_retry = n, 3
        template_spec: dict[str, Any] = {"containers": [container_spec(wd)], "restartPolicy": "Never",
                                         "tolerations": TOLERATIONS[:1]}
        spec: dict[str, Any] = {
            "maxRetry": max_retry, "minAvailable": min_avail, "plugins": {"env": [], "svc": []},
            "policies": policies, "queue": wl["queue"], "schedulerName": "volcano",
            "tasks": [{"maxRetry": max_retry, "minAvailable": min_avail, "name": wd.task, "replicas": n,
                       "template": {"metadata": {"labels": {"app": wl["name"]}}, "spec": template_spec}}],
        }
        if wd.lifecycle == "nightly":
            spec["ttlSecondsAfterFinished"] = 600
        done = [p for p in pods if s.completed(p)]
        running = len(pods) - len(done)
        failed = sum(p["phase"] == "Failed" for p in done)
        succeeded = len(done) - failed
        started = min(p["started_s"] for p in pods) if pods else created
        phase = "Running" if running else ("Completed" if succeeded >= n else "Restarting")
        counts = {k: v for k, v in (("Running", running), ("Succeeded", succeeded), ("Failed", failed)) if v}
        status = {
            "conditions": [{"lastTransitionTime": k8s.iso(created + 1), "status": "Pending"},
                           {"lastTransitionTime": k8s.iso(started), "status": "Running"}],
            "controlledResources": {"plugin-env": "env", "plugin-svc": "svc"},
            "failed": failed, "minAvailable": min_avail, "pending": 0, "retryCount": 0, "running": running,
            "state": {"lastTransitionTime": k8s.iso(started), "phase": phase}, "succeeded": succeeded,
            "taskStatusCount": {wd.task: {"phase": counts}}, "version": 1,
        }
        meta = _meta(s, wl["name"], created, wl["namespace"], uid=wl["uid"],
                     labels={"app": wl["name"]}, finalizers=["volcano.sh/job-finalizer"])
        if wd.annotations:
            meta["annotations"] = dict(sorted(wd.annotations.items()))
        out.append({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta,
                    "spec": spec, "status": status})
    return out


def hypernode_objects(s: Snapshot) -> list[dict[str, Any]]:
    """Volcano HyperNodes (topology.volcano.sh/v1alpha1) of the racks NodeDef.rack names: tier 1
    per rack holding its nodes by exact name, tier 2 (the spine) holding the racks."""
    from .spec import SPINE

    racks: dict[str, list[str]] = {}
    spines: dict[str, list[str]] = {}
    for n in s.nodes:
        if n["rack"]:
            rack = n["rack"] + cell_suffix(n["cell"])
            racks.setdefault(rack, []).append(n["name"])
            members = spines.setdefault(SPINE + cell_suffix(n["cell"]), [])
            if rack not in members:
                members.append(rack)
    if not racks:
        return []
    created = s.fleet.spec.start_s - 30 * 86400
    out = []
    for name, nodes in sorted(racks.items()):
        out.append({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
                    "metadata": _meta(s, name, created), "spec": {
                        "members": [{"selector": {"exactMatch": {"name": m}}, "type": "Node"} for m in sorted(nodes)],
                        "tier": 1, "tierName": "leaf"},
                    "status": {"nodeCount": len(nodes)}})
    for name, members in sorted(spines.items()):
        out.append({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
                    "metadata": _meta(s, name, created), "spec": {
                        "members": [{"selector": {"exactMatch": {"name": m}}, "type": "HyperNode"} for m in sorted(members)],
                        "tier": 2, "tierName": "spine"},
                    "status": {"nodeCount": sum(len(racks[m]) for m in members)}})
    return out


def podgroup_objects(s: Snapshot) -> list[dict[str, Any]]:
    out = []
    by = _job_pods(s)
    for i, wl in enumerate(s.workloads):
        wd = WORKLOADS[wl["template"]]
        pods = by.get(i, [])
        if not pods or wd.kind == "RayCluster":  # KubeRay clusters here do not use Volcano
            continue
        created = min(p["created_s"] for p in pods) - 1 if wd.lifecycle == "nightly" else wl["created_s"] + 1
        running = [p for p in pods if not s.completed(p)]
        spec: dict[str, Any] = {"queue": wl["queue"]}
        if wd.kind == "VolcanoJob":
            n = len(wd.pods) if wd.lifecycle != "restart" else 1
            spec.update(minMember=n, minResources=_requests(pods[:n]), minTaskMember={wd.task: n})
            owner = _owner_ref("Job", "batch.volcano.sh/v1alpha1", wl["name"], wl["uid"])
        else:
            spec.update(minMember=1, minResources=_requests(pods[:1]))
            owner = _owner_ref(wl["owner_kind"], "apps/v1", wl["owner_name"], wl["owner_uid"])
        if wd.priority_class:
            spec["priorityClassName"] = wd.priority_class
        done = [p for p in pods if s.completed(p)]
        status: dict[str, Any] = {
            "conditions": [{"lastTransitionTime": k8s.iso(min(p["scheduled_s"] for p in pods)),
                            "reason": "tasks in gang are ready to be scheduled", "status": "True",
                            "transitionID": s.uid("pg", wl["uid"], created), "type": "Scheduled"}],
            "phase": "Running" if running else "Completed", "running": len(running),
        }
        if done:
            status["succeeded"] = sum(p["phase"] == "Succeeded" for p in done)
            status["failed"] = sum(p["phase"] == "Failed" for p in done)
        meta = _meta(s, wl["podgroup"], created, wl["namespace"], ownerReferences=[owner])
        out.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": meta,
                    "spec": spec, "status": status})
    return out


def _scaled(q: QueueDef, attr: str, cells: int) -> dict[str, str]:
    return {r: str(v * cells) for r, v in getattr(q, attr).items()}


def queue_objects(s: Snapshot) -> list[dict[str, Any]]:
    cells = s.fleet.spec.cell_count
    created = s.fleet.spec.start_s - 90 * 86400
    by_queue: dict[str, list[dict[str, Any]]] = {}
    groups: dict[str, set[int]] = {}
    for p in s.pods:
        q = s.workloads[p["workload"]]["queue"]
        if not s.completed(p):
            by_queue.setdefault(q, []).append(p)
            groups.setdefault(q, set()).add(p["workload"])
    out = []
    defs = [QueueDef("default", 1, {}, {}), *QUEUES]
    for q in defs:
        spec: dict[str, Any] = {"reclaimable": True, "weight": q.weight}
        if q.deserved:
            spec["deserved"] = _scaled(q, "deserved", cells)
        if q.capability:
            spec["capability"] = _scaled(q, "capability", cells)
        status = {"allocated": _requests(by_queue.get(q.name, [])), "reservation": {},
                  "running": len(groups.get(q.name, ())), "state": "Open"}
        out.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                    "metadata": _meta(s, q.name, created + len(out) * 60), "spec": spec, "status": status})
    return out


def nodepool_objects(s: Snapshot) -> list[dict[str, Any]]:
    out = []
    created = s.fleet.spec.start_s - 60 * 86400
    for name, (itype, cap_type, zone, policy, after) in NODE_POOLS.items():
        it = INSTANCE_TYPES[itype]
        nodes = [n for n in s.nodes if n["pool"] == name]
        labels = {"nvidia.com/gpu.deploy.operands": "true"}
        if name == "gpu-h100-mig":
            labels.update({"nvidia.com/mig.config": "all-1g.10gb"})
        limits = {"nvidia.com/gpu": str(max(8, it.gpu_count * len(nodes) * 2))} if name != "gpu-h100-mig" else {
            "cpu": str(it.vcpu * max(2, len(nodes) * 2))}
        res: Counter[str] = Counter()
        for n in nodes:
            cap, _ = k8s.node_resources(n)
            for r, q in cap.items():
                if r in ("cpu", "memory", "pods", "ephemeral-storage") or r.startswith("nvidia.com/"):
                    res[r] += k8s.quantity(q)
        resources = {r: (str(int(v)) if r not in ("memory", "ephemeral-storage") else f"{int(v) // 1024}Ki")
                     for r, v in sorted(res.items())}
        resources["nodes"] = str(len(nodes))
        ts = k8s.iso(created + 30)
        conds = [{"lastTransitionTime": ts, "message": "", "observedGeneration": 1, "reason": t, "status": "True",
                  "type": t} for t in ("NodeClassReady", "NodeRegistrationHealthy", "Ready", "ValidationSucceeded")]
        spec = {
            "disruption": {"budgets": [{"nodes": "10%"}], "consolidateAfter": after, "consolidationPolicy": policy},
            "limits": limits,
            "template": {"metadata": {"labels": labels}, "spec": {
                "expireAfter": "720h",
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [cap_type]},
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [itype]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                ],
                "taints": [k8s.GPU_TAINT],
            }},
            "weight": 10,
        }
        meta = _meta(s, name, created, annotations={"karpenter.sh/nodepool-hash-version": "v3"})
        out.append({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": meta, "spec": spec,
                    "status": {"conditions": conds, "nodeClassObservedGeneration": 1, "nodes": len(nodes),
                               "resources": resources}})
    return out

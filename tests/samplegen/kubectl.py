"""Write the fleet's end-of-window state as `kubectl get ... -o json` dumps.

Files: nodes.json, pods.json, events.json (the last hour, as the API server keeps them),
queues.json, podgroups.json, vcjobs.json, nodepools.json, pdbs.json, rayclusters.json, rayjobs.json,
scaledobjects.json, hypernodes.json.  Keys are sorted and
indented by four spaces, as kubectl prints unstructured objects.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from . import k8s
from .fleet import Fleet
from .spec import WORKLOADS

_ALNUM = "bcdfghjklmnpqrstvwxz2456789"


class Snapshot:
    """The objects alive at the end of the window, with a shared resourceVersion counter."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.t = fleet.spec.end_s
        self._rv = 48_211_000
        self.workloads = fleet.workloads.to_dicts()
        self.nodes = fleet.nodes.to_dicts()
        self.pods = [p for p in fleet.pods.to_dicts()
                     if p["created_s"] <= self.t and (p["deleted_s"] is None or p["deleted_s"] > self.t)]

    def rv(self) -> str:
        self._rv += 1 + self._rv % 7
        return str(self._rv)

    @staticmethod
    def uid(*parts: object) -> str:
        h = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"

    def completed(self, p: dict[str, Any]) -> bool:
        return p["completed_s"] is not None and p["completed_s"] <= self.t


def _short(uid: str) -> str:
    return "".join(_ALNUM[int(c, 16)] for c in uid.replace("-", "")[-5:])


def _cond(type_: str, status: str, ts: int, **extra: str) -> dict[str, Any]:
    return {"lastProbeTime": None, "lastTransitionTime": k8s.iso(ts), "status": status, "type": type_, **extra}


def _digest(image: str) -> str:
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


TOLERATIONS = [
    {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
    {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
    {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
]


def container_spec(wd: Any, mount: str | None = None) -> dict[str, Any]:
    req, lim = k8s.pod_resources(wd)
    c: dict[str, Any] = {
        "image": wd.image, "imagePullPolicy": "IfNotPresent", "name": wd.container_name,
        "resources": {"limits": lim, "requests": req},
        **({"args": list(wd.serving.args)} if getattr(wd, "serving", None) is not None and wd.serving.args else {}),
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
    }
    if mount:
        c["volumeMounts"] = [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": mount,
                              "readOnly": True}]
    return c


def pod_object(s: Snapshot, p: dict[str, Any]) -> dict[str, Any]:
    wl = s.workloads[p["workload"]]
    wd = k8s.wdef(p)
    node = s.nodes[p["node_row"]]
    vol = f"kube-api-access-{_short(p['uid'])}"
    meta: dict[str, Any] = {
        "annotations": k8s.pod_annotations(p, wl), "creationTimestamp": k8s.iso(p["created_s"]),
        "labels": k8s.pod_labels(p, wl), "name": p["name"], "namespace": p["namespace"],
        "ownerReferences": [k8s.pod_owner(p, wl)], "resourceVersion": s.rv(), "uid": p["uid"],
    }
    if wd.kind == "Deployment":
        meta["generateName"] = f"{wl['owner_name']}-"
    elif wd.kind == "RayCluster":
        meta["generateName"] = p["name"][:-5]
    spec: dict[str, Any] = {
        "containers": [container_spec(wd, vol)], "dnsPolicy": "ClusterFirst", "enableServiceLinks": True,
        "nodeName": p["node"], "preemptionPolicy": "PreemptLowerPriority", "priority": k8s.priority(wd),
        "restartPolicy": "Always" if wd.kind != "VolcanoJob" else "Never",
        "schedulerName": "default-scheduler" if wd.kind == "RayCluster" else "volcano",
        "securityContext": {}, "serviceAccount": "default", "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30, "tolerations": TOLERATIONS,
        "volumes": [{"name": vol, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
            {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                        "path": "namespace"}]}}]}}],
    }
    if wd.priority_class:
        spec["priorityClassName"] = wd.priority_class
    if wd.kind == "StatefulSet":
        spec.update(hostname=p["name"], subdomain=wl["name"])
    started, done = p["started_s"], s.completed(p)
    cstatus: dict[str, Any] = {
        "containerID": f"containerd://{p['container_id']}", "image": wd.image,
        "imageID": f"{wd.image.split(':')[0]}@{_digest(wd.image)}", "lastState": {}, "name": p["container"],
        "ready": not done, "restartCount": 0, "started": not done,
        "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": vol,
                          "readOnly": True, "recursiveReadOnly": "Disabled"}],
    }
    ready_at = started + 3
    if done:
        failed = p["phase"] == "Failed"
        cstatus["state"] = {"terminated": {
            "containerID": f"containerd://{p['container_id']}", "exitCode": 75 if failed else 0,
            "finishedAt": k8s.iso(p["completed_s"]), "reason": "Error" if failed else "Completed",
            "startedAt": k8s.iso(started + 1)}}
        why = "PodFailed" if failed else "PodCompleted"
        ready = [_cond("Ready", "False", p["completed_s"], reason=why),
                 _cond("ContainersReady", "False", p["completed_s"], reason=why)]
    else:
        cstatus["state"] = {"running": {"startedAt": k8s.iso(started + 1)}}
        ready = [_cond("Ready", "True", ready_at), _cond("ContainersReady", "True", ready_at)]
    status = {
        "conditions": [_cond("PodReadyToStartContainers", "False" if done else "True", started + 1),
                       _cond("Initialized", "True", p["scheduled_s"]), *ready,
                       _cond("PodScheduled", "True", p["scheduled_s"])],
        "containerStatuses": [cstatus], "hostIP": node["internal_ip"], "hostIPs": [{"ip": node["internal_ip"]}],
        "phase": p["phase"] if done else "Running", "podIP": p["pod_ip"], "podIPs": [{"ip": p["pod_ip"]}],
        "qosClass": "Burstable", "startTime": k8s.iso(started),
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def node_object(s: Snapshot, n: dict[str, Any]) -> dict[str, Any]:
    cap, alloc = k8s.node_resources(n)
    dns = f"ip-{n['internal_ip'].replace('.', '-')}.ec2.internal"
    ann = {"alpha.kubernetes.io/provided-node-ip": n["internal_ip"], "node.alpha.kubernetes.io/ttl": "0",
           "nvidia.com/gpu-driver-upgrade-enabled": "true",
           "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
    meta: dict[str, Any] = {"annotations": ann, "creationTimestamp": k8s.iso(n["created_s"]),
                            "labels": k8s.node_labels(n), "name": n["name"], "resourceVersion": s.rv(),
                            "uid": n["uid"]}
    if n["pool_kind"] == "karpenter":
        ann.update({"compatibility.karpenter.k8s.aws/user-data-hash": "9184427354711290371",
                    "karpenter.k8s.aws/ec2nodeclass-hash": "15616957348189460630",
                    "karpenter.k8s.aws/ec2nodeclass-hash-version": "v4",
                    "karpenter.sh/nodepool-hash": str(int(hashlib.sha256(n["pool"].encode()).hexdigest()[:15], 16)),
                    "karpenter.sh/nodepool-hash-version": "v3"})
        meta["finalizers"] = ["karpenter.sh/termination"]
        meta["ownerReferences"] = [{"apiVersion": "karpenter.sh/v1", "blockOwnerDeletion": True, "kind": "NodeClaim",
                                    "name": n["nodeclaim"], "uid": s.uid("nodeclaim", n["nodeclaim"])}]
    t = n["created_s"] + 40
    conds = [{"lastHeartbeatTime": k8s.iso(s.t - 17), "lastTransitionTime": k8s.iso(t), "message": m,
              "reason": r, "status": st, "type": ty} for ty, st, r, m in (
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"))]
    suid = s.uid("boot", n["uid"])
    return {
        "apiVersion": "v1", "kind": "Node", "metadata": meta,
        "spec": {"providerID": f"aws:///{n['zone']}/{n['instance_id']}", "taints": [k8s.GPU_TAINT]},
        "status": {
            "addresses": [{"address": n["internal_ip"], "type": "InternalIP"},
                          {"address": dns, "type": "InternalDNS"}, {"address": dns, "type": "Hostname"}],
            "allocatable": alloc, "capacity": cap, "conditions": conds,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"architecture": "amd64", "bootID": suid, "containerRuntimeVersion": "containerd://1.7.22",
                         "kernelVersion": "6.1.112-124.190.amzn2023.x86_64", "kubeProxyVersion": "",
                         "kubeletVersion": "v1.31.2-eks-7f9249a", "machineID": suid.replace("-", ""),
                         "operatingSystem": "linux", "osImage": "Amazon Linux 2023.6.20241031",
                         "systemUUID": "ec2" + n["uid"].replace("-", "")[3:]},
        },
    }


def _event(s: Snapshot, obj: dict[str, Any], ts: int, reason: str, message: str, component: str,
           host: str = "", type_: str = "Normal") -> dict[str, Any]:
    meta = obj["metadata"]
    # the message too: a Volcano job restarting two failed pods in one second gets two events, and the
    # API server names every event uniquely
    key = f"{meta['uid']}/{ts}/{reason}/{message}".encode()
    name = f"{meta['name']}.{hashlib.sha256(key).hexdigest()[:16]}"
    ev: dict[str, Any] = {
        "apiVersion": "v1", "count": 1, "eventTime": None, "firstTimestamp": k8s.iso(ts),
        "involvedObject": {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
                           "namespace": meta["namespace"], "resourceVersion": meta["resourceVersion"],
                           "uid": meta["uid"]},
        "kind": "Event", "lastTimestamp": k8s.iso(ts), "message": message,
        "metadata": {"creationTimestamp": k8s.iso(ts), "name": name, "namespace": meta["namespace"],
                     "resourceVersion": s.rv(), "uid": s.uid("event", name)},
        "reason": reason, "reportingComponent": component, "reportingInstance": host,
        "source": {"component": component, **({"host": host} if host else {})}, "type": type_,
    }
    if component == "kubelet":
        ev["involvedObject"]["fieldPath"] = f"spec.containers{{{obj['spec']['containers'][0]['name']}}}"
    return ev


def event_objects(s: Snapshot, pods: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events of the last hour (the API server's default event TTL)."""
    since = s.t - 3600
    by_uid = {p["uid"]: p for p in s.fleet.pods.to_dicts() if since <= (p["completed_s"] or 0) < s.t}
    out = []
    for obj in pods:
        meta, spec = obj["metadata"], obj["spec"]
        created = int(datetime_s(meta["creationTimestamp"]))
        if created < since:
            continue
        c = spec["containers"][0]
        start = int(datetime_s(obj["status"]["startTime"]))
        out.append(_event(s, obj, created, "Scheduled",
                          f"Successfully assigned {meta['namespace']}/{meta['name']} to {spec['nodeName']}", "volcano"))
        out.append(_event(s, obj, start, "Pulled", f'Container image "{c["image"]}" already present on machine',
                          "kubelet", spec["nodeName"]))
        out.append(_event(s, obj, start, "Created", f"Created container {c['name']}", "kubelet", spec["nodeName"]))
        out.append(_event(s, obj, start + 1, "Started", f"Started container {c['name']}", "kubelet",
                          spec["nodeName"]))
    jobs_by_name = {(j["metadata"]["namespace"], j["metadata"]["name"]): j for j in jobs}
    wls = s.workloads
    for p in by_uid.values():
        job = jobs_by_name.get((p["namespace"], wls[p["workload"]]["name"]))
        if job is not None and p["phase"] == "Failed":
            out.append(_event(s, job, p["completed_s"] + 1, "ExecuteAction",
                              f"Start to execute action RestartTask for pod {p['name']}", "vc-controller-manager"))
    out.sort(key=lambda e: (e["lastTimestamp"], e["metadata"]["name"]))
    return out


def datetime_s(iso: str) -> float:
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def pdb_objects(s: Snapshot) -> list[dict[str, Any]]:
    out = []
    for i, wl in enumerate(s.workloads):
        wd = WORKLOADS[wl["template"]]
        if not wd.pdb:
            continue
        pods = [p for p in s.pods if p["workload"] == i and not s.completed(p)]
        healthy = len(pods)
        expected = len(wd.pods)
        desired = wd.pdb.get("minAvailable", expected - wd.pdb.get("maxUnavailable", 0))
        allowed = max(0, healthy - desired)
        ts = wl["created_s"] + 5
        out.append({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"creationTimestamp": k8s.iso(wl["created_s"]), "generation": 1, "name": wl["name"],
                         "namespace": wl["namespace"], "resourceVersion": s.rv(), "uid": s.uid("pdb", wl["uid"])},
            "spec": {**wd.pdb, "selector": {"matchLabels": {"app": wl["name"]}}},
            "status": {"conditions": [{"lastTransitionTime": k8s.iso(ts), "message": "", "observedGeneration": 1,
                                       "reason": "SufficientPods" if allowed else "InsufficientPods",
                                       "status": "True" if allowed else "False", "type": "DisruptionAllowed"}],
                       "currentHealthy": healthy, "desiredHealthy": desired, "disruptionsAllowed": allowed,
                       "expectedPods": expected, "observedGeneration": 1},
        })
    return out

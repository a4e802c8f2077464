"""ray: KubeRay changes as patches of the RayJob, RayCluster or RayService (docs/actions.md).

* ``job_cleanup``: server-side apply of ``spec.shutdownAfterJobFinishes`` and
  ``spec.ttlSecondsAfterFinished`` on the RayJob (KubeRay's own validation wants a TTL only with
  the shutdown); KubeRay then deletes the finished job's cluster once the TTL after
  ``status.endTime`` has passed.
* ``worker_min_replicas``: a JSON patch of the worker group, found by index and guarded by a
  ``test`` of its ``groupName`` (``workerGroupSpecs`` is an atomic list: an apply would take the
  whole list): ``minReplicas``, and ``enableInTreeAutoscaling`` plus
  ``autoscalerOptions.idleTimeoutSeconds`` (the cluster-wide timeout, which both autoscaler
  versions honour; a group's own ``idleTimeoutSeconds`` needs autoscaler v2).
* ``head_gpus``: a JSON patch removing ``nvidia.com/gpu`` from the head's containers (requests
  and limits, each guarded by a ``test`` of the container's name) and setting ``num-gpus: "0"``
  in its ``rayStartParams``.

A RayService's cluster is changed in the RayService (``spec.rayClusterConfig``). A spec the
builder cannot see (not loaded, not fetched) gets a note instead of a blind patch.
"""

from __future__ import annotations

from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.builders.common import fail, readable
from gpuinsight.actions.patching import escape, get, pointer
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds import RAY

# the finding kinds this module builds the actions of
BUILDS = (RAY,)

GPU = "nvidia.com/gpu"
ROOT = {"RayCluster": "/spec", "RayService": "/spec/rayClusterConfig"}


def target_ref(rec: Recommendation) -> Ref:
    t = rec.target or {}
    kind, name, ns = t.get("kind"), t.get("name"), t.get("namespace") or rec.namespace
    if kind not in ("RayCluster", "RayJob", "RayService"):
        raise fail(rec, "target.kind", f"{kind!r} is not RayCluster, RayJob or RayService")
    if not isinstance(name, str) or not name or not ns:
        raise fail(rec, "target", "name and namespace are required")
    return Ref(kind, ns, name)


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    return readable([target_ref(rec)])


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    change = rec.proposed.get("change")
    ref = target_ref(rec)
    if change == "job_cleanup":
        return _job(rec, ref, state)
    if ref.kind not in ROOT:
        raise fail(rec, "target.kind", f"a {change} change is made in a RayCluster or RayService, not a {ref.kind}")
    spec = get(state.get(ref), ROOT[ref.kind]) if state.get(ref) is not None and state.is_known(ref, "/spec") else None
    if not isinstance(spec, dict):
        return [model.note(f"{ref.key}: its spec was not loaded (collect kubernetes, or --context to read it "
                           f"live); {rec.title}", ref.key)]
    if change == "worker_min_replicas":
        return [_workers(rec, ref, spec, state)]
    if change == "head_gpus":
        return [_head(rec, ref, spec, state)]
    raise fail(rec, "proposed.change", f"unknown change {change!r}")


def _job(rec: Recommendation, ref: Ref, state: ClusterState) -> list[dict[str, Any]]:
    ttl = rec.proposed.get("ttl_after_finish_s")
    if not isinstance(ttl, int) or ttl < 0:
        raise fail(rec, "proposed.ttl_after_finish_s", "a non-negative integer is required")
    cfg = ref.skeleton() | {"spec": {"shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": ttl}}
    paths = ["/spec/shutdownAfterJobFinishes", "/spec/ttlSecondsAfterFinished"]
    observed = state.observe(ref, paths)
    cluster = (rec.target or {}).get("ray_cluster")
    return [model.k8s_apply(cfg, "workload", f"{ref.key}: shutdownAfterJobFinishes true, ttlSecondsAfterFinished "
                                             f"{ttl} (KubeRay deletes RayCluster {cluster} {ttl} s after the job's "
                                             "end; the submitter Job and its logs stay)", observed)]


def _workers(rec: Recommendation, ref: Ref, spec: dict[str, Any], state: ClusterState) -> dict[str, Any]:
    t, p = rec.target, rec.proposed
    root = ROOT[ref.kind]
    index, group = t.get("group_index"), t.get("group")
    groups = spec.get("workerGroupSpecs") or []
    if not isinstance(index, int) or not 0 <= index < len(groups) or groups[index].get("groupName") != group:
        found = [i for i, g in enumerate(groups) if isinstance(g, dict) and g.get("groupName") == group]
        if not found:
            raise fail(rec, "target.group", f"worker group {group!r} is not in {ref.key}")
        index = found[0]
    at = f"{root}/workerGroupSpecs/{index}"
    ops: list[dict[str, Any]] = [{"op": "test", "path": f"{at}/groupName", "value": group},
                                 {"op": "add", "path": f"{at}/minReplicas", "value": int(p["min_replicas"])}]
    paths = [f"{at}/minReplicas"]
    if p.get("autoscaling") and not spec.get("enableInTreeAutoscaling"):
        ops.append({"op": "add", "path": f"{root}/enableInTreeAutoscaling", "value": True})
        paths.append(f"{root}/enableInTreeAutoscaling")
    timeout = p.get("idle_timeout_s")
    if timeout is not None:
        options = spec.get("autoscalerOptions")
        if isinstance(options, dict):
            ops.append({"op": "add", "path": f"{root}/autoscalerOptions/idleTimeoutSeconds", "value": int(timeout)})
        else:
            ops.append({"op": "add", "path": f"{root}/autoscalerOptions", "value": {"idleTimeoutSeconds": int(timeout)}})
        paths.append(f"{root}/autoscalerOptions/idleTimeoutSeconds")
    text = f"{ref.key}: worker group {group}: minReplicas -> {p['min_replicas']}"
    if p.get("autoscaling") and not spec.get("enableInTreeAutoscaling"):
        text += ("; in-tree autoscaler on (it runs beside the head: it starts when the head pod is recreated, "
                 "until then the group keeps its replicas)")
    if timeout is not None:
        text += f"; autoscaler idleTimeoutSeconds {timeout}"
    if ref.kind == "RayService":
        text += "; KubeRay rolls the RayService out to a new RayCluster"
    return model.k8s_patch(ref, ops, "workload", text, state.observe(ref, paths))


def _head(rec: Recommendation, ref: Ref, spec: dict[str, Any], state: ClusterState) -> dict[str, Any]:
    root = ROOT[ref.kind] + "/headGroupSpec"
    containers = get(spec, "/headGroupSpec/template/spec/containers") or []
    ops: list[dict[str, Any]] = []
    paths = []
    for i, c in enumerate(containers):
        res = c.get("resources") or {} if isinstance(c, dict) else {}
        held = [k for k in ("requests", "limits") if GPU in (res.get(k) or {})]
        if not held:
            continue
        at = f"{root}/template/spec/containers/{i}"
        ops.append({"op": "test", "path": f"{at}/name", "value": c.get("name")})
        for k in held:
            ops.append({"op": "remove", "path": f"{at}/resources/{k}/{escape(GPU)}"})
            paths.append(f"{at}/resources/{k}/{escape(GPU)}")
    if not ops:
        raise fail(rec, "target", f"the head of {ref.key} asks for no {GPU}")
    params = spec.get("headGroupSpec", {}).get("rayStartParams")
    if isinstance(params, dict):
        ops.append({"op": "add", "path": pointer(*root.strip("/").split("/"), "rayStartParams", "num-gpus"),
                    "value": "0"})
    else:
        ops.append({"op": "add", "path": f"{root}/rayStartParams", "value": {"num-gpus": "0"}})
    paths.append(f"{root}/rayStartParams/num-gpus")
    return model.k8s_patch(ref, ops, "workload", f"{ref.key}: the head asks for no GPU (num-gpus 0); it takes effect "
                                                 "when the head pod is recreated", state.observe(ref, paths))

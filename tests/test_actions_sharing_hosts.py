"""A plan that shares GPUs on 8-GPU nodes, carried out: the findings of a literal fleet built into
actions against a loopback API server holding the same cluster, every object validated against
the real schemas, the mig-parted config against mig-parted's format and the GPU's valid
layouts, the steps in their order (cordon, evict, relabel once the pods are gone, uncordon once
mig-manager reports success, then the workloads), emitted as files, applied (the server plays
mig-manager, and refuses a repartition while a pod runs on a GPU it changes) and rolled back.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinsight.actions import attach_actions, ordered_actions
from gpuinsight.actions.apply import apply_plan, rollback
from gpuinsight.actions.emit import emit
from gpuinsight.actions.kube import Kube
from gpuinsight.actions.model import action_ref, expected_after
from gpuinsight.actions.validate import validate_object
from gpuinsight.migparted import layout_errors, spec_errors
from gpuinsight.plan import Plan
from gpuinsight.rules.engine import evaluate_plan
from tests.crds import REFERENCE
from tests.genai_trace import mig_reference
from tests.k8s_apply_server import MIG_INDEX_ANNOTATION, ApplyKubeAPI, live_state, schemas_for, unschedulable
from tests.rule_fleets import Fleet
from tests.test_pool_planner import full_fleet, mixed_fleet


def fleet_objects(f: Fleet) -> dict[str, list[dict[str, Any]]]:
    """The literal fleet as the API server would hold it: nodes, Deployments (one container asking
    for its GPUs), Volcano Jobs for gangs, their pods on their nodes (the GPU indices DCGM sees
    kept in an annotation the fake mig-manager reads), PodDisruptionBudgets."""
    indices = f.gpu_indices()
    out: dict[str, list[dict[str, Any]]] = {"nodes": [], "deployments": [], "pods": [], "pdbs": [], "vcjobs": [],
                                            "podgroups": [], "statefulsets": []}
    for n in f.nodes:
        out["nodes"].append({"metadata": {"name": n.name, "labels": {
            "karpenter.sh/nodepool": n.pool, "kubernetes.io/hostname": n.name, "nvidia.com/mig.config": "all-disabled",
            "nvidia.com/mig.strategy": "mixed", **n.labels}}, "spec": {},
            "status": {"capacity": {"nvidia.com/gpu": str(n.gpus)}}})
    by_wl: dict[tuple[str, str], list[Any]] = {}
    for p in f.pods:
        by_wl.setdefault((p.namespace, p.workload), []).append(p)
    for (ns, wl), pods in by_wl.items():
        kind, g = pods[0].kind, int(pods[0].gpus)
        container = {"name": "main", "image": f"{wl}:1", "resources": {
            "limits": {"nvidia.com/gpu": str(g), "cpu": "2"}, "requests": {"nvidia.com/gpu": str(g), "cpu": "1"}}}
        template = {"metadata": {"labels": {"app": wl, **pods[0].labels}}, "spec": {"containers": [container]}}
        if kind == "VolcanoJob":
            out["vcjobs"].append({"metadata": {"name": wl, "namespace": ns}, "spec": {
                "minAvailable": len(pods), "schedulerName": "volcano",
                "tasks": [{"name": "worker", "replicas": len(pods), "template": template}]}})
            out["podgroups"].append({"metadata": {"name": wl, "namespace": ns},
                                     "spec": {"minMember": pods[0].gang_min or len(pods)}})
        else:
            res = "statefulsets" if kind == "StatefulSet" else "deployments"
            spec = {"replicas": len(pods), "selector": {"matchLabels": {"app": wl}}, "template": template}
            if kind == "StatefulSet":
                spec["serviceName"] = wl
            out[res].append({"metadata": {"name": wl, "namespace": ns}, "spec": spec})
        for p in pods:
            meta: dict[str, Any] = {"name": p.name, "namespace": ns, "labels": {"app": wl, **p.labels},
                                    "annotations": {MIG_INDEX_ANNOTATION: ",".join(map(str, indices[(ns, p.name)] or []))}}
            if kind == "VolcanoJob":
                meta["annotations"]["scheduling.k8s.io/group-name"] = wl
                meta["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": wl,
                                            "controller": True, "uid": f"uid-{wl}"}]
            elif kind == "Deployment":
                meta["labels"]["pod-template-hash"] = "5c4d"
                meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{wl}-5c4d",
                                            "controller": True, "uid": f"uid-{wl}"}]
            else:
                meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": wl, "controller": True,
                                            "uid": f"uid-{wl}"}]
            out["pods"].append({"metadata": meta, "spec": {"nodeName": p.node, "containers": [container]},
                                "status": {"phase": "Running"}})
    for b in f.pdbs:
        out["pdbs"].append({"metadata": {"name": b["name"], "namespace": b["namespace"]}, "spec": {
            "selector": json.loads(b["selector"]), **({"minAvailable": int(b["min_available"])}
                                                      if b.get("min_available") else {})}})
    return out


def state_of(f: Fleet, api: ApplyKubeAPI) -> Any:
    state = live_state(api)
    state.cluster = f.cluster  # the fleet's findings are of its cluster
    return state


def served(f: Fleet) -> ApplyKubeAPI:
    api = ApplyKubeAPI(crd_dir=REFERENCE)
    for name, objs in fleet_objects(f).items():
        if objs:
            api.add(name, *objs)
    return api


def plan_of(f: Fleet) -> tuple[Fleet, ApplyKubeAPI, Plan]:
    recs, _ = evaluate_plan(f.frames())
    api = served(f)
    plan = Plan("plan-sharing-hosts", datetime.now(UTC), None, (None, None),
                [r for r in recs if r.rule in ("mig", "mps", "timeslice", "idle")])
    attach_actions(plan, state_of(f, api), strict=True)
    return f, api, plan


@pytest.fixture(params=["mixed", "full"])
def planned(request: pytest.FixtureRequest) -> tuple[Fleet, ApplyKubeAPI, Plan]:
    """The lone production service's fleet (a free GPU is partitioned), and the full node's (a
    busy replica is evicted first, the relabel waits for it)."""
    return plan_of(mixed_fleet() if request.param == "mixed" else full_fleet())


def test_the_steps_come_in_order_and_every_object_is_valid(planned: tuple[Fleet, ApplyKubeAPI, Plan]) -> None:
    f, api, plan = planned
    actions = ordered_actions(plan)
    kinds = [(a["phase"], a["type"]) for a in actions if a["type"] != "note"]
    phases = [p for p, _ in kinds]
    assert phases == sorted(phases, key=lambda p: ["config", "host-cordon", "host-drain", "label", "uncordon",
                                                   "workload"].index(p))
    assert ("config", "k8s-apply") in kinds and ("host-cordon", "cordon") in kinds
    assert ("label", "k8s-label") in kinds and ("uncordon", "uncordon") in kinds
    node = next(r.proposed["node"] for r in plan.recommendations if r.rule == "mig")
    label = next(a for a in actions if a["type"] == "k8s-label")
    uncordon = next(a for a in actions if a["type"] == "uncordon")
    assert label["node"] == node and uncordon["wait_for_label"] == {"nvidia.com/mig.config.state": "success"}
    leave = {(s["namespace"], s["pod"]) for r in plan.recommendations if r.rule == "mig"
             for s in r.proposed["stop_first"]}
    leave |= {(m["namespace"], pod) for r in plan.recommendations if r.rule == "mig" for m in r.proposed["evict"]
              if m["from"] == node for pod in m["pods"]}
    assert {(p["namespace"], p["name"]) for p in label.get("wait_for_pods_gone") or []} == leave
    schemas = schemas_for(REFERENCE)
    state = state_of(f, api)
    for a in actions:
        ref = action_ref(a)
        if ref is None or a["type"] == "note":
            continue
        assert validate_object(expected_after(a, state.get(ref)), schemas) == [], a["target"]
    # the custom config: mig-manager's defaults kept, the node's own config valid and within the GPU's layouts
    cm = next(a for a in actions if a["type"] == "k8s-apply" and a["ref"]["kind"] == "ConfigMap")
    doc = yaml.safe_load(cm["object"]["data"]["config.yaml"])
    assert spec_errors(doc) == [] and "all-1g.10gb" in doc["mig-configs"] and "all-disabled" in doc["mig-configs"]
    name = label["labels"]["nvidia.com/mig.config"]
    profiles, layouts = mig_reference("H100-80GB")
    assert layout_errors(doc["mig-configs"][name], 8, {p[0]: p[3] for p in profiles}, layouts) == []
    # every workload patch asks for its slice on the node's own config, which the scheduler model can place
    patches = [a for a in actions if a["type"] == "k8s-patch"]
    assert len(patches) == 3 and not unschedulable(api, {"nodeSelector": {}, "containers": []})
    for a in patches:
        ops = {op["path"]: op.get("value") for op in a["patch"] if op["op"] == "add"}
        assert ops["/spec/template/spec/nodeSelector"] == {"nvidia.com/mig.config": name}


def test_emitted_steps_wait_for_the_pods_and_for_mig_manager(tmp_path: Path) -> None:
    f, _, plan = plan_of(full_fleet())
    emit(plan, tmp_path / "out", contexts={f.cluster: "ctx-c"})
    out = tmp_path / "out" / f.cluster  # each cluster's steps in a folder of their own
    script = (out / "steps.sh").read_text()
    steps = sorted(p.name for p in out.iterdir() if p.is_dir())
    names = [s.split("-", 1)[1] for s in steps]
    assert names[:4] == ["config", "host-cordon-evict", "label", "uncordon"] and "workload-patch" in names[4:]
    assert "/eviction" in script and "wait --for=delete" in script
    assert "nvidia\\.com/mig\\.config\\.state}=success" in script
    assert script.index("/eviction") < script.index("wait --for=delete") < script.index("-k 03-label")
    readme = (out / "README.md").read_text()
    assert "custom-mig-config" in readme and "mixed" in readme


def test_applied_against_the_server_then_rolled_back(planned: tuple[Fleet, ApplyKubeAPI, Plan], tmp_path: Path) -> None:
    import gpuinsight as gi

    f, api, plan = planned
    node = next(r.proposed["node"] for r in plan.recommendations if r.rule == "mig")
    with api, gi.open(tmp_path / "w.duckdb") as g:
        kube = Kube(api.client())
        result = apply_plan(plan, kube, g.wh)
        assert result.applied
        n = api.get_obj("nodes", None, node)
        assert n["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
        assert not n["spec"].get("unschedulable")  # uncordoned once mig-manager succeeded
        for r in (r for r in plan.recommendations if r.rule == "mig"):
            dep = api.get_obj("deployments", r.target["namespace"], r.target["name"])
            assert unschedulable(api, dep["spec"]["template"]["spec"]) is None, r.workload  # its slice exists
        rollback(plan.plan_id, kube, g.wh)
        n = api.get_obj("nodes", None, node)
        assert n["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled" and not n["spec"].get("unschedulable")


def test_a_pod_left_on_the_gpu_makes_mig_manager_fail_and_the_apply_stop(tmp_path: Path) -> None:
    import gpuinsight as gi
    from gpuinsight.actions.apply import ApplyFailed

    f = full_fleet()
    recs, _ = evaluate_plan(f.frames())
    mig = [r for r in recs if r.rule == "mig"]
    for r in mig:  # a plan edited by hand that forgets to move the busy pod off the GPU first
        r.proposed["evict"] = []
    api = served(f)
    plan = Plan("plan-forgot-a-pod", datetime.now(UTC), None, (None, None), mig)
    attach_actions(plan, state_of(f, api), strict=True)
    with api, gi.open(tmp_path / "w.duckdb") as g, pytest.raises(ApplyFailed, match="mig.config.state=failed"):
        apply_plan(plan, Kube(api.client()), g.wh)


def test_single_strategy_node_gets_a_named_layout_and_keeps_nvidia_gpu() -> None:
    from tests.rule_fleets import Node, Pod
    from tests.test_pool_planner import small

    f = Fleet([Node(f"n{i}", model="H100-80GB", gpus=1, price=6.88, labels={"nvidia.com/mig.strategy": "single"})
               for i in range(3)])
    for i in range(3):
        f.pods.append(Pod(f"s{i}-0", f"n{i}", f"s{i}", namespace="apps"))
        f.usage[("apps", f"s{i}")] = small(0.05, 4000)
    f, api, plan = plan_of(f)
    actions = ordered_actions(plan)
    assert not [a for a in actions if a["type"] == "k8s-apply" and a["ref"]["kind"] == "ConfigMap"]
    label = next(a for a in actions if a["type"] == "k8s-label")
    assert label["labels"]["nvidia.com/mig.config"].startswith("all-")
    assert {p["name"] for p in label["wait_for_pods_gone"]}  # the host's own workload stopped first
    for a in (a for a in actions if a["type"] == "k8s-patch"):
        assert not any("nvidia.com~1mig-" in op["path"] for op in a["patch"])  # slices stay nvidia.com/gpu
        assert {"op": "add", "path": "/spec/template/spec/nodeSelector",
                "value": {"nvidia.com/mig.config": label["labels"]["nvidia.com/mig.config"]}} in a["patch"]

"""GPU nodes held by pods that ask for no GPU (aws/karpenter-provider-aws #8447, #5798): the
node-hours they keep up, the finding, and its fix (taint the pool, tolerate it on the GPU
workloads), every emitted object validated; DaemonSets are never holders nor changed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import gpuinsight as gi
from gpuinsight.actions import build_actions
from gpuinsight.actions.eks import Eks
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.actions.validate import validate_action
from gpuinsight.config import Config
from gpuinsight.plan.kinds import validate_finding
from gpuinsight.sources.kubernetes import load_dump_dir
from gpuinsight.sources.prices import load_catalog
from tests.crds import CRD_DIRS
from tests.k8s_apply_server import schemas_for
from tests.sharing_objects import T0, iso, running_pod, uid, write_dump

CFG = Config(cluster="c1")
READ = T0 + timedelta(hours=6)
PRICE = 21.957642  # p4d.24xlarge in the shipped catalog


def node(name: str, pool: str, instance: str = "p4d.24xlarge", kind: str = "karpenter") -> dict[str, Any]:
    labels = {"node.kubernetes.io/instance-type": instance, "karpenter.sh/capacity-type": "on-demand"}
    labels["karpenter.sh/nodepool" if kind == "karpenter" else "eks.amazonaws.com/nodegroup"] = pool
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": uid("node", name), "creationTimestamp": iso(T0 - timedelta(days=1)),
                         "labels": labels},
            "status": {"capacity": {"cpu": "96", "nvidia.com/gpu": "8"} if instance.startswith("p") else {"cpu": "4"}}}


def owned(kind: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid(kind, name), "controller": True}


def gpu_spec(gpus: int = 8) -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}


CPU_SPEC = {"containers": [{"name": "app", "image": "nginx:1.27", "resources": {"requests": {"cpu": "500m"}}}]}


def fleet(kind: str = "karpenter") -> dict[str, list[dict[str, Any]]]:
    nodes = [node("gpu-a", "gpu", kind=kind), node("gpu-b", "gpu", kind=kind), node("gpu-c", "gpu", kind=kind),
             node("cpu-1", "general", "m5.xlarge", kind=kind)]
    train = running_pod("train-0", "ml", gpu_spec(), "gpu-a", owner={**owned("StatefulSet", "train")})
    train["status"] = {"phase": "Succeeded", "startTime": iso(T0), "containerStatuses": [{"name": "main", "state": {
        "terminated": {"startedAt": iso(T0), "finishedAt": iso(T0 + timedelta(hours=2)), "exitCode": 0}}}]}
    pods = [
        train,
        running_pod("serve-7c9f6b5d4-qx2zk", "ml", gpu_spec(), "gpu-c", labels={"pod-template-hash": "7c9f6b5d4"},
                    owner=owned("ReplicaSet", "serve-7c9f6b5d4")),
        # pods asking for no GPU that landed on GPU nodes
        running_pod("web-5d8f7c6b9-k2x4p", "shop", CPU_SPEC, "gpu-a", labels={"pod-template-hash": "5d8f7c6b9"},
                    owner=owned("ReplicaSet", "web-5d8f7c6b9")),
        running_pod("redis-0", "shop", CPU_SPEC, "gpu-b", owner=owned("StatefulSet", "redis")),
        running_pod("api-6b7c8d9f5-z9w8v", "shop", CPU_SPEC, "cpu-1", labels={"pod-template-hash": "6b7c8d9f5"},
                    owner=owned("ReplicaSet", "api-6b7c8d9f5")),
    ]
    for n in nodes:  # a DaemonSet on every node holds nothing
        pods.append(running_pod(f"dcgm-exporter-{n['metadata']['name']}", "gpu-operator", CPU_SPEC,
                                n["metadata"]["name"], owner=owned("DaemonSet", "dcgm-exporter")))
    objs: dict[str, list[dict[str, Any]]] = {"nodes": nodes, "pods": pods}
    if kind == "karpenter":
        objs["nodepools"] = [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
                              "spec": {"template": {"spec": {
                                  "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                                  "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In",
                                                    "values": ["p4d"]}],
                                  "taints": [{"key": "example.com/team", "value": "ml", "effect": "PreferNoSchedule"}]}},
                                  "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized"}}}]
    return objs


@pytest.fixture(scope="module", params=["karpenter", "eks-nodegroup"])
def held(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[gi.GpuInsight]:
    folder = tmp_path_factory.mktemp(request.param)
    g = gi.open(folder / "w.duckdb")
    load_catalog(g.wh, CFG)
    load_dump_dir(g.wh, CFG, write_dump(folder / "dump", fleet(request.param)), observed_at=READ)
    g.refresh()
    yield g
    g.close()


def test_node_hours_kept_up_by_cpu_pods(held: gi.GpuInsight) -> None:
    rows = {r["node"]: r for r in held.query("gpu_nodes_held_by_cpu_pods").to_dicts()}
    assert set(rows) == {"gpu-a", "gpu-b"}  # gpu-c's GPUs are busy; cpu-1 is no GPU node
    assert rows["gpu-a"]["held_hours"] == pytest.approx(4)  # after train-0 finished at 02:00
    assert rows["gpu-b"]["held_hours"] == pytest.approx(6)
    assert rows["gpu-b"]["held_usd"] == pytest.approx(6 * PRICE)
    assert [p["workload"] for p in rows["gpu-b"]["pods"]] == ["redis"]  # not the DaemonSet
    assert {w["name"] for w in rows["gpu-a"]["gpu_workloads"]} == {"train"}


def test_the_finding_and_its_fix(held: gi.GpuInsight, tmp_path: Path) -> None:
    plan = held.recommend()
    [rec] = [r for r in plan.recommendations if r.rule == "cpu_pods_on_gpu_nodes"]
    validate_finding(rec.to_dict(), "rec")
    assert rec.proposed["nodes"] == ["gpu-a", "gpu-b"] and rec.proposed["node_pool"] == "gpu"
    assert {h["workload"] for h in rec.proposed["holders"]} == {"web", "redis"}
    assert rec.monthly_savings_usd == pytest.approx(10 / 6 * PRICE * 730, rel=1e-3)
    assert not any(w["kind"] == "DaemonSet" for w in rec.proposed["tolerate"])
    pool_kind = rec.proposed["node_pool_kind"]
    # the objects the fix changes, as a live read or dump would show them
    state = ClusterState.from_warehouse(held.wh, "c1")
    for name, tmpl_spec in (("train", gpu_spec()), ("serve", gpu_spec())):
        kind = "StatefulSet" if name == "train" else "Deployment"
        state.add_object({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": "ml"},
                          "spec": {"selector": {"matchLabels": {"app": name}},
                                   "template": {"metadata": {"labels": {"app": name}},
                                                "spec": {**tmpl_spec, "tolerations": [
                                                    {"key": "example.com/team", "operator": "Exists"}]}}}}, "dump")
    actions = build_actions(rec, state)
    schemas = schemas_for(CRD_DIRS)
    tolerations = [a for a in actions if a["phase"] == "workload"]
    assert {a["ref"]["name"] for a in tolerations} == {"train"}
    [tol] = tolerations
    assert tol["object"]["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "example.com/team", "operator": "Exists"},  # its own kept (the list is atomic)
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert validate_action(tol, schemas, state.get(Ref("StatefulSet", "ml", "train"))) == []
    [taint] = [a for a in actions if a["phase"] == "scale-down"]
    if pool_kind == "karpenter":
        spec = taint["object"]["spec"]["template"]["spec"]
        assert spec["taints"] == [{"key": "example.com/team", "value": "ml", "effect": "PreferNoSchedule"},
                                  {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
        assert validate_action(taint, schemas, state.get(Ref("NodePool", None, "gpu"))) == []
    else:
        assert taint["type"] == "aws-eks" and taint["call"] == "update_nodegroup_config"
        assert taint["args"]["taints"] == {"addOrUpdateTaints": [
            {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]}
        # botocore validates, offline: credentials given, so making the client asks no metadata service
        Eks.from_region("us-east-1", aws_access_key_id="offline", aws_secret_access_key="offline").validate(
            taint["call"], taint["args"])
    assert all(a["ref"]["kind"] != "DaemonSet" for a in actions if a.get("ref"))


def test_a_pool_tainted_already_gets_a_note_and_no_saving(tmp_path: Path) -> None:
    objs = fleet()
    for n in objs["nodes"][:3]:
        n["spec"] = {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]}
    with gi.open(tmp_path / "w.duckdb") as g:
        load_catalog(g.wh, CFG)
        load_dump_dir(g.wh, CFG, write_dump(tmp_path / "dump", objs), observed_at=READ)
        g.refresh()
        [rec] = [r for r in g.recommend().recommendations if r.rule == "cpu_pods_on_gpu_nodes"]
        assert rec.monthly_savings_usd == 0 and rec.proposed["already_tainted"] is True
        assert "tolerate its GPU taint" in rec.title
        [note] = build_actions(rec, ClusterState.from_warehouse(g.wh, "c1"))
        assert note["type"] == "note" and "blanket toleration" in note["description"]

"""Kubernetes source: mappers on literal objects, kubectl dumps, live API via a loopback fake."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from gpuinsight.config import Config
from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.gpumodels import canonical_gpu_model
from gpuinsight.sources import kubernetes as k8s
from gpuinsight.sources.k8s import (
    MapContext,
    MapError,
    event_row,
    node_row,
    nodepool_row,
    parse_quantity,
    pdb_row,
    pod_row,
    podgroup_row,
    queue_row,
    resolve_workload,
    vcjob_row,
)
from gpuinsight.warehouse.db import Warehouse
from tests.k8s_server import FakeKubeAPI

REPO = Path(__file__).resolve().parents[1]
T0 = "2026-07-01T00:00:00Z"


# -- literal objects --------------------------------------------------------------------------

def node(name: str = "gpu-node-1", **labels: str) -> dict[str, Any]:
    base = {
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "karpenter.sh/capacity-type": "on-demand",
        "karpenter.sh/nodepool": "gpu-od",
        "topology.kubernetes.io/zone": "us-east-1a",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
    }
    base.update(labels)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": T0,
                     "labels": {k: v for k, v in base.items() if v != "-"}},
        "spec": {"providerID": f"aws:///us-east-1a/i-{name}"},
        "status": {"capacity": {"cpu": "192", "memory": "2113470464Ki", "nvidia.com/gpu": "8", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-07-08T12:00:00Z",
                                   "lastTransitionTime": T0}]},
    }


def pod(name: str, uid: str, *, ns: str = "ml", owner: tuple[str, str, str] | None = None,
        gpus: str | None = "1", labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        phase: str = "Running", node_name: str = "gpu-node-1", extra_resources: dict[str, str] | None = None,
        finished: str | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpus} if gpus else {}
    limits.update(extra_resources or {})
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": T0,
                            "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": owner[2], "uid": "o",
                                    "controller": True}]
    state = ({"terminated": {"startedAt": "2026-07-01T00:01:00Z", "finishedAt": finished, "exitCode": 0}}
             if finished else {"running": {"startedAt": "2026-07-01T00:01:00Z"}})
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"nodeName": node_name, "schedulerName": "volcano", "priorityClassName": "batch-low",
                 "containers": [{"name": "main", "resources": {"limits": limits, "requests": {"cpu": "500m"}}}]},
        "status": {"phase": phase, "startTime": "2026-07-01T00:00:30Z",
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-07-01T00:00:10Z"}],
                   "containerStatuses": [{"name": "main", "state": state}]},
    }


def queue(name: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": 4, "reclaimable": False, "capability": {"nvidia.com/gpu": "16", "cpu": "200"},
                     "deserved": {"nvidia.com/gpu": 8}, "guarantee": {"resource": {"nvidia.com/gpu": "2"}}},
            "status": {"state": "Open", "allocated": {"nvidia.com/gpu": "6", "memory": "16Gi"}}}


def podgroup(name: str = "train-pg", ns: str = "ml", q: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns, "uid": "pg-uid", "creationTimestamp": T0,
                         "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                              "name": "train", "uid": "j", "controller": True}]},
            "spec": {"minMember": 2, "queue": q, "minResources": {"nvidia.com/gpu": "16"}},
            "status": {"phase": "Running"}}


def vcjob(name: str = "train", ns: str = "ml") -> dict[str, Any]:
    task_spec = {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "uid": "job-uid", "creationTimestamp": T0},
            "spec": {"queue": "team-a", "minAvailable": 2, "maxRetry": 5,
                     "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
                     "tasks": [{"name": "worker", "replicas": 2, "template": {"spec": task_spec},
                                "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}]}]},
            "status": {"state": {"phase": "Running"}, "retryCount": 1}}


def nodepool(name: str = "gpu-od") -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {"requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]},
                {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["h100"]}]}},
                "limits": {"nvidia.com/gpu": "64"},
                "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"}}}


def pdb() -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "infer-pdb", "namespace": "prod"},
            "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "infer"}}}}


def event() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e1", "namespace": "ml", "uid": "ev-1"},
            "involvedObject": {"kind": "Pod", "name": "train-worker-0", "namespace": "ml", "uid": "p-2"},
            "reason": "FailedScheduling", "type": "Warning", "message": "0/3 nodes are available",
            "firstTimestamp": "2026-07-01T00:00:05Z", "lastTimestamp": "2026-07-09T00:00:00Z", "count": 3}


def fleet() -> dict[str, list[dict[str, Any]]]:
    volcano = {"scheduling.k8s.io/group-name": "train-pg"}
    return {
        "nodes": [node(), node("cpu-node", **{"nvidia.com/gpu.product": "-", "nvidia.com/gpu.count": "-",
                                              "node.kubernetes.io/instance-type": "m5.xlarge",
                                              "karpenter.sh/nodepool": "-", "karpenter.sh/capacity-type": "-",
                                              "eks.amazonaws.com/nodegroup": "system",
                                              "eks.amazonaws.com/capacityType": "SPOT"})],
        "pods": [
            pod("web-7d9f8b6c5d-x2x4z", "p-1", owner=("apps/v1", "ReplicaSet", "web-7d9f8b6c5d"),
                labels={"pod-template-hash": "7d9f8b6c5d"}),
            pod("train-worker-0", "p-2", owner=("batch.volcano.sh/v1alpha1", "Job", "train"), gpus="8",
                labels={"volcano.sh/job-name": "train"}, annotations=volcano),
            pod("nb-0", "p-3", owner=("apps/v1", "StatefulSet", "nb"), gpus=None,
                extra_resources={"nvidia.com/mig-1g.10gb": "2"},
                annotations={"scheduling.volcano.sh/queue-name": "team-b"}),
            pod("etl-1-abcde", "p-4", owner=("batch/v1", "Job", "etl-1"), phase="Succeeded",
                finished="2026-07-01T03:00:00Z"),
        ],
        "queues": [queue()], "podgroups": [podgroup()], "vcjobs": [vcjob()], "nodepools": [nodepool()],
        "pdbs": [pdb()], "events": [event()],
    }


def write_dump(folder: Path, objs: dict[str, list[dict[str, Any]]], *, yaml_kinds: tuple[str, ...] = ()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for kind, items in objs.items():
        doc = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
        if kind in yaml_kinds:
            (folder / f"{kind}.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
        else:
            (folder / f"{kind}.json").write_text(json.dumps(doc, indent=4), encoding="utf-8")
    return folder


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    w = Warehouse(tmp_path / "wh.duckdb")
    yield w
    w.close()


CFG = Config(cluster="test")
CTX = MapContext(cluster="test", source="dump")


def count(w: Warehouse, table: str) -> int:
    return int(w.sql(f'SELECT count(*) AS n FROM "{table}"').item())


def counts(w: Warehouse) -> dict[str, int]:
    return {t: count(w, t) for t in ("nodes", "pods", "podgroups", "vcjobs", "queues", "node_pools", "pdbs", "events")}


# -- mappers ----------------------------------------------------------------------------------

def test_quantities_parse_like_kubernetes() -> None:
    assert parse_quantity("8", "x") == 8
    assert parse_quantity("500m", "x") == 0.5
    assert parse_quantity("16Gi", "x") == 16 * 2**30
    assert parse_quantity("1.5k", "x") == 1500
    assert parse_quantity("1e3", "x") == 1000
    assert parse_quantity(2, "x") == 2
    with pytest.raises(MapError, match="not a Kubernetes quantity"):
        parse_quantity("8 GPUs", "spec.x")


def test_node_row_karpenter_and_eks() -> None:
    row = node_row(node(), CTX)
    assert (row["instance_type"], row["capacity_type"], row["node_pool"], row["node_pool_kind"]) == (
        "p5.48xlarge", "on-demand", "gpu-od", "karpenter")
    assert (row["gpu_model"], row["gpu_product"], row["gpu_count"], row["sharing_strategy"]) == (
        "H100-80GB", "NVIDIA-H100-80GB-HBM3", 8, "none")
    assert json.loads(row["capacity"]) == {"cpu": 192.0, "memory": 2113470464 * 1024.0, "nvidia.com/gpu": 8.0}
    assert row["zone"] == "us-east-1a" and row["provider_id"].startswith("aws:///")
    eks = node_row(node("n2", **{"karpenter.sh/nodepool": "-", "karpenter.sh/capacity-type": "-",
                                 "eks.amazonaws.com/nodegroup": "a100-spot", "eks.amazonaws.com/capacityType": "SPOT",
                                 "node.kubernetes.io/instance-type": "p4de.24xlarge",
                                 "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
                                 "nvidia.com/gpu.count": "16", "nvidia.com/mig.config": "all-3g.40gb",
                                 "nvidia.com/gpu.sharing-strategy": "-"}), CTX)
    assert (eks["capacity_type"], eks["node_pool"], eks["node_pool_kind"]) == ("spot", "a100-spot", "eks-nodegroup")
    # MIG single strategy: the product names the slice, the count counts slices
    assert (eks["gpu_model"], eks["gpu_count"], eks["mig_config"]) == ("A100-80GB", 8, "all-3g.40gb")
    shared = node_row(node("n3", **{"nvidia.com/gpu.sharing-strategy": "time-slicing"}), CTX)
    assert shared["sharing_strategy"] == "time-slicing"


def test_resolve_workload_kinds() -> None:
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8b6c5d"}
    assert resolve_workload("p", {"pod-template-hash": "7d9f8b6c5d"}, rs)[2:] == ("Deployment", "web")
    assert resolve_workload("p", {}, rs)[2:] == ("Deployment", "web")
    assert resolve_workload("p", {}, {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"})[2:] == (
        "StatefulSet", "db")
    assert resolve_workload("p", {}, {"apiVersion": "batch/v1", "kind": "Job", "name": "etl"})[2:] == ("Job", "etl")
    assert resolve_workload("p", {}, {"apiVersion": "batch/v1", "kind": "Job", "name": "nightly-29650000"})[2:] == (
        "CronJob", "nightly")
    assert resolve_workload("p", {}, {"apiVersion": "batch/v1", "kind": "Job", "name": "run-20260701"})[2:] == (
        "Job", "run-20260701")
    vc = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train"}
    assert resolve_workload("p", {}, vc) == ("Job", "train", "VolcanoJob", "train")
    assert resolve_workload("bare", {}, None) == (None, None, "Pod", "bare")


def test_pod_row_requests_queue_and_timeline() -> None:
    objs = fleet()["pods"]
    web = pod_row(objs[0], CTX)
    assert (web["workload_kind"], web["workload"], web["gpu_request"]) == ("Deployment", "web", 1.0)
    assert web["scheduled"] == datetime(2026, 7, 1, 0, 0, 10) and web["started"] == datetime(2026, 7, 1, 0, 1)
    assert web["finished"] is None and web["scheduler"] == "volcano" and web["priority_class"] == "batch-low"
    train = pod_row(objs[1], CTX)
    assert (train["workload_kind"], train["vcjob"], train["podgroup"], train["gpu_request"]) == (
        "VolcanoJob", "train", "train-pg", 8.0)
    assert train["queue"] is None  # resolved from the PodGroup at load time
    nb = pod_row(objs[2], CTX)
    assert (nb["gpu_request"], nb["mig_profile"], nb["mig_request"], nb["queue"]) == (0.0, "1g.10gb", 2.0, "team-b")
    assert json.loads(nb["gpu_requests"]) == {"nvidia.com/mig-1g.10gb": 2.0}
    etl = pod_row(objs[3], CTX)
    assert etl["finished"] == datetime(2026, 7, 1, 3) and etl["last_seen"] == etl["finished"]
    assert etl["phase"] == "Succeeded" and etl["_alive"] is False


def test_pod_gpu_requests_sum_containers_and_init_max() -> None:
    obj = pod("multi", "u", gpus="1")
    obj["spec"]["containers"].append({"name": "side", "resources": {"requests": {"nvidia.com/gpu": "2"}}})
    obj["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
    assert pod_row(obj, CTX)["gpu_request"] == 4.0
    obj["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    assert pod_row(obj, CTX)["gpu_request"] == 3.0


def test_volcano_and_cluster_mappers() -> None:
    q = queue_row(queue(), CTX)
    assert (q["weight"], q["capability_gpu"], q["deserved_gpu"], q["guarantee_gpu"], q["allocated_gpu"]) == (
        4, 16.0, 8.0, 2.0, 6.0)
    assert q["reclaimable"] is False and q["state"] == "Open"
    assert json.loads(q["allocated"]) == {"memory": 16 * 2**30, "nvidia.com/gpu": 6.0}
    assert queue_row({"metadata": {"name": "d"}, "spec": {}}, CTX)["reclaimable"] is True
    pg = podgroup_row(podgroup(), CTX)
    assert (pg["queue"], pg["min_member"], pg["owner_kind"], pg["phase"]) == ("team-a", 2, "Job", "Running")
    job = vcjob_row(vcjob(), CTX)
    assert (job["queue"], job["min_available"], job["max_retry"], job["retry_count"], job["phase"]) == (
        "team-a", 2, 5, 1, "Running")
    tasks = json.loads(job["tasks"])
    assert tasks[0]["name"] == "worker" and tasks[0]["replicas"] == 2 and tasks[0]["gpus_per_pod"] == 8.0
    assert json.loads(job["policies"]) == {"job": [{"action": "RestartJob", "event": "PodEvicted"}],
                                           "tasks": {"worker": [{"action": "CompleteJob", "event": "TaskCompleted"}]}}
    np_ = nodepool_row(nodepool(), CTX)
    assert json.loads(np_["capacity_types"]) == ["on-demand", "spot"]
    assert np_["consolidation_policy"] == "WhenEmpty" and json.loads(np_["limits"]) == {"nvidia.com/gpu": 64.0}
    assert json.loads(nodepool_row({"metadata": {"name": "x"}, "spec": {}}, CTX)["capacity_types"]) == ["on-demand"]
    p = pdb_row(pdb(), CTX)
    assert p["min_available"] == "50%" and p["max_unavailable"] is None
    e = event_row(event(), CTX)
    assert (e["involved_kind"], e["reason"], e["count"], e["last_ts"]) == (
        "Pod", "FailedScheduling", 3, datetime(2026, 7, 9))


def test_mapper_errors_name_the_field() -> None:
    with pytest.raises(MapError, match="metadata.uid: missing"):
        pod_row({"metadata": {"name": "x"}}, CTX)
    bad = pod("x", "u")
    bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
    with pytest.raises(MapError, match=r"containers\[0\].resources.limits.nvidia.com/gpu"):
        pod_row(bad, CTX)


# -- dumps ------------------------------------------------------------------------------------

def test_load_dump_dir_all_kinds(wh: Warehouse, tmp_path: Path) -> None:
    folder = write_dump(tmp_path / "dump", fleet(), yaml_kinds=("queues", "nodepools"))
    written = datetime(2026, 7, 10, 6).replace(tzinfo=UTC).timestamp()
    for f in folder.iterdir():  # kubectl wrote the files when it read the cluster
        os.utime(f, (written, written))
    report = k8s.load_dump_dir(wh, CFG, folder)
    assert counts(wh) == {"nodes": 2, "pods": 4, "podgroups": 1, "vcjobs": 1, "queues": 1,
                          "node_pools": 2, "pdbs": 1, "events": 1}
    assert report.rows["pods"] == 4
    # the queue of a Volcano Job's pod comes from its PodGroup; the dump time is when it was read (its
    # files' time), not its newest timestamp (2026-07-09)
    row = wh.sql("SELECT queue, last_seen, snapshot_at, source FROM pods WHERE uid = 'p-2'").row(0)
    assert row == ("team-a", datetime(2026, 7, 10, 6), datetime(2026, 7, 10, 6), "dump")
    assert any("newest timestamp inside these objects is 2026-07-09 00:00, 1 day(s) before" in n for n in report.notes)
    pools = wh.sql("SELECT name, kind, capacity_types FROM node_pools ORDER BY name").rows()
    assert pools == [("gpu-od", "karpenter", '["on-demand","spot"]'), ("system", "eks-nodegroup", '["spot"]')]
    assert wh.sql("SELECT cluster FROM clusters").rows() == [("test",)]
    state = wh.sql("SELECT source, status, cursor FROM ingest_state").row(0)
    assert state == ("kubernetes:dump", "complete", datetime(2026, 7, 10, 6))
    snaps = dict(wh.sql("SELECT kind, observed_at FROM k8s_snapshots").rows())
    assert set(snaps) == {"nodes", "pods", "podgroups", "vcjobs", "queues", "nodepools", "pdbs", "events"}
    assert set(snaps.values()) == {datetime(2026, 7, 10, 6)}
    # --as-of dates it; an older read loaded afterwards does not move the newest snapshot back
    k8s.load_dump_dir(wh, CFG, folder, observed_at=datetime(2026, 7, 12))
    k8s.load_dump_dir(wh, CFG, folder, observed_at=datetime(2026, 7, 11))
    assert wh.sql("SELECT DISTINCT observed_at FROM k8s_snapshots").rows() == [(datetime(2026, 7, 12),)]
    assert wh.sql("SELECT snapshot_at FROM vcjobs").item() == datetime(2026, 7, 12)


def test_reload_is_idempotent(wh: Warehouse, tmp_path: Path) -> None:
    folder = write_dump(tmp_path / "dump", fleet())
    k8s.load_dump_dir(wh, CFG, folder)
    before = counts(wh)
    snapshot = wh.sql("SELECT * EXCLUDE (labels, annotations) FROM pods ORDER BY uid").rows()
    k8s.load_dump_dir(wh, CFG, folder)
    assert counts(wh) == before
    assert wh.sql("SELECT * EXCLUDE (labels, annotations) FROM pods ORDER BY uid").rows() == snapshot


def test_dump_merges_with_prometheus_pods(wh: Warehouse, tmp_path: Path) -> None:
    wh.con.execute(
        "INSERT INTO pods (cluster, uid, namespace, name, node, gpu_request, created, started, last_seen, source) "
        "VALUES ('test', 'p-1', 'ml', 'web-7d9f8b6c5d-x2x4z', 'gpu-node-1', 1, '2026-06-01', '2026-06-01 00:00:05', "
        "'2026-07-20', 'prometheus')")
    pods = fleet()["pods"][:1]
    del pods[0]["metadata"]["creationTimestamp"]  # the dump lacks it: Prometheus' value stays
    # a dump taken before Prometheus last saw the pod
    k8s.load_dump_dir(wh, CFG, write_dump(tmp_path / "d", {"pods": pods}), observed_at=datetime(2026, 7, 10))
    row = wh.sql("SELECT workload, created, started, last_seen, phase, source FROM pods WHERE uid = 'p-1'").row(0)
    assert row == ("web", datetime(2026, 6, 1), datetime(2026, 7, 1, 0, 1), datetime(2026, 7, 20), "Running", "dump")
    assert count(wh, "pods") == 1


def test_truncated_json_is_bad_input_and_writes_nothing(wh: Warehouse, tmp_path: Path) -> None:
    folder = write_dump(tmp_path / "dump", fleet())
    text = (folder / "pods.json").read_text()
    (folder / "pods.json").write_text(text[: len(text) // 2])
    with pytest.raises(BadInput, match=r"pods\.json: line \d+ col \d+: "):
        k8s.load_dump_dir(wh, CFG, folder)
    assert sum(counts(wh).values()) == 0


def test_truncated_item_names_index_and_field(wh: Warehouse, tmp_path: Path) -> None:
    objs = fleet()
    del objs["pods"][2]["metadata"]["uid"]
    folder = write_dump(tmp_path / "dump", objs)
    with pytest.raises(BadInput, match=r"pods\.json: item 2 \(ml/nb-0\): metadata\.uid: missing"):
        k8s.load_dump_dir(wh, CFG, folder)
    assert sum(counts(wh).values()) == 0


def test_bad_yaml_and_odd_shapes(wh: Warehouse, tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "queues.yaml").write_text("items:\n  - metadata: {name: a\n", encoding="utf-8")
    with pytest.raises(BadInput, match=r"queues\.yaml: line \d+ col \d+"):
        k8s.load_dump_dir(wh, CFG, folder)
    (folder / "queues.yaml").write_text(yaml.safe_dump(queue("solo")), encoding="utf-8")  # a single object
    (folder / "nodes.json").write_text(json.dumps([node()]), encoding="utf-8")  # a bare list
    k8s.load_dump_dir(wh, CFG, folder)
    assert (count(wh, "queues"), count(wh, "nodes")) == (1, 1)
    (folder / "nodes.json").write_text(json.dumps([pod("x", "u")]), encoding="utf-8")
    with pytest.raises(BadInput, match="item 0 .*kind: expected Node, got 'Pod'"):
        k8s.load_dump_dir(wh, CFG, folder)
    with pytest.raises(BadInput, match="no kubectl dumps"):
        k8s.load_dump_dir(wh, CFG, tmp_path)


def _sample_dump_dir() -> Path | None:
    folder = REPO / "sample_data" / "kubectl"
    if not folder.is_dir():
        return None
    tracked = subprocess.run(["git", "ls-files", "sample_data/kubectl"], cwd=REPO, capture_output=True, text=True)
    return folder if tracked.stdout.strip() else None


def test_sample_fleet_dump_loads(wh: Warehouse) -> None:
    folder = _sample_dump_dir()
    assert folder is not None
    report = k8s.load_dump_dir(wh, Config(cluster="sample"), folder)
    for stem, table in (("nodes", "nodes"), ("pods", "pods"), ("queues", "queues")):
        path = next((folder / f"{stem}{ext}" for ext in (".json", ".yaml") if (folder / f"{stem}{ext}").exists()), None)
        if path is not None and path.suffix == ".json":
            assert count(wh, table) == len(orjson.loads(path.read_bytes())["items"]), table
    assert report.rows.get("nodes", 0) > 0
    assert wh.sql("SELECT count(*) FROM nodes WHERE gpu_count > 0 AND gpu_model IS NULL").item() == 0
    assert wh.sql("SELECT count(*) FROM pods WHERE workload IS NULL").item() == 0
    truth_path = folder.parent / "ground_truth.json"
    if truth_path.exists():  # the generator's ground truth: node facts and workload identities
        truth = json.loads(truth_path.read_text())
        kinds = {"karpenter-nodepool": "karpenter", "eks-managed-nodegroup": "eks-nodegroup"}
        got = {r[0]: r[1:] for r in wh.sql("SELECT node, instance_type, capacity_type, node_pool, node_pool_kind, "
                                          "gpu_count, gpu_model FROM nodes").rows()}
        for n in truth["nodes"]:
            assert got[n["node"]] == (n["instance_type"], n["capacity_type"], n["node_pool"], kinds[n["pool_kind"]],
                                      n["gpu_count"], canonical_gpu_model(n["model_name"])), n["node"]
        pods = {(r[0], r[1]): r[2:] for r in wh.sql(
            "SELECT DISTINCT namespace, workload, workload_kind, queue FROM pods").rows()}
        for w in truth["workloads"]:
            if (w["namespace"], w["workload"]) in pods:
                assert pods[(w["namespace"], w["workload"])] == (w["workload_kind"], w["queue"]), w["workload"]
        assert sum((w["namespace"], w["workload"]) in pods for w in truth["workloads"]) >= len(truth["workloads"]) - 2
    before = counts(wh)
    k8s.load_dump_dir(wh, Config(cluster="sample"), folder)
    assert counts(wh) == before


# -- live API ---------------------------------------------------------------------------------

@pytest.fixture
def api() -> FakeKubeAPI:
    fake = FakeKubeAPI(token="s3cret-token", page_size_cap=2).load(**fleet())
    with fake:
        yield fake


def test_live_collect_lists_everything_with_paging(wh: Warehouse, api: FakeKubeAPI, tmp_path: Path) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path)
    report = k8s.collect_live(wh, CFG, context="fake", kubeconfig=kubeconfig)
    assert counts(wh) == {"nodes": 2, "pods": 4, "podgroups": 1, "vcjobs": 1, "queues": 1,
                          "node_pools": 2, "pdbs": 1, "events": 1}
    assert report.notes == []
    assert wh.sql("SELECT queue, source FROM pods WHERE uid = 'p-2'").row(0) == ("team-a", "kubernetes")
    pod_pages = [r for r in api.requests if r.path == "/api/v1/pods"]
    assert len(pod_pages) == 2 and pod_pages[1].query["continue"] == ["2"]  # 4 pods, pages of 2
    assert all(r.method == "GET" and r.authorized for r in api.requests)
    paths = {r.path for r in api.requests}
    assert {"/apis/scheduling.volcano.sh/v1beta1/queues", "/apis/batch.volcano.sh/v1alpha1/jobs",
            "/apis/karpenter.sh/v1/nodepools", "/apis/policy/v1/poddisruptionbudgets"} <= paths
    state = wh.sql("SELECT scope, details FROM ingest_state").row(0)
    assert "s3cret" not in str(state) and state[0].startswith("http://127.0.0.1:")


def test_live_missing_crd_is_a_note(wh: Warehouse, tmp_path: Path) -> None:
    objs = {k: v for k, v in fleet().items() if k in ("nodes", "pods", "events", "pdbs")}
    with FakeKubeAPI(crds=("volcano",)).load(**objs) as fake:  # no Karpenter
        report = k8s.collect_live(wh, CFG, kubeconfig=fake.write_kubeconfig(tmp_path))
        tried = [r.path for r in fake.requests if "karpenter" in r.path]
    assert tried == ["/apis/karpenter.sh/v1/nodepools", "/apis/karpenter.sh/v1beta1/nodepools"]
    assert any("nodepools.karpenter.sh is not served" in n for n in report.notes)
    assert count(wh, "pods") == 4 and count(wh, "queues") == 0


def test_live_forbidden_and_unauthorized(wh: Warehouse, api: FakeKubeAPI, tmp_path: Path) -> None:
    api.fail("pods", 403)
    with pytest.raises(RuntimeFailure, match=r"403 Forbidden listing pods") as info:
        k8s.collect_live(wh, CFG, kubeconfig=api.write_kubeconfig(tmp_path))
    assert "\n" not in str(info.value) and "s3cret" not in str(info.value)
    assert count(wh, "nodes") == 0  # nothing written
    bad = api.write_kubeconfig(tmp_path, token="wrong-token")
    with pytest.raises(RuntimeFailure, match="401 Unauthorized") as info:
        k8s.collect_live(wh, CFG, kubeconfig=bad)
    assert "wrong-token" not in str(info.value)


def test_live_bad_context_and_unreachable(wh: Warehouse, api: FakeKubeAPI, tmp_path: Path) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path)
    with pytest.raises(BadInput, match="context 'nope'"):
        k8s.collect_live(wh, CFG, context="nope", kubeconfig=kubeconfig)
    url = api.url
    api.stop()
    cfg = yaml.safe_load(kubeconfig.read_text())
    cfg["clusters"][0]["cluster"]["server"] = url  # the port is closed now
    kubeconfig.write_text(yaml.safe_dump(cfg))
    with pytest.raises(RuntimeFailure, match="cannot reach Kubernetes API at http://127.0.0.1"):
        k8s.collect_live(wh, CFG, kubeconfig=kubeconfig)


def test_fake_server_discovery_and_errors() -> None:
    import urllib.error
    import urllib.request

    def get(fake: FakeKubeAPI, path: str, token: str | None = "test-token") -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(fake.url + path, headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    with FakeKubeAPI(crds=("volcano",)).load(nodes=[node()], queues=[queue()]) as fake:
        assert get(fake, "/api")[1]["versions"] == ["v1"]
        groups = {g["name"] for g in get(fake, "/apis")[1]["groups"]}
        assert groups == {"policy", "scheduling.volcano.sh", "batch.volcano.sh", "topology.volcano.sh"}
        assert {r["name"] for r in get(fake, "/apis/scheduling.volcano.sh/v1beta1")[1]["resources"]} == {
            "queues", "podgroups"}
        assert get(fake, "/apis/karpenter.sh/v1")[0] == 404
        assert get(fake, "/apis/karpenter.sh/v1/nodepools")[1]["reason"] == "NotFound"
        assert get(fake, "/api/v1/nodes/gpu-node-1")[1]["metadata"]["name"] == "gpu-node-1"
        assert get(fake, "/api/v1/nodes", token=None)[0] == 401
        assert [r.path for r in fake.requests][-1] == "/api/v1/nodes" and not fake.requests[-1].authorized


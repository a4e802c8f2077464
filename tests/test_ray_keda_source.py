"""Collecting KubeRay and KEDA objects (kubectl dumps in every shape, the live API, bad input), and
the SQL models that tie Ray pods to their cluster and group, through to the rules in DuckDB."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpuinsight as gi
from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.sources import kubernetes as k8s
from gpuinsight.sources.k8s.common import MapContext
from gpuinsight.sources.k8s.pods import pod_row
from gpuinsight.sources.k8s.ray import raycluster_row, rayjob_row, scaledobject_row
from gpuinsight.warehouse import Warehouse
from tests.crds import REFERENCE
from tests.fleet_tables import T0, MiniFleet
from tests.k8s_server import FakeKubeAPI

CFG = Config(cluster="k2")
CTX = MapContext(cluster="k2", source="dump")
TABLES = ("rayclusters", "rayjobs", "rayservices", "scaled_objects")
NS = "ml"


def sample(name: str, kind: str) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all((REFERENCE / "kuberay" / name).read_text()) if d and d["kind"] == kind)


def gpu_cluster(name: str = "batch", *, autoscaling: bool = True, min_replicas: int = 2) -> dict[str, Any]:
    rc = copy.deepcopy(sample("ray-cluster.autoscaler.yaml", "RayCluster"))
    rc["metadata"] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "creationTimestamp": "2026-11-01T00:00:00Z"}
    rc["spec"]["enableInTreeAutoscaling"] = autoscaling
    group = rc["spec"]["workerGroupSpecs"][0]
    group.update(groupName="gpu", replicas=2, minReplicas=min_replicas, maxReplicas=4)
    group["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1},
                                                              "requests": {"nvidia.com/gpu": 1}}
    return rc


def ray_job(end: str = "2026-11-01T02:20:00Z", **spec: Any) -> dict[str, Any]:
    job = copy.deepcopy(sample("ray-job.volcano-scheduler-queue.yaml", "RayJob"))
    job["metadata"] = {"name": "embed", "namespace": NS, "uid": "uid-embed"}
    job["spec"].update(spec)
    job["status"] = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "rayClusterName": "embed-x7k2p",
                     "startTime": "2026-11-01T00:00:00Z", "endTime": end}
    return job


def scaled_object(target: str = "svc") -> dict[str, Any]:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": target, "namespace": NS},
            "spec": {"scaleTargetRef": {"name": target}, "minReplicaCount": 1,
                     "triggers": [{"type": "prometheus", "metadata": {"query": "q", "threshold": "1"}}]}}


def counts(wh: Warehouse) -> dict[str, int]:
    return {t: wh.sql(f"SELECT count(*) AS n FROM {t}").item() for t in TABLES}


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    w = Warehouse(tmp_path / "wh.duckdb")
    yield w
    w.close()


def test_mappers_read_kuberay_samples_and_keda() -> None:
    queue = raycluster_row(sample("ray-cluster.volcano-scheduler-queue.yaml", "RayCluster"), CTX)
    assert queue["autoscaling"] is False and queue["head_gpus"] == 0.0
    (group,) = json.loads(queue["worker_groups"])
    assert (group["group"], group["replicas"], group["min_replicas"], group["max_replicas"]) == (
        "worker", 2, 2, 2)
    auto = raycluster_row(sample("ray-cluster.autoscaler.yaml", "RayCluster"), CTX)
    assert auto["autoscaling"] is True and auto["idle_timeout_s"] == 60 and auto["owner_kind"] is None
    job = rayjob_row(ray_job(shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=30), CTX)
    assert (job["ray_cluster"], job["deployment_status"], job["shutdown_after_finish"], job["ttl_after_finish_s"]) == (
        "embed-x7k2p", "Complete", True, 30)
    assert "rayClusterSpec" not in json.loads(job["spec"])
    so = scaledobject_row(scaled_object(), CTX)
    assert (so["target_kind"], so["target_api_version"], so["min_replicas"], so["max_replicas"]) == (
        "Deployment", "apps/v1", 1, 100)
    # a pod KubeRay made belongs to its RayCluster
    pod = {"metadata": {"name": "batch-gpu-worker-x7k2p", "uid": "p1", "namespace": NS,
                        "labels": {"ray.io/cluster": "batch", "ray.io/group": "gpu"},
                        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "batch",
                                             "controller": True}]}, "spec": {"containers": []}}
    assert (pod_row(pod, CTX)["workload_kind"], pod_row(pod, CTX)["workload"]) == ("RayCluster", "batch")


def test_dumps_in_every_shape_load_once(wh: Warehouse, tmp_path: Path) -> None:
    owned = gpu_cluster("embed-x7k2p")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "embed",
                                             "controller": True}]
    # multi-document YAML, a kind: List, a typed list without item kinds, a YAML List
    (tmp_path / "rayclusters.yaml").write_text(yaml.safe_dump_all([gpu_cluster(), owned]))
    (tmp_path / "rayjobs.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [ray_job()]}))
    service = {"metadata": {"name": "serve", "namespace": NS},
               "spec": {"rayClusterConfig": gpu_cluster()["spec"]},
               "status": {"activeServiceStatus": {"rayClusterName": "serve-abcde"}}}
    (tmp_path / "rayservices.json").write_text(json.dumps({"apiVersion": "ray.io/v1", "kind": "RayServiceList",
                                                            "items": [service]}))
    (tmp_path / "scaledobjects.yaml").write_text(yaml.safe_dump({"kind": "List", "items": [scaled_object()]}))
    report = k8s.load_dump_dir(wh, CFG, tmp_path)
    assert counts(wh) == {"rayclusters": 2, "rayjobs": 1, "rayservices": 1, "scaled_objects": 1}
    assert report.rows["rayclusters"] == 2
    assert wh.sql("SELECT owner_kind, owner_name FROM rayclusters WHERE name = 'embed-x7k2p'").row(0) == (
        "RayJob", "embed")
    assert wh.sql("SELECT active_cluster FROM rayservices").item() == "serve-abcde"
    before = counts(wh)
    k8s.load_dump_dir(wh, CFG, tmp_path)
    assert counts(wh) == before


@pytest.mark.parametrize("file,obj,where", [
    ("rayclusters.json", lambda: {**gpu_cluster(), "spec": {**gpu_cluster()["spec"], "workerGroupSpecs": [
        {**gpu_cluster()["spec"]["workerGroupSpecs"][0], "minReplicas": "many"}]}},
     "spec.workerGroupSpecs[0].minReplicas: expected an integer"),
    ("rayclusters.json", lambda: {**gpu_cluster(), "spec": {"workerGroupSpecs": []}}, "spec.headGroupSpec: missing"),
    ("rayjobs.json", lambda: {**ray_job(), "status": {"endTime": "yesterday"}}, "status.endTime: not an RFC 3339"),
    ("scaledobjects.json", lambda: {**scaled_object(), "spec": {"scaleTargetRef": {}}},
     "spec.scaleTargetRef.name: missing"),
])
def test_bad_objects_are_refused_naming_file_item_and_field(wh: Warehouse, tmp_path: Path, file: str, obj: Any,
                                                           where: str) -> None:
    kind = {"rayclusters": "RayCluster", "rayjobs": "RayJob", "scaledobjects": "ScaledObject"}[file.split(".")[0]]
    api = "keda.sh/v1alpha1" if kind == "ScaledObject" else "ray.io/v1"
    (tmp_path / file).write_text(json.dumps({"kind": "List", "items": [{**obj(), "kind": kind, "apiVersion": api}]}))
    with pytest.raises(BadInput) as err:
        k8s.load_dump_dir(wh, CFG, tmp_path)
    assert str(tmp_path / file) in str(err.value) and "item 0" in str(err.value) and where in str(err.value)
    assert counts(wh) == dict.fromkeys(TABLES, 0)


def test_live_collect_reads_kuberay_and_keda_and_notes_missing_crds(wh: Warehouse, tmp_path: Path) -> None:
    with FakeKubeAPI().load(rayclusters=[gpu_cluster()], rayjobs=[ray_job()],
                            scaledobjects=[scaled_object()]) as fake:
        report = k8s.collect_live(wh, CFG, context="fake", kubeconfig=fake.write_kubeconfig(tmp_path))
        paths = {r.path for r in fake.requests}
    assert counts(wh) == {"rayclusters": 1, "rayjobs": 1, "rayservices": 0, "scaled_objects": 1}
    assert {"/apis/ray.io/v1/rayclusters", "/apis/ray.io/v1/rayjobs", "/apis/ray.io/v1/rayservices",
            "/apis/keda.sh/v1alpha1/scaledobjects"} <= paths and report.notes == []
    with FakeKubeAPI(crds=("volcano", "karpenter")) as fake:
        (tmp_path / "b").mkdir()
        report = k8s.collect_live(wh, CFG, context="fake", kubeconfig=fake.write_kubeconfig(tmp_path / "b"))
    assert any("rayclusters.ray.io is not served" in n for n in report.notes)
    assert any("scaledobjects.keda.sh is not served" in n for n in report.notes)


def test_ray_models_and_rules_in_duckdb(tmp_path: Path) -> None:
    """Two L4 nodes: a RayJob's cluster (2 GPU workers busy until 02:20, kept 22 h more), and a
    standalone cluster whose 2 GPU workers are busy 02:00-04:00 only (minReplicas 2)."""
    end = T0 + timedelta(days=1)
    f = MiniFleet(cluster="k2")
    f.price("g6.12xlarge", "L4", 4, 4.6016)
    for n in ("r1", "r2"):
        f.node(n, "g6.12xlarge", "L4", 4, pool="ray")
    for cluster, node in (("embed-x7k2p", "r1"), ("batch", "r2")):
        for i in range(2):
            pod = f"{cluster}-gpu-worker-{i}"
            f.pod(pod, node, namespace=NS, workload=cluster, kind="RayCluster",
                  labels={"ray.io/cluster": cluster, "ray.io/group": "gpu", "ray.io/node-type": "worker"})
            busy = {0, 1, 2} if cluster == "embed-x7k2p" else {2, 3}
            f.series(node, i, pod, NS, 0.8, end=end, active_hours=busy)
    folder = tmp_path / "dumps"
    folder.mkdir()
    owned = gpu_cluster("embed-x7k2p", autoscaling=False)
    owned["metadata"]["labels"] = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "embed"}
    (folder / "rayclusters.json").write_text(json.dumps({"kind": "List", "items": [gpu_cluster(), owned]}))
    (folder / "rayjobs.json").write_text(json.dumps({"kind": "List", "items": [ray_job()]}))
    with gi.open(tmp_path / "k2.duckdb") as g:
        f.load(g.wh)
        k8s.load_dump_dir(g.wh, CFG, folder)
        g.refresh()
        groups = {r["ray_cluster"]: r for r in g.query("ray_groups").to_dicts()}
        assert groups["batch"]["min_replicas"] == 2 and groups["batch"]["autoscaling"] is True
        assert groups["embed-x7k2p"]["owner_kind"] == "RayJob" and groups["embed-x7k2p"]["gpu_hours"] == 48
        (job,) = g.query("ray_jobs").to_dicts()
        # the job ended 02:20: from 03:00 on the cluster held 2 GPUs idle for 21 whole hours
        assert (job["ray_cluster"], job["post_hours"], job["post_gpu_hours"]) == ("embed-x7k2p", 21, 42)
        assert job["post_gr_max"] == 0 and job["alive_at_end"] is True
        s = {r["workload"]: r for r in g.query("idle_stretches").to_dicts()}["batch"]
        assert s["ray_group"] == "gpu" and [(st["hours"], st["woke"]) for st in s["stretches"]] == [
            (2, True), (20, False)]
        plan = g.recommend()
    found = {(r.rule, r.workload, r.proposed.get("change")) for r in plan.recommendations}
    assert found == {("ray", "embed", "job_cleanup"), ("ray", "batch", "worker_min_replicas")}
    by = {r.workload: r for r in plan.recommendations}
    gpu_h = 4.6016 / 4
    assert by["embed"].monthly_savings_usd == pytest.approx(2 * gpu_h * 21 / 24 * 730, rel=1e-3)
    assert by["batch"].monthly_savings_usd == pytest.approx(2 * gpu_h * (2 + 20 - 2 / 60) / 24 * 730, rel=1e-3)
    assert by["batch"].target["group_index"] == 0

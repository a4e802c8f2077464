"""KubeRay and KEDA actions: RayJob / RayCluster / RayService patches and KEDA ScaledObjects,
built from literal recommendations, validated against the real CRDs (the RayCluster CRD and
KubeRay samples from tests/fixtures/reference, the RayJob and RayService CRDs vendored in
tests/fixtures/kuberay, KEDA's ScaledObject CRD) and the operators' own rules, then applied and
rolled back through the loopback API server."""

from __future__ import annotations

import copy
import gzip
import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinsight.actions import ApplyFailed, Kube, apply_plan, attach_actions, build_actions, rollback
from gpuinsight.actions.model import action_ref
from gpuinsight.actions.patching import get
from gpuinsight.actions.state import ClusterState
from gpuinsight.actions.validate import CrdSchemas, validate_action, validate_object
from gpuinsight.plan import Plan, Recommendation
from gpuinsight.plan.kinds import validate_finding
from gpuinsight.warehouse import Warehouse
from tests.crds import CRD_DIRS, REFERENCE, VENDORED
from tests.k8s_apply_server import ApplyKubeAPI, live_state, schemas_for

NS = "ml-platform"
SHA256 = {"ray.io_rayjobs.yaml.gz": "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5",
          "ray.io_rayservices.yaml.gz": "0a8fc325e6e22b9231c1f282b309555e2ecf94227ca20a03df3d1d9a403907ab"}


@pytest.fixture(scope="module")
def schemas() -> CrdSchemas:
    return schemas_for(CRD_DIRS)


def sample(name: str, kind: str) -> dict[str, Any]:
    docs = yaml.safe_load_all((REFERENCE / "kuberay" / name).read_text())
    return next(d for d in docs if d and d.get("kind") == kind)


def gpu_cluster(name: str = "batch-infer", autoscaling: bool = False) -> dict[str, Any]:
    """KubeRay's autoscaler sample with a GPU worker group of four and a GPU on the head."""
    rc = sample("ray-cluster.autoscaler.yaml", "RayCluster")
    rc["metadata"] = {"name": name, "namespace": NS}
    spec = rc["spec"]
    spec["enableInTreeAutoscaling"] = autoscaling
    if not autoscaling:
        spec.pop("autoscalerOptions")
    head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["resources"]["limits"]["nvidia.com/gpu"] = 1
    head["resources"]["requests"]["nvidia.com/gpu"] = 1
    group = spec["workerGroupSpecs"][0]
    group.update(groupName="gpu-workers", replicas=4, minReplicas=4, maxReplicas=8)
    worker = group["template"]["spec"]["containers"][0]
    worker["resources"] = {"limits": {"nvidia.com/gpu": 1, "cpu": "4", "memory": "16Gi"},
                           "requests": {"nvidia.com/gpu": 1, "cpu": "4", "memory": "16Gi"}}
    spec["workerGroupSpecs"].insert(0, {**copy.deepcopy(group), "groupName": "cpu", "replicas": 1,
                                        "minReplicas": 1, "maxReplicas": 1})
    return rc


def ray_job() -> dict[str, Any]:
    job = sample("ray-job.volcano-scheduler-queue.yaml", "RayJob")
    job["metadata"] = {"name": "nightly-embed", "namespace": NS, "labels": job["metadata"]["labels"]}
    job["status"] = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "rayClusterName": "nightly-embed-x7k2p",
                     "startTime": "2026-11-01T00:31:00Z", "endTime": "2026-11-01T03:12:00Z"}
    return job


def ray_service() -> dict[str, Any]:
    spec = copy.deepcopy(gpu_cluster("x", autoscaling=True)["spec"])
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "summarizer", "namespace": NS},
            "spec": {"rayClusterConfig": spec,
                     "serveConfigV2": "applications:\n- name: app\n  import_path: app:deployment\n"}}


def deployment(name: str = "summarizer-preview", replicas: int = 1) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "ml-demo"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "serve", "image": "vllm/vllm-openai:v0.6.3",
                                                           "resources": {"limits": {"nvidia.com/gpu": 1},
                                                                         "requests": {"nvidia.com/gpu": 1}}}]}}}}


def job_rec() -> Recommendation:
    return Recommendation(rule="ray", title="cluster outlives the job", namespace=NS, workload="nightly-embed",
                          target={"kind": "RayJob", "name": "nightly-embed", "namespace": NS,
                                  "ray_cluster": "nightly-embed-x7k2p"},
                          proposed={"change": "job_cleanup", "shutdown_after_finish": True, "ttl_after_finish_s": 300})


def workers_rec(kind: str = "RayCluster", name: str = "batch-infer", index: int = 1) -> Recommendation:
    return Recommendation(rule="ray", title="idle workers", namespace=NS, workload=name,
                          target={"kind": kind, "name": name, "namespace": NS, "ray_cluster": name,
                                  "group": "gpu-workers", "group_index": index},
                          proposed={"change": "worker_min_replicas", "min_replicas": 0, "autoscaling": True,
                                    "idle_timeout_s": 600})


def head_rec() -> Recommendation:
    return Recommendation(rule="ray", title="head holds a GPU", namespace=NS, workload="batch-infer",
                          target={"kind": "RayCluster", "name": "batch-infer", "namespace": NS,
                                  "ray_cluster": "batch-infer", "group": "headgroup"},
                          proposed={"change": "head_gpus", "head_gpus": 0})


def stz_rec(name: str = "summarizer-preview", replicas: int = 1, hours: list[int] | None = None) -> Recommendation:
    return Recommendation(rule="scale_to_zero", title="idle at night", namespace="ml-demo", workload=name,
                          target={"kind": "Deployment", "name": name, "namespace": "ml-demo"},
                          proposed={"replicas_when_idle": 0, "replicas_when_active": replicas, "cooldown_s": 1800,
                                    "polling_interval_s": 30, "prometheus_url": "http://prometheus:9090",
                                    "request_query": 'sum(rate(r{service="x"}[2m])) or vector(0)',
                                    "gpu_query": 'max(g{pod=~"x-.+"}) or vector(0)', "gpu_activation": "0.01",
                                    "active_hours_utc": hours, "scaler": "keda"})


def state_with(*objs: dict[str, Any]) -> ClusterState:
    st = ClusterState()
    for o in objs:
        st.add_object(copy.deepcopy(o), "live")
    return st


def test_vendored_crds_are_the_cited_ones(schemas: CrdSchemas) -> None:
    for name, digest in SHA256.items():
        assert hashlib.sha256(gzip.decompress((VENDORED / name).read_bytes())).hexdigest() == digest
        assert name in (VENDORED / "SOURCES.md").read_text()
    kinds = set(schemas.kinds())
    assert {("ray.io/v1", "RayCluster"), ("ray.io/v1", "RayJob"), ("ray.io/v1", "RayService"),
            ("keda.sh/v1alpha1", "ScaledObject")} <= kinds
    for obj in (gpu_cluster(), ray_job(), ray_service()):
        assert validate_object(obj, schemas) == [], obj["kind"]


def test_every_emitted_object_validates(schemas: CrdSchemas) -> None:
    st = state_with(gpu_cluster(), ray_job(), ray_service(), deployment(), deployment("multi", 3))
    for rec in (job_rec(), workers_rec(), head_rec(), workers_rec("RayService", "summarizer"), stz_rec(),
                stz_rec("multi", 1, [1, 2, 3, 22, 23])):
        validate_finding(rec.to_dict(), rec.id)
        (action,) = build_actions(rec, st)
        assert action["type"] in ("k8s-apply", "k8s-patch"), action
        base = st.get(action_ref(action))
        assert validate_action(action, schemas, base) == [], (rec.id, action)


def test_the_patches_say_what_they_change() -> None:
    st = state_with(gpu_cluster(), ray_job(), deployment("multi", 3))
    (job,) = build_actions(job_rec(), st)
    assert job["object"]["spec"] == {"shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": 300}
    (workers,) = build_actions(workers_rec(), st)
    assert workers["patch"] == [
        {"op": "test", "path": "/spec/workerGroupSpecs/1/groupName", "value": "gpu-workers"},
        {"op": "add", "path": "/spec/workerGroupSpecs/1/minReplicas", "value": 0},
        {"op": "add", "path": "/spec/enableInTreeAutoscaling", "value": True},
        {"op": "add", "path": "/spec/autoscalerOptions", "value": {"idleTimeoutSeconds": 600}}]
    assert "starts when the head pod is recreated" in workers["description"]
    # the group moved: found by name, not by the stale index
    (moved,) = build_actions(workers_rec(index=0), st)
    assert moved["patch"][0]["path"] == "/spec/workerGroupSpecs/1/groupName"
    (head,) = build_actions(head_rec(), st)
    assert [op["op"] for op in head["patch"]] == ["test", "remove", "remove", "add"]
    assert head["patch"][-1] == {"op": "add", "path": "/spec/headGroupSpec/rayStartParams/num-gpus", "value": "0"}
    (multi,) = build_actions(stz_rec("multi", 1, [22, 23, 0]), st)
    spec = multi["object"]["spec"]
    # three live replicas: zero when idle, all three when active (never fewer under load)
    assert (spec["idleReplicaCount"], spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 3, 3)
    assert [t["type"] for t in spec["triggers"]] == ["prometheus", "prometheus", "cron"]
    assert spec["triggers"][2]["metadata"] == {"timezone": "Etc/UTC", "start": "0 22 * * *", "end": "0 1 * * *",
                                               "desiredReplicas": "3"}
    assert spec["triggers"][0]["metadata"]["activationThreshold"] == "0"


def test_what_the_operators_refuse_is_refused(schemas: CrdSchemas) -> None:
    rc = gpu_cluster()
    rc["spec"]["workerGroupSpecs"][1]["idleTimeoutSeconds"] = 300  # needs autoscaler v2
    assert any("autoscaler v2 is not enabled" in e for e in validate_object(rc, schemas))
    job = ray_job()
    job["spec"]["ttlSecondsAfterFinished"] = 60  # a TTL without the shutdown
    assert any("cannot have TTLSecondsAfterFinished" in e for e in validate_object(job, schemas))
    so = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "s", "namespace": "n"},
          "spec": {"scaleTargetRef": {"name": "d"}, "minReplicaCount": 2, "maxReplicaCount": 2, "idleReplicaCount": 2,
                   "triggers": [{"type": "cron", "metadata": {"timezone": "Etc/UTC"}}]}}
    errors = validate_object(so, schemas)
    assert any("IdleReplicaCount=2 must be less" in e for e in errors) and any("cron needs" in e for e in errors)
    # a spec the builder cannot see gets a note, not a blind patch
    (note,) = build_actions(workers_rec(), ClusterState())
    assert note["type"] == "note" and "not loaded" in note["message"]


def test_apply_dry_runs_then_applies_and_rolls_back(tmp_path: Path) -> None:
    api = ApplyKubeAPI(crd_dir=CRD_DIRS)
    api.add("rayclusters", gpu_cluster())
    api.add("rayjobs", ray_job())
    api.add("deployments", deployment())
    with api, Warehouse(tmp_path / "wh.duckdb") as wh:
        before = {k: copy.deepcopy(v) for k, v in api.objects.items()}
        plan = Plan("plan-ray1", datetime.now(UTC), "test", (None, None), [job_rec(), workers_rec(), stz_rec()])
        attach_actions(plan, live_state(api), strict=True)
        kube = Kube(api.client())
        apply_plan(plan, kube, wh)
        writes = api.writes()
        assert all(dry for _, _, dry in writes[:3]) and not any(dry for _, _, dry in writes[3:])
        assert get(api.get_obj("rayjobs", NS, "nightly-embed"), "/spec/shutdownAfterJobFinishes") is True
        assert get(api.get_obj("rayclusters", NS, "batch-infer"), "/spec/workerGroupSpecs/1/minReplicas") == 0
        so = api.get_obj("scaledobjects", "ml-demo", "summarizer-preview")
        assert so is not None and so["spec"]["minReplicaCount"] == 0
        rollback("plan-ray1", kube, wh)
        assert api.get_obj("scaledobjects", "ml-demo", "summarizer-preview") is None  # created, so deleted
        # every request is one the apply ClusterRole grants (deploy/rbac)
        role = yaml.safe_load((Path(__file__).resolve().parents[1] / "deploy/rbac/apply-clusterrole.yaml").read_text())
        verbs = {"GET": "get", "PATCH": "patch", "DELETE": "delete", "POST": "create"}
        for r in api.requests:
            target = api.match([p for p in r.path.split("/") if p])
            if target is not None and target[2] is not None:
                res = target[0]
                assert any(res.group in g["apiGroups"] and res.plural in g["resources"] and verbs[r.method] in g["verbs"]
                           for g in role["rules"]), (r.method, r.path)
        for key in (("ray.io", "v1", "rayclusters"), ("ray.io", "v1", "rayjobs")):
            (now,), (then,) = api.objects[key], before[key]
            assert now["spec"] == then["spec"]


def test_keda_refuses_a_second_scaled_object_and_nothing_is_written(tmp_path: Path) -> None:
    api = ApplyKubeAPI(crd_dir=CRD_DIRS)
    api.add("deployments", deployment())
    api.add("scaledobjects", {"metadata": {"name": "theirs", "namespace": "ml-demo"},
                              "spec": {"scaleTargetRef": {"name": "summarizer-preview"},
                                       "triggers": [{"type": "cpu", "metadata": {"value": "50"}}]}})
    with api, Warehouse(tmp_path / "wh.duckdb") as wh:
        plan = Plan("plan-ray2", datetime.now(UTC), "test", (None, None), [stz_rec()])
        attach_actions(plan, live_state(api), strict=True)
        with pytest.raises(ApplyFailed, match="already managed by the ScaledObject 'theirs'"):
            apply_plan(plan, Kube(api.client()), wh)
        assert not [w for w in api.writes() if not w[2]]

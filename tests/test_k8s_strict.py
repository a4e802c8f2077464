"""The loopback API server refuses what kube-apiserver (and the charts' webhooks) refuse for the
objects gpuinsight writes, and core objects validate against the Kubernetes OpenAPI schemas."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuinsight.actions import ApplyFailed, Kube, apply_plan, attach_actions
from gpuinsight.actions.kube import Conflict, KubeError
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.validate import KUBERNETES_VERSION, core_schemas, validate_object
from gpuinsight.plan import Plan
from gpuinsight.warehouse import Warehouse
from tests.k8s_apply_server import ApplyKubeAPI, cluster_objects, live_state, seeded, unschedulable
from tests.test_actions_builders import CRDS, queue_rec

DEPLOY = Ref("Deployment", "prod-inference", "recsys-ranker")
GPU = "nvidia.com~1gpu"
SERVER = "/spec/template/spec/containers/1/resources"


@pytest.fixture()
def api() -> Iterator[ApplyKubeAPI]:
    server = seeded(crd_dir=CRDS)
    with server:
        yield server


def test_core_objects_against_the_openapi_schemas() -> None:
    assert KUBERNETES_VERSION == "1.35"  # the API of the pinned kubernetes client (<36)
    for name, objs in cluster_objects().items():
        kind = {"nodes": ("v1", "Node"), "deployments": ("apps/v1", "Deployment"),
                "configmaps": ("v1", "ConfigMap"), "pods": ("v1", "Pod")}.get(name)
        for obj in objs if kind else []:
            doc = {"apiVersion": kind[0], "kind": kind[1], **obj}
            assert core_schemas().validate(doc) == [], name
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", **copy.deepcopy(cluster_objects()["deployments"][0])}
    bad = copy.deepcopy(dep)
    bad["spec"]["template"]["spec"]["nodeSelectr"] = {"a": "b"}  # a typo: strict schemas refuse unknown fields
    bad["spec"]["template"]["spec"]["tolerations"] = [{"key": "k", "tolerationSeconds": "soon"}]
    errors = core_schemas().validate(bad)
    assert any("nodeSelectr" in e for e in errors) and any("tolerationSeconds" in e for e in errors)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "spec": {"unschedulable": "yes"}}
    assert any("/spec/unschedulable" in e for e in validate_object(node))
    # a Volcano Job's pod templates are core pod templates
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "n"},
           "spec": {"tasks": [{"name": "w", "template": {"spec": {"containers": [{"name": "c", "image": "i",
                                                                                   "resurces": {}}]}}}]}}
    assert any("resurces" in e for e in validate_object(job))


def _resources(limits: dict[str, Any], requests: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"op": "replace", "path": f"{SERVER}/limits", "value": limits},
            {"op": "replace", "path": f"{SERVER}/requests", "value": requests}]


@pytest.mark.parametrize("ops, message", [
    # a MIG move that removes only the limit: the request of an extended resource needs one
    ([{"op": "remove", "path": f"{SERVER}/limits/{GPU}"}], "Limit must be set for non overcommitable resources"),
    (_resources({"nvidia.com/mig-1g.10gb": "1"}, {"nvidia.com/mig-1g.10gb": "2"}), "must be equal to"),
    (_resources({"nvidia.com/gpu": "0.5"}, {}), "must be an integer"),
    ([{"op": "replace", "path": "/spec/selector/matchLabels/app", "value": "other"}], "field is immutable"),
    ([{"op": "add", "path": "/spec/template/spec/nodeSelectr", "value": {}}], "nodeSelectr"),
])
def test_refused_like_kube_apiserver(api: ApplyKubeAPI, ops: list[dict[str, Any]], message: str) -> None:
    kube = Kube(api.client())
    before = api.get_obj("deployments", "prod-inference", "recsys-ranker")
    with pytest.raises(KubeError, match=message) as info:
        kube.patch(DEPLOY, ops, "json")
    assert info.value.status == 422
    assert api.get_obj("deployments", "prod-inference", "recsys-ranker") == before
    swapped = _resources({"cpu": "4", "nvidia.com/mig-1g.10gb": "1"}, {"cpu": "2", "nvidia.com/mig-1g.10gb": "1"})
    kube.patch(DEPLOY, swapped, "json", dry_run=True)  # a proper MIG move passes


def test_webhooks_immutable_fields_and_conflicts(api: ApplyKubeAPI) -> None:
    kube = Kube(api.client())
    job = Ref("VolcanoJob", "training", "llm-train")
    with pytest.raises(KubeError, match='refused: admission webhook "validatejob.volcano.sh" denied'):
        kube.patch(job, [{"op": "add", "path": "/spec/tasks/0/template/spec/nodeSelector", "value": {"a": "b"}}],
                   "json", dry_run=True)
    kube.patch(job, [{"op": "replace", "path": "/spec/tasks/0/replicas", "value": 3}], "json", dry_run=True)
    pod = Ref("Pod", "batch", "etl-0")
    with pytest.raises(KubeError, match="pod updates may not change fields"):
        kube.patch(pod, [{"op": "add", "path": "/spec/nodeSelector", "value": {"a": "b"}}], "json")
    kube.patch(pod, [{"op": "add", "path": "/spec/tolerations", "value": [{"key": "k", "operator": "Exists"}]}],
               "json", dry_run=True)  # adding a toleration to a pod is allowed
    stale = api.get_obj("queues", None, "research")["metadata"]["resourceVersion"]
    kube.apply({**Ref("Queue", None, "research").skeleton(), "spec": {"weight": 5}})
    with pytest.raises(Conflict, match="the object has been modified"):
        kube.apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                    "metadata": {"name": "research", "resourceVersion": stale}, "spec": {"weight": 6}})
    assert api.get_obj("queues", None, "research")["spec"]["weight"] == 5


def test_a_change_between_the_drift_check_and_the_write_is_a_conflict(api: ApplyKubeAPI, tmp_path: Path) -> None:
    plan = Plan("plan-race", datetime.now(UTC), None, (None, None), [queue_rec()])
    attach_actions(plan, live_state(api), strict=True)

    class Racing(Kube):
        def apply(self, obj: dict[str, Any], *, dry_run: bool = False, force: bool = False) -> dict[str, Any]:
            if not dry_run:  # someone relabels the queue right before gpuinsight's write
                Kube(api.client(), field_manager="someone").patch(
                    Ref("Queue", None, "research"), {"metadata": {"labels": {"team": "a"}}}, "merge")
            return super().apply(obj, dry_run=dry_run, force=force)

    with Warehouse(tmp_path / "wh.duckdb") as wh, pytest.raises(ApplyFailed, match="the object has been modified"):
        apply_plan(plan, Racing(api.client()), wh)
    assert api.get_obj("queues", None, "research")["spec"]["weight"] == 4


def test_the_scheduling_model(api: ApplyKubeAPI) -> None:
    spec = {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            "nodeSelector": {"gpu": "h100"}}  # only the nodes the NodePool launches carry it
    assert "untolerated taint nvidia.com/gpu" in unschedulable(api, spec)
    spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert unschedulable(api, spec) is None
    mig = {**spec, "nodeSelector": {"kubernetes.io/hostname": "h100-2"},
           "containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}]}
    assert "no nvidia.com/mig-1g.10gb" in unschedulable(api, mig)

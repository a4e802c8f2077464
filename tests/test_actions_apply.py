"""apply_plan / rollback against the loopback fake API server (tests/k8s_apply_server.py).

Asserts which requests are made and in which order: preflight discovery and GETs, every dry
run before the first real write, phase order, stop at the first error, audit rows, and that a
rollback restores every object.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuinsight.actions import ApplyFailed, Kube, apply_plan, attach_actions, rollback
from gpuinsight.actions.audit import rows
from gpuinsight.actions.patching import json_patch
from gpuinsight.actions.validate import validate_action
from gpuinsight.errors import BadInput, NotFound
from gpuinsight.plan import Plan, Recommendation
from gpuinsight.warehouse import Warehouse
from tests.k8s_apply_server import ApplyKubeAPI, live_state, schemas_for, seeded
from tests.test_actions_builders import CRDS, all_recs, binpack_rec, idle_rec, mig_rec, queue_rec

PHASE_OF_PATH = [("/configmaps/", 0), ("/queues/", 0), ("/nodepools/", 1), ("/nodes/", 2), ("/deployments/", 3),
                 ("/jobs/", 3), ("/eviction", 5)]


@pytest.fixture()
def api() -> Iterator[ApplyKubeAPI]:
    server = seeded(crd_dir=CRDS)
    with server:
        yield server


@pytest.fixture()
def wh(tmp_path: Path) -> Iterator[Warehouse]:
    w = Warehouse(tmp_path / "wh.duckdb")
    yield w
    w.close()


def make_plan(api: ApplyKubeAPI, recs: list[Recommendation], plan_id: str = "plan-t1",
              created_at: datetime | None = None) -> Plan:
    plan = Plan(plan_id, created_at or datetime.now(UTC), "test", (None, None), recs)
    attach_actions(plan, live_state(api), strict=True)
    return plan


def snapshot(api: ApplyKubeAPI) -> dict[tuple[str, str | None, str], dict[str, Any]]:
    out = {}
    with api.lock:
        for (_g, _v, plural), objs in api.objects.items():
            for obj in objs:
                o = copy.deepcopy(obj)
                for key in ("resourceVersion", "generation", "managedFields"):
                    o["metadata"].pop(key, None)
                # mig-manager's progress label is its own: it stays after a rollback, as on a real node
                (o["metadata"].get("labels") or {}).pop("nvidia.com/mig.config.state", None)
                out[(plural, o["metadata"].get("namespace"), o["metadata"]["name"])] = o
    return out


def phase(path: str) -> int:
    for fragment, index in PHASE_OF_PATH:
        if fragment in path:
            return index if not path.endswith(("/nodes/h100-3",)) else 4
    raise AssertionError(path)


def test_apply_dry_runs_everything_first_then_applies_in_order_and_rolls_back(api: ApplyKubeAPI,
                                                                             wh: Warehouse) -> None:
    plan = make_plan(api, all_recs())
    before = snapshot(api)
    api.requests.clear()
    result = apply_plan(plan, Kube(api.client()), wh)
    writes = api.writes()
    dry = [w for w in writes if w[2]]
    real = [w for w in writes if not w[2]]
    assert writes.index(real[0]) == len(dry), "every dry run comes before the first real write"
    assert [(m, p) for m, p, _ in dry] == [(m, p) for m, p, _ in real], "the same requests, dry then real"
    assert [phase(p) for _, p, _ in real] == sorted(phase(p) for _, p, _ in real)
    first_write = next(i for i, r in enumerate(api.requests) if r.method != "GET")
    assert all(r.method == "GET" for r in api.requests[:first_write])  # discovery + drift reads
    assert any(r.path == "/apis/karpenter.sh/v1" for r in api.requests[:first_write])
    for r in api.requests:
        if r.method == "PATCH" and r.content_type == "application/apply-patch+yaml":
            assert r.query["fieldManager"] == ["gpuinsight"] and r.query["force"] == ["false"]
    assert {r.content_type for r in api.requests if r.method == "PATCH"} == {
        "application/apply-patch+yaml", "application/json-patch+json"}

    assert api.get_obj("queues", None, "research")["spec"]["weight"] == 1
    assert api.get_obj("nodes", None, "h100-1")["metadata"]["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"
    assert api.get_obj("nodes", None, "h100-3")["spec"]["unschedulable"] is True
    server = api.get_obj("deployments", "prod-inference", "recsys-ranker")["spec"]["template"]["spec"]["containers"][1]
    assert server["resources"]["limits"] == {"cpu": "4", "nvidia.com/mig-1g.10gb": "1"}
    assert api.get_obj("nodepools", None, "gpu-h100-spot") is not None
    assert api.get_obj("pods", "training", "llm-train-worker-0") is None  # evicted, with its gang
    assert api.get_obj("deployments", "research", "notebook")["spec"]["replicas"] == 0

    audit = rows(wh, plan.plan_id)
    assert [r["status"] for r in audit] == ["applied"] * len(result.steps) == ["applied"] * len(audit)
    queue_row = next(r for r in audit if r["target"] == "Queue/research")
    assert queue_row["operation"] == "apply"
    assert queue_row["previous"]["fields"] == {"/spec/weight": 4, "/spec/capability/nvidia.com~1gpu": 32,
                                               "/spec/deserved/nvidia.com~1gpu": 24}  # only what the change touches
    assert queue_row["applied"]["after"]["/spec/weight"] == 1
    mig_row = next(r for r in audit if r["target"] == "Deployment/prod-inference/recsys-ranker")
    assert set(mig_row["previous"]["fields"]) == {
        f"/spec/template/spec/containers/1/resources/{s}/nvidia.com~1{r}" for s in ("limits", "requests")
        for r in ("gpu",)}, "one container's GPU fields, not the containers (their env, other containers)"
    assert mig_row["previous"]["absent"] == sorted(
        ["/spec/template/spec/nodeSelector", "/spec/template/spec/containers/1/resources/limits/nvidia.com~1mig-1g.10gb",
         "/spec/template/spec/containers/1/resources/requests/nvidia.com~1mig-1g.10gb"])
    # a submitted Volcano Job is not patched: its spot change is a patch for its manifest
    assert api.get_obj("vcjobs", "training", "llm-train") == {**before[("jobs", "training", "llm-train")],
                                                              "metadata": api.get_obj("vcjobs", "training", "llm-train")["metadata"]}
    assert next(r for r in audit if r["target"] == "NodePool/gpu-h100-spot")["previous"] is None
    stored = wh.sql("SELECT count(*) AS n FROM recommendations WHERE plan_id = ?", [plan.plan_id]).item()
    assert stored == len(plan.recommendations)

    with pytest.raises(BadInput, match="already applied"):
        apply_plan(plan, Kube(api.client()), wh)

    api.requests.clear()
    undone = rollback(plan.plan_id, Kube(api.client()), wh)
    assert [s.seq for s in undone.steps] == sorted((s.seq for s in undone.steps), reverse=True)
    rb = [w for w in api.writes()]
    assert all(w[2] for w in rb[: len(rb) // 2]) and not any(w[2] for w in rb[len(rb) // 2:])
    after = snapshot(api)
    evicted = {("pods", "training", "llm-train-worker-0"), ("pods", "training", "llm-train-worker-1")}
    assert set(before) - set(after) == evicted
    assert set(after) == set(before) - evicted, "the created NodePool is deleted again"
    for key, obj in before.items():
        if key not in evicted:
            assert after[key] == obj, key
    statuses = {r["target"]: r["status"] for r in rows(wh, plan.plan_id)}
    assert statuses.pop("Node/h100-3") in ("rolled-back", "irreversible")
    assert set(statuses.values()) <= {"rolled-back", "irreversible"}
    assert [r["status"] for r in rows(wh, plan.plan_id) if r["operation"] == "drain"] == ["irreversible"]
    with pytest.raises(NotFound, match="nothing applied to roll back"):
        rollback(plan.plan_id, Kube(api.client()), wh)


def test_changes_to_a_submitted_volcano_job_are_for_its_manifest(api: ApplyKubeAPI, wh: Warehouse) -> None:
    """MIG, sharing and idle findings on a Volcano Job: its webhook refuses every spec change but
    minAvailable and replicas, so the job's step is a patch for its manifest (or a note) and the
    apply changes only the node and the device-plugin config, through the strict server."""
    job = {"kind": "VolcanoJob", "namespace": "training", "name": "llm-train"}
    mig = mig_rec()
    mig.target, mig.namespace, mig.workload = job, "training", "llm-train"
    group = [job, {"kind": "Deployment", "namespace": "prod-search", "name": "embedder"}]
    mps = Recommendation(rule="mps", title="share an L4", namespace="training", workload="llm-train",
                         target={"kind": "SharedGroup", "workloads": group, "member": job},
                         proposed={"sharing": "mps", "replicas": 2, "node": "l4-1", "config_name": "mps-2x"})
    plan = make_plan(api, [mig, mps, idle_rec("VolcanoJob", "training", "llm-train")])
    before = snapshot(api)
    manifest = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", **before[("jobs", "training", "llm-train")]}
    result = apply_plan(plan, Kube(api.client()), wh)
    assert [s.target for s in result.steps] == ["ConfigMap/gpu-operator/device-plugin-config", "Node/h100-1",
                                                "Node/l4-1"]
    assert snapshot(api)[("jobs", "training", "llm-train")] == before[("jobs", "training", "llm-train")]
    assert api.get_obj("nodes", None, "h100-1")["metadata"]["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"
    mig_step, pin, idle = (next(a for a in r.actions if a["target"] == "VolcanoJob/training/llm-train")
                           for r in plan.recommendations)
    assert mig_step["type"] == pin["type"] == "manifest-patch" and "resubmit" in mig_step["description"]
    worker = json_patch(manifest, mig_step["patch"])["spec"]["tasks"][0]["template"]["spec"]
    assert worker["containers"][0]["resources"] == {"limits": {"nvidia.com/mig-1g.10gb": 4},
                                                    "requests": {"nvidia.com/mig-1g.10gb": 4}}
    assert worker["nodeSelector"] == {"nvidia.com/mig.config": "all-1g.10gb"}
    shared = json_patch(manifest, pin["patch"])["spec"]["tasks"][0]["template"]["spec"]
    assert shared["nodeSelector"] == {"nvidia.com/device-plugin.config": "mps-2x"}
    schemas = schemas_for(CRDS)
    assert validate_action(mig_step, schemas, manifest) == validate_action(pin, schemas, manifest) == []
    assert idle["type"] == "note" and "vcctl job suspend -n training -N llm-train" in idle["message"]
    assert "kubectl get vcjob -n training llm-train -o yaml > llm-train.yaml" in idle["message"]


def test_a_conflict_in_the_dry_run_changes_nothing(api: ApplyKubeAPI, wh: Warehouse) -> None:
    api.own("queues", None, "research", {"/spec/weight": "helm"})
    plan = make_plan(api, [mig_rec(), queue_rec()])
    api.requests.clear()
    with pytest.raises(ApplyFailed, match=r'dry run: dry-run apply Queue/research: conflict: .*"helm".*\.spec\.weight'
                                          r".*nothing was changed"):
        apply_plan(plan, Kube(api.client()), wh)
    assert not [w for w in api.writes() if not w[2]]
    assert {r["status"] for r in rows(wh, plan.plan_id)} == {"dry-run-failed", "not-applied"}
    with pytest.raises(NotFound):
        rollback(plan.plan_id, Kube(api.client()), wh)


@pytest.mark.parametrize("status, words", [(409, "conflict"), (403, "forbidden")])
def test_an_apply_error_stops_and_what_was_applied_rolls_back(api: ApplyKubeAPI, wh: Warehouse, status: int,
                                                             words: str) -> None:
    plan = make_plan(api, [queue_rec(), mig_rec(), idle_rec()])
    before = snapshot(api)
    api.fault("PATCH", r"/nodes/h100-1$", status, dry_run=False)
    api.requests.clear()
    with pytest.raises(ApplyFailed) as info:
        apply_plan(plan, Kube(api.client()), wh)
    message = str(info.value)
    assert words in message and "Node/h100-1" in message
    assert "1 change(s) were applied before it: roll back with `gpuinsight rollback plan-t1`" in message
    real = [p for _, p, dry in api.writes() if not dry]
    assert real[-1].endswith("/nodes/h100-1") and len(real) == 2, "nothing after the failing request"
    assert [r["status"] for r in rows(wh, plan.plan_id)] == ["applied", "failed", "not-applied", "not-applied"]
    assert [s.status for s in info.value.result.steps] == ["applied", "failed", "not-applied", "not-applied"]
    rollback(plan.plan_id, Kube(api.client()), wh)
    assert snapshot(api) == before


def test_a_missing_crd_is_named_and_nothing_is_written(api: ApplyKubeAPI, wh: Warehouse) -> None:
    plan = make_plan(api, [queue_rec(), binpack_rec()])
    api.remove_api("nodepools")
    api.requests.clear()
    with pytest.raises(ApplyFailed, match=r"karpenter.sh/v1 nodepools is not served by this cluster"):
        apply_plan(plan, Kube(api.client()), wh)
    assert api.writes() == []


def test_drift_and_age_are_refused(api: ApplyKubeAPI, wh: Warehouse) -> None:
    plan = make_plan(api, [queue_rec(), idle_rec()])
    with api.lock:
        queue = next(o for o in api.objects[("scheduling.volcano.sh", "v1beta1", "queues")]
                     if o["metadata"]["name"] == "research")
        queue["spec"]["weight"] = 6
    with pytest.raises(ApplyFailed, match=r"cluster changed since the plan: Queue/research /spec/weight is 6, "
                                          r"the plan saw 4"):
        apply_plan(plan, Kube(api.client()), wh)
    assert api.writes() == []
    old = make_plan(api, [idle_rec()], "plan-old", datetime.now(UTC) - timedelta(hours=30))
    with pytest.raises(BadInput, match="older than 1 day"):
        apply_plan(old, Kube(api.client()), wh)
    apply_plan(old, Kube(api.client()), wh, max_age=timedelta(days=2))


def test_resource_version_drift(api: ApplyKubeAPI, wh: Warehouse) -> None:
    plan = make_plan(api, [queue_rec()])
    with api.lock:
        queue = next(o for o in api.objects[("scheduling.volcano.sh", "v1beta1", "queues")]
                     if o["metadata"]["name"] == "research")
        queue["metadata"]["resourceVersion"] = "999"   # e.g. a status update
    with pytest.raises(ApplyFailed, match=r"Queue/research changed \(resourceVersion"):
        apply_plan(plan, Kube(api.client()), wh, strict=True)
    apply_plan(plan, Kube(api.client()), wh)  # fields and generation unchanged: not drift by default


def test_refused_recommendations_block_apply(api: ApplyKubeAPI, wh: Warehouse) -> None:
    plan = Plan("plan-split", datetime.now(UTC), None, (None, None), [binpack_rec(pods=("llm-train-worker-0",))])
    attach_actions(plan, live_state(api))
    with pytest.raises(BadInput, match="would split gang"):
        apply_plan(plan, Kube(api.client()), wh)
    assert api.writes() == []


def test_rollback_does_not_overwrite_later_changes(api: ApplyKubeAPI, wh: Warehouse) -> None:
    plan = make_plan(api, [queue_rec()])
    apply_plan(plan, Kube(api.client()), wh)
    with api.lock:
        queue = next(o for o in api.objects[("scheduling.volcano.sh", "v1beta1", "queues")]
                     if o["metadata"]["name"] == "research")
        queue["spec"]["weight"] = 3
    with pytest.raises(ApplyFailed, match=r"rollback refused: Queue/research /spec/weight changed after the apply "
                                          r"\(now 3\); pass --force to restore anyway"):
        rollback(plan.plan_id, Kube(api.client()), wh)
    rollback(plan.plan_id, Kube(api.client()), wh, force=True)
    assert api.get_obj("queues", None, "research")["spec"]["weight"] == 4


def test_the_rollback_command_takes_the_force_its_refusal_asks_for(api: ApplyKubeAPI, wh: Warehouse,
                                                                     tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gpuinsight.cli import main

    plan = make_plan(api, [queue_rec()])
    apply_plan(plan, Kube(api.client()), wh)
    wh.close()
    with api.lock:
        next(o for o in api.objects[("scheduling.volcano.sh", "v1beta1", "queues")]
             if o["metadata"]["name"] == "research")["spec"]["weight"] = 3
    env = {"KUBECONFIG": str(api.write_kubeconfig(tmp_path, context="fake"))}
    args = ["rollback", plan.plan_id, "--context", "fake", "--db", str(tmp_path / "wh.duckdb")]
    res = CliRunner().invoke(main, args, env=env)
    assert res.exit_code == 1 and "pass --force to restore anyway" in res.output
    res = CliRunner().invoke(main, [*args, "--force"], env=env)
    assert res.exit_code == 0, res.output
    assert api.get_obj("queues", None, "research")["spec"]["weight"] == 4
    assert res.output.strip().endswith(f"{plan.plan_id}: 1 rolled-back")


def test_only_applies_the_chosen_recommendations(api: ApplyKubeAPI, wh: Warehouse) -> None:
    recs = [queue_rec(), idle_rec()]
    plan = make_plan(api, recs)
    result = apply_plan(plan, Kube(api.client()), wh, only={recs[1].id})
    assert [s.target for s in result.steps] == ["Deployment/research/notebook"]
    assert api.get_obj("queues", None, "research")["spec"]["weight"] == 4
    with pytest.raises(NotFound):
        apply_plan(plan, Kube(api.client()), wh, only={"nope"})


def test_kube_client_basics(api: ApplyKubeAPI) -> None:
    from gpuinsight.actions.kube import Forbidden
    from gpuinsight.actions.refs import Ref
    from gpuinsight.plan.vocabulary import kind_info

    kube = Kube(api.client())
    assert kube.get(Ref("Queue", None, "nope")) is None
    assert kube.get(Ref("Queue", None, "research"))["spec"]["weight"] == 4
    assert kube.served(kind_info("Pod"), "eviction") and not kube.served(kind_info("Pod"), "binding")
    api.fault("GET", "/deployments/", 403)
    with pytest.raises(Forbidden, match="apply-clusterrole"):
        kube.get(Ref("Deployment", "research", "notebook"))
    bad = Kube(api.client())
    bad.api.configuration.host = "http://127.0.0.1:9"
    with pytest.raises(Exception, match="cannot reach the API server"):
        bad.get(Ref("Queue", None, "research"))


def _allowed(role: dict[str, Any], group: str, resource: str, verb: str, name: str | None) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
               and (not r.get("resourceNames") or name in r["resourceNames"]) for r in role["rules"])


def test_the_rbac_roles_cover_exactly_what_collect_and_apply_do(api: ApplyKubeAPI, wh: Warehouse) -> None:
    import yaml

    rbac = Path(__file__).resolve().parents[1] / "deploy" / "rbac"
    collect = yaml.safe_load((rbac / "collect-clusterrole.yaml").read_text())
    apply_role = yaml.safe_load((rbac / "apply-clusterrole.yaml").read_text())
    assert collect["metadata"]["name"] == "gpuinsight-collect"
    assert {v for r in collect["rules"] for v in r["verbs"]} == {"get", "list", "watch"}
    assert {(g, res) for r in collect["rules"] for g in r["apiGroups"] for res in r["resources"]} == {
        ("", "nodes"), ("", "pods"), ("", "events"), ("policy", "poddisruptionbudgets"),
        ("scheduling.volcano.sh", "queues"), ("scheduling.volcano.sh", "podgroups"), ("batch.volcano.sh", "jobs"),
        ("karpenter.sh", "nodepools"), ("ray.io", "rayclusters"), ("ray.io", "rayjobs"), ("ray.io", "rayservices"),
        ("keda.sh", "scaledobjects"), ("kueue.x-k8s.io", "clusterqueues"), ("kueue.x-k8s.io", "localqueues"),
        ("kueue.x-k8s.io", "resourceflavors"), ("kueue.x-k8s.io", "workloads"), ("resource.k8s.io", "resourceclaims")}
    assert not {v for r in apply_role["rules"] for v in r["verbs"]} & {"*", "update", "deletecollection", "escalate"}

    plan = make_plan(api, all_recs())
    api.requests.clear()
    apply_plan(plan, Kube(api.client()), wh)
    rollback(plan.plan_id, Kube(api.client()), wh)
    seen = set()
    for r in api.requests:
        parts = [p for p in r.path.split("/") if p]
        target = api.match(parts) if not r.path.endswith("/eviction") else (api._res("pods"), parts[3], parts[5])
        if target is None or target[2] is None:
            continue  # discovery: non-resource URLs every authenticated identity may read
        res, _ns, name = target
        resource = res.plural + ("/eviction" if r.path.endswith("/eviction") else "")
        verb = {"GET": "get", "PATCH": "patch", "DELETE": "delete", "POST": "create"}[r.method]
        assert _allowed(apply_role, res.group, resource, verb, name), (r.method, r.path)
        seen.add((res.group, resource, verb))
    assert _allowed(apply_role, "karpenter.sh", "nodepools", "create", "gpu-h100-spot")  # SSA creating the pool
    assert ("", "pods/eviction", "create") in seen and ("karpenter.sh", "nodepools", "delete") in seen

"""Plans as files (hand edits -> BadInput naming the field), emit, diff, warehouse state, CLI glue."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
import yaml

import gpuinsight
from gpuinsight.actions import (
    ApplyFailed,
    ClusterState,
    Kube,
    apply_plan,
    attach_actions,
    diff_plan,
    emit,
    load_plan,
    plan_to_json,
    prepare_plan,
)
from gpuinsight.actions.prepare import actions_from_warehouse
from gpuinsight.api import rollback_text
from gpuinsight.errors import BadInput
from gpuinsight.plan import Plan
from gpuinsight.warehouse import Warehouse
from tests.k8s_apply_server import live_state, seeded
from tests.test_actions_builders import all_recs, binpack_rec, idle_rec, mig_rec, mps_rec, queue_rec


def saved_plan(tmp_path: Path) -> tuple[Path, dict]:
    plan = Plan("plan-file", datetime.now(UTC), "cat", (None, None), [queue_rec(), idle_rec()])
    attach_actions(plan, live_state(seeded()), strict=True)
    data = plan_to_json(plan)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path, data


def test_plan_file_round_trip(tmp_path: Path) -> None:
    path, data = saved_plan(tmp_path)
    plan = load_plan(path)
    assert plan.plan_id == "plan-file" and plan_to_json(plan) == data
    bare = load_plan(json.dumps(data["recommendations"]), plan_id="p2", created_at=datetime.now(UTC))
    assert [r.id for r in bare.recommendations] == [r.id for r in plan.recommendations]


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["recommendations"][0]["proposed"].update(weight=-3), r"recommendations\[0\]\.proposed\.weight: -3"),
    (lambda d: d["recommendations"][0].update(rule="magic"), r"recommendations\[0\]\.rule: unknown rule 'magic'"),
    (lambda d: d["recommendations"][0]["proposed"].update(capability={"nvidia.com/gpu": "lots"}),
     r"recommendations\[0\]\.proposed\.capability\.nvidia\.com/gpu: 'lots' is not a quantity"),
    (lambda d: d["recommendations"][0]["proposed"].update(deserved={"nvidia.com/gpu": True}),
     r"proposed\.deserved\.nvidia\.com/gpu"),
    (lambda d: d["recommendations"][0]["actions"][0]["object"]["spec"].update(weight=0),
     r"recommendations\[0\]\.actions\[0\]\.object\.spec\.weight: 0 is out of range"),
    (lambda d: d["recommendations"][1]["actions"][0].update(type="kubectl-exec"),
     r"recommendations\[1\]\.actions\[0\]\.type: 'kubectl-exec'"),
    (lambda d: d["recommendations"][1]["proposed"].update(replicas="zero"),
     r"recommendations\[1\]\.proposed\.replicas: 'zero' is not an integer"),
    (lambda d: d.pop("created_at"), r"created_at: missing"),
])
def test_hand_edited_plan_is_refused_naming_the_field(tmp_path: Path, edit, field: str) -> None:
    path, data = saved_plan(tmp_path)
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(BadInput, match=field):
        load_plan(path)


def test_an_edited_plan_in_memory_is_refused_by_apply(tmp_path: Path) -> None:
    path, _ = saved_plan(tmp_path)
    plan = load_plan(path)
    plan.recommendations[0].proposed["capability"] = {"nvidia.com/gpu": "eight"}
    with Warehouse(tmp_path / "wh.duckdb") as wh, pytest.raises(BadInput, match="capability"):
        apply_plan(plan, None, wh)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(BadInput, match="broken.json: not JSON"):
        load_plan(tmp_path / "broken.json")


def test_emit_writes_every_step_in_order(tmp_path: Path) -> None:
    state = live_state(seeded())
    plan = Plan("plan-emit", datetime.now(UTC), None, (None, None),
                [*all_recs(), mig_rec(node="h100-3", layout="all-3g.40gb")])
    plan.recommendations[-1].id = "mig-h100-3"
    attach_actions(plan, state)
    written = emit(plan, tmp_path / "out")
    top = tmp_path / "out"
    assert not (top / "kustomization.yaml").exists(), "kubectl apply -k DIR must not perform half the plan"
    assert sorted(p.name for p in top.iterdir() if p.is_dir()) == ["default"]  # a folder per cluster
    out = top / "default"
    assert not (out / "kustomization.yaml").exists()
    steps = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert steps == ["01-config", "02-node-pool", "03-label", "04-workload", "05-workload-patch", "06-manifest",
                     "07-cordon-evict"]
    kinds = []
    for step in steps[:4]:  # the server-side apply steps are kustomizations of their own objects
        kust = yaml.safe_load((out / step / "kustomization.yaml").read_text())
        assert kust["kind"] == "Kustomization"
        assert sorted(kust["resources"]) == sorted(p.name for p in (out / step).glob("*.yaml")
                                                   if p.name != "kustomization.yaml")
        kinds += [yaml.safe_load((out / step / f).read_text())["kind"] for f in kust["resources"]]
    assert sorted(kinds) == sorted(["ConfigMap", "ConfigMap", "Queue", "NodePool", "NodePool", "Node", "Node", "Node",
                                    "Deployment", "Deployment", "Deployment"])
    cordon = [p for p in (out / "07-cordon-evict").iterdir()]
    assert not (out / "07-cordon-evict" / "kustomization.yaml").exists()
    h100_3 = yaml.safe_load(next(p for p in cordon if p.suffix == ".yaml").read_text())
    assert h100_3 == {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "h100-3"},
                      "spec": {"unschedulable": True}}
    labels = yaml.safe_load(next((out / "03-label").glob("*-node-h100-3.yaml")).read_text())
    assert labels["metadata"]["labels"] == {"nvidia.com/mig.config": "all-3g.40gb"}  # labelled before cordoned
    evictions = sorted(json.loads(p.read_text())["metadata"]["name"] for p in cordon if p.suffix == ".json")
    assert evictions == ["llm-train-worker-0", "llm-train-worker-1"]
    assert len(list((out / "05-workload-patch").glob("*.json"))) == 2  # the two MIG workload patches
    assert len(list((out / "06-manifest").glob("*.json"))) == 1       # the Volcano job's spot change
    script = (out / "steps.sh").read_text()
    order = [script.index(f"if step {n} ") for n in range(1, 8)]
    assert order == sorted(order)
    assert script.index("-k 01-config") < script.index("--type=json") < script.index("/eviction")
    assert "/api/v1/namespaces/training/pods/llm-train-worker-0/eviction" in script
    readme = (out / "README.md").read_text()
    assert "kubectl patch --local" in readme and "### GPU sharing (MPS, time-slicing)" in readme
    assert "`spec.devicePlugin.config.name: device-plugin-config`" in readme
    assert 'CONTEXT="${KUBE_CONTEXT:-}"' in script and '"$KUBECTL" --context "$CONTEXT" patch' in script
    assert load_plan(top / "plan.json").plan_id == "plan-emit"
    assert sorted(str(p.relative_to(top)) for p in top.rglob("*") if p.is_file()) == sorted(
        str(p.relative_to(top)) for p in written)


def test_diff_shows_only_the_touched_fields() -> None:
    state = live_state(seeded())
    plan = Plan("plan-diff", datetime.now(UTC), None, (None, None),
                [queue_rec(), mps_rec(), binpack_rec(pods=("llm-train-worker-0",))])
    attach_actions(plan, state)
    text = diff_plan(plan, state)
    assert "--- Queue/research (live)" in text and "+++ Queue/research (planned)" in text
    assert "  -  weight: 4" in text and "  +  weight: 1" in text
    assert "  +  mps-2x: |" in text and "  +    sharing:" in text
    assert "  +    nvidia.com/device-plugin.config: mps-2x" in text
    assert "REFUSED: " in text and "would split gang" in text
    assert "status" not in text


def _warehouse_rows(wh: Warehouse, weight: int = 4) -> None:
    wh.merge("queues", pl.DataFrame([{"cluster": "default", "name": "research", "weight": weight,
                                      "capability": json.dumps({"nvidia.com/gpu": 32}),
                                      "deserved": json.dumps({"nvidia.com/gpu": 24}),
                                      "spec": json.dumps({"weight": weight, "capability": {"nvidia.com/gpu": 32},
                                                          "deserved": {"nvidia.com/gpu": 24}})}]),
             ["cluster", "name"])
    wh.merge("nodes", pl.DataFrame([{"cluster": "default", "node": "h100-1", "node_pool": "gpu-h100-od",
                                     "node_pool_kind": "karpenter", "gpu_count": 8,
                                     "labels": json.dumps({"nvidia.com/mig.config": "all-disabled"})}]),
             ["cluster", "node"])


def test_actions_from_the_warehouse_detect_live_drift(tmp_path: Path) -> None:
    with Warehouse(tmp_path / "wh.duckdb") as wh, seeded() as api:
        _warehouse_rows(wh, weight=6)  # what the rules saw differs from the live cluster (4)
        plan = Plan("plan-wh", datetime.now(UTC), None, (None, None), [queue_rec(), mig_rec()])
        state = actions_from_warehouse(wh, plan)["default"]  # the findings' cluster
        assert state.sources["Queue/research"] == "warehouse"
        queue_action = plan.recommendations[0].actions[0]
        assert queue_action["observed"]["fields"]["/spec/weight"] == 6
        assert queue_action["observed"]["resourceVersion"] is None
        mig_patch = plan.recommendations[1].actions[-1]
        assert "workload spec not observed" in mig_patch["description"]
        with pytest.raises(ApplyFailed, match=r"/spec/weight is 4, the plan saw 6"):
            apply_plan(plan, Kube(api.client()), wh)
        state = prepare_plan(plan, wh, kube=Kube(api.client()))["default"]  # rebuilt with live workload specs
        assert "workload spec not observed" not in plan.recommendations[1].actions[-1]["description"]
        assert state.sources["Queue/research"] == "live"


def test_dumped_state_diff(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    api = seeded()
    (dump / "queues.json").write_text(json.dumps({"kind": "List", "items": api.objects[
        ("scheduling.volcano.sh", "v1beta1", "queues")]}))
    (dump / "nodes.yaml").write_text(yaml.safe_dump({"kind": "List", "items": api.objects[("", "v1", "nodes")]}))
    state = ClusterState.from_dump_dir(dump)
    assert state.sources["Queue/research"] == "dump" and "h100-1" in state.nodes
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        plan = Plan("plan-dump", datetime.now(UTC), None, (None, None), [queue_rec()])
        view = prepare_plan(plan, wh, dump_dir=dump)
        assert "--- Queue/research (dump)" in diff_plan(plan, view)
    with pytest.raises(BadInput, match="not a directory"):
        ClusterState.from_dump_dir(tmp_path / "nope")


def test_facade_apply_and_rollback_through_a_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with seeded() as api:
        monkeypatch.setenv("KUBECONFIG", str(api.write_kubeconfig(tmp_path)))
        with gpuinsight.open(tmp_path / "wh.duckdb") as gi:
            plan = Plan("plan-cli", datetime.now(UTC), None, (None, None), [queue_rec(), idle_rec(), mps_rec()])
            assert "+  weight: 1" in gi.diff(plan, gi.prepare(plan, contexts="fake"))
            text = gi.apply(plan, contexts="fake").text()
            assert "plan-cli: 6 applied; undo with: gpuinsight rollback plan-cli" in text
            assert api.get_obj("queues", None, "research")["spec"]["weight"] == 1
            assert all(r.authorized for r in api.requests)
            text = rollback_text(gi.rollback("plan-cli", contexts="fake"))
            assert text.endswith("plan-cli: 6 rolled-back")
            assert api.get_obj("queues", None, "research")["spec"]["weight"] == 4


def _node(name: str, labels: dict[str, str], gpus: str = "8") -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels,
                                                            "creationTimestamp": "2026-01-05T00:00:00Z"},
            "status": {"capacity": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": gpus}}}


def test_dumped_nodes_read_like_the_warehouse_on_every_platform(tmp_path: Path) -> None:
    """The builders' view of a dumped (or live) Node is what the sources store for it: one
    reading of the pool label of every platform, the capacity type and physical GPUs."""
    product = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    nodes = [
        _node("gke-1", {**product, "cloud.google.com/gke-nodepool": "a100-pool", "cloud.google.com/gke-spot": "true"}),
        _node("aks-1", {**product, "kubernetes.azure.com/agentpool": "gpupool",
                        "kubernetes.azure.com/scalesetpriority": "spot"}),
        _node("kp-old", {**product, "karpenter.sh/provisioner-name": "gpu", "karpenter.sh/capacity-type": "on-demand"}),
        _node("eks-1", {"node.kubernetes.io/instance-type": "p4d.24xlarge", "eks.amazonaws.com/nodegroup": "ng",
                        "eks.amazonaws.com/capacityType": "ON_DEMAND"}),
        # time-slicing: the device plugin advertises 4 replicas of each of 2 GPUs
        _node("ts-1", {**product, "nvidia.com/gpu.replicas": "4", "karpenter.sh/nodepool": "shared"}, gpus="8"),
    ]
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    dumped = ClusterState.from_dump_dir(dump, cluster="default")
    with gpuinsight.open(tmp_path / "wh.duckdb") as gi:
        gi.collect_kubernetes(from_dir=dump)
        stored = ClusterState.from_warehouse(gi.wh, cluster=gi.config.cluster)
    keys = ("node_pool", "node_pool_kind", "capacity_type", "gpu_model", "gpu_count")
    assert {n: [dumped.nodes[n][k] for k in keys] for n in dumped.nodes} == {
        n: [stored.nodes[n][k] for k in keys] for n in stored.nodes}
    assert [dumped.nodes["gke-1"][k] for k in keys] == ["a100-pool", "gke-nodepool", "spot", "A100-80GB", 8]
    assert dumped.nodes["aks-1"]["node_pool_kind"] == "aks-agentpool"
    assert dumped.nodes["kp-old"]["node_pool"] == "gpu" and dumped.nodes["ts-1"]["gpu_count"] == 2

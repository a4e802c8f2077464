"""Action builders: small literal recommendations in, Kubernetes objects / patches out.

Every object an action produces is validated against the real CRD schemas (Queue, PodGroup,
Job, NodePool) from ``tests/fixtures/reference`` (vendored, cited in its SOURCES.md); core objects are checked structurally.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from gpuinsight.actions import attach_actions, build_actions, ordered_actions
from gpuinsight.actions.builders.binpack import binpack_conf
from gpuinsight.actions.model import ActionError, expected_after
from gpuinsight.actions.patching import PatchError, get, json_patch
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.validate import CrdSchemas, check_core, validate_action
from gpuinsight.plan import Plan, Recommendation
from gpuinsight.rules.disruption import allowed_disruptions
from tests.crds import REFERENCE
from tests.k8s_apply_server import CHART_CONF, cluster_objects, schemas_for, seeded, tolerates

CRDS = REFERENCE


@pytest.fixture(scope="module")
def schemas() -> CrdSchemas:
    return schemas_for(CRDS)


@pytest.fixture()
def state() -> Any:
    from tests.k8s_apply_server import live_state

    return live_state(seeded())


def queue_rec(**proposed: Any) -> Recommendation:
    return Recommendation(rule="queue", title="resize research", queue="research",
                          target={"kind": "Queue", "name": "research"},
                          proposed=proposed or {"weight": 1, "deserved": {"nvidia.com/gpu": 8},
                                                "capability": {"nvidia.com/gpu": 8}})


def mig_rec(node: str | None = "h100-1", layout: str = "all-1g.10gb") -> Recommendation:
    return Recommendation(rule="mig", title="recsys on a slice", namespace="prod-inference", workload="recsys-ranker",
                          target={"kind": "Deployment", "namespace": "prod-inference", "name": "recsys-ranker"},
                          proposed={"mig_profile": "1g.10gb", "resource": "nvidia.com/mig-1g.10gb", "count": 1,
                                    "gpu_model": "H100-80GB", "node": node, "node_mig_config": layout,
                                    "gpus_freed": 0.857})


def mps_rec(node: str | None = "l4-1") -> Recommendation:
    wl = [{"kind": "Deployment", "namespace": "prod-search", "name": n} for n in ("query-encoder", "embedder")]
    return Recommendation(rule="mps", title="share an L4", namespace="prod-search", workload="query-encoder",
                          target={"kind": "SharedGroup", "workloads": wl},
                          proposed={"sharing": "mps", "replicas": 2, "node": node, "config_name": "mps-2x",
                                    "gpus_freed": 1})


def idle_rec(kind: str = "Deployment", ns: str = "research", name: str = "notebook") -> Recommendation:
    return Recommendation(rule="idle", title="idle", namespace=ns, workload=name,
                          target={"kind": kind, "namespace": ns, "name": name},
                          proposed={"replicas": 0, "reason": "idle"})


def spot_rec(kind: str = "karpenter") -> Recommendation:
    return Recommendation(rule="spot", title="llm-train to spot", namespace="training", workload="llm-train",
                          target={"kind": "VolcanoJob", "namespace": "training", "name": "llm-train"},
                          proposed={"capacity_type": "spot", "node_pool": "gpu-h100-spot",
                                    "from_node_pool": "gpu-h100-od", "node_pool_kind": kind,
                                    "instance_types": ["p5.48xlarge"], "gpu_model": "H100-80GB"})


def binpack_rec(pods: tuple[str, ...] = ("llm-train-worker-0", "llm-train-worker-1"),
                extra: list[dict[str, Any]] | None = None, freed: tuple[str, ...] = ("h100-3",)) -> Recommendation:
    moves = [{"namespace": "training", "workload": "llm-train", "gang": "llm-train-pg", "pods": list(pods),
              "from": "h100-3", "to": "h100-2", "gpus": 4.0 * len(pods)}] + (extra or [])
    return Recommendation(rule="binpack", title="free h100-3", node="h100-3",
                          target={"kind": "NodeSet", "nodes": list(freed)},
                          proposed={"moves": moves, "nodes_freed": list(freed), "node_pool": "gpu-h100-od"})


def all_recs() -> list[Recommendation]:
    return [queue_rec(), mig_rec(), mps_rec(), idle_rec(), spot_rec(), binpack_rec()]


def _by_type(actions: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [a for a in actions if a["type"] == kind]


def test_queue_is_a_server_side_apply_of_the_changed_fields(state: Any, schemas: CrdSchemas) -> None:
    [action] = build_actions(queue_rec(), state)
    assert action["type"] == "k8s-apply" and action["phase"] == "config"
    assert action["object"] == {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                "metadata": {"name": "research"},
                                "spec": {"weight": 1, "deserved": {"nvidia.com/gpu": 8},
                                         "capability": {"nvidia.com/gpu": 8}}}
    assert action["observed"]["fields"] == {"/spec/weight": 4, "/spec/deserved/nvidia.com~1gpu": 24,
                                            "/spec/capability/nvidia.com~1gpu": 32}
    assert "weight 4 -> 1" in action["description"]
    assert schemas.validate(action["object"]) == []  # the apply configuration alone is a valid Queue
    assert validate_action(action, schemas, state.get(Ref("Queue", None, "research"))) == []
    [same] = build_actions(queue_rec(weight=4), state)
    assert same["type"] == "note"


def test_mig_labels_the_node_and_swaps_the_gpu_for_a_slice(state: Any) -> None:
    label, patch = build_actions(mig_rec(), state)
    assert label["type"] == "k8s-label" and label["labels"] == {"nvidia.com/mig.config": "all-1g.10gb"}
    assert label["observed"]["fields"] == {"/metadata/labels/nvidia.com~1mig.config": "all-disabled"}
    assert patch["type"] == "k8s-patch" and patch["patch_type"] == "json"
    ops = patch["patch"]
    assert {"op": "test", "path": "/spec/template/spec/containers/1/name", "value": "server"} in ops
    assert {"op": "test", "path": "/spec/template/spec/containers/1/resources/limits/nvidia.com~1gpu",
            "value": "1"} in ops
    ref = Ref("Deployment", "prod-inference", "recsys-ranker")
    after = json_patch(state.get(ref), ops)
    server = get(after, "/spec/template/spec/containers/1")
    assert server["resources"]["limits"] == {"cpu": "4", "nvidia.com/mig-1g.10gb": "1"}
    assert server["resources"]["requests"] == {"cpu": "2", "nvidia.com/mig-1g.10gb": "1"}
    assert get(after, "/spec/template/spec/nodeSelector") == {"nvidia.com/mig.config": "all-1g.10gb"}
    assert get(after, "/spec/template/spec/containers/0") == get(state.get(ref), "/spec/template/spec/containers/0")
    assert check_core(after) == []
    node = expected_after(label, state.get(Ref("Node", None, "h100-1")))
    assert check_core(node) == [] and node["metadata"]["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"


def test_mig_slice_goes_into_requests_and_limits_of_every_gpu_container(state: Any) -> None:
    # a container that only sets limits (requests default to them) gets the slice in both,
    # and every container that asked for a whole GPU is changed, not only the first
    ref = Ref("Deployment", "prod-inference", "recsys-ranker")
    containers = get(state.get(ref), "/spec/template/spec/containers")
    containers[1]["resources"].pop("requests")
    containers.append({"name": "sidecar", "image": "s:1",
                       "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}})
    _, patch = build_actions(mig_rec(), state)
    after = json_patch(state.get(ref), patch["patch"])
    for c in get(after, "/spec/template/spec/containers")[1:]:
        for section in ("limits", "requests"):
            assert c["resources"][section]["nvidia.com/mig-1g.10gb"] == "1", (c["name"], section)
            assert "nvidia.com/gpu" not in c["resources"][section]
    assert check_core(after) == []  # requests equal limits for the extended resource


def test_mig_leaves_a_node_that_already_runs_another_layout(state: Any) -> None:
    state.get(Ref("Node", None, "h100-1"))["metadata"]["labels"]["nvidia.com/mig.config"] = "all-balanced"
    note, patch = build_actions(mig_rec(), state)
    assert note["type"] == "note" and "not repartitioned" in note["message"]
    assert {"op": "add", "path": "/spec/template/spec/nodeSelector",
            "value": {"nvidia.com/mig.config": "all-balanced"}} in patch["patch"]


def test_mig_without_a_node_needs_nodes_of_that_layout(state: Any) -> None:
    with pytest.raises(ActionError, match=r"proposed\.node: no node chosen"):
        build_actions(mig_rec(node=None), state)
    state.nodes["h100-2"]["labels"]["nvidia.com/mig.config"] = "all-1g.10gb"
    note, patch = build_actions(mig_rec(node=None), state)
    assert "h100-2" in note["message"] and patch["type"] == "k8s-patch"


def test_mps_configmap_label_and_pins(state: Any) -> None:
    cm, label, pin1, pin2 = build_actions(mps_rec(), state)
    assert cm["object"]["metadata"] == {"name": "device-plugin-config", "namespace": "gpu-operator"}
    doc = yaml.safe_load(cm["object"]["data"]["mps-2x"])
    assert doc == {"version": "v1", "sharing": {"mps": {"renameByDefault": False,
                                                        "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
    assert check_core(expected_after(cm, state.get(Ref("ConfigMap", "gpu-operator", "device-plugin-config")))) == []
    assert label["labels"] == {"nvidia.com/device-plugin.config": "mps-2x"} and label["node"] == "l4-1"
    for pin, name in ((pin1, "query-encoder"), (pin2, "embedder")):
        # the workload follows the sharing label, never a host name (issue 12.4)
        assert pin["object"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                 "metadata": {"name": name, "namespace": "prod-search"},
                                 "spec": {"template": {"spec": {"nodeSelector": {
                                     "nvidia.com/device-plugin.config": "mps-2x"}}}}}
        assert check_core(expected_after(pin, state.get(Ref("Deployment", "prod-search", name)))) == []


def test_timeslice_per_member_recommendations_share_one_node_and_config(state: Any) -> None:
    group = [{"kind": "Deployment", "namespace": "prod-search", "name": n} for n in ("query-encoder", "embedder")]
    recs = [Recommendation(rule="timeslice", title="ts", namespace="prod-search", workload=m["name"],
                           target={"kind": "SharedGroup", "workloads": group, "member": m},
                           proposed={"sharing": "time-slicing", "replicas": 2, "node": None, "config_name": "ts-2x"})
            for m in group]
    plan = Plan("plan-ts", datetime.now(UTC), None, (None, None), recs)
    attach_actions(plan, state, strict=True)
    ordered = ordered_actions(plan)
    assert [a["type"] for a in ordered] == ["k8s-apply", "k8s-label", "k8s-apply", "k8s-apply"]
    assert ordered[1]["node"] == "l4-1"  # where the group runs
    assert "timeSlicing" in ordered[0]["object"]["data"]["ts-2x"]


def test_idle_scales_to_zero_or_explains(state: Any) -> None:
    [scale] = build_actions(idle_rec(), state)
    assert scale["object"]["spec"] == {"replicas": 0} and scale["observed"]["fields"] == {"/spec/replicas": 1}
    [note] = build_actions(idle_rec("VolcanoJob", "training", "llm-train"), state)
    assert note["type"] == "note" and "kubectl delete vcjob -n training llm-train" in note["message"]
    [suspend] = build_actions(idle_rec("CronJob", "batch", "nightly"), state)
    assert suspend["object"]["spec"] == {"suspend": True}


def test_spot_karpenter_pool_and_volcano_job_pin(state: Any, schemas: CrdSchemas) -> None:
    job = state.get(Ref("VolcanoJob", "training", "llm-train"))
    gpu_toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    job["spec"]["tasks"][0]["template"]["spec"]["tolerations"] = [gpu_toleration]
    evaluator = copy.deepcopy(job["spec"]["tasks"][0])
    evaluator["name"] = "eval"
    evaluator["template"]["spec"]["tolerations"] = [
        {"key": "dedicated", "value": "train", "effect": "NoExecute", "operator": "Equal"}, gpu_toleration]
    job["spec"]["tasks"] += [evaluator, {"name": "ps", "replicas": 1, "template": {"spec": {
        "containers": [{"name": "ps", "image": "llm:3", "resources": {"limits": {"cpu": "2"}}}]}}}]
    pool, pin, note = build_actions(spot_rec(), state)
    spec = pool["object"]["spec"]
    reqs = {r["key"]: r["values"] for r in spec["template"]["spec"]["requirements"]}
    assert reqs["karpenter.sh/capacity-type"] == ["spot"]
    assert reqs["node.kubernetes.io/instance-type"] == ["p5.48xlarge"]
    assert reqs["karpenter.k8s.aws/instance-gpu-name"] == ["h100"]  # copied from the on-demand pool
    taints = spec["template"]["spec"]["taints"]
    assert {"key": "gpuinsight.io/spot", "value": "true", "effect": "NoSchedule"} in taints
    assert {"key": "nvidia.com/gpu", "effect": "NoSchedule"} in taints  # the source pool's taint is kept
    assert spec["limits"] == {"nvidia.com/gpu": "64"} and spec["weight"] == 20
    assert pool["observed"] == {"exists": False, "fields": {}}
    assert schemas.validate(pool["object"]) == []
    # a submitted Volcano Job's spec is immutable: the change is a patch for its manifest
    assert pin["type"] == "manifest-patch" and "resubmit" in pin["description"]
    after = json_patch(job, pin["patch"])
    spot = {"key": "gpuinsight.io/spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    assert after["spec"]["tasks"][2] == job["spec"]["tasks"][2]  # the CPU-only task stays where it runs
    for i, task in enumerate(after["spec"]["tasks"][:2]):  # every GPU task, each keeping its own tolerations
        assert pin["patch"].count({"op": "test", "path": f"/spec/tasks/{i}/name", "value": task["name"]}) == 1
        tmpl = task["template"]["spec"]
        assert tmpl["nodeSelector"] == {"karpenter.sh/capacity-type": "spot", "karpenter.sh/nodepool": "gpu-h100-spot"}
        assert tmpl["tolerations"] == job["spec"]["tasks"][i]["template"]["spec"]["tolerations"] + [spot]
        assert all(any(tolerates(t, taint) for t in tmpl["tolerations"]) for taint in taints), task["name"]
    assert validate_action(pin, schemas, job) == []
    assert note["type"] == "note"
    drifted = copy.deepcopy(job)
    drifted["spec"]["tasks"][1]["template"]["spec"]["tolerations"] = []
    with pytest.raises(PatchError, match="test failed"):  # the patch refuses a manifest that changed since
        json_patch(drifted, pin["patch"])


def test_spot_deployment_keeps_its_tolerations_and_an_unobserved_spec_is_not_guessed(state: Any) -> None:
    rec = spot_rec()
    rec.target = {"kind": "Deployment", "namespace": "prod-search", "name": "embedder"}
    dep = state.get(Ref("Deployment", "prod-search", "embedder"))
    own = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    dep["spec"]["template"]["spec"]["tolerations"] = [own]
    _, pin, _ = build_actions(rec, state)
    assert pin["type"] == "k8s-apply"
    after = expected_after(pin, dep)["spec"]["template"]["spec"]
    assert after["tolerations"][0] == own and after["tolerations"][1]["key"] == "gpuinsight.io/spot"
    assert after["nodeSelector"] == {"karpenter.sh/capacity-type": "spot", "karpenter.sh/nodepool": "gpu-h100-spot"}
    assert pin["observed"]["fields"]["/spec/template/spec/tolerations"] == [own]
    # what the warehouse keeps of a Volcano Job has no pod templates: no patch that would replace them
    state.known["VolcanoJob/training/llm-train"] = ()
    for task in state.get(Ref("VolcanoJob", "training", "llm-train"))["spec"]["tasks"]:
        task.pop("template")
    _, step, _ = build_actions(spot_rec(), state)
    assert step["type"] == "note" and "spec was not observed" in step["message"]


def test_pinning_never_replaces_tolerations_it_has_not_seen(state: Any) -> None:
    """Server-side apply replaces ``tolerations`` as a whole: with the pod template unknown (what
    the warehouse holds), pinning with a toleration is a note, never a list of only the new one;
    a nodeSelector alone (a map, merged key by key) is still applied."""
    from gpuinsight.actions.builders.common import pin_workload

    ref = Ref("Deployment", "prod-search", "embedder")
    state.known[ref.key] = ("/metadata",)  # seen, but not its pod template
    toleration = {"key": "gpuinsight.io/spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    step = pin_workload(state, ref, {"pool": "spot"}, [toleration], "run on spot")
    assert step["type"] == "note" and "spec was not observed" in step["message"]
    del state.objects[ref.key]  # not seen at all
    assert pin_workload(state, ref, {"pool": "spot"}, [toleration], "run on spot")["type"] == "note"
    only_selector = pin_workload(state, ref, {"pool": "spot"}, None, "share a GPU")
    assert only_selector["type"] == "k8s-apply"
    assert only_selector["object"]["spec"] == {"template": {"spec": {"nodeSelector": {"pool": "spot"}}}}


def test_spot_needs_the_on_demand_pool(state: Any) -> None:
    rec = spot_rec()
    rec.proposed["from_node_pool"] = "nope"
    with pytest.raises(ActionError, match=r"proposed\.from_node_pool: node pool 'nope'"):
        build_actions(rec, state)


def test_binpack_conf_keeps_the_rest_of_the_scheduler_conf() -> None:
    conf = yaml.safe_load(binpack_conf(CHART_CONF))
    plugins = [p for t in conf["tiers"] for p in t["plugins"]]
    assert [p["name"] for p in plugins] == [p["name"] for t in yaml.safe_load(CHART_CONF)["tiers"]
                                            for p in t["plugins"]]
    binpack = next(p for p in plugins if p["name"] == "binpack")
    assert binpack["arguments"] == {"binpack.resources": "nvidia.com/gpu", "binpack.resources.nvidia.com/gpu": 10}
    assert conf["actions"] == "enqueue, allocate, backfill"
    again = yaml.safe_load(binpack_conf(binpack_conf(CHART_CONF.replace(
        "  - name: binpack\n", "  - name: binpack\n    arguments:\n      binpack.resources: example.com/foo\n"))))
    args = next(p for t in again["tiers"] for p in t["plugins"] if p["name"] == "binpack")["arguments"]
    assert args["binpack.resources"] == "example.com/foo, nvidia.com/gpu"


def test_binpack_actions_whole_gang(state: Any, schemas: CrdSchemas) -> None:
    actions = build_actions(binpack_rec(), state)
    conf, pool, cordon, drain = actions
    assert conf["object"]["metadata"] == {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"}
    assert pool["object"]["spec"] == {"disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized"}}
    merged = expected_after(pool, state.get(Ref("NodePool", None, "gpu-h100-od")))
    assert schemas.validate(merged) == []
    assert cordon == {**cordon, "type": "cordon", "node": "h100-3", "phase": "cordon"}
    assert drain["gang"] == "training/llm-train-pg" and len(drain["pods"]) == 2


@pytest.mark.parametrize("rec, message", [
    (lambda: binpack_rec(pods=("llm-train-worker-0",)), r"would split gang training/llm-train-pg: 1 of 2"),
    (lambda: binpack_rec(extra=[{"namespace": "batch", "pods": ["etl-0"], "from": "h100-2", "to": "h100-1"}],
                         freed=("h100-3",)), r"PodDisruptionBudget batch/etl, which allows 0"),
    (lambda: binpack_rec(extra=[{"namespace": "batch", "pods": ["etl-0"], "from": "h100-1", "to": "h100-2"}]),
     r"moves\[1\]\.pods: pod batch/etl-0 runs on h100-2, not h100-1"),
    (lambda: binpack_rec(freed=("h100-3", "h100-2")), r"node h100-2 keeps GPU pods"),
])
def test_binpack_refuses_unsafe_moves(state: Any, rec: Any, message: str) -> None:
    with pytest.raises(ActionError, match=message):
        build_actions(rec(), state)
    plan = Plan("p", datetime.now(UTC), None, (None, None), [rec()])
    attach_actions(plan, state)
    assert plan.recommendations[0].actions[0]["type"] == "refused"


def test_pdb_allowed_disruptions() -> None:
    assert allowed_disruptions({"min_available": "2"}, 3, 3) == 1
    assert allowed_disruptions({"min_available": "50%"}, 4, 4) == 2
    assert allowed_disruptions({"max_unavailable": "1"}, 4, 3) == 0
    assert allowed_disruptions({"max_unavailable": "50%"}, 4, 4) == 2


def test_ordering_dedup_and_conflicts(state: Any) -> None:
    plan = Plan("plan-all", datetime.now(UTC), None, (None, None), all_recs())
    attach_actions(plan, state, strict=True)
    ordered = ordered_actions(plan)
    phases = [a["phase"] for a in ordered if a["type"] != "note"]
    assert phases == sorted(phases, key=["config", "node-pool", "label", "workload", "cordon", "drain"].index)
    clash = Plan("plan-clash", datetime.now(UTC), None, (None, None),
                 [mig_rec(), mig_rec(layout="all-3g.40gb")])
    clash.recommendations[1].id = "mig-other"
    attach_actions(clash, state)
    with pytest.raises(ActionError, match=r"set Node/h100-1 /metadata/labels/nvidia.com~1mig.config to different"):
        ordered_actions(clash)


def test_every_emitted_object_validates(state: Any, schemas: CrdSchemas) -> None:
    plan = Plan("plan-all", datetime.now(UTC), None, (None, None), all_recs())
    attach_actions(plan, state, strict=True)
    checked = set()
    for action in ordered_actions(plan):
        ref = {"k8s-label": lambda a: Ref("Node", None, a["node"]), "cordon": lambda a: Ref("Node", None, a["node"]),
               "k8s-apply": lambda a: Ref.of(a["object"]), "k8s-patch": lambda a: Ref.from_dict(a["ref"]),
               "manifest-patch": lambda a: Ref.from_dict(a["ref"])}.get(action["type"])
        if ref is None:
            continue
        base = copy.deepcopy(state.get(ref(action)))
        assert validate_action(action, schemas, base) == [], action["target"]
        checked.add(ref(action).kind)
    assert {"Queue", "NodePool", "VolcanoJob", "ConfigMap", "Node", "Deployment"} <= checked
    for obj in cluster_objects()["podgroups"]:
        pg = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", **obj}
        assert schemas.validate(pg) == []


def test_the_schemas_catch_bad_objects(schemas: CrdSchemas) -> None:
    bad_queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"},
                 "spec": {"weight": 0, "capability": {"nvidia.com/gpu": "lots"}}}
    errors = schemas.validate(bad_queue)
    assert any("/spec/weight" in e for e in errors) and any("lots" in e for e in errors)
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"},
                                           "requirements": [{"key": "karpenter.sh/foo", "operator": "In",
                                                             "values": ["x"]}]}},
                     "disruption": {"consolidationPolicy": "Sometimes"}}}
    errors = schemas.validate(pool)
    assert any("consolidationPolicy" in e or "Sometimes" in e for e in errors)
    assert any("karpenter.sh is restricted" in e for e in errors)
    bad_deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"replicas": -1, "template": {"spec": {"nodeSelector": {"a": "b c"}}}}}
    assert len(check_core(bad_deploy)) == 2
    assert set(schemas.kinds()) >= {("scheduling.volcano.sh/v1beta1", "Queue"), ("karpenter.sh/v1", "NodePool"),
                                    ("batch.volcano.sh/v1alpha1", "Job"),
                                    ("scheduling.volcano.sh/v1beta1", "PodGroup")}

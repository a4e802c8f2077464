"""End to end on the sample fleet: ``gpuinsight recommend --apply`` and ``gpuinsight rollback``.

The warehouse is built by ``gpuinsight demo``; the loopback API server
(:mod:`tests.k8s_apply_server`) holds the sample's kubectl dumps plus what a real cluster would
also have and the dumps do not carry: the Deployments / StatefulSets behind the pods (derived
from the pods' owners and labels), the Volcano scheduler ConfigMap with the chart's default conf
and the GPU Operator's device-plugin ConfigMap. Asserted, all through the CLI:

* ``recommend`` without ``--apply`` (live diff) makes no mutating request;
* ``recommend --apply`` dry-runs every change before the first real write, writes exactly the
  objects the plan's actions name and nothing else, the server then holds the planned values,
  and ``applied_actions`` has one ``applied`` row per change with the object's previous state;
* ``rollback`` puts every touched object back as it was, deletes what the apply created, and
  reports the evictions as irreversible.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpuinsight.actions import model
from gpuinsight.actions.audit import rows
from gpuinsight.actions.patching import get, has, json_patch
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.validate import validate_object
from gpuinsight.cli import main
from gpuinsight.paths import sample_data_dir
from gpuinsight.plan.vocabulary import INERT_TYPES
from gpuinsight.warehouse import Warehouse
from tests.crds import CRD_DIRS
from tests.k8s_apply_server import CHART_CONF, ApplyKubeAPI, schemas_for, tolerates, unschedulable
from tests.test_actions_builders import CRDS

# The Volcano chart's default scheduler conf (volcano-scheduler.conf of the Helm chart).
VOLCANO_CHART_CONF = CHART_CONF
# A GPU Operator device-plugin ConfigMap holding one entry without any sharing.
DEVICE_PLUGIN_DEFAULT = "version: v1\nflags:\n  migStrategy: mixed\n"

CONTEXT = "sample-fleet"
DUMP_RESOURCES = {"nodes", "pods", "events", "queues", "podgroups", "vcjobs", "nodepools", "pdbs", "rayclusters",
                  "rayjobs", "scaledobjects", "hypernodes"}
# Set on pods by their controllers / admission, not part of the owner's pod template.
POD_ONLY_LABELS = ("pod-template-hash", "controller-revision-hash", "statefulset.kubernetes.io/pod-name",
                   "apps.kubernetes.io/pod-index")
POD_ONLY_ANNOTATIONS = ("scheduling.k8s.io/group-name",)
POD_ONLY_SPEC = ("nodeName", "hostname", "subdomain", "priority", "preemptionPolicy")
ADMISSION_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
PLURALS = {"Deployment": "deployments", "StatefulSet": "statefulsets"}
BOOKKEEPING = ("resourceVersion", "generation", "managedFields", "creationTimestamp", "uid")


# -- the cluster ---------------------------------------------------------------------------------
def dumped_objects() -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in sorted((sample_data_dir() / "kubectl").glob("*.json")):
        assert path.stem in DUMP_RESOURCES, f"unexpected dump {path.name}"
        out[path.stem] = json.loads(path.read_text())["items"]
    assert DUMP_RESOURCES - {"events"} <= set(out)
    return out


def pod_template(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod template a running pod came from: without what admission, the scheduler and the
    controller added to the pod."""
    meta, spec = pod["metadata"], copy.deepcopy(pod["spec"])
    for key in POD_ONLY_SPEC:
        spec.pop(key, None)
    injected = {v["name"] for v in spec.get("volumes") or [] if v["name"].startswith("kube-api-access-")}
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v["name"] not in injected]
    for container in spec["containers"]:
        container["volumeMounts"] = [m for m in container.get("volumeMounts") or [] if m["name"] not in injected]
        if not container["volumeMounts"]:
            del container["volumeMounts"]
    if not spec["volumes"]:
        del spec["volumes"]
    spec["tolerations"] = [t for t in spec.get("tolerations") or [] if t.get("key") not in ADMISSION_TOLERATIONS]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in POD_ONLY_LABELS}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in POD_ONLY_ANNOTATIONS}
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}


def workload_objects(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Deployments and StatefulSets rebuilt from their pods (owner references and labels)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for pod in pods:
        meta = pod["metadata"]
        owner = next(o for o in meta["ownerReferences"] if o.get("controller"))
        if owner["kind"] == "ReplicaSet":
            suffix = "-" + meta["labels"]["pod-template-hash"]
            assert owner["name"].endswith(suffix), owner
            groups.setdefault(("deployments", meta["namespace"], owner["name"][: -len(suffix)]), []).append(pod)
        elif owner["kind"] == "StatefulSet":
            groups.setdefault(("statefulsets", meta["namespace"], owner["name"]), []).append(pod)
        elif owner["kind"] == "RayCluster":
            continue  # its RayCluster is in the dumps
        else:
            assert owner["kind"] == "Job" and owner["apiVersion"].startswith("batch.volcano.sh"), owner
    out: dict[str, list[dict[str, Any]]] = {"deployments": [], "statefulsets": []}
    for (plural, namespace, name), members in sorted(groups.items()):
        template = pod_template(members[0])
        assert all(pod_template(p) == template for p in members), f"{namespace}/{name}: pods differ"
        app = template["metadata"]["labels"]["app"]
        spec: dict[str, Any] = {"replicas": len(members), "selector": {"matchLabels": {"app": app}},
                                "template": template}
        if plural == "statefulsets":
            spec["serviceName"] = name
        out[plural].append({"metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
                            "spec": spec})
    return out


def sample_cluster(*, device_plugin_config: bool = True) -> ApplyKubeAPI:
    api = ApplyKubeAPI(crd_dir=CRD_DIRS)
    dumps = dumped_objects()
    for name, objs in dumps.items():
        api.add(name, *objs)
    for name, objs in workload_objects(dumps["pods"]).items():
        api.add(name, *objs)
    api.add("configmaps", {"metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
                           "data": {"volcano-scheduler.conf": VOLCANO_CHART_CONF}})
    if device_plugin_config:
        api.add("configmaps", {"metadata": {"name": "device-plugin-config", "namespace": "gpu-operator"},
                               "data": {"default": DEVICE_PLUGIN_DEFAULT}})
    return api


Key = tuple[str, str | None, str]  # (plural, namespace, name)


def snapshot(api: ApplyKubeAPI) -> dict[Key, dict[str, Any]]:
    """Every object the server holds, without the server's bookkeeping."""
    out = {}
    with api.lock:
        for (_g, _v, plural), objs in api.objects.items():
            for obj in objs:
                o = copy.deepcopy(obj)
                for key in BOOKKEEPING:
                    o["metadata"].pop(key, None)
                # mig-manager's progress label is its own: it stays after a rollback, as on a real node
                (o["metadata"].get("labels") or {}).pop("nvidia.com/mig.config.state", None)
                out[(plural, o["metadata"].get("namespace"), o["metadata"]["name"])] = o
    return out


def key_of(api: ApplyKubeAPI, path: str) -> Key:
    parts = [p for p in path.removesuffix("/eviction").split("/") if p]
    target = api.match(parts)
    assert target is not None and target[2] is not None, path
    res, namespace, name = target
    return res.plural, namespace, name


def ref_key(ref: Ref) -> Key:
    return ref.info.plural, ref.namespace, ref.name


def action_keys(action: dict[str, Any]) -> list[Key]:
    """The objects one action writes (an eviction writes its pod)."""
    if action["type"] == "drain":
        return [("pods", p["namespace"], p["name"]) for p in action["pods"]]
    if action["type"] in INERT_TYPES:
        return []  # a manifest patch changes nothing in the cluster
    ref = model.action_ref(action)
    return [ref_key(ref)] if ref is not None else []


# -- the CLI -------------------------------------------------------------------------------------
def gpuinsight(args: list[str], kubeconfig: Path) -> str:
    result = CliRunner().invoke(main, args, env={"KUBECONFIG": str(kubeconfig)}, catch_exceptions=False)
    assert result.exit_code == 0, f"gpuinsight {' '.join(args)} -> {result.exit_code}\n{result.output}"
    return result.output


def writes(api: ApplyKubeAPI, start: int) -> list[tuple[str, str, bool]]:
    """(method, path, dry run) of every mutating request from ``api.requests[start]`` on."""
    with api.lock:
        log = list(api.requests[start:])
    return [(r.method, r.path, (r.query.get("dryRun") or [""])[0] == "All") for r in log if r.method != "GET"]


def assert_dry_runs_first(log: list[tuple[str, str, bool]]) -> None:
    dry = [w for w in log if w[2]]
    real = [w for w in log if not w[2]]
    assert dry and real
    first_real = next(i for i, w in enumerate(log) if not w[2])
    assert all(w[2] for w in log[:first_real]) and not any(w[2] for w in log[first_real:]), \
        "every dry run comes before the first real write"
    assert [(m, p) for m, p, _ in dry] == [(m, p) for m, p, _ in real], "the same requests, dry then real"


# -- the test ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    result = CliRunner().invoke(main, ["demo", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out / "demo.duckdb"


@pytest.mark.parametrize("device_plugin_config", ["present", "absent"])
def test_recommend_apply_and_rollback_on_the_sample_fleet(demo_db: Path, tmp_path: Path,
                                                          device_plugin_config: str) -> None:
    """``absent``: a GPU Operator installed without a device-plugin config (its default), so
    the apply creates the ConfigMap and the rollback deletes it again."""
    db_path = tmp_path / "demo.duckdb"
    shutil.copyfile(demo_db, db_path)  # each run gets its own plan and audit rows
    db = ["--db", str(db_path)]
    api = sample_cluster(device_plugin_config=device_plugin_config == "present")
    before = snapshot(api)
    with api:
        kubeconfig = api.write_kubeconfig(tmp_path, context=CONTEXT)

        # 1. recommend with a live diff and no --apply: it reads the cluster, never writes
        start = len(api.requests)
        text = gpuinsight(["recommend", "--context", CONTEXT, *db], kubeconfig)
        assert "(live)" in text and "REFUSED" not in text
        assert len(api.requests) > start
        assert writes(api, start) == [], "recommend without --apply must not write"
        assert snapshot(api) == before

        # 2. recommend --apply
        start = len(api.requests)
        text = gpuinsight(["recommend", "--apply", "--context", CONTEXT, *db], kubeconfig)
        found = re.search(r"(plan-\S+): (\d+) applied; undo with: gpuinsight rollback (plan-\S+)", text)
        assert found and found[1] == found[3], text
        plan_id, n_applied = found[1], int(found[2])
        log = writes(api, start)
        assert_dry_runs_first(log)
        for r in api.requests[start:]:
            assert r.authorized
            if r.method == "PATCH" and r.content_type == "application/apply-patch+yaml":
                assert r.query["fieldManager"] == ["gpuinsight"] and r.query["force"] == ["false"]
        after_apply = snapshot(api)

        with Warehouse(db_path) as wh:
            bodies = [json.loads(b) for (b,) in wh.sql(
                "SELECT body FROM recommendations WHERE plan_id = ? ORDER BY id", [plan_id]).rows()]
            audit = rows(wh, plan_id)
        check_apply(api, n_applied, log, bodies, audit, before, after_apply)

        # 3. rollback
        start = len(api.requests)
        text = gpuinsight(["rollback", plan_id, "--context", CONTEXT, *db], kubeconfig)
        assert_dry_runs_first(writes(api, start))
        after = snapshot(api)
        with Warehouse(db_path) as wh:
            statuses = {r["seq"]: r["status"] for r in rows(wh, plan_id)}

    drains = [r for r in audit if r["operation"] == "drain"]
    assert drains
    for row in drains:
        assert re.search(rf"{row['seq']}\s+irreversible\s+drain\s+{re.escape(row['target'])}: "
                         r".*evictions cannot be undone", text), text
    assert text.strip().endswith(f"{plan_id}: {len(drains)} irreversible, {len(audit) - len(drains)} rolled-back")
    assert statuses == {r["seq"]: "irreversible" if r["operation"] == "drain" else "rolled-back" for r in audit}

    planned = {k for r in audit for k in action_keys(r["applied"]["action"])}
    evicted = {k for r in drains for k in action_keys(r["applied"]["action"])}
    created = planned - set(before)
    assert ("nodepools", None, "gpu-a100-spot") in created
    assert (("configmaps", "gpu-operator", "device-plugin-config") in created) == (device_plugin_config == "absent")
    assert not created & set(after), "what the apply created is deleted"
    assert set(after) == set(before) - evicted, "evicted pods stay gone (nothing recreates them here)"
    for key in planned - evicted - created:
        was, now = before[key], after[key]
        for ptr in ("/spec", "/data", "/metadata/labels", "/metadata/annotations"):
            assert get(now, ptr) == get(was, ptr), (key, ptr)
    assert after == {k: v for k, v in before.items() if k not in evicted}, "nothing else changed either"


def check_apply(api: ApplyKubeAPI, n_applied: int, log: list[tuple[str, str, bool]],
                bodies: list[dict[str, Any]], audit: list[dict[str, Any]], before: dict[Key, dict[str, Any]],
                after_apply: dict[Key, dict[str, Any]]) -> None:
    assert bodies, "the applied plan's recommendations are stored"
    actions = [a for body in bodies for a in body["actions"]]
    assert not [a for a in actions if a["type"] == "refused"]
    assert {a["type"] for a in actions} >= {"k8s-apply", "k8s-patch", "k8s-label", "cordon", "drain"}

    # exactly the objects the plan's actions name were written, nothing else
    planned = {k for a in actions for k in action_keys(a)}
    real = [p for _, p, dry in log if not dry]
    assert {key_of(api, p) for p in real} == planned
    assert {k for r in audit for k in action_keys(r["applied"]["action"])} == planned
    assert {k for k in set(before) | set(after_apply) if before.get(k) != after_apply.get(k)} == planned
    # identical actions from several recommendations (the shared sharing config and node label)
    # are applied once; one real request per change (per pod for a drain)
    unique = {json.dumps({k: v for k, v in a.items() if k not in ("recommendation", "description", "observed")},
                         sort_keys=True) for a in actions if a["type"] not in INERT_TYPES}
    assert n_applied == len(unique) == len(audit)
    assert len(real) == sum(len(a["pods"]) if a["type"] == "drain" else 1 for a in map(json.loads, unique))

    # one applied row per change, in apply order, with the object's state just before it; the
    # server ends up holding exactly the snapshot with every planned change applied in that order
    assert [r["status"] for r in audit] == ["applied"] * len(audit)
    assert [r["seq"] for r in audit] == sorted(r["seq"] for r in audit)
    expected = {k: copy.deepcopy(v) for k, v in before.items()}
    for row in audit:
        action = row["applied"]["action"]
        if action["type"] == "drain":
            assert row["previous"] == [{"namespace": p["namespace"], "name": p["name"],
                                        "node": before[("pods", p["namespace"], p["name"])]["spec"]["nodeName"]}
                                       for p in action["pods"]], row["target"]
            for key in action_keys(action):
                del expected[key]
            continue
        (key,) = action_keys(action)
        if key not in expected:
            assert row["previous"] is None, row["target"]
            expected[key] = model.expected_after(action, None)
            continue
        # only the fields the change touches are kept, exactly as they were
        assert row["previous"]["fields"] == {p: get(expected[key], p) for p in model.touched_paths(action)
                                             if has(expected[key], p)}, row["target"]
        for ptr in row["previous"]["absent"]:
            assert not has(expected[key], ptr), (row["target"], ptr)
        expected[key] = model.expected_after(action, expected[key])
        assert row["applied"]["after"] == {p: get(expected[key], p) for p in model.touched_paths(action)}
    assert after_apply == expected

    # the planned values, from the recommendations
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for body in bodies:
        by_rule.setdefault(body["rule"], []).append(body)
    assert set(by_rule) == {"binpack", "spot", "idle", "mig", "timeslice", "mps", "queue", "ray", "scale_to_zero",
                           "input_starved", "topology"}

    # KubeRay: the finished job's cluster is let go, the idle workers' floor lowered, the head's GPU removed
    ray = {b["proposed"]["change"]: b for b in by_rule["ray"]}
    job = after_apply[("rayjobs", "ml-platform", "nightly-embed")]["spec"]
    assert (job["shutdownAfterJobFinishes"], job["ttlSecondsAfterFinished"]) == (True, 300)
    assert "shutdownAfterJobFinishes" not in before[("rayjobs", "ml-platform", "nightly-embed")]["spec"]
    group = ray["worker_min_replicas"]["target"]
    workers = after_apply[("rayclusters", "ml-platform", group["name"])]["spec"]["workerGroupSpecs"][
        group["group_index"]]
    assert (workers["groupName"], workers["minReplicas"], workers["maxReplicas"]) == ("gpu-workers", 0, 8)
    head = after_apply[("rayclusters", "ml-platform", "llm-finetune")]["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert all("nvidia.com/gpu" not in r for r in head["template"]["spec"]["containers"][0]["resources"].values())
    # KEDA: a new ScaledObject for the service that sleeps; none for the production one or the one KEDA scales
    (stz,) = by_rule["scale_to_zero"]
    so = after_apply[("scaledobjects", "ml-demo", "summarizer-preview")]
    assert ("scaledobjects", "ml-demo", "summarizer-preview") not in before
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": stz["workload"]}
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (0, 1)
    check_signal_findings(by_rule, before, after_apply)

    (queue,) = by_rule["queue"]
    was, now = (s[("queues", None, queue["queue"])]["spec"] for s in (before, after_apply))
    assert queue["queue"] == "research"
    assert str(now["deserved"]["nvidia.com/gpu"]) == str(queue["proposed"]["deserved"]["nvidia.com/gpu"]) \
        != str(was["deserved"]["nvidia.com/gpu"])
    assert now["weight"] == queue["proposed"]["weight"] != was["weight"]

    for mig in by_rule["mig"]:
        target, node, layout = mig["target"], mig["proposed"]["node"], mig["proposed"]["node_mig_config"]
        resource = mig["proposed"]["resource"]
        pod_spec = after_apply[(PLURALS[target["kind"]], target["namespace"], target["name"])]["spec"]["template"]["spec"]
        for section in ("limits", "requests"):
            res = pod_spec["containers"][0]["resources"][section]
            assert res[resource] == "1" and "nvidia.com/gpu" not in res
        assert pod_spec["nodeSelector"] == {"nvidia.com/mig.config": layout}
        assert after_apply[("nodes", None, node)]["metadata"]["labels"]["nvidia.com/mig.config"] == layout
        relabelled = [a for a in mig["actions"] if a["type"] == "k8s-label"]
        already = before[("nodes", None, node)]["metadata"]["labels"].get("nvidia.com/mig.config") == layout
        # the node is relabelled unless it already runs the layout (or another finding on it relabels it)
        assert relabelled or already or any(a["type"] == "k8s-label" and a["node"] == node
                                            for other in by_rule["mig"] for a in other["actions"])
        # an inference server moved onto a slice starts with the memory setting made for the slice
        setting = mig["proposed"].get("server_memory")
        args = pod_spec["containers"][0].get("args") or []
        if setting:
            flag, value = setting["flag"], f"{setting['value']:.3f}".rstrip("0")
            assert args[args.index(flag) + 1] == value, (mig["workload"], args)
        else:
            assert args == (before[(PLURALS[target["kind"]], target["namespace"], target["name"])]["spec"]["template"]
                            ["spec"]["containers"][0].get("args") or [])
    assert {m["workload"]: m["proposed"]["resource"] for m in by_rule["mig"]}["recsys-ranker"] == \
        "nvidia.com/mig-1g.10gb"
    assert {m["workload"] for m in by_rule["mig"] if m["proposed"].get("server_memory")} == {"assistant-8b", "faq-bot"}

    spot = next(b for b in by_rule["spot"] if b["workload"] == "feature-extract")
    pool_key = ("nodepools", None, spot["proposed"]["node_pool"])
    assert spot["proposed"]["from_node_pool"] == "gpu-a100-od" and pool_key not in before
    pool = after_apply[pool_key]
    assert {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]} in \
        pool["spec"]["template"]["spec"]["requirements"]
    job_key = ("jobs", spot["namespace"], spot["workload"])
    assert after_apply[job_key] == before[job_key], "a submitted Volcano Job is never patched (its webhook refuses)"
    (manifest,) = [a for a in spot["actions"] if a["type"] == "manifest-patch"]
    resubmitted = json_patch(before[job_key], manifest["patch"])  # the job's next submission
    assert validate_object(resubmitted, schemas_for(CRDS)) == []
    taints = pool["spec"]["template"]["spec"]["taints"]
    assert any(t["key"] == "nvidia.com/gpu" for t in taints), "the spot pool keeps the GPU taint"
    for i, task in enumerate(resubmitted["spec"]["tasks"]):
        spec = task["template"]["spec"]
        assert spec["nodeSelector"]["karpenter.sh/capacity-type"] == "spot"
        kept = before[job_key]["spec"]["tasks"][i]["template"]["spec"].get("tolerations") or []
        assert kept and spec["tolerations"][: len(kept)] == kept, "the task's own tolerations are kept"
        # the scheduler model: the resubmitted pods fit exactly the new spot pool's nodes
        assert unschedulable(api, spec) is None, f"{job_key} task {task['name']} would stay Pending"
        untolerated = [t for t in taints if not any(tolerates(tol, t) for tol in spec["tolerations"])]
        assert not untolerated, f"{job_key} task {task['name']} cannot run on the new spot nodes: {untolerated}"
        alone = {**spec, "tolerations": kept}
        assert unschedulable(api, alone) is not None, "without the spot toleration it would not fit"

    (binpack,) = by_rule["binpack"]
    assert binpack["node"] == "h100-od-4"
    assert after_apply[("nodes", None, "h100-od-4")]["spec"]["unschedulable"] is True
    assert before[("nodes", None, "h100-od-4")]["spec"].get("unschedulable") is None
    conf = yaml.safe_load(after_apply[("configmaps", "volcano-system", "volcano-scheduler-configmap")]["data"][
        "volcano-scheduler.conf"])
    plugins = {p["name"]: p for tier in conf["tiers"] for p in tier["plugins"]}
    assert plugins["binpack"]["arguments"]["binpack.resources.nvidia.com/gpu"] == 10
    assert {k: v for k, v in plugins.items() if k != "binpack"} == {
        p["name"]: p for tier in yaml.safe_load(VOLCANO_CHART_CONF)["tiers"] for p in tier["plugins"]
        if p["name"] != "binpack"}, "the rest of the scheduler conf is kept"
    assert after_apply[("nodepools", None, binpack["proposed"]["node_pool"])]["spec"]["disruption"][
        "consolidationPolicy"] == "WhenEmptyOrUnderutilized"
    evicted = {(p["namespace"], p["name"]) for a in binpack["actions"] if a["type"] == "drain" for p in a["pods"]}
    assert evicted == {(p["metadata"]["namespace"], p["metadata"]["name"]) for k, p in before.items()
                       if k[0] == "pods" and p["spec"]["nodeName"] == "h100-od-4"}, "h100-od-4 is emptied"

    device_plugin = after_apply[("configmaps", "gpu-operator", "device-plugin-config")]["data"]
    for rule in ("mps", "timeslice"):
        for body in by_rule[rule]:
            name = body["proposed"]["config_name"]
            assert name in device_plugin
            (pin,) = [a for a in body["actions"] if a["phase"] == "workload"]
            host = body["proposed"]["node"]
            assert after_apply[("nodes", None, host)]["metadata"]["labels"]["nvidia.com/device-plugin.config"] == name
            member = body["target"]["member"]
            wl = after_apply[(PLURALS[member["kind"]], member["namespace"], member["name"])]
            # selected by the sharing label, never by host name (a replaced node keeps working)
            assert wl["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/device-plugin.config": name}
    for body in by_rule["idle"]:
        assert after_apply[(PLURALS[body["target"]["kind"]], body["namespace"], body["workload"])]["spec"][
            "replicas"] == 0


def check_signal_findings(by_rule: dict[str, list[dict[str, Any]]], before: dict[Key, dict[str, Any]],
                          after_apply: dict[Key, dict[str, Any]]) -> None:
    """Issue 14's findings: the Volcano Jobs are never patched in place; their next submission (the
    manifest patch applied to the job) validates against the Job CRD and carries the change."""
    crds = schemas_for(CRDS)

    def resubmitted(body: dict[str, Any]) -> dict[str, Any]:
        key = ("jobs", body["namespace"], body["workload"])
        assert after_apply[key] == before[key], "a submitted Volcano Job is never patched (its webhook refuses)"
        (manifest,) = [a for a in body["actions"] if a["type"] == "manifest-patch"]
        job = json_patch(before[key], manifest["patch"])
        assert validate_object(job, crds) == []
        return job

    (topo,) = by_rule["topology"]
    assert topo["workload"] == "bert-ddp" and topo["monthly_savings_usd"] == 0
    assert resubmitted(topo)["spec"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 1}
    (starved,) = by_rule["input_starved"]
    assert starved["proposed"]["cause"] == "cpu" and starved["proposed"]["cpu_request"] == 12
    (task,) = resubmitted(starved)["spec"]["tasks"]
    resources = task["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == "12" and resources["requests"]["nvidia.com/gpu"] == "2", \
        "the CPU grows, the GPUs stay"
    for body in by_rule["spot"]:
        if body["workload"] != "feature-extract":
            assert body["evidence"]["checkpoint_interval_min"] in (20.0, 30.0)
            resubmitted(body)


def test_a_reviewed_plan_file_is_applied_exactly_and_only_the_chosen_ids(demo_db: Path, tmp_path: Path) -> None:
    db_path = tmp_path / "demo.duckdb"
    shutil.copyfile(demo_db, db_path)
    db = ["--db", str(db_path)]
    plan_file = tmp_path / "plan.json"
    api = sample_cluster()
    before = snapshot(api)
    with api:
        kubeconfig = api.write_kubeconfig(tmp_path, context=CONTEXT)
        gpuinsight(["recommend", "--save-plan", str(plan_file), "--format", "json", *db], kubeconfig)
        plan = json.loads(plan_file.read_text())
        queue = next(r for r in plan["recommendations"] if r["rule"] == "queue")

        # a hand edit into an invalid value is refused, naming the field, before any request
        bad = json.loads(plan_file.read_text())
        next(r for r in bad["recommendations"] if r["rule"] == "queue")["proposed"]["weight"] = -3
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        start = len(api.requests)
        res = CliRunner().invoke(main, ["recommend", "--plan", str(tmp_path / "bad.json"), "--apply", "--context",
                                        CONTEXT, *db], env={"KUBECONFIG": str(kubeconfig)})
        assert res.exit_code == 2 and "proposed.weight" in res.output
        assert writes(api, start) == []

        # the reviewed plan, only its queue finding: one object changes, nothing else
        start = len(api.requests)
        text = gpuinsight(["recommend", "--plan", str(plan_file), "--apply", "--only", queue["id"], "--context",
                           CONTEXT, *db], kubeconfig)
        assert f"{plan['plan_id']}: 1 applied" in text
        changed = {k for k, v in snapshot(api).items() if before.get(k) != v}
        assert changed == {("queues", None, "research")}
        assert_dry_runs_first(writes(api, start))

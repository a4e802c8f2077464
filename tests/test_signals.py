"""Input-starved GPUs, topology-aware gangs and checkpoint-aware spot (issue 14) on small literal
tables: the rules, their SQL model at Prometheus resolution, the topology domains (labels and
Volcano HyperNodes), binpack's topology preference against a brute force, cAdvisor's counter,
and the action builders' objects validated against the real schemas."""

from __future__ import annotations

import itertools
import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from gpuinsight.actions.builders import build_actions
from gpuinsight.actions.patching import json_patch
from gpuinsight.actions.state import ClusterState
from gpuinsight.actions.validate import CrdSchemas, validate_object
from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.plan import Recommendation
from gpuinsight.rules.engine import evaluate_rules
from gpuinsight.rules.pack_bound import (
    PoolNode,
    PoolPlan,
    PoolPod,
    PoolProblem,
    check_plan,
    solve_greedy,
    solve_ilp,
)
from gpuinsight.rules.spot import parse_interval_hours
from gpuinsight.rules.topology_domains import build_topology, nvlink_reach
from gpuinsight.sources.cadvisor import pod_cpu_samples
from gpuinsight.sources.k8s.common import MapContext, MapError
from gpuinsight.sources.k8s.volcano import hypernode_row
from gpuinsight.sources.series import SeriesBatch, load_series
from gpuinsight.sql import load_registry
from gpuinsight.sql.rows import typed_rows
from gpuinsight.warehouse import Warehouse
from tests.crds import REFERENCE
from tests.rule_fleets import Fleet, Node, Pod, Usage

ROOT = Path(__file__).resolve().parents[1]
CRDS = REFERENCE
HYPERNODE_CRD = Path(__file__).parent / "fixtures" / "crds"
L4X4 = dict(model="L4", gpus=4, price=4.6016, pool="train", instance_type="g6.12xlarge")


def only(recs: list[Recommendation], rule: str) -> list[Recommendation]:
    return [r for r in recs if r.rule == rule]


# -- input-starved ---------------------------------------------------------------------------------
def starved(**kw: Any) -> dict[str, Any]:
    """A workload_input_profile row: bursts at 90 %, busy 60 % of the steps, loader CPU at its request."""
    row = {"pod_steps": 576, "hours_observed": 48.0, "step_s": 300, "min_pushed_down": False, "burst_level": 0.9,
           "gr_mean": 0.54, "duty_cycle": 0.6, "busy_step_fraction": 0.6, "idle_step_fraction": 0.4,
           "mixed_step_fraction": 0.0, "fb_mean_mib": 17000.0, "fb_cv": 0.01, "fb_busy_mib": 17000.0,
           "fb_idle_mib": 16990.0, "gr_idle_mean": 0.01, "pcie_coverage": 1.0, "pcie_rx_busy_bps": 4e9,
           "pcie_rx_idle_bps": 1e8, "pcie_rx_gr_corr": 0.99, "nvlink_coverage": 0.0, "nvlink_rx_busy_bps": None,
           "nvlink_rx_idle_bps": None, "cpu_coverage": 1.0, "cpu_busy_cores": 4.0, "cpu_idle_cores": 7.8,
           "cpu_max_cores": 8.0, "cpu_gr_corr": -0.9, "busy_runs": 96, "idle_runs": 96, "busy_run_mean_s": 1200.0,
           "idle_run_mean_s": 600.0, "burst_period_s": 1800.0, "idle_run_cv": 0.1, "cpu_request": 8.0}
    row.update(kw)
    return row


def trainer_fleet(inp: dict[str, Any], **usage: Any) -> Fleet:
    f = Fleet([Node("n1", **L4X4)], [Pod("train-0", "n1", "train", kind="VolcanoJob", gpus=2),
                                     Pod("other-0", "n1", "other", gpus=2)])
    f.usage[("ns", "train")] = Usage(**{"gr_mean": inp["gr_mean"], "gr_p50": 0.85, "gr_p95": 0.92, "gr_max": 0.95,
                                        "peak_p95": 0.92, "input": inp, **usage})
    return f


def test_a_cpu_bound_loader_is_diagnosed_priced_and_claimed_before_idle() -> None:
    # its quiet hours would make the idle rule schedule it (periodic): the starved finding comes first
    f = trainer_fleet(starved(), gr_p50=0.0, active_fraction=0.6, recurring_hours=list(range(8, 20)), days_observed=2)
    recs = evaluate_rules(f.frames())
    (r,) = [x for x in recs if x.workload == "train"]
    assert r.rule == "input_starved" and r.proposed["cause"] == "cpu"
    cost_month = 2 * 4.6016 / 4 * 730
    assert r.monthly_savings_usd == pytest.approx(cost_month * (1 - 0.6 / 0.95), rel=1e-3)
    assert r.evidence["waiting_usd_per_month"] == pytest.approx(cost_month * 0.4, rel=1e-3)
    assert r.evidence["saving_basis"] == "waiting_time"
    assert r.evidence["claims"][0]["gpus"] == 0.0  # time, not GPUs in space
    assert r.proposed["cpu_request"] == 13  # ceil(8 x 0.95 / 0.6): the loader keeps up with the GPUs
    assert r.evidence["burst_period_min"] == 30.0 and r.evidence["measured"] == ["container_cpu", "pcie_nvlink_rx"]
    assert "mig" not in {x.rule for x in recs} and "idle" not in {x.rule for x in recs}


def test_a_volcano_jobs_cpu_patch_names_each_task_and_container_it_changes() -> None:
    """The loader's CPU request grows on every GPU task (in proportion to its containers' requests;
    the CPU-only task stays), and the manifest-patch says per task and container from what to what."""
    (r,) = only(evaluate_rules(trainer_fleet(starved()).frames()), "input_starved")
    def task(name: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
        return {"name": name, "replicas": 1, "template": {"spec": {"containers": containers}}}
    def gpu() -> dict[str, Any]:
        return {"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 1, "cpu": "4"}}
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train", "namespace": "ns"},
           "spec": {"minAvailable": 3, "queue": "ml", "tasks": [
               task("ps", [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "2"}}}]),
               task("worker", [{"name": "c", "image": "i", "resources": gpu()},
                               {"name": "loader", "image": "i", "resources": gpu()}]),
               task("chief", [{"name": "c", "image": "i", "resources": gpu()}])]}}
    state = ClusterState(cluster="c")  # the random fleet's cluster
    state.put(job, "dump")
    actions = build_actions(r, state)
    (patch,) = [a for a in actions if a["type"] == "manifest-patch"]
    after = json_patch(job, patch["patch"])
    cpu = [[c["resources"]["requests"]["cpu"] for c in t["template"]["spec"]["containers"]]
           for t in after["spec"]["tasks"]]
    assert cpu == [["2"], ["6500m", "6500m"], ["13"]]  # 13 cores per pod, ceil(8 x 0.95 / 0.6)
    assert ("worker/c: cpu 4 -> 6.5 cores, worker/loader: cpu 4 -> 6.5 cores, chief/c: cpu 4 -> 13 cores"
            in patch["description"])
    assert validate_object(after, CrdSchemas(CRDS)) == []


@pytest.mark.parametrize("kw,cause", [
    ({"cpu_idle_cores": 2.0, "pcie_rx_idle_bps": 3.5e9}, "transfer"),      # copies keep PCIe busy in the stalls
    ({"cpu_idle_cores": 2.0, "pcie_rx_idle_bps": 5e7}, "storage"),         # nothing busy: waiting on storage
    ({"cpu_idle_cores": None, "cpu_coverage": 0.0, "pcie_rx_idle_bps": None, "pcie_coverage": 0.0}, "undiagnosed"),
    ({"cpu_request": None, "cpu_idle_cores": 7.9, "cpu_max_cores": 8.0}, "cpu"),  # no request: its own peak
])
def test_the_cause_follows_what_was_busy_while_the_gpu_waited(kw: dict[str, Any], cause: str) -> None:
    (r,) = only(evaluate_rules(trainer_fleet(starved(**kw)).frames()), "input_starved")
    assert r.proposed["cause"] == cause
    if cause == "undiagnosed":
        assert r.confidence < 0.7 and "not collected" in r.evidence["cause_basis"]
        assert r.evidence["measured"] == []


def test_coarse_steps_say_the_period_is_not_resolved() -> None:
    inp = starved(step_s=300, min_pushed_down=True, idle_step_fraction=0.0, mixed_step_fraction=0.9,
                  busy_runs=1, idle_runs=0, burst_period_s=None)
    (r,) = only(evaluate_rules(trainer_fleet(inp).frames()), "input_starved")
    assert r.evidence["burst_period_min"] is None and "not resolved" in r.evidence["period_basis"]
    assert "pushed down" in r.evidence["resolution"]


@pytest.mark.parametrize("kw", [
    {"duty_cycle": 0.93, "gr_mean": 0.84},                     # fed: busy nearly all the time
    {"burst_level": 0.3},                                       # never busy: idle or small, not starved
    {"idle_step_fraction": 0.02, "mixed_step_fraction": 0.0},   # steady half load: no stalls
    {"fb_idle_mib": 2000.0},                                    # frees its memory when quiet: not a resident model
    {"fb_cv": 0.6},
    {"idle_run_mean_s": 22 * 3600.0, "busy_run_mean_s": 7200.0},  # busy two hours a night: periodic, not stalls
])
def test_what_is_not_input_starvation(kw: dict[str, Any]) -> None:
    assert not only(evaluate_rules(trainer_fleet(starved(**kw)).frames()), "input_starved")


def test_input_profile_at_prometheus_resolution(tmp_path: Path) -> None:
    """Per-step min/max pushed down (``:min``/``:max`` rows) and cAdvisor rates through the
    warehouse: every step holds a burst and a stall, so the period is below the step."""
    t0 = datetime(2026, 11, 1)
    gpu = {"gpu": "0", "UUID": "GPU-9", "modelName": "NVIDIA L4", "Hostname": "n1", "pod": "train-0",
           "namespace": "ml"}
    rows: list[dict[str, Any]] = []
    for i in range(24):
        ts = t0 + timedelta(minutes=5 * i)
        rows += [{"metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ts": ts, "value": 0.45, **gpu},
                 {"metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE:max", "ts": ts, "value": 0.9, **gpu},
                 {"metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE:min", "ts": ts, "value": 0.0, **gpu},
                 {"metric": "DCGM_FI_DEV_FB_USED", "ts": ts, "value": 12000.0, **gpu},
                 {"metric": "DCGM_FI_PROF_PCIE_RX_BYTES", "ts": ts, "value": 2e9, **gpu},
                 {"metric": "container_cpu_usage_seconds_total:rate", "ts": ts, "value": 3.9 + 0.01 * (i % 2),
                  "namespace": "ml", "pod": "train-0"},
                 {"metric": "kube_pod_info", "ts": ts, "value": 1, "namespace": "ml", "pod": "train-0", "uid": "u1",
                  "node": "n1"}]
    rows += [{"metric": "kube_pod_container_resource_requests", "ts": t0, "value": v, "namespace": "ml",
              "pod": "train-0", "uid": "u1", "container": "c", "resource": res}
             for res, v in (("nvidia_com_gpu", 1), ("cpu", 4))]
    frame = pl.DataFrame(rows, infer_schema_length=None).with_columns(pl.col("value").cast(pl.Float64),
                                                                     pl.col("ts").cast(pl.Datetime("us")))
    cfg = Config(db_path=tmp_path / "w.duckdb", cluster="c")
    with Warehouse(cfg.db_path) as wh:
        load_series(wh, cfg, [SeriesBatch(frame, 300, end=t0 + timedelta(hours=2))], source="test", scope="s",
                    window=None)
        registry = load_registry()
        with wh.transaction() as con:
            registry.refresh(con)
        (p,) = registry.run(wh.con, "workload_input_profile").to_dicts()
        timeline = registry.run(wh.con, "workload_activity_timeline", namespace="ml", workload="train-0")
    assert p["min_pushed_down"] is True and p["mixed_step_fraction"] == 1.0 and p["idle_step_fraction"] == 0.0
    assert p["duty_cycle"] == pytest.approx(0.5) and p["burst_level"] == pytest.approx(0.9)
    assert p["cpu_request"] == 4.0 and p["cpu_coverage"] == 1.0 and p["pcie_coverage"] == 1.0
    assert p["idle_runs"] == 0 and p["burst_period_s"] is None  # nothing resolved at 300 s
    assert timeline.height == 24 and timeline["gr_active_min"].max() == 0.0 and timeline["cpu_request"][0] == 4.0


# -- topology --------------------------------------------------------------------------------------
RACK = "topology.kubernetes.io/rack"


def racked(nodes: dict[str, str], **kw: Any) -> list[Node]:
    return [Node(n, labels={RACK: rack, "nvidia.com/gpu.product": "NVIDIA-L4"}, **{**L4X4, **kw})
            for n, rack in nodes.items()]


def gang(f: Fleet, name: str, nodes: list[str], gpus: float = 2, gr: float = 0.85) -> None:
    f.pods += [Pod(f"{name}-{i}", n, name, kind="VolcanoJob", gpus=gpus, gang=name, gang_min=len(nodes))
               for i, n in enumerate(nodes)]
    f.usage[("ns", name)] = Usage(gr_mean=gr, gr_p50=gr, gr_p95=0.95, fb_p99=15000, fb_max=16000)


def spread_fleet() -> Fleet:
    """The sample's training pool in miniature: a gang on n1 (rack a) and n3 (rack b); n2 (rack a)
    has two free GPUs; every node otherwise full, so no node can be released."""
    f = Fleet(racked({"n1": "a", "n2": "a", "n3": "b"}))
    gang(f, "ddp", ["n1", "n3"])
    for node, name in (("n1", "sft"), ("n2", "resnet"), ("n3", "lora")):
        f.pods.append(Pod(f"{name}-0", node, name, gpus=2))
        f.usage[("ns", name)] = Usage(gr_mean=0.8)
    return f


def test_a_gang_spread_over_racks_gets_the_rack_that_holds_it_and_no_dollars() -> None:
    recs = evaluate_rules(spread_fleet().frames())
    assert not only(recs, "binpack")
    (r,) = only(recs, "topology")
    assert r.workload == "ddp" and r.monthly_savings_usd == 0 and r.evidence["claims"] == []
    assert r.evidence["saving_basis"] == "slowdown_risk" and r.evidence["current_span"] == "zone"
    assert (r.proposed["level"], r.proposed["domain"]) == ("rack", f"{RACK}=a")
    assert r.proposed["placement"] == [{"pod": "ddp-0", "from": "n1", "to": "n1"}, {"pod": "ddp-1", "from": "n3",
                                                                                    "to": "n2"}]
    assert r.proposed["topology_key"] == RACK and r.proposed["volcano_tier"] is None
    assert r.evidence["nvlink_reach"] == "none"
    cost = r.evidence["gang_gpu_cost_usd_per_month"]
    assert cost == pytest.approx(4 * 4.6016 / 4 * 730) and r.evidence["usd_per_month_per_pct_slowdown"] == \
        pytest.approx(cost / 100, abs=0.01)


def test_no_topology_finding_without_room_or_when_idle_or_already_asked() -> None:
    f = spread_fleet()
    f.pods.append(Pod("fill-0", "n2", "fill", gpus=2))  # rack a is full now
    assert not only(evaluate_rules(f.frames()), "topology")
    f = spread_fleet()
    f.usage[("ns", "ddp")].gr_mean = 0.01  # an idle gang is not slowed
    assert not only(evaluate_rules(f.frames()), "topology")
    f = spread_fleet()
    asked = pl.DataFrame([{"cluster": "c", "namespace": "ns", "gang": "ddp", "source": "VolcanoJob",
                           "network_topology": json.dumps({"mode": "hard", "highestTierAllowed": 1})}])
    f.hypernodes = [{"name": "rack-a", "tier": 1, "members": [{"type": "Node", "selector": {"regexMatch": {
        "pattern": "n[12]"}}}]}, {"name": "rack-b", "tier": 1, "members": [{"type": "Node", "selector": {
            "exactMatch": {"name": "n3"}}}]}]
    assert not only(evaluate_rules(f.frames(gang_network_topology=asked)), "topology")


def test_two_pods_one_node_with_room_is_tighter_than_one_rack() -> None:
    f = Fleet(racked({"n1": "a", "n2": "a"}))
    gang(f, "ddp", ["n1", "n2"], gpus=1)
    f.pods += [Pod("x-0", "n2", "x", gpus=3)]
    f.usage[("ns", "x")] = Usage(gr_mean=0.9)
    (r,) = only(evaluate_rules(f.frames()), "topology")
    assert (r.proposed["level"], r.proposed["domain"]) == ("node", "n1")
    assert r.proposed["topology_key"] == "kubernetes.io/hostname" and r.evidence["current_span"] == "rack"


def test_hypernodes_take_precedence_and_the_job_gets_a_network_topology() -> None:
    f = spread_fleet()
    f.hypernodes = [
        {"name": "leaf-1", "tier": 1, "members": [{"type": "Node", "selector": {"labelMatch": {
            "matchLabels": {RACK: "a"}}}}]},
        {"name": "leaf-2", "tier": 1, "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": "n3"}}}]},
        {"name": "spine", "tier": 2, "members": [{"type": "HyperNode", "selector": {"regexMatch": {
            "pattern": "leaf-.*"}}}]},
    ]
    (r,) = only(evaluate_rules(f.frames()), "topology")
    assert r.evidence["topology_source"] == "hypernodes" and r.evidence["current_span"] == "tier2"
    assert (r.proposed["level"], r.proposed["domain"], r.proposed["volcano_tier"]) == ("tier1", "leaf-1", 1)
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "ddp", "namespace": "ns"},
           "spec": {"minAvailable": 2, "queue": "ml", "tasks": [{"name": "worker", "replicas": 2, "template": {
               "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}]}}
    state = ClusterState(cluster="c")  # the random fleet's cluster
    state.put(job, "dump")
    (action,) = build_actions(r, state)
    assert action["type"] == "manifest-patch"
    after = json_patch(job, action["patch"])
    assert after["spec"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 1}
    assert validate_object(after, CrdSchemas(CRDS)) == []


def test_label_domains_become_a_pod_affinity_on_every_task_template() -> None:
    (r,) = only(evaluate_rules(spread_fleet().frames(), {"topology": {"mode": "hard"}}), "topology")
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "ddp", "namespace": "ns"},
           "spec": {"minAvailable": 2, "queue": "ml", "tasks": [{"name": "worker", "replicas": 2, "template": {
               "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                   "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}},
                   "containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}]}}
    state = ClusterState(cluster="c")  # the random fleet's cluster
    state.put(job, "dump")
    (action,) = build_actions(r, state)
    after = json_patch(job, action["patch"])
    affinity = after["spec"]["tasks"][0]["template"]["spec"]["affinity"]
    assert affinity["nodeAffinity"] == job["spec"]["tasks"][0]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": {"matchLabels": {"volcano.sh/job-name": "ddp"}}, "topologyKey": RACK}]
    assert validate_object(after, CrdSchemas(CRDS)) == []
    with pytest.raises(BadInput):
        evaluate_rules(spread_fleet().frames(), {"topology": {"mode": "sometimes"}})


def test_topology_domains_from_labels_hypernodes_and_products() -> None:
    nodes = [{"cluster": "c", "node": "a", "zone": "z1", "labels": json.dumps({
        "topology.k8s.aws/network-node-layer-3": "nn-3a", "topology.k8s.aws/network-node-layer-2": "nn-2",
        "nvidia.com/gpu.clique": "uuid.1", "nvidia.com/gpu.product": "NVIDIA-GB200"})},
        {"cluster": "c", "node": "b", "zone": "z1", "labels": json.dumps({
            "topology.k8s.aws/network-node-layer-3": "nn-3b", "topology.k8s.aws/network-node-layer-2": "nn-2",
            "nvidia.com/gpu.clique": "uuid.1", "nvidia.com/gpu.product": "NVIDIA-GB200"})},
        {"cluster": "c", "node": "h", "zone": "z1", "labels": json.dumps({
            "nvidia.com/gpu.clique": "uuid.9", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})}]
    topo = build_topology(typed_rows("nodes_current", pl.DataFrame(nodes)))
    assert topo.levels == ["node", "nvlink", "rack", "block", "zone"]
    assert topo.span("c", ["a", "b"]) == "nvlink"  # one NVL72 clique spans both racks
    assert topo.of("c", "h").domain("nvlink") is None  # an HGX board's clique label says nothing across nodes
    assert topo.span("c", ["a", "h"]) == "zone"
    assert [nvlink_reach(p) for p in ("NVIDIA-GB200", "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB",
                                      "NVIDIA-A100-PCIE-40GB", "NVIDIA-L4", "NVIDIA-L40S")] == [
        "multi-node", "node", "node", "none", "none", "none"]


def test_hypernode_objects_map_and_the_sample_validates_against_the_crd() -> None:
    crd = CrdSchemas(HYPERNODE_CRD)
    items = json.loads((ROOT / "sample_data" / "kubectl" / "hypernodes.json").read_text())["items"]
    assert items and all(crd.validate(h) == [] for h in items)
    ctx = MapContext(cluster="c", source="dump", observed_at=datetime(2026, 11, 3))
    rows = {r["name"]: r for r in (hypernode_row(h, ctx) for h in items)}
    assert rows["rack-a"]["tier"] == 1 and json.loads(rows["spine-1"]["members"])[0]["type"] == "HyperNode"
    bad = {**items[0], "spec": {"tier": 1, "members": [{"type": "Switch", "selector": {"exactMatch": {"name": "x"}}}]}}
    assert crd.validate(bad) != []
    with pytest.raises(MapError, match="spec.members\\[0\\].type"):
        hypernode_row(bad, ctx)
    both = {**items[0], "spec": {"tier": 1, "members": [{"type": "Node", "selector": {
        "exactMatch": {"name": "x"}, "regexMatch": {"pattern": "y"}}}]}}
    with pytest.raises(MapError, match="exactly one"):
        hypernode_row(both, ctx)


# -- binpack: the tightest landing among the optimal plans -----------------------------------------
def _spread(problem: PoolProblem, assign: list[int], moved: set[str]) -> int:
    """The ILP's topology term, recomputed: domains a moved gang lands in beyond the first, per level."""
    size = max((len(m) for g, m in problem.gangs().items() if g in moved), default=1)
    total = 0
    for g, members in problem.gangs().items():
        if g not in moved:
            continue
        nodes = {assign[i] for i in members}
        total += len(nodes) - 1
        for k in range(problem.domain_levels()):
            total += (size + 1) ** (k + 1) * (len({problem.nodes[j].domains[k] for j in nodes}) - 1)
    return total


def brute_force(problem: PoolProblem) -> tuple[int, int]:
    """(nodes kept, spread of the moved gangs) of the best plan by exhaustive search."""
    gangs = problem.gangs()
    best = (len(problem.nodes) + 1, 0)
    for moved in itertools.chain.from_iterable(itertools.combinations(gangs, k) for k in range(len(gangs) + 1)):
        free = [i for i, p in enumerate(problem.pods) if not p.gang or p.gang in moved]
        for targets in itertools.product(range(len(problem.nodes)), repeat=len(free)):
            assign = [p.node for p in problem.pods]
            for i, j in zip(free, targets, strict=True):
                assign[i] = j
            plan_ok = not check_plan(problem, PoolPlan(assign, set(moved), "brute", True))
            if plan_ok:
                best = min(best, (len(set(assign)), _spread(problem, assign, set(moved))))
    return best


def test_binpack_lands_a_moved_gang_within_the_tightest_domain_and_stays_optimal() -> None:
    checked = tight = 0
    for seed in range(40):
        rng = random.Random(seed)
        racks = ["r1", "r1", "r2", "r2"][: rng.randint(3, 4)]
        nodes = [PoolNode(f"n{j}", 4.0, 10.0, (r,)) for j, r in enumerate(racks)]
        pods = [PoolPod("g-0", rng.randrange(len(nodes)), 1.0, gang="g"),
                PoolPod("g-1", rng.randrange(len(nodes)), 1.0, gang="g")]
        load = [sum(p.gpus for p in pods if p.node == j) for j in range(len(nodes))]
        for i in range(rng.randint(1, 3)):
            j = rng.randrange(len(nodes))
            g = rng.choice([1.0, 2.0])
            if load[j] + g <= 4:
                load[j] += g
                pods.append(PoolPod(f"p{i}", j, g))
        problem = PoolProblem(nodes, pods)
        plan = solve_ilp(problem)
        assert plan is not None and check_plan(problem, plan) == []
        want = brute_force(problem)
        got = (len(set(plan.assign)), _spread(problem, plan.assign, plan.moved_gangs))
        assert got == want, (seed, got, want)
        checked += 1
        tight += "g" in plan.moved_gangs and got[1] == 0
        greedy = solve_greedy(problem)
        assert check_plan(problem, greedy) == []
    assert checked == 40 and tight >= 5


# -- checkpoint-aware spot -------------------------------------------------------------------------
A100 = dict(model="A100-80GB", gpus=8, price=27.44705, pool="gpu-a100-od", instance_type="p4de.24xlarge")


def spot_frames(annotations: dict[str, str] | None = None, checkpoint: dict[str, Any] | None = None,
                finished: int = 0, **settings: Any) -> list[Recommendation]:
    f = Fleet([Node("a1", **A100)], [Pod("sft-0", "a1", "sft", kind="VolcanoJob", gpus=4,
                                         annotations=annotations or {})])
    f.usage[("ns", "sft")] = Usage(gr_mean=0.85, checkpoint=checkpoint)
    frames = f.frames()
    prof = frames["workload_gpu_profile"].with_columns(
        pl.lit(finished).alias("finished_pods"), pl.lit(2400.0 if finished else None).alias("runtime_p50_s"),
        pl.lit(2700.0 if finished else None).alias("runtime_p90_s"))
    frames.update(
        workload_gpu_profile=prof,
        disruption_controls=pl.DataFrame([{"cluster": "c", "namespace": "ns", "workload": "sft", "max_retry": 10,
                                           "min_available": 1, "policies": json.dumps({"job": [
                                               {"event": "PodEvicted", "action": "RestartTask"}]}), "tasks": None}]),
        instance_prices=pl.DataFrame([{"instance_type": "p4de.24xlarge", "gpu_count": 8,
                                       "on_demand_usd_per_hour": 27.44705, "spot_usd_per_hour": 9.6}]))
    return only(evaluate_rules(frames, {"spot": settings} if settings else None), "spot")


def test_an_annotated_checkpoint_interval_bounds_the_rework() -> None:
    (r,) = spot_frames({"gpuinsight.io/checkpoint-interval": "30m"})
    gh = 4 * 730.0
    assert r.evidence["checkpoint_interval_min"] == 30.0 and r.evidence["lost_hours_per_interruption"] == 0.25
    assert r.evidence["expected_rework_gpu_hours_per_month"] == pytest.approx(gh * 0.005 * 0.25, abs=0.01)
    assert r.evidence["rework_without_checkpoints_gpu_hours_per_month"] == pytest.approx(gh * 0.005 * 24, abs=0.01)
    od, spot = 27.44705 / 8, 9.6 / 8
    assert r.monthly_savings_usd == pytest.approx((od - spot) * gh - spot * gh * 0.005 * 0.25, rel=1e-3)
    # kube-state-metrics' sanitized spelling works too; a pool's own rate comes from the setting
    (k,) = spot_frames({"gpuinsight_io_checkpoint_interval": "1h"}, interruption_rates="p4de.24xlarge=0.02")
    assert k.evidence["checkpoint_interval_min"] == 60.0 and k.evidence["interruptions_per_node_hour"] == 0.02
    assert k.evidence["expected_rework_gpu_hours_per_month"] == pytest.approx(gh * 0.02 * 0.5, abs=0.01)
    with pytest.raises(BadInput):
        spot_frames({}, interruption_rates="p4de.24xlarge=lots")


def test_an_inferred_checkpoint_interval_needs_regular_bursts_the_step_resolves() -> None:
    sig = {"step_s": 60, "gpus_with_tx": 4, "burst_events": 36, "gpus_with_bursts": 4, "intervals": 32,
           "interval_median_s": 1200.0, "interval_cv": 0.05}
    (r,) = spot_frames(checkpoint=sig)
    assert r.evidence["checkpoint_interval_min"] == 20.0 and r.evidence["checkpoint_basis"].startswith("inferred")
    assert not spot_frames(checkpoint={**sig, "interval_cv": 0.6})    # irregular: not checkpoints
    assert not spot_frames(checkpoint={**sig, "intervals": 2})        # too few
    assert not spot_frames(checkpoint={**sig, "step_s": 900})         # 900 s steps cannot resolve 20 min
    assert not spot_frames()                                           # no interval, no finished task: not tolerant
    (t,) = spot_frames(finished=5)                                     # the old basis: half a task
    assert t.evidence["lost_hours_per_interruption"] == pytest.approx(2400 / 3600 / 2, abs=1e-3)
    assert t.evidence["checkpoint_interval_min"] is None


@pytest.mark.parametrize("text,hours", [("30m", 0.5), ("1h", 1.0), ("900s", 0.25), ("1800", 0.5), ("45 min", 0.75),
                                        ("soon", None), ("0", None), ("-5m", None)])
def test_checkpoint_interval_convention(text: str, hours: float | None) -> None:
    assert parse_interval_hours(text) == hours


# -- container CPU ----------------------------------------------------------------------------------
def test_cadvisor_counter_skips_the_pod_cgroup_pause_container_and_resets() -> None:
    t0 = datetime(2026, 11, 1)
    rows = []
    for i, (c, v) in enumerate([("main", 0.0), ("main", 120.0), ("main", 30.0), ("main", 150.0)]):
        rows.append({"metric": "container_cpu_usage_seconds_total", "ts": t0 + timedelta(minutes=i), "value": v,
                     "namespace_name": "ml", "pod_name": "p", "container_name": c})
        rows.append({"metric": "container_cpu_usage_seconds_total", "ts": t0 + timedelta(minutes=i), "value": 9e9,
                     "namespace_name": "ml", "pod_name": "p", "container_name": "POD"})
        rows.append({"metric": "container_cpu_usage_seconds_total", "ts": t0 + timedelta(minutes=i),
                     "value": 500.0 * i, "namespace_name": "ml", "pod_name": "p"})  # the pod cgroup (no container)
    frame = pl.DataFrame(rows).with_columns(pl.col("ts").cast(pl.Datetime("us")))
    dropped: dict[str, int] = {}
    out = pod_cpu_samples(frame, "c", 60, dropped).select("ts", "cpu_cores").rows()
    # 0 -> 120 is 2 cores; the drop to 30 is a restart (skipped, counted); 30 -> 150 is 2 cores again
    assert out == [(t0, 2.0), (t0 + timedelta(minutes=2), 2.0)]
    assert dropped == {"container_cpu_usage_seconds_total (counter resets)": 1}


def test_the_sample_training_pool_emits_valid_objects() -> None:
    """The emitted Volcano Job changes of the demo's three new findings validate as resubmitted jobs
    (the full apply path is in test_apply_sample_fleet)."""
    jobs = {j["metadata"]["name"]: j for j in json.loads(
        (ROOT / "sample_data" / "kubectl" / "vcjobs.json").read_text())["items"]}
    assert jobs["llama-sft"]["metadata"]["annotations"] == {"gpuinsight.io/checkpoint-interval": "30m"}
    assert {p["action"] for p in jobs["mistral-lora"]["spec"]["policies"]} == {"RestartTask"}
    assert "annotations" not in jobs["mistral-lora"]["metadata"]  # its interval is only inferred
    pods = json.loads((ROOT / "sample_data" / "kubectl" / "pods.json").read_text())["items"]
    ddp = {p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith("bert-ddp-")}
    assert ddp == {"l4-train-1", "l4-train-3"}
    crd = yaml.safe_load((HYPERNODE_CRD / "topology.volcano.sh_hypernodes.yaml").read_text())
    assert crd["spec"]["group"] == "topology.volcano.sh"

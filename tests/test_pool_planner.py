"""The pool planner: GPU sharing planned with binpack on the node shape most fleets run (8-GPU
nodes where busy and small workloads sit side by side).

* the exact plan (HiGHS) against an exhaustive search on small pools with MIG-partitioned GPUs to
  place, sharing hosts to empty, GPUs free only after a move, gangs and budgets;
* literal fleets: the lone small production service on a mixed 8-GPU H100 node, a busy service
  moved to make room, the single strategy, nodes whose pods DCGM does not locate;
* the emitted mig-parted entries against mig-parted's format and the GPU's valid layouts.
"""

from __future__ import annotations

import itertools
import random

import pytest

from gpuinsight.errors import BadInput
from gpuinsight.keys import NodeKey
from gpuinsight.migparted import layout_errors, spec_errors
from gpuinsight.rules.engine import evaluate_plan, evaluate_rules
from gpuinsight.rules.pack_bound import (
    PoolNode,
    PoolPlan,
    PoolPod,
    PoolProblem,
    check_plan,
    solve_greedy,
    solve_ilp,
)
from tests.genai_trace import mig_reference
from tests.rule_fleets import Fleet, Node, Pod, Usage


# -- the exact plan against an exhaustive search --------------------------------------------------
def brute_force(problem: PoolProblem) -> int | None:
    """Fewest nodes kept by any valid plan (None: no plan), trying every placement."""
    n = len(problem.nodes)
    free = [i for i, p in enumerate(problem.pods) if not p.pinned and p.gang not in problem.pinned_gangs()]
    options = [range(n) if i in free else [p.node] for i, p in enumerate(problem.pods)]
    eligible = [j for j, nd in enumerate(problem.nodes) if nd.mig_slots > 0 and not nd.closed and not nd.evacuate]
    splits = [c for c in itertools.product(*(range(problem.nodes[j].mig_slots + 1) for j in eligible))
              if sum(c) == problem.shared_gpus]
    best = None
    for assign in itertools.product(*options):
        moved = {p.gang for i, p in enumerate(problem.pods) if p.gang and assign[i] != p.node}
        for split in splits:
            plan = PoolPlan(list(assign), moved, "brute", True, {j: c for j, c in zip(eligible, split, strict=True) if c})
            if check_plan(problem, plan):
                continue
            kept = len(set(assign) | set(plan.shared) | {j for j, nd in enumerate(problem.nodes)
                                                           if nd.fixed > 0 or nd.evacuate})
            best = kept if best is None else min(best, kept)
    return best


def random_problem(rng: random.Random) -> PoolProblem:
    nodes = [PoolNode(f"n{j}", float(rng.choice([4, 4, 8])), 10.0) for j in range(rng.randint(2, 4))]
    pods: list[PoolPod] = []
    load = [0.0] * len(nodes)
    for i in range(rng.randint(1, 5)):
        g = rng.choice([1.0, 1.0, 2.0])
        j = rng.randrange(len(nodes))
        if load[j] + g <= nodes[j].capacity:
            load[j] += g
            pods.append(PoolPod(f"p{i}", j, g, gang=rng.choice([None, None, None, "g"]),
                                pinned=rng.random() < 0.1, budgets=("b",) if rng.random() < 0.3 else ()))
    for j, nd in enumerate(nodes):
        if rng.random() < 0.7:
            nd.mig_slots = int(nd.capacity)
            nd.free_now = float(rng.randint(0, int(nd.capacity - load[j])))
            nd.early_free = nd.free_now + rng.choice([0.0, 0.0, 1.0])
        nd.fixed = rng.choice([0.0, 0.0, 0.0, 1.0]) if load[j] + 1 <= nd.capacity else 0.0
    if rng.random() < 0.3:
        rng.choice(nodes).evacuate = True
    return PoolProblem(nodes, pods, {"b": rng.randint(0, 2)}, shared_gpus=rng.randint(0, 3))


def test_exact_plan_with_shared_gpus_matches_an_exhaustive_search() -> None:
    checked = infeasible = 0
    for seed in range(120):
        rng = random.Random(seed)
        problem = random_problem(rng)
        best = brute_force(problem)
        exact = solve_ilp(problem)
        greedy = solve_greedy(problem)
        if best is None:
            assert exact is None and not greedy.feasible, seed  # no plan: neither claims one
            infeasible += 1
            continue
        assert exact is not None and check_plan(problem, exact) == [], seed
        kept = len(set(exact.assign) | set(exact.shared) | {j for j, nd in enumerate(problem.nodes)
                                                              if nd.fixed > 0 or nd.evacuate})
        assert kept == best, f"seed {seed}: the plan keeps {kept} nodes, the optimum is {best}"
        if greedy.feasible:
            assert check_plan(problem, greedy) == [], seed
        checked += 1
    assert checked >= 60 and infeasible >= 5  # both kinds of pool were reached


# -- literal fleets ---------------------------------------------------------------------------------
H100_8 = dict(model="H100-80GB", gpus=8, price=55.04, pool="h100")


def small(gr: float, fb: float) -> Usage:
    return Usage(gr_mean=gr * 0.8, gr_p50=gr * 0.8, gr_p95=gr, gr_max=gr * 1.3, fb_p99=fb * 0.97, fb_max=fb)


BUSY = Usage(gr_mean=0.75, gr_p50=0.75, gr_p95=0.9, gr_max=0.97, fb_p99=60000, fb_max=62000)
IDLE = Usage(gr_mean=0.002, gr_p50=0.0, gr_p95=0.004, gr_max=0.3, active_fraction=0.01, fb_p99=2000, fb_max=2100)


def mixed_fleet() -> Fleet:
    """Two 8-GPU H100 nodes: on the first a busy 3-replica service, an idle notebook and a lone
    small production service beside other whole-GPU work; on the second a busy gang and two small
    dev services. Neutral names."""
    f = Fleet([Node("gpu-a", **H100_8), Node("gpu-b", **H100_8)])
    f.pods += [Pod(f"api-{i}", "gpu-a", "api", namespace="shop") for i in range(3)]
    f.pods += [Pod("nb-0", "gpu-a", "nb", namespace="lab", kind="StatefulSet"),
               Pod("rank-0", "gpu-a", "rank", namespace="shop", labels={"env": "production"}),
               Pod("etl-0", "gpu-a", "etl", namespace="data", gpus=2)]
    f.pods += [Pod(f"train-{i}", "gpu-b", "train", namespace="ml", kind="VolcanoJob", gang="train", gang_min=2,
                   gpus=2) for i in range(2)]
    f.pods += [Pod("tool-0", "gpu-b", "tool", namespace="team-x"), Pod("viz-0", "gpu-b", "viz", namespace="team-y")]
    f.usage[("shop", "api")] = BUSY
    f.usage[("lab", "nb")] = IDLE
    f.usage[("shop", "rank")] = small(0.06, 6000)
    f.usage[("data", "etl")] = BUSY
    f.usage[("ml", "train")] = BUSY
    f.usage[("team-x", "tool")] = small(0.05, 4000)
    f.usage[("team-y", "viz")] = small(0.04, 5000)
    return f


def test_lone_small_production_service_on_a_mixed_8_gpu_node_gets_a_mig_slice() -> None:
    f = mixed_fleet()
    recs, ctx = evaluate_plan(f.frames())
    by = {(r.rule, r.workload): r for r in recs}
    assert ("idle", "nb") in by
    rank = by[("mig", "rank")]
    assert rank.evidence["production"] is True
    assert {r.workload for r in recs if r.rule == "mig"} == {"rank", "tool", "viz"}
    node, index = rank.proposed["node"], rank.proposed["gpu_index"]
    assert {(r.proposed["node"], r.proposed["gpu_index"]) for r in recs if r.rule == "mig"} == {(node, index)}
    # one GPU partitioned, the other seven whole: a per-node mig-parted config
    layout = rank.proposed["node_layout"]
    whole = next(e for e in layout if not e["mig-enabled"])
    assert len(whole["devices"]) == 7 and index not in whole["devices"]
    assert sum(r.proposed["gpus_freed"] for r in recs if r.rule == "mig") == pytest.approx(2, abs=0.01)
    # nothing that stays runs on the partitioned GPU: it was free or held by a workload stopped first
    held = f.gpu_indices()
    stopped = {(s["namespace"], s["pod"]) for s in rank.proposed["stop_first"]}
    for p in f.pods:
        if p.node == node and index in (held.get((p.namespace, p.name)) or []):
            assert (p.namespace, p.name) in stopped
    assert not any(r.rule in ("mps", "timeslice") and r.evidence["production"] for r in recs if r.rule == "timeslice")
    assert ctx.partitioned_gpus(NodeKey(f.cluster, node)) > 0 and not ctx.is_sharing_host(NodeKey(f.cluster, node))
    restarts = {x["pod"] for x in rank.evidence["restarts"]}
    assert "shop/rank-0" in restarts and "device plugin" in rank.evidence["also_restarted"]


def full_fleet() -> Fleet:
    # gpu-a is full and its small services have PodDisruptionBudgets (never stopped first); gpu-b
    # has room but DCGM does not say which of its GPUs its pod holds (it cannot be partitioned): a
    # GPU of gpu-a is partitioned only after a busy replica moves to gpu-b
    f = Fleet([Node("gpu-a", **H100_8), Node("gpu-b", **H100_8)])
    f.pods += [Pod(f"svc{i}-0", "gpu-a", f"svc{i}", namespace="apps", labels={"app": f"svc{i}"}) for i in range(3)]
    f.pods += [Pod(f"api-{i}", "gpu-a", "api", namespace="shop") for i in range(5)]
    f.pods += [Pod("etl-0", "gpu-b", "etl", namespace="data", gpus=4, gpu_indices=[])]
    for i in range(3):
        f.usage[("apps", f"svc{i}")] = small(0.05, 4000)
        f.pdbs.append({"cluster": "c", "namespace": "apps", "name": f"svc{i}", "selector": f'{{"matchLabels": {{"app": "svc{i}"}}}}',
                       "min_available": "1", "max_unavailable": None})
    f.usage[("shop", "api")] = BUSY
    f.usage[("data", "etl")] = BUSY
    return f


def test_a_full_node_makes_room_by_moving_a_whole_gpu_pod_away() -> None:
    f = full_fleet()
    recs, _ = evaluate_plan(f.frames())
    mig = [r for r in recs if r.rule == "mig"]
    assert len(mig) == 3
    evict = mig[0].proposed["evict"]
    assert evict and all(m["to"] != m["from"] for m in evict) and mig[0].proposed["stop_first"] == []
    node, index = mig[0].proposed["node"], mig[0].proposed["gpu_index"]
    indices = f.gpu_indices()
    moved = {(m["namespace"], p) for m in evict for p in m["pods"]}
    for p in f.pods:  # the partitioned GPU was held only by a pod moved away first
        if p.node == node and index in (indices[(p.namespace, p.name)] or []):
            assert (p.namespace, p.name) in moved
    assert any("evicted from" in x["why"] for x in mig[0].evidence["restarts"])


def test_single_strategy_nodes_get_one_named_layout_for_all_their_gpus() -> None:
    f = Fleet([Node(f"n{i}", model="H100-80GB", gpus=1, price=6.88, labels={"nvidia.com/mig.strategy": "single"})
               for i in range(3)])
    for i in range(3):
        f.pods.append(Pod(f"s{i}-0", f"n{i}", f"s{i}", namespace="apps"))
        f.usage[("apps", f"s{i}")] = small(0.05, 4000)
    recs = evaluate_rules(f.frames())
    assert {r.rule for r in recs} == {"mig"}
    assert {r.proposed["strategy"] for r in recs} == {"single"}
    assert all(r.proposed["node_mig_config"].startswith("all-") and not r.proposed["node_layout"] for r in recs)
    # the same fleet without the label (mixed) partitions one GPU with its own config
    for n in f.nodes:
        n.labels = {}
    recs = evaluate_rules(f.frames())
    assert {r.proposed["strategy"] for r in recs} == {"mixed"} and recs[0].proposed["node_layout"]
    # a cluster whose nodes do not carry the label says so in the setting
    recs = evaluate_rules(f.frames(), {"consolidation": {"mig_strategy": "single"}})
    assert {r.proposed["strategy"] for r in recs} == {"single"}
    with pytest.raises(BadInput, match="mig_strategy"):
        evaluate_rules(f.frames(), {"consolidation": {"mig_strategy": "sometimes"}})


def test_a_node_whose_pods_dcgm_does_not_locate_keeps_its_gpus_whole() -> None:
    f = mixed_fleet()
    for p in f.pods:
        p.gpu_indices = []  # unknown: a dump-only cluster
    recs = evaluate_rules(f.frames())
    assert not [r for r in recs if r.rule == "mig" and r.proposed.get("gpu_index") is not None]


# -- the emitted config against mig-parted's format and the valid layouts ---------------------------
def test_mig_parted_format_accepts_its_own_examples_and_refuses_what_its_parser_refuses() -> None:
    import yaml

    from tests.crds import REFERENCE

    for name in ("mig-parted-config-default.yaml", "mig-parted-config-example.yaml"):
        doc = yaml.safe_load((REFERENCE / "mig" / name).read_text())
        assert spec_errors(doc) == [], name
    good = {"version": "v1", "mig-configs": {"x": [{"devices": [0], "mig-enabled": False},
                                                   {"devices": [1], "mig-enabled": True,
                                                    "mig-devices": {"1g.10gb": 7}}]}}
    assert spec_errors(good) == []
    bad = [({"mig-configs": {}}, "version"), ({"version": "v2", "mig-configs": {"x": []}}, "unknown version"),
           ({"version": "v1", "mig-configs": {"x": []}}, "at least one entry"),
           ({"version": "v1", "mig-configs": {"x": [{"devices": [0]}]}}, "mig-enabled"),
           ({"version": "v1", "mig-configs": {"x": [{"devices": "some", "mig-enabled": False}]}}, "devices"),
           ({"version": "v1", "mig-configs": {"x": [{"devices": [0], "mig-enabled": True}]}}, "mig-devices"),
           ({"version": "v1", "mig-configs": {"x": [{"devices": [0], "mig-enabled": False,
                                                      "mig-devices": {"1g.10gb": 1}}]}}, "false"),
           ({"version": "v1", "mig-configs": {"x": [{"devices": [0], "mig-enabled": True,
                                                      "mig-devices": {"1x.10gb": 1}}]}}, "invalid format"),
           ({"version": "v1", "mig-configs": {"x": [{"devices": [0], "mig-enabled": True,
                                                      "mig-devices": {"1g.10gb": 0}}]}}, "all counts"),
           ({"version": "v1", "mig-configs": {"x": [{"devices": [0], "mig-enabled": False, "extra": 1}]}},
            "unexpected field")]
    for doc, want in bad:
        errors = spec_errors(doc)
        assert errors and any(want in e for e in errors), (doc, errors)


def test_every_planned_node_layout_is_a_valid_mig_parted_config_of_valid_layouts() -> None:
    from tests.random_fleets import random_fleet

    profiles, layouts = mig_reference("H100-80GB")
    classes = {p[0]: p[3] for p in profiles}
    seen = 0
    for seed in range(2000, 2040):
        rf = random_fleet(seed)
        gpus = {n.name: n.gpus for n in rf.fleet.nodes}
        models = {n.name: n.model for n in rf.fleet.nodes}
        for r in evaluate_rules(rf.frames()):
            if r.rule != "mig" or not r.proposed["node_layout"]:
                continue
            node = r.proposed["node"]
            profiles_m, layouts_m = mig_reference(models[node])
            layout = r.proposed["node_layout"]
            assert spec_errors({"version": "v1", "mig-configs": {r.proposed["node_mig_config"]: layout}}) == []
            assert layout_errors(layout, gpus[node], {p[0]: p[3] for p in profiles_m}, layouts_m) == [], (seed, layout)
            seen += 1
    assert seen >= 10 and classes


def test_layout_errors_names_overlaps_missing_gpus_and_impossible_layouts() -> None:
    profiles, layouts = mig_reference("H100-80GB")
    classes = {p[0]: p[3] for p in profiles}
    assert layout_errors([{"devices": [0, 1], "mig-enabled": False}], 3, classes, layouts) == ["GPU 2 is in no entry"]
    assert any("2 entries" in e for e in layout_errors(
        [{"devices": [0], "mig-enabled": False}, {"devices": [0], "mig-enabled": False}], 1, classes, layouts))
    errors = layout_errors([{"devices": [0], "mig-enabled": True, "mig-devices": {"4g.40gb": 2}}], 1, classes, layouts)
    assert errors and "no valid MIG layout" in errors[0]


"""Each rule on small literal fleets: findings, figures and the negative cases."""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest

from gpuinsight.config import DEFAULT_CLUSTER
from gpuinsight.errors import BadInput
from gpuinsight.plan import Recommendation
from gpuinsight.rules.engine import evaluate_plan, evaluate_rules
from gpuinsight.rules.production import ProductionClassifier
from tests.rule_fleets import Fleet, Node, Pod, Usage

H100_GPU = 55.04 / 8
L4 = dict(model="L4", gpus=1, price=0.8048, pool="l4", instance_type="g6.xlarge")


def only(recs: list[Recommendation], rule: str) -> list[Recommendation]:
    return [r for r in recs if r.rule == rule]


def small(gr: float = 0.06, fb: float = 3000.0, **kw: Any) -> Usage:
    return Usage(gr_mean=gr * 0.8, gr_p50=gr * 0.8, gr_p95=gr, gr_max=gr * 1.3, fb_p99=fb * 0.97, fb_max=fb, **kw)


def lone_nodes(fleet: Fleet, names: list[str], node: dict[str, Any], usage: Usage, **pod: Any) -> None:
    """One single-GPU node per workload, the workload alone on it."""
    for name in names:
        fleet.nodes.append(Node(f"n-{name}", **node))
        fleet.pods.append(Pod(f"{name}-0", f"n-{name}", name, **pod))
        fleet.usage[(pod.get("namespace", "ns"), name)] = usage


# -- nothing to do ----------------------------------------------------------------------------
def test_busy_well_sized_workloads_get_nothing() -> None:
    f = Fleet([Node("n1"), Node("n2")],
              [Pod(f"train-{i}", "n1", "train", kind="VolcanoJob", gang="train", gang_min=8) for i in range(8)]
              + [Pod(f"serve-{i}", "n2", "serve", namespace="prod-a") for i in range(8)])
    assert evaluate_rules(f.frames()) == []


# -- idle -------------------------------------------------------------------------------------
def test_idle_notebook_found_with_its_cost_and_nothing_else() -> None:
    f = Fleet([Node("n1", gpus=8)], [Pod("nb-0", "n1", "jupyter", kind="StatefulSet"),
                                    Pod("busy-0", "n1", "busy")])
    f.usage[("ns", "jupyter")] = Usage(gr_mean=0.004, gr_p50=0.0, gr_p95=0.02, gr_max=0.6, active_fraction=0.03,
                                       fb_p99=3000, fb_max=3100)
    recs = evaluate_rules(f.frames())
    assert [r.rule for r in recs] == ["idle"]
    r = recs[0]
    assert r.workload == "jupyter" and r.proposed == {"replicas": 0, "reason": "idle", "schedule": None}
    assert r.monthly_savings_usd == pytest.approx(H100_GPU * 730, rel=1e-3)
    assert r.evidence["saving_basis"] == "gpus_returned"
    assert r.evidence["claims"] == [{"node": "n1", "usd_per_hour": pytest.approx(H100_GPU, rel=1e-3), "gpus": 1.0,
                                     "node_usd_per_hour": 55.04}]
    assert r.target == {"kind": "StatefulSet", "name": "jupyter", "namespace": "ns", "cluster": "c"}
    assert r.cluster == "c" and r.to_dict()["cluster"] == "c"


def test_idle_pod_alone_on_a_node_is_claimed_once() -> None:
    # the old plan said "scale it to zero" and "release the node": more than the node costs
    f = Fleet([Node("a", **L4), Node("b", **L4)], [Pod("nb-0", "a", "nb"), Pod("svc-0", "b", "svc")])
    f.usage[("ns", "nb")] = Usage(gr_mean=0.0, gr_p50=0.0, gr_p95=0.0, gr_max=0.01, active_fraction=0.0)
    recs, ctx = evaluate_plan(f.frames())
    assert [r.rule for r in recs] == ["idle"]
    assert sum(r.monthly_savings_usd for r in recs) == pytest.approx(0.8048 * 730, rel=1e-3)
    assert ctx.ledger.spend_monthly_usd() == pytest.approx(2 * 0.8048 * 730)


def test_nightly_work_gets_a_schedule_not_removal() -> None:
    # median 0, two hours a night at 90 %: low median and active share, but high peaks; a kind KEDA
    # cannot scale (a Deployment or StatefulSet gets a ScaledObject from scale_to_zero instead)
    f = Fleet([Node("n1", **L4)], [Pod("retrain-0", "n1", "retrain", kind="VolcanoJob")])
    f.usage[("ns", "retrain")] = Usage(gr_mean=0.075, gr_p50=0.0, gr_p95=0.9, peak_p95=0.93, gr_max=0.97,
                                       active_fraction=0.083, recurring_hours=[2, 3], days_observed=7)
    (r,) = evaluate_rules(f.frames())
    assert r.rule == "idle" and r.proposed["reason"] == "periodic"
    assert r.proposed["schedule"]["active_hours_utc"] == [1, 2, 3, 4]  # with an hour's margin each side
    assert r.monthly_savings_usd == pytest.approx(0.8048 * 730 * 20 / 24, rel=1e-3)
    assert "scale it to zero in between" in r.title
    f.pods[0].kind = "Deployment"
    assert evaluate_rules(f.frames()) == []  # without its idle stretches, scale_to_zero has nothing to go on


def test_interactive_bursts_at_random_hours_are_neither_idle_nor_periodic() -> None:
    f = Fleet([Node("n1", **L4)], [Pod("nb-0", "n1", "nb")])
    f.usage[("ns", "nb")] = Usage(gr_mean=0.05, gr_p50=0.0, gr_p95=0.6, gr_max=0.9, active_fraction=0.08,
                                  recurring_hours=[], stray_active_hours=9)
    assert evaluate_rules(f.frames()) == []


def test_short_history_is_not_judged() -> None:
    f = Fleet([Node("n1", **L4)], [Pod("nb-0", "n1", "nb")])
    f.usage[("ns", "nb")] = Usage(gr_p50=0.0, gr_p95=0.0, active_fraction=0.0, hours_held=3)
    assert evaluate_rules(f.frames()) == []


# -- consolidation: MIG, MPS, time-slicing ----------------------------------------------------
def test_mig_fits_small_production_service_into_free_slice() -> None:
    f = Fleet([Node("big", gpus=8), Node("mig-1", gpus=1, price=6.88, pool="mig", mig_config="all-1g.10gb")],
              [Pod("ranker-0", "big", "ranker", namespace="prod-inference"),
               Pod("train-0", "big", "train", gpus=7)]
              + [Pod(f"embed-{i}", "mig-1", "embed", namespace="prod-inference", mig_profile="1g.10gb")
                 for i in range(5)])
    f.usage[("prod-inference", "ranker")] = small(0.08, 6400)
    f.usage[("prod-inference", "embed")] = Usage(gr_p95=0.7, fb_p99=7000, fb_max=8000)
    recs = evaluate_rules(f.frames())
    assert [r.rule for r in recs] == ["mig"]
    r = recs[0]
    assert r.proposed["mig_profile"] == "1g.10gb" and r.proposed["node"] == "mig-1"
    assert r.proposed["resource"] == "nvidia.com/mig-1g.10gb" and r.proposed["repartition"] is False
    assert r.monthly_savings_usd == pytest.approx(H100_GPU * 730 * 6 / 7)  # frees its GPU less the slice
    assert r.evidence["production"] is True and "prod-inference" in r.evidence["production_reason"]
    assert r.evidence["compute_resolution_s"] == 60 and r.evidence["max_per_step_pushed_down"] is True


def test_memory_is_sized_on_the_observed_maximum() -> None:
    # p99 35 GB would fit a 40 GB slice, but it peaked at 45 GB: no 40 GB slice, and two such
    # services do not fit one time-sliced 80 GB GPU either
    names = ["a", "b", "c"]
    f = Fleet()
    lone_nodes(f, names, dict(gpus=1, price=6.88), Usage(gr_p95=0.1, gr_max=0.2, fb_p99=35000, fb_max=45000))
    assert evaluate_rules(f.frames()) == []


def test_bursty_service_is_not_squeezed() -> None:
    # p95 of 5-minute means 0.2, but the short-window p95 is 0.7: sized on the peak, it shares nothing
    f = Fleet()
    lone_nodes(f, ["x", "y"], dict(gpus=1, price=6.88),
               Usage(gr_p95=0.2, peak_p95=0.7, gr_max=0.75, fb_p99=5000, fb_max=5200))
    assert evaluate_rules(f.frames()) == []


def test_lone_production_candidate_shares_a_mig_gpu_with_other_work() -> None:
    # one production MIG candidate of its model, and two dev ones: one planner puts all three on one GPU
    f = Fleet()
    lone_nodes(f, ["ranker"], dict(gpus=1, price=6.88), small(0.08, 6400), namespace="prod-x")
    lone_nodes(f, ["dev-a", "dev-b"], dict(gpus=1, price=6.88), small(0.05, 4000), namespace="dev")
    recs = evaluate_rules(f.frames())
    assert sorted(r.rule for r in recs) == ["mig", "mig", "mig"]
    ranker = next(r for r in recs if r.workload == "ranker")
    # the node's own mig-parted config: its one GPU partitioned for the three
    assert ranker.proposed["node_layout"] == [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 3}}]
    assert {r.proposed["node_mig_config"] for r in recs} == {ranker.proposed["node_mig_config"]}
    # the GPU repartitioned is a dev one's (stopped first): a production service is stopped last
    assert [s["namespace"] for s in ranker.proposed["stop_first"]] == ["dev"]
    assert set(ranker.proposed["group"]) == {"dev/dev-a", "dev/dev-b"}
    assert sum(r.proposed["gpus_freed"] for r in recs) == pytest.approx(2, abs=0.01)
    assert sum(r.monthly_savings_usd for r in recs) == pytest.approx(2 * 6.88 * 730, rel=1e-3)


def test_seven_small_services_share_one_mig_gpu() -> None:
    f = Fleet()
    lone_nodes(f, [f"s{i}" for i in range(7)], dict(gpus=1, price=6.88), small(0.1, 7000), namespace="prod-s")
    recs = evaluate_rules(f.frames())
    assert len(only(recs, "mig")) == 7
    assert sum(r.proposed["gpus_freed"] for r in recs) == pytest.approx(6, abs=0.01)
    hosts = {r.proposed["node"] for r in recs}
    assert len(hosts) == 1 and len({r.proposed["node_mig_config"] for r in recs}) == 1
    assert recs[0].proposed["node_layout"] == [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    for r in recs:  # every slice holds the observed maximum plus headroom
        assert r.evidence["slice_usable_mib"] >= 1.05 * 7000


def test_timeslice_groups_dev_and_mps_groups_production_never_mixed() -> None:
    f = Fleet()
    lone_nodes(f, ["dev-a", "dev-b", "dev-c"], L4, small(0.06, 3000), namespace="dev-team")
    lone_nodes(f, ["prod-a", "prod-b"], L4, small(0.06, 3000), namespace="prod-team")
    recs = evaluate_rules(f.frames())
    ts, mps = only(recs, "timeslice"), only(recs, "mps")
    assert {r.workload for r in ts} == {"dev-a", "dev-b", "dev-c"}
    assert {r.workload for r in mps} == {"prod-a", "prod-b"}
    for r in ts:
        assert set(r.proposed["group"]) | {f"dev-team/{r.workload}"} == {"dev-team/dev-a", "dev-team/dev-b",
                                                                         "dev-team/dev-c"}
        assert r.target["kind"] == "SharedGroup" and len(r.target["workloads"]) == 3
    for r in mps:
        assert not any("dev" in g for g in r.proposed["group"])
        assert r.evidence["client_memory_limit_gb"] == pytest.approx(22888 / 2 / 1024, abs=0.01)
    # three on one GPU frees two: 2/3 of a GPU each
    assert sum(r.monthly_savings_usd for r in ts) == pytest.approx(2 * 0.8048 * 730, rel=1e-3)


def test_mps_gives_each_client_an_equal_memory_share() -> None:
    # 9 GB max each (+10 %): two fit 22.9 GB / 2 = 11.4 GB each; three do not (7.6 GB each)
    f = Fleet()
    lone_nodes(f, ["a", "b", "c"], L4, small(0.05, 9000), namespace="prod-x")
    recs = only(evaluate_rules(f.frames()), "mps")
    assert len(recs) == 2 and all(r.proposed["replicas"] == 2 for r in recs)


def test_production_and_multi_replica_services_are_handled_as_documented() -> None:
    f = Fleet([Node("n1", **L4), Node("n2", **L4)],
              [Pod("api-0", "n1", "api"), Pod("api-1", "n2", "api")])
    f.usage[("ns", "api")] = small(0.05, 2000)
    assert evaluate_rules(f.frames()) == []  # two replicas are spread on purpose


# -- spot -------------------------------------------------------------------------------------
def test_spot_for_restartable_volcano_job_with_short_tasks() -> None:
    f = Fleet([Node("a100", model="A100-80GB", price=27.44705, pool="gpu-a100-od", instance_type="p4de.24xlarge")],
              [Pod(f"fe-{i}", "a100", "feature-extract", kind="VolcanoJob") for i in range(8)])
    f.usage[("ns", "feature-extract")] = Usage(gr_p95=0.8)
    frames = f.frames(
        disruption_controls=pl.DataFrame([{"cluster": "c", "namespace": "ns", "workload": "feature-extract",
                                           "max_retry": 10, "min_available": 8,
                                           "policies": json.dumps({"job": [{"event": "PodEvicted",
                                                                            "action": "RestartTask"}], "tasks": {}}),
                                           "tasks": None, "pod_labels": "{}", "pdb_selectors": None}]),
        instance_prices=pl.DataFrame([{"instance_type": "p4de.24xlarge", "gpu_count": 8,
                                       "on_demand_usd_per_hour": 27.44705, "spot_usd_per_hour": 27.44705 * 0.35}]))
    prof = frames["workload_gpu_profile"].with_columns(pl.lit(60).alias("finished_pods"),
                                                      pl.lit(2600.0).alias("runtime_p50_s"),
                                                      pl.lit(2900.0).alias("runtime_p90_s"))
    frames["workload_gpu_profile"] = prof
    recs = evaluate_rules(frames)
    assert [r.rule for r in recs] == ["spot"]
    r = recs[0]
    od, spot = 27.44705 / 8, 27.44705 * 0.35 / 8
    gh_month = 8 * 730
    rework = gh_month * 0.005 / 8 * (2600 / 3600 / 2)
    assert r.monthly_savings_usd == pytest.approx((od - spot) * gh_month - spot * rework, rel=1e-3)
    assert r.proposed["capacity_type"] == "spot" and r.proposed["node_pool"] == "gpu-a100-spot"
    assert r.evidence["saving_basis"] == "price_difference"


# -- binpack ----------------------------------------------------------------------------------
def pool(held: dict[str, list[tuple[str, float, str | None]]], gpus: int = 8, **node: Any) -> Fleet:
    f = Fleet([Node(n, gpus=gpus, **node) for n in held])
    for n, pods in held.items():
        for name, g, gang in pods:
            f.pods.append(Pod(name, n, gang or name, kind="VolcanoJob" if gang else "Deployment", gpus=g, gang=gang))
    return f


def test_binpack_frees_a_node_moving_the_gang_whole() -> None:
    f = pool({"n1": [("a0", 4, None), ("a1", 2, None)], "n2": [("det-0", 1, "det"), ("det-1", 1, "det")]})
    for p in f.pods:
        f.usage[("ns", p.workload)] = Usage(gr_mean=0.3)  # not busy
    recs = evaluate_rules(f.frames())
    assert [r.rule for r in recs] == ["binpack"]
    r = recs[0]
    assert r.node == "n2" and r.proposed["nodes_freed"] == ["n2"] and r.workload is None and r.namespace is None
    assert r.proposed["moves"] == [{"namespace": "ns", "workload": "det", "gang": "det", "pods": ["det-0", "det-1"],
                                    "from": "n2", "to": "n1", "gpus": 2.0}]
    assert r.monthly_savings_usd == pytest.approx(55.04 * 730)
    assert r.evidence["saving_basis"] == "nodes_released" and r.evidence["plan_is_optimal"] is True
    assert r.evidence["nodes_released"] == [{"node": "n2", "node_usd_per_hour": 55.04, "saving_usd_per_hour": 55.04,
                                             "gpus": 8.0}]
    assert r.target == {"nodes": ["n2"], "kind": "NodeSet", "pool": "pool-a", "cluster": "c"}


def test_binpack_plans_around_a_spread_gang_and_never_splits_it() -> None:
    # a busy gang spread over n2 and n3 (one member each) used to make the pool unplannable;
    # now it stays put and the rest is packed: n1's pods fit the free room of n2 and n3
    f = pool({"n1": [("a0", 2, None), ("b0", 2, None)], "n2": [("g-0", 4, "g")], "n3": [("g-1", 4, "g")]})
    f.usage[("ns", "g")] = Usage(gr_mean=0.9)
    for w in ("a0", "b0"):
        f.usage[("ns", w)] = Usage(gr_mean=0.5)
    (r,) = only(evaluate_rules(f.frames()), "binpack")
    assert r.proposed["nodes_freed"] == ["n1"]
    assert not [m for m in r.proposed["moves"] if m["gang"] == "g"], "a busy gang was touched"


def test_binpack_moves_an_idle_spread_gang_whole() -> None:
    f = pool({"n1": [("g-0", 2, "g")], "n2": [("g-1", 2, "g")], "n3": [("x0", 4, None)]})
    f.usage[("ns", "g")] = Usage(gr_mean=0.2)
    f.usage[("ns", "x0")] = Usage(gr_mean=0.5)
    (r,) = evaluate_rules(f.frames())
    assert len(r.proposed["nodes_freed"]) == 2
    gang_pods = sorted(p for m in r.proposed["moves"] if m["gang"] == "g" for p in m["pods"])
    assert gang_pods == ["g-0", "g-1"]  # all or nothing


def test_binpack_plans_nodes_labelled_mig_disabled() -> None:
    # nvidia.com/mig.config=all-disabled is the GPU operator's default on non-MIG nodes
    f = pool({"n1": [("a0", 6, None)], "n2": [("b0", 2, None)]}, mig_config="all-disabled")
    (r,) = evaluate_rules(f.frames())
    assert r.proposed["nodes_freed"] == ["n2"]


def test_binpack_elastic_gang_moves_only_beyond_min_available() -> None:
    # a job of 4 pods with minAvailable 2 is a gang only up to 2: at most 2 pods may move alone
    f = Fleet([Node("n1"), Node("n2"), Node("n3")])
    f.pods += [Pod(f"w-{i}", "n1", "w", kind="VolcanoJob", gpus=2, gang="w", gang_min=2) for i in range(3)]
    f.pods += [Pod("w-3", "n2", "w", kind="VolcanoJob", gpus=2, gang="w", gang_min=2),
               Pod("x", "n2", "x", gpus=4), Pod("y", "n3", "y", gpus=2)]
    f.usage[("ns", "w")] = Usage(gr_mean=0.9)
    recs = evaluate_rules(f.frames())
    (r,) = only(recs, "binpack")
    moved = [p for m in r.proposed["moves"] if m["workload"] == "w" for p in m["pods"]]
    assert len(moved) <= 2
    assert all(m["gang"] is None for m in r.proposed["moves"])  # moved one by one, not as a gang


@pytest.mark.parametrize("min_available,evictions,freed", [("1", 1, 2), ("2", 0, 1)])
def test_binpack_respects_pod_disruption_budgets(min_available: str, evictions: int, freed: int) -> None:
    f = pool({"n1": [("a0", 6, None)], "n2": [("s-0", 1, None)], "n3": [("s-1", 1, None)]})
    for p in f.pods:
        if p.name.startswith("s-"):
            p.labels, p.workload = {"app": "s"}, "s"
    f.pdbs = [{"cluster": "c", "namespace": "ns", "name": "s", "selector": json.dumps({"matchLabels": {"app": "s"}}),
               "min_available": min_available, "max_unavailable": None}]
    (r,) = evaluate_rules(f.frames())
    evicted = [p for m in r.proposed["moves"] for p in m["pods"]]
    assert len([p for p in evicted if p.startswith("s-")]) == evictions  # what the PDB allows, no more
    assert len(r.proposed["nodes_freed"]) == freed


def test_binpack_nothing_when_nothing_fits() -> None:
    f = pool({"n1": [("a0", 7, None)], "n2": [("b0", 2, None)]})
    assert evaluate_rules(f.frames()) == []


def test_exact_packing_bound() -> None:
    from gpuinsight.rules.pack_bound import Unit, optimal_nodes

    # 5 + 5 + 3 + 3 GPUs on 8-GPU nodes: the capacity bound says 2, the exact answer is 2 (5+3, 5+3)
    assert optimal_nodes([Unit(5), Unit(5), Unit(3), Unit(3)], [8, 8, 8]) == 2
    # 5 + 5 + 5 on 8-GPU nodes: the capacity bound says 2, but no two fit together: 3
    assert optimal_nodes([Unit(5), Unit(5), Unit(5)], [8, 8, 8]) == 3
    # a pinned unit keeps its node in use even if it could share
    assert optimal_nodes([Unit(1, pinned_to=2), Unit(1)], [8, 8, 8]) == 1
    assert optimal_nodes([Unit(1, pinned_to=2), Unit(7.5)], [8, 8, 8]) == 2
    assert optimal_nodes([Unit(1)] * 5000, [8] * 10) is None  # too large to solve exactly here


# -- queues -----------------------------------------------------------------------------------
def queue_frames(*queues: dict[str, Any]) -> dict[str, pl.DataFrame]:
    base = {"weight": 4, "deserved_gpu": None, "capability_gpu": None, "allocated_gpu_avg": 2.0,
            "allocated_gpu_p95": 2.0, "allocated_gpu_max": 2.0, "used_gpu_avg": 0.01, "pending_p95_s": 2.0,
            "pending_pods": 0, "largest_pod_gpus": 1.0, "largest_gang_gpus": 1.0}
    return {"queue_usage": pl.DataFrame([base | q for q in queues], infer_schema_length=None),
            "cluster_summary": pl.DataFrame([{"cluster": DEFAULT_CLUSTER, "gpu_hours": 48.0 * 50,
                                              "total_usd": 48 * 50 * 5.0, "hours": 48.0,
                                              "allocated_gpu_hours": 48.0 * 30}])}


def test_queue_over_provisioned_and_well_sized() -> None:
    recs = evaluate_rules(queue_frames(
        {"queue": "research", "deserved_gpu": 24.0, "capability_gpu": 32.0},
        {"queue": "training", "deserved_gpu": 16.0, "capability_gpu": 18.0, "allocated_gpu_avg": 16.0,
         "allocated_gpu_p95": 16.0, "allocated_gpu_max": 18.0, "used_gpu_avg": 14.0}))
    assert [r.queue for r in recs] == ["research"]
    r = recs[0]
    assert r.proposed == {"weight": 1, "deserved": {"nvidia.com/gpu": 3}, "capability": {"nvidia.com/gpu": 3}}
    assert r.current["deserved"] == {"nvidia.com/gpu": 24.0}
    assert r.monthly_savings_usd == 0 and r.evidence["saving_basis"] == "entitlement"
    assert r.evidence["idle_entitlement_usd_per_month_at_list"] == pytest.approx(21 * 5.0 * 730)


def test_a_queue_finding_quotes_its_own_clusters_price_and_spare_gpus() -> None:
    """Two clusters with the same queue name: each finding's idle entitlement is priced at its
    cluster's GPU-hour and quotes its cluster's unallocated GPUs, not the fleet's."""
    frames = queue_frames(*({"cluster": c, "queue": "research", "deserved_gpu": 24.0, "capability_gpu": 32.0}
                            for c in ("east", "west")))
    frames["cluster_summary"] = pl.DataFrame([
        {"cluster": "east", "hours": 48.0, "gpu_hours": 48.0 * 50, "allocated_gpu_hours": 48.0 * 30,
         "total_usd": 48 * 50 * 5.0},
        {"cluster": "west", "hours": 24.0, "gpu_hours": 24.0 * 10, "allocated_gpu_hours": 24.0 * 9,
         "total_usd": 24 * 10 * 2.0}])
    by = {r.cluster: r for r in evaluate_rules(frames)}
    assert by["east"].evidence["idle_entitlement_usd_per_month_at_list"] == pytest.approx(21 * 5.0 * 730)
    assert by["west"].evidence["idle_entitlement_usd_per_month_at_list"] == pytest.approx(21 * 2.0 * 730)
    assert by["east"].evidence["cluster_unallocated_gpus_avg"] == 20.0
    assert by["west"].evidence["cluster_unallocated_gpus_avg"] == 1.0


def test_queue_never_cut_below_a_jobs_pod_or_gang() -> None:
    # from a real Volcano issue: capability 4 and a Job asking 3 GPUs per pod was cut to 1
    recs = evaluate_rules(queue_frames(
        {"queue": "q1", "capability_gpu": 4.0, "allocated_gpu_p95": 0.0, "allocated_gpu_max": 0.0,
         "largest_pod_gpus": 3.0, "largest_gang_gpus": 3.0},
        {"queue": "q2", "deserved_gpu": 40.0, "largest_pod_gpus": 8.0, "largest_gang_gpus": 16.0}))
    by = {r.queue: r for r in recs}
    assert by["q1"].proposed["capability"] == {"nvidia.com/gpu": 3}
    assert by["q2"].proposed["deserved"] == {"nvidia.com/gpu": 16}
    assert by["q2"].evidence["floor_gpus"] == 16
    # already at the floor: nothing to lower
    assert evaluate_rules(queue_frames({"queue": "q3", "capability_gpu": 3.0, "largest_pod_gpus": 3.0,
                                        "allocated_gpu_p95": 0.0})) == []


# -- production, settings, ids, plan entries --------------------------------------------------
@pytest.mark.parametrize("ns,pc,labels,want", [
    ("prod-inference", None, {}, True), ("search-prod", None, {}, True), ("products", None, {}, False),
    ("non-prod", None, {}, False), ("preprod", None, {}, False), ("ml", "production-high", {}, True),
    ("ml", "non-production", {}, False), ("kube-system", "system-cluster-critical", {}, False),
    ("ml", None, {"env": "production"}, True), ("ml", None, {"environment": "prd"}, True),
    ("ml", None, {"tier": "productivity"}, False), ("prod-x", None, {"gpuinsight.io/production": "false"}, False),
])
def test_production_is_whole_token(ns: str, pc: str | None, labels: dict[str, str], want: bool) -> None:
    got, why = ProductionClassifier().classify(ns, pc, labels)
    assert got is want, why
    assert why


def test_production_classifier_is_a_setting() -> None:
    f = Fleet()
    lone_nodes(f, ["a", "b"], L4, small(0.06, 3000), namespace="live")
    assert {r.rule for r in evaluate_rules(f.frames())} == {"timeslice"}
    recs = evaluate_rules(f.frames(), {"production": {"namespaces": "live"}})
    assert {r.rule for r in recs} == {"mps"}
    assert recs[0].evidence["production_reason"] == "namespace live is listed as production"


def test_ids_are_stable_and_settings_validated() -> None:
    f = Fleet([Node("n1", **L4)], [Pod("nb-0", "n1", "jupyter")])
    f.usage[("ns", "jupyter")] = Usage(gr_p50=0.0, gr_p95=0.0, gr_max=0.0, active_fraction=0.0)
    a = evaluate_rules(f.frames())
    b = evaluate_rules(f.frames())
    assert [r.id for r in a] == [r.id for r in b] and a[0].id.startswith("idle-")
    assert evaluate_rules(f.frames(), {"idle": {"min_hours": 1000}}) == []  # too short to judge now
    # a value outside its bounds, or not of its type, is refused naming the setting (never read
    # as a default or as false)
    with pytest.raises(BadInput, match=r"idle\.max_active_fraction: -1 is outside 0\.\.1"):
        evaluate_rules(f.frames(), {"idle": {"max_active_fraction": -1}})
    with pytest.raises(BadInput, match=r"scale_to_zero\.include_production: 'maybe' is not true or false"):
        evaluate_rules(f.frames(), {"scale_to_zero": {"include_production": "maybe"}})
    with pytest.raises(BadInput, match=r"consolidation\.max_clients: '2\.5' is not a whole number"):
        evaluate_rules(f.frames(), {"consolidation": {"max_clients": "2.5"}})
    with pytest.raises(BadInput, match=r"topology\.mode: 'firm' is not one of soft, hard"):
        evaluate_rules(f.frames(), {"topology": {"mode": "firm"}})
    assert evaluate_rules(f.frames(), {"scale_to_zero": {"include_production": "Yes"}})  # the words a flag takes
    with pytest.raises(BadInput, match="unknown setting"):
        evaluate_rules(f.frames(), {"idle": {"colour": 1}})
    with pytest.raises(BadInput, match="unknown rule"):
        evaluate_rules(f.frames(), {"nope": {}})


def test_plan_entries_are_checked_against_their_kind() -> None:
    from gpuinsight.plan.kinds import BY_NAME, validate_finding

    f = Fleet()
    lone_nodes(f, [f"s{i}" for i in range(3)], dict(gpus=1, price=6.88), small(0.1, 7000), namespace="prod-s")
    lone_nodes(f, ["d1", "d2"], L4, small(0.06, 3000), namespace="dev")
    recs = evaluate_rules(f.frames())
    assert {r.rule for r in recs} == {"mig", "timeslice"}
    for r in recs:
        validate_finding(r.to_dict(), "r")  # what the rules emit is what the schemas accept
        assert r.evidence["saving_basis"] == BY_NAME[r.rule].saving_basis
    bad = recs[0].to_dict()
    bad["proposed"] = {**bad["proposed"], "mig_profile": "9g.1tb"} if bad["rule"] == "mig" else \
        {**bad["proposed"], "replicas": 1}
    with pytest.raises(BadInput, match=r"r\.proposed\.(mig_profile|replicas)"):
        validate_finding(bad, "r")


def test_store_plan_with_many_findings_and_late_non_null_fields(tmp_path) -> None:  # noqa: ANN001
    from datetime import UTC, datetime

    from gpuinsight.plan import Plan
    from gpuinsight.plan.model import finding_order
    from gpuinsight.plan.store import store_plan, stored_plan
    from gpuinsight.warehouse import Warehouse

    recs = [Recommendation(rule="idle", title=f"t{i}", namespace="ns", workload=f"w{i}") for i in range(150)]
    recs.append(Recommendation(rule="queue", title="q", queue="research"))  # first non-null queue at row 151
    plan = Plan("plan-x", datetime.now(UTC), "c", (None, None), recs, notes=["a note"], spend_monthly_usd=12.5)
    wh = Warehouse(tmp_path / "w.duckdb")
    store_plan(wh, plan)
    assert wh.count("recommendations") == 151
    assert wh.sql("SELECT queue FROM recommendations WHERE rule = 'queue'").item() == "research"
    # read back: the same plan (what a report renders without running the rules)
    again = stored_plan(wh)
    assert again is not None and again.plan_id == "plan-x" and again.notes == ["a note"]
    assert again.spend_monthly_usd == 12.5 and again.catalog == "c" and again.clusters == ["default"]
    # in the engine's order (this plan's are not: built by hand)
    assert [r.to_dict() for r in again.recommendations] == [r.to_dict() for r in sorted(recs, key=finding_order)]
    assert stored_plan(wh, "plan-y") is None


def test_label_index_covers_exactly_what_the_selector_matches() -> None:
    """The PDB coverage index (binpack's planner and its action builder) gives exactly the pods a
    brute-force selector check gives, in the same order, on random pods and selectors."""
    import random

    from gpuinsight.kubelabels import LabelIndex, selector_matches

    rnd = random.Random(11)
    keys, values = ["app", "tier", "team", "x"], ["a", "b", "c", 1]
    pods = [{"namespace": rnd.choice(["n1", "n2"]), "name": f"p{i}",
             "labels": {k: rnd.choice(values) for k in rnd.sample(keys, rnd.randint(0, 3))}} for i in range(300)]
    index = LabelIndex(pods, lambda p: p["namespace"], lambda p: p["labels"])
    seen_match = 0
    for _ in range(400):
        selector: dict = {}
        if rnd.random() < 0.8:
            selector["matchLabels"] = {k: rnd.choice(values) for k in rnd.sample(keys, rnd.randint(0, 2))}
        if rnd.random() < 0.4:
            selector["matchExpressions"] = [{"key": rnd.choice(keys), "operator": rnd.choice(
                ["In", "NotIn", "Exists", "DoesNotExist", "Bogus"]), "values": rnd.sample(values, 2)}]
        ns = rnd.choice(["n1", "n2", "n3"])
        brute = [p for p in pods if p["namespace"] == ns and selector_matches(selector, p["labels"])]
        assert index.covered(ns, selector) == brute
        seen_match += bool(brute)
    assert seen_match > 50  # the selectors did match pods: the comparison is not between empty lists


def test_one_selector_reading_for_pdbs_hypernodes_and_spot() -> None:
    """Spot's PDB check reads ``matchExpressions`` as the binpack planner does (a PDB selecting
    its pods by expression alone was missed); a HyperNode's empty ``labelMatch`` selects every
    node, an empty PDB selector protects nothing here; an unknown operator selects nothing."""
    from gpuinsight.kubelabels import selector_matches
    from gpuinsight.rules.spot import has_pdb
    from gpuinsight.rules.topology_domains import _selects
    from gpuinsight.sql.rows import make_row

    pod = '{"app": "api", "tier": "serving"}'
    by_expression = '{"matchExpressions": [{"key": "app", "operator": "In", "values": ["api", "web"]}]}'
    assert has_pdb(make_row("disruption_controls", pod_labels=pod, pdb_selectors=[by_expression]))
    assert has_pdb(make_row("disruption_controls", pod_labels=pod, pdb_selectors=['{"matchLabels": {"app": "api"}}']))
    assert not has_pdb(make_row("disruption_controls", pod_labels=pod, pdb_selectors=[
        '{"matchLabels": {"app": "api"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", '
        '"values": ["serving"]}]}', "{}"]))
    assert _selects({"selector": {"labelMatch": {}}}, "n1", {"rack": "r1"})
    assert _selects({"selector": {"labelMatch": {"matchExpressions": [{"key": "rack", "operator": "Exists"}]}}},
                    "n1", {"rack": "r1"})
    assert not selector_matches({}, {"app": "api"})
    assert not selector_matches({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]},
                                {"app": "api"})


def test_a_rule_reads_only_the_models_it_declares() -> None:
    """Each rule is handed its declared ``needs`` (and the engine's frames): a model it does not
    declare is refused, so :func:`needed_frames` fetches everything a plan reads."""
    from gpuinsight.rules.context import PlanContext
    from gpuinsight.rules.engine import DeclaredFrames

    frames = Fleet([Node("n1", **L4)], [Pod("nb-0", "n1", "jupyter")]).frames()
    view = DeclaredFrames(frames, "idle", ("workload_gpu_profile",))
    assert view["workload_gpu_profile"] is frames["workload_gpu_profile"] and "analysis_window" in view
    with pytest.raises(AssertionError, match="rule idle reads the model 'queue_usage' it does not declare"):
        view.get("queue_usage")
    ctx = PlanContext()
    ctx.rows(frames, "queue_usage")  # cached for the plan ...
    with pytest.raises(AssertionError, match="does not declare"):
        ctx.rows(view, "queue_usage")  # ... and still refused to a rule that does not declare it


def test_rows_without_a_nested_column_and_its_cells_read_as_the_rows_would() -> None:
    """A rule may leave a nested column out of a model's typed rows (converted once per plan) and
    read it for the few rows it needs: the same value the full rows hold, row by row."""
    from gpuinsight.rules.context import PlanContext

    week = [[{"how": h, "gr_avg": 0.1 * h, "idle_share": None} for h in range(3)], None, []]
    frames = {"idle_stretches": pl.DataFrame({"namespace": ["a", "b", "c"], "hour_of_week": week})}
    ctx = PlanContext()
    full = ctx.rows(frames, "idle_stretches")
    slim = ctx.rows(frames, "idle_stretches", without=("hour_of_week",))
    assert [r.namespace for r in slim] == ["a", "b", "c"] and all(r.hour_of_week is None for r in slim)
    assert [ctx.cell(frames, "idle_stretches", i, "hour_of_week") for i in range(3)] == [r.hour_of_week for r in full]
    assert ctx.cell({"idle_stretches": frames["idle_stretches"].drop("hour_of_week")}, "idle_stretches", 0,
                    "hour_of_week") is None

"""Each rule on small literal tables: findings, figures and the negative cases."""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest

from gpuinsight.rules.base import Recommendation
from gpuinsight.rules.engine import evaluate_rules
from gpuinsight.rules.mig_packing import MigProfile, pack, parse_layouts

WINDOW = pl.DataFrame([{"hours": 48.0, "catalog": "test", "window_start": None, "window_end": None}])
LAYOUTS = [line.split(",")[1] for line in """1,7g
2,4g+3g
3,4g+2g+1g.2x
9,3g+3g
10,3g+2g+2g
19,2g+2g+2g+1g.2x
31,1g.2x+1g.2x+1g.2x+1g.2x
38,1g+1g+1g+1g+1g+1g+1g""".splitlines()]
MIG_CATALOG = pl.DataFrame([
    {"gpu_model": "H100-80GB", "profile": p, "memory_gb": m, "compute_slices": c, "memory_slices": ms,
     "max_instances": n, "layouts": LAYOUTS}
    for p, m, c, ms, n in [("1g.10gb", 10, 1, 1, 7), ("1g.20gb", 20, 1, 2, 4), ("2g.20gb", 20, 2, 2, 3),
                           ("3g.40gb", 40, 3, 4, 2), ("4g.40gb", 40, 4, 4, 1), ("7g.80gb", 80, 7, 8, 1)]
])


def wl(name: str, **kw: Any) -> dict[str, Any]:
    base = dict(cluster="c", namespace="ns", workload=name, workload_kind="Deployment", queue=None,
                vcjob=None, podgroup=None, gpu_model="H100-80GB", node_pool="gpu-h100-od", capacity_type="on-demand",
                instance_type="p5.48xlarge", zone="z1", production=False, pods=1, gpus_per_pod=1.0,
                gpu_request_per_pod=1.0, mig_profile=None, gpu_hours=48.0, cost_usd=48 * 6.88, usd_per_gpu_hour=6.88,
                hours_held=48, avg_gpus_held=1.0, samples=576, gr_mean=0.6, gr_p50=0.6, gr_p95=0.8, gr_p99=0.9,
                gr_max=0.95, sm_mean=0.5, sm_p95=0.7, sm_p99=0.8, sm_max=0.9, fb_p95_mib=60000.0,
                fb_p99_mib=62000.0, fb_max_mib=64000.0, gpu_memory_mib=81559.0, active_fraction=0.99,
                diurnal_swing=0.1, finished_pods=0, runtime_p50_s=None, runtime_p90_s=None, pending_p95_s=5.0)
    base.update(kw)
    return base


def frames(workloads: list[dict[str, Any]], **extra: pl.DataFrame) -> dict[str, pl.DataFrame]:
    out = {"analysis_window": WINDOW, "workload_gpu_profile": pl.DataFrame(workloads, infer_schema_length=None),
           "mig_catalog": MIG_CATALOG}
    out.update(extra)
    return out


def only(recs: list[Recommendation], rule: str) -> list[Recommendation]:
    return [r for r in recs if r.rule == rule]


def test_busy_well_sized_workloads_get_nothing() -> None:
    recs = evaluate_rules(frames([wl("train"), wl("serve", production=True)]))
    assert recs == []


def test_idle_notebook_found_with_its_cost() -> None:
    recs = evaluate_rules(frames([
        wl("jupyter", workload_kind="StatefulSet", gr_p50=0.0, gr_p95=0.02, gr_mean=0.004, active_fraction=0.03,
           sm_p95=0.01, fb_p99_mib=3000.0),
        wl("busy"),
        # low but steady use is a sharing case, not idle
        wl("steady-low", gr_p50=0.037, gr_p95=0.05, gr_mean=0.037, active_fraction=0.09, sm_p95=0.045,
           instance_type="g6.xlarge", gpu_model="L4"),
    ]))
    assert [r.rule for r in recs] == ["idle"]
    r = recs[0]
    assert r.workload == "jupyter" and r.proposed == {"replicas": 0, "reason": "idle"}
    assert r.monthly_savings_usd == pytest.approx(48 * 6.88 / 48 * 730, rel=1e-3)
    assert r.evidence["active_fraction_pct"] == 3.0
    assert r.target["kind"] == "StatefulSet"


def test_short_history_is_not_judged() -> None:
    recs = evaluate_rules(frames([wl("new-nb", gr_p50=0.0, active_fraction=0.0, hours_held=3, gr_p95=0.0)]))
    assert only(recs, "idle") == []


def test_mig_fits_small_production_service_into_free_slice() -> None:
    cap = pl.DataFrame([{"cluster": "c", "node": "mig-1", "gpu_model": "H100-80GB", "zone": "z1", "node_pool": "p",
                         "profile": "1g.10gb", "capacity": 7.0, "held": 5.0, "free": 2.0}])
    recs = evaluate_rules(frames([wl("ranker", production=True, gr_p95=0.08, sm_p95=0.06, fb_p99_mib=6400.0)],
                                 mig_capacity=cap))
    assert [r.rule for r in recs] == ["mig"]
    r = recs[0]
    assert r.proposed["mig_profile"] == "1g.10gb" and r.proposed["node"] == "mig-1"
    assert r.proposed["resource"] == "nvidia.com/mig-1g.10gb"
    assert r.monthly_savings_usd == pytest.approx(6.88 * 730 * 6 / 7)  # frees its GPU less the slice


def test_mig_never_gives_a_60gb_service_a_10gb_slice() -> None:
    recs = evaluate_rules(frames([wl("big", production=True, gr_p95=0.05, sm_p95=0.05, fb_p99_mib=61440.0,
                                     active_fraction=0.5, gr_p50=0.06)]))
    assert only(recs, "mig") == []


def test_mig_packs_several_services_into_valid_layouts() -> None:
    services = [wl(f"s{i}", production=True, gr_p95=0.1, sm_p95=0.1, fb_p99_mib=7000.0) for i in range(7)]
    recs = only(evaluate_rules(frames(services)), "mig")
    assert len(recs) == 7
    # seven 1g.10gb instances fit on one GPU: 6 of 7 GPUs freed
    assert sum(r.proposed["gpus_freed"] for r in recs) == pytest.approx(6, abs=0.01)
    assert recs[0].proposed["node_mig_config"] == "all-1g.10gb"


def test_packing_respects_layouts() -> None:
    layouts = parse_layouts(LAYOUTS)
    three_g = MigProfile("H100-80GB", "3g.40gb", 40, 3, 4, 2)
    four_g = MigProfile("H100-80GB", "4g.40gb", 4 * 10, 4, 4, 1)
    assert len(pack([three_g, three_g, three_g], layouts)) == 2  # 3g+3g per GPU at most
    assert len(pack([four_g, four_g], layouts)) == 2  # never two 4g on one GPU
    assert len(pack([four_g, three_g], layouts)) == 1


def test_timeslice_groups_dev_and_never_mixes_production() -> None:
    small = dict(gr_p95=0.06, sm_p95=0.05, fb_p99_mib=3000.0, gpu_model="L4", gpu_memory_mib=22888.0,
                 usd_per_gpu_hour=0.8048, node_pool="gpu-l4-od", instance_type="g6.xlarge", active_fraction=0.6,
                 gr_p50=0.06)
    recs = evaluate_rules(frames([wl("dev-a", **small), wl("dev-b", **small), wl("dev-c", **small),
                                  wl("prod-a", production=True, **small), wl("prod-b", production=True, **small)]))
    ts = only(recs, "timeslice")
    mps = only(recs, "mps")
    assert {r.workload for r in ts} == {"dev-a", "dev-b", "dev-c"}
    assert {r.workload for r in mps} == {"prod-a", "prod-b"}
    for r in ts:
        assert set(r.proposed["group"]) == {"ns/dev-a", "ns/dev-b", "ns/dev-c"}
    for r in mps:
        assert not any("dev" in g for g in r.proposed["group"])
    # three on one GPU frees two: 2/3 of a GPU each
    assert sum(r.monthly_savings_usd for r in ts) == pytest.approx(2 * 0.8048 * 730, rel=1e-3)


def test_mps_respects_equal_memory_shares() -> None:
    # 9 GB p99 each (+20 %): two fit in 22.9 GB / 2 each? 10.8 > 11.4 no -> 10.8 <= 11.44 yes; three do not.
    big = dict(gr_p95=0.05, sm_p95=0.05, fb_p99_mib=9000.0, gpu_model="L4", gpu_memory_mib=22888.0,
               production=True, usd_per_gpu_hour=0.8048, active_fraction=0.6, gr_p50=0.06)
    recs = only(evaluate_rules(frames([wl("a", **big), wl("b", **big), wl("c", **big)])), "mps")
    assert len(recs) == 2 and all(r.proposed["replicas"] == 2 for r in recs)


def test_spot_for_restartable_volcano_job_with_short_tasks() -> None:
    job = wl("feature-extract", workload_kind="VolcanoJob", instance_type="p4de.24xlarge", gpu_model="A100-80GB",
             node_pool="gpu-a100-od", gpu_hours=384.0, avg_gpus_held=8.0, cost_usd=384 * 27.44705 / 8,
             finished_pods=60, runtime_p50_s=2600.0, runtime_p90_s=2900.0)
    controls = pl.DataFrame([{"cluster": "c", "namespace": "ns", "workload": "feature-extract", "max_retry": 10,
                              "min_available": 8,
                              # as the dump loader stores them: job-level list + per-task map
                              "policies": json.dumps({"job": [{"event": "PodEvicted", "action": "RestartTask"}],
                                                      "tasks": {}}),
                              "tasks": None, "pod_labels": "{}", "pdb_selectors": None}])
    prices = pl.DataFrame([{"instance_type": "p4de.24xlarge", "gpu_count": 8, "on_demand_usd_per_hour": 27.44705,
                            "spot_usd_per_hour": 27.44705 * 0.35}])
    recs = evaluate_rules(frames([job], disruption_controls=controls, instance_prices=prices))
    assert [r.rule for r in recs] == ["spot"]
    r = recs[0]
    od, spot = 27.44705 / 8, 27.44705 * 0.35 / 8
    gh_month = 384 / 48 * 730
    rework = gh_month * 0.005 / 8 * (2600 / 3600 / 2)
    assert r.monthly_savings_usd == pytest.approx((od - spot) * gh_month - spot * rework, rel=1e-3)
    assert r.proposed["capacity_type"] == "spot" and r.proposed["node_pool"] == "gpu-a100-spot"
    assert r.evidence["spot_price_assumed"] is False


def test_no_spot_without_restart_policy_or_when_already_spot() -> None:
    gang = wl("pretrain", workload_kind="VolcanoJob", finished_pods=0)
    controls = pl.DataFrame([{"cluster": "c", "namespace": "ns", "workload": "pretrain", "max_retry": 3,
                              "min_available": 2, "policies": None, "tasks": None, "pod_labels": "{}",
                              "pdb_selectors": None}])
    prices = pl.DataFrame([{"instance_type": "p5.48xlarge", "gpu_count": 8, "on_demand_usd_per_hour": 55.04,
                            "spot_usd_per_hour": None}])
    nightly = wl("nightly", workload_kind="VolcanoJob", capacity_type="spot", finished_pods=10,
                 runtime_p50_s=3600.0, runtime_p90_s=3600.0)
    recs = evaluate_rules(frames([gang, nightly], disruption_controls=controls, instance_prices=prices))
    assert only(recs, "spot") == []


def placement(rows: list[tuple[str, str, float, str | None]]) -> pl.DataFrame:
    return pl.DataFrame([{"cluster": "c", "uid": p, "namespace": "ns", "pod": p, "workload_kind": "Job",
                          "workload": g or p, "node": n, "gpus": gpus, "mig_profile": None, "production": False,
                          "gang": g} for p, n, gpus, g in rows])


def node_rows(held: dict[str, float], gpus: int = 8, price: float = 55.04) -> pl.DataFrame:
    return pl.DataFrame([{"cluster": "c", "node": n, "node_pool": "gpu-h100-od", "zone": "z1", "gpu_model": "H100-80GB",
                          "gpu_count": gpus, "mig_config": None, "gpus_held": h, "usd_per_hour": price,
                          "node_pool_kind": "karpenter"} for n, h in held.items()])


def test_binpack_frees_a_node_moving_the_gang_whole() -> None:
    place = placement([("a0", "n1", 4, None), ("a1", "n1", 2, None), ("det-0", "n2", 1, "det"),
                       ("det-1", "n2", 1, "det")])
    recs = evaluate_rules({"placement_current": place, "nodes_current": node_rows({"n1": 6, "n2": 2})})
    assert [r.rule for r in recs] == ["binpack"]
    r = recs[0]
    assert r.node == "n2" and r.proposed["nodes_freed"] == ["n2"]
    assert r.proposed["moves"] == [{"namespace": "ns", "workload": "det", "gang": "det", "pods": ["det-0", "det-1"],
                                    "from": "n2", "to": "n1", "gpus": 2.0}]
    assert r.monthly_savings_usd == pytest.approx(55.04 * 730)
    assert r.evidence["gap_to_lower_bound_nodes"] == 0
    assert r.evidence["pool_optimal_nodes"] == 1 and r.evidence["gap_to_optimal_nodes"] == 0


def test_binpack_never_splits_a_gang() -> None:
    # the gang spans n2 and n3; n1 has room for n2's half only: freeing n2 would split it
    place = placement([("a0", "n1", 6, None), ("g-0", "n2", 2, "g"), ("g-1", "n3", 2, "g"), ("b0", "n3", 4, None)])
    recs = evaluate_rules({"placement_current": place, "nodes_current": node_rows({"n1": 6, "n2": 2, "n3": 6})})
    for r in only(recs, "binpack"):
        moved = [m for m in r.proposed["moves"] if m["gang"] == "g"]
        assert not moved, "a gang was moved while part of it stays behind"


def test_binpack_nothing_when_nothing_fits() -> None:
    place = placement([("a0", "n1", 7, None), ("b0", "n2", 2, None)])
    recs = evaluate_rules({"placement_current": place, "nodes_current": node_rows({"n1": 7, "n2": 2})})
    assert recs == []


def test_queue_over_provisioned_and_well_sized() -> None:
    usage = pl.DataFrame([
        {"queue": "research", "weight": 4, "deserved_gpu": 24.0, "capability_gpu": 32.0, "allocated_gpu_avg": 2.0,
         "allocated_gpu_p95": 2.0, "allocated_gpu_max": 2.0, "used_gpu_avg": 0.01, "pending_p95_s": 2.0,
         "pending_pods": 0},
        {"queue": "training", "weight": 4, "deserved_gpu": 16.0, "capability_gpu": 18.0, "allocated_gpu_avg": 16.0,
         "allocated_gpu_p95": 16.0, "allocated_gpu_max": 18.0, "used_gpu_avg": 14.0, "pending_p95_s": 10.0,
         "pending_pods": 0},
    ])
    summary = pl.DataFrame([{"gpu_hours": 48.0 * 50, "total_usd": 48 * 50 * 5.0, "hours": 48.0,
                             "allocated_gpu_hours": 48.0 * 30}])
    recs = evaluate_rules({"queue_usage": usage, "fleet_summary": summary})
    assert [r.queue for r in recs] == ["research"]
    r = recs[0]
    assert r.proposed == {"weight": 1, "deserved": {"nvidia.com/gpu": 3}, "capability": {"nvidia.com/gpu": 3}}
    assert r.current["deserved"] == {"nvidia.com/gpu": 24.0}
    assert r.monthly_savings_usd == 0  # an entitlement, not a bill
    assert r.evidence["idle_entitlement_usd_per_month_at_list"] == pytest.approx(21 * 5.0 * 730)


def test_ids_are_stable_and_settings_validated() -> None:
    f = frames([wl("jupyter", gr_p50=0.0, gr_p95=0.0, active_fraction=0.0)])
    a = evaluate_rules(f)
    b = evaluate_rules(f)
    assert [r.id for r in a] == [r.id for r in b] and a[0].id.startswith("idle-")
    stricter = evaluate_rules(f, {"idle": {"max_active_fraction": -1}})
    assert stricter == []
    from gpuinsight.errors import BadInput

    with pytest.raises(BadInput, match="unknown setting"):
        evaluate_rules(f, {"idle": {"colour": 1}})
    with pytest.raises(BadInput, match="unknown rule"):
        evaluate_rules(f, {"nope": {}})


def test_store_plan_with_many_findings_and_late_non_null_fields(tmp_path) -> None:  # noqa: ANN001
    from datetime import UTC, datetime

    from gpuinsight.rules.base import Plan
    from gpuinsight.rules.engine import store_plan
    from gpuinsight.warehouse import Warehouse

    recs = [Recommendation(rule="idle", title=f"t{i}", namespace="ns", workload=f"w{i}") for i in range(150)]
    recs.append(Recommendation(rule="queue", title="q", queue="research"))  # first non-null queue at row 151
    plan = Plan("plan-x", datetime.now(UTC), "c", (None, None), recs)
    wh = Warehouse(tmp_path / "w.duckdb")
    store_plan(wh, plan)
    assert wh.count("recommendations") == 151
    assert wh.sql("SELECT queue FROM recommendations WHERE rule = 'queue'").item() == "research"


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

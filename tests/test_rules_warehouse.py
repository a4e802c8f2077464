"""The rules end to end through DuckDB on a fleet with neutral names (nothing here is spelled
like the sample fleet): the SQL models' peak figures, recurring hours, node splits, gang sizes,
queue floors and MIG-disabled nodes reach the rules, and the plan is what the fleet calls for."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import gpuinsight as gi
from gpuinsight.rules.base import Plan
from tests.fleet_tables import T0, MiniFleet

END = T0 + timedelta(days=2)


def build() -> MiniFleet:
    f = MiniFleet(cluster="k1")
    f.price("it-big", "H100-80GB", 8, 55.04)
    f.price("it-one", "H100-80GB", 1, 6.88)
    for n in ("a1", "a2", "a3"):  # MIG-capable nodes that do not run MIG
        f.node(n, "it-big", "H100-80GB", 8, pool="p1", mig_config="all-disabled")
    for n in ("b1", "b2", "b3", "b4", "b5", "b6"):
        f.node(n, "it-one", "H100-80GB", 1, pool="p2")
    # pool p1: a strict gang spread over a1 and a2 (not busy), a busy service, a one-pod job on a3
    f.podgroup("g7", "ns-y", min_member=2)
    for i, node in enumerate(("a1", "a2")):
        f.pod(f"g7-{i}", node, namespace="ns-y", gpus=4, workload="g7", kind="VolcanoJob", podgroup="g7")
        for gpu in range(4):
            f.series(node, gpu, f"g7-{i}", "ns-y", 0.2, end=END, fb_mib=20000)
    f.pod("w3-0", "a2", namespace="ns-y", gpus=2, workload="w3")
    f.pod("j5-0", "a3", namespace="ns-y", gpus=2, workload="j5", kind="VolcanoJob")
    for gpu in (4, 5):
        f.series("a2", gpu, "w3-0", "ns-y", 0.8, end=END, fb_mib=40000)
    for gpu in (0, 1):
        f.series("a3", gpu, "j5-0", "ns-y", 0.85, end=END, fb_mib=50000)
    # pool p2: one pod per 1-GPU node
    f.pod("s1-0", "b1", namespace="ns-x", workload="s1", labels={"env": "production"})
    f.series("b1", 0, "s1-0", "ns-x", 0.08, gr_max=0.12, end=END, fb_mib=6000, fb_max_mib=6500)
    f.pod("s2-0", "b2", namespace="products", workload="s2", queue="q9")  # 'products' is not 'prod'
    f.series("b2", 0, "s2-0", "products", 0.05, end=END, fb_mib=4000)
    f.pod("s3-0", "b3", namespace="ns-y", workload="s3")  # bursty: modest means, peaks at 90 %
    f.series("b3", 0, "s3-0", "ns-y", 0.2, gr_max=0.9, end=END, fb_mib=5000)
    f.pod("s4-0", "b4", namespace="ns-y", workload="s4")  # memory-spiky: 30 GB usually, 70 GB at peak
    f.series("b4", 0, "s4-0", "ns-y", 0.15, end=END, fb_mib=30000, fb_max_mib=70000)
    f.pod("nb-0", "b5", namespace="ns-z", workload="nb", kind="StatefulSet")  # idle, alone on its node
    f.series("b5", 0, "nb-0", "ns-z", 0.001, end=END, fb_mib=2000)
    f.pod("nt-0", "b6", namespace="ns-z", workload="nt")  # busy two hours a night, idle otherwise
    f.series("b6", 0, "nt-0", "ns-z", 0.9, end=END, fb_mib=9000, active_hours={2, 3})
    # queue q9 holds one small pod, but a PodGroup of it needs 3 GPUs to be admitted
    f.queue("q9", weight=2, deserved=4, capability=4)
    f.podgroup("pg-big", "products", queue="q9", min_member=1, gpus=3)
    return f


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = Path(tmp_path_factory.mktemp("neutral")) / "k1.duckdb"
    with gi.open(db) as g:
        build().load(g.wh)
        g.refresh()
    return db


@pytest.fixture(scope="module")
def plan(warehouse: Path) -> Plan:
    with gi.open(warehouse) as g:
        return g.recommend()


def test_window_path_and_materialized_path_agree(warehouse: Path) -> None:
    # without a window the sample statistics come from workload_sample_stats (built at load);
    # with one, from the raw samples of the window: over the whole window they must agree
    with gi.open(warehouse, read_only=True) as g:
        whole = g.query("workload_gpu_profile").sort("workload")
        windowed = g.query("workload_gpu_profile", since=T0.isoformat(), until=END.isoformat()).sort("workload")
    cols = ["workload", "samples", "gr_p50", "gr_p95", "peak_p95", "fb_max_mib", "step_s", "max_pushed_down",
            "active_fraction"]
    assert whole.select(cols).to_dicts() == windowed.select(cols).to_dicts()
    peaks = {r["workload"]: r for r in whole.to_dicts()}
    assert peaks["s3"]["gr_p95"] == pytest.approx(0.2) and peaks["s3"]["peak_p95"] == pytest.approx(0.9)
    assert peaks["nt"]["recurring_hours_utc"] == [2, 3] and peaks["s4"]["fb_max_mib"] == 70000


def test_the_plan_is_what_the_fleet_calls_for(plan: Plan) -> None:
    found = sorted((r.rule, r.workload or r.node or r.queue) for r in plan.recommendations)
    by = {(r.rule, r.workload or r.node or r.queue): r for r in plan.recommendations}
    # binpack: the spread gang no longer blocks the pool; one 2-GPU job moves, a3 is released
    bp = by[("binpack", "a3")]
    assert bp.proposed["nodes_freed"] == ["a3"] and [m["pods"] for m in bp.proposed["moves"]] == [["j5-0"]]
    # j5 may land on a1 or a2 (the same nodes kept, the same GPUs moved: the solver breaks the tie).
    # On a2 it leaves a1 room for the whole spread gang g7, and the topology rule gathers it there
    (landing,) = [m["to"] for m in bp.proposed["moves"]]
    gathered = [("topology", "g7")] if landing == "a2" else []
    assert found == sorted([("binpack", "a3"), ("idle", "nb"), ("mig", "s1"), ("mig", "s2"), ("queue", "q9"),
                            ("scale_to_zero", "nt"), *gathered])
    if gathered:
        topo = by[("topology", "g7")]
        assert topo.proposed["domain"] == "a1" and topo.monthly_savings_usd == 0
        assert {p["pod"]: p["to"] for p in topo.proposed["placement"]} == {"g7-0": "a1", "g7-1": "a1"}
    assert bp.monthly_savings_usd == pytest.approx(55.04 * 730) and bp.evidence["plan_is_optimal"] is True
    # the lone production candidate shares a MIG GPU with non-production work, sized on its peak
    s1, s2 = by[("mig", "s1")], by[("mig", "s2")]
    assert s1.proposed["mig_profile"] == "2g.20gb"  # peak 12 % needs 2 of 7 slices at an 80 % target
    assert s1.proposed["node"] == s2.proposed["node"] and s1.proposed["repartition"] is True
    assert s1.evidence["production"] is True and s2.evidence["production"] is False
    assert s1.evidence["compute_resolution_s"] == 300 and s1.evidence["max_per_step_pushed_down"] is True
    assert s1.monthly_savings_usd + s2.monthly_savings_usd == pytest.approx(6.88 * 730, rel=1e-3)
    # idle alone on its node: claimed once; the nightly Deployment gets a KEDA ScaledObject started by cron
    # at its usual hours: idle 04:00-02:00 and 04:00-24:00 less the cron hours 04 and 01 and the cooldowns
    assert by[("idle", "nb")].monthly_savings_usd == pytest.approx(6.88 * 730, rel=1e-3)
    nt = by[("scale_to_zero", "nt")]
    assert nt.proposed["active_hours_utc"] == [1, 2, 3, 4]
    assert nt.evidence["hours_at_zero"] == pytest.approx((22 - 2 - 0.5) + (20 - 1 - 0.5))
    assert nt.monthly_savings_usd == pytest.approx(6.88 * 730 * 38 / 48, rel=1e-3)
    assert nt.evidence["expected_cold_starts_per_day"] == 0.5  # it woke once, on the second night
    # the queue floor: never below the 3 GPUs its PodGroup needs
    q = by[("queue", "q9")]
    assert q.proposed["capability"] == {"nvidia.com/gpu": 3} and q.proposed["deserved"] == {"nvidia.com/gpu": 3}


def test_totals_per_basis_and_the_mig_actions(plan: Plan) -> None:
    basis = plan.savings_by_basis
    assert basis["nodes_released"] == pytest.approx(55.04 * 730, rel=1e-3)
    assert basis["gpus_returned"] == pytest.approx(6.88 * 730 * (1 + 1 + 38 / 48), rel=1e-3)
    assert plan.spend_monthly_usd == pytest.approx((3 * 55.04 + 6 * 6.88) * 730, rel=1e-3)
    assert any("savings ledger" in n for n in plan.notes)
    for r in (r for r in plan.recommendations if r.rule == "mig"):
        (patch,) = [a for a in r.actions if a["type"] == "k8s-patch"]
        added = {op["path"].rsplit("/", 2)[-2] for op in patch["patch"] if op["op"] == "add"
                 and "mig-" in op["path"]}
        assert added == {"limits", "requests"}, "the slice goes into both requests and limits"

"""Cost, allocation and waste models on small fleets computed by hand."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

import gpuinsight as gi
from gpuinsight.errors import BadInput
from tests.fleet_tables import T0, MiniFleet

H1 = T0 + timedelta(hours=1)
H2 = T0 + timedelta(hours=2)


@pytest.fixture()
def fleet(tmp_path: Path) -> gi.GpuInsight:
    f = MiniFleet()
    f.price("p5.48xlarge", "H100-80GB", 8, 55.04)
    f.price("p5.4xlarge", "H100-80GB", 1, 6.88)
    f.price("g6.xlarge", "L4", 1, 0.8048, 0.30)
    # n1: 8 x H100 on demand, whole window
    f.node("n1", "p5.48xlarge", "H100-80GB", 8, last=H2 - timedelta(seconds=300))
    f.pod("busy", "n1", namespace="train", queue="q-train")
    f.series("n1", 0, "busy", "train", 0.5, end=H2, fb_mib=60000)
    f.pod("idle-nb", "n1", namespace="research", queue="q-research")
    f.series("n1", 1, "idle-nb", "research", 0.01, end=H2)
    f.pod("blind", "n1", namespace="train", queue="q-train")  # holds a GPU, no DCGM series
    for g in range(3, 8):
        f.series("n1", g, "", "", 0.0, end=H2)
    # n2: 1 x L4 on spot; the pod arrives at 00:30
    f.node("n2", "g6.xlarge", "L4", 1, capacity_type="spot", last=H2 - timedelta(seconds=300))
    f.pod("svc", "n2", namespace="dev", start=T0 + timedelta(minutes=30))
    f.series("n2", 0, "", "", 0.0, end=T0 + timedelta(minutes=30), mem_mib=22888)
    f.series("n2", 0, "svc", "dev", 0.2, start=T0 + timedelta(minutes=30), end=H2, mem_mib=22888)
    # n3: 1 x H100 in MIG mode, one 1g.10gb slice held
    f.node("n3", "p5.4xlarge", "H100-80GB", 1, mig_config="all-1g.10gb", last=H2 - timedelta(seconds=300))
    f.pod("embed", "n3", namespace="prod-inf", mig_profile="1g.10gb", gpus=1)
    f.series("n3", 0, "embed", "prod-inf", 0.6, end=H2, mig_instance=7, mig_profile="1g.10gb")
    # n4: an instance type the catalog does not know
    f.node("n4", "x9.large", "L4", 1, last=H2 - timedelta(seconds=300))
    f.queue("q-train", weight=4, deserved=16, capability=16)
    f.queue("q-research", weight=4, deserved=24, capability=32)
    g = gi.open(tmp_path / "t.duckdb")
    f.load(g.wh)
    g.refresh()
    yield g
    g.close()


def test_window_and_node_costs(fleet: gi.GpuInsight) -> None:
    w = fleet.query("analysis_window").row(0, named=True)
    assert w["window_start"] == T0 and w["window_end"] == H2 and w["catalog"] == "test-catalog"
    cost = fleet.query("node_hourly_cost")
    by_node = {r["node"]: r for r in cost.group_by("node").agg(
        cost=pl.col("cost_usd").sum(), missing=pl.col("price_missing").all(), nulls=pl.col("cost_usd").null_count()
    ).to_dicts()}
    assert by_node["n1"]["cost"] == pytest.approx(2 * 55.04)
    assert by_node["n2"]["cost"] == pytest.approx(2 * 0.30)  # spot node at the spot price
    assert by_node["n3"]["cost"] == pytest.approx(2 * 6.88)
    assert by_node["n4"]["missing"] is True and by_node["n4"]["nulls"] == 2  # reported, not zero
    missing = fleet.query("missing_prices")
    assert missing["instance_type"].to_list() == ["x9.large"]


def test_every_dollar_in_exactly_one_bucket(fleet: gi.GpuInsight) -> None:
    wb = fleet.query("waste_breakdown", by="node")
    rows = {r["group"]: r for r in wb.to_dicts()}
    n1 = rows["n1"]
    per_gpu_hour = 55.04 / 8
    assert n1["used_usd"] == pytest.approx(2 * per_gpu_hour * 0.5)
    assert n1["underused_usd"] == pytest.approx(2 * per_gpu_hour * 0.5)
    assert n1["idle_usd"] == pytest.approx(2 * per_gpu_hour)
    assert n1["unmeasured_usd"] == pytest.approx(2 * per_gpu_hour)  # flagged, not dropped
    assert n1["unallocated_usd"] == pytest.approx(5 * 2 * per_gpu_hour)
    assert n1["total_usd"] == pytest.approx(2 * 55.04)
    n2 = rows["n2"]
    assert n2["used_usd"] == pytest.approx(1.5 * 0.30 * 0.2)
    assert n2["underused_usd"] == pytest.approx(1.5 * 0.30 * 0.8)
    assert n2["unallocated_usd"] == pytest.approx(0.5 * 0.30)
    n3 = rows["n3"]  # MIG slice costs its compute fraction: 1/7 of the GPU
    assert n3["used_usd"] + n3["underused_usd"] == pytest.approx(2 * 6.88 / 7)
    assert n3["unallocated_usd"] == pytest.approx(2 * 6.88 * 6 / 7)
    # and the whole: buckets add up to the priced node cost
    total = fleet.sql("SELECT sum(cost_usd) FROM node_hours").item()
    assert wb["total_usd"].sum() == pytest.approx(total)


def test_chargeback_charges_idle_to_requester(fleet: gi.GpuInsight) -> None:
    cb = {r["group"]: r for r in fleet.query("chargeback", by="namespace").to_dicts()}
    assert cb["research"]["idle_usd"] == pytest.approx(2 * 55.04 / 8)
    assert cb["research"]["used_usd"] == 0
    assert cb["(unallocated)"]["total_usd"] == pytest.approx(5 * 2 * 55.04 / 8 + 0.5 * 0.30 + 2 * 6.88 * 6 / 7)
    by_queue = {r["group"]: r for r in fleet.query("chargeback", by="queue").to_dicts()}
    assert by_queue["q-train"]["total_usd"] == pytest.approx(4 * 55.04 / 8)


def test_partial_hours_prorated_and_unmeasured_listed(fleet: gi.GpuInsight) -> None:
    alloc = fleet.query("workload_gpu_profile", namespace="dev").row(0, named=True)
    assert alloc["gpu_hours"] == pytest.approx(1.5)
    assert alloc["cost_usd"] == pytest.approx(1.5 * 0.30)
    assert alloc["gr_p95"] == pytest.approx(0.2)
    assert alloc["capacity_type"] == "spot"
    unmeasured = fleet.query("unmeasured_pods")
    assert unmeasured["pod"].to_list() == ["blind"]


def test_workload_profile_figures(fleet: gi.GpuInsight) -> None:
    prof = {r["workload"]: r for r in fleet.query("workload_gpu_profile").to_dicts()}
    assert prof["busy"]["gr_mean"] == pytest.approx(0.5)
    assert prof["busy"]["fb_max_mib"] == pytest.approx(60000)
    assert prof["busy"]["active_fraction"] == pytest.approx(1.0)
    assert prof["idle-nb"]["active_fraction"] == pytest.approx(0.0)
    assert prof["embed"]["gpu_hours"] == pytest.approx(2 / 7)
    # production is the rules' classifier (a setting), not a SQL column: it reads these
    from gpuinsight.rules.production import DEFAULT

    assert DEFAULT.classify_row(prof["embed"])[0] is True
    assert DEFAULT.classify_row(prof["busy"])[0] is False
    assert prof["blind"]["samples"] is None


def test_fragmentation_and_queue_usage(fleet: gi.GpuInsight) -> None:
    frag = fleet.query("fragmentation")
    first = frag.filter(frag["hour"] == T0).row(0, named=True)
    # one pool "pool": n1 has 5 free on a partly used node, n2 0.5 free (pod from 00:30), n3 6/7 free, n4 empty
    assert first["free_gpus_partial_nodes"] == pytest.approx(5 + 0.5 + 6 / 7)
    assert first["free_gpus_empty_nodes"] == pytest.approx(1)
    q = {r["queue"]: r for r in fleet.query("queue_usage").to_dicts()}
    assert q["q-research"]["deserved_gpu"] == 24
    assert q["q-research"]["allocated_gpu_avg"] == pytest.approx(1.0)
    assert q["q-train"]["allocated_gpu_avg"] == pytest.approx(2.0)


def test_fleet_summary_run_rates(fleet: gi.GpuInsight) -> None:
    s = fleet.query("fleet_summary").row(0, named=True)
    total = 2 * 55.04 + 2 * 0.30 + 2 * 6.88
    assert s["total_usd"] == pytest.approx(total)
    assert s["monthly_spend_usd"] == pytest.approx(total / 2 * 730)
    assert s["gpus"] == 11
    assert s["catalog"] == "test-catalog"
    assert s["unpriced_node_hours"] == pytest.approx(2)


def test_window_parameters_and_bad_values(fleet: gi.GpuInsight) -> None:
    one = fleet.query("waste_breakdown", by="node", since=H1.isoformat())
    n1 = one.filter(one["group"] == "n1").row(0, named=True)
    assert n1["total_usd"] == pytest.approx(55.04)
    with pytest.raises(BadInput, match="parameter by: 'planet' is not one of namespace, queue, cluster_queue, workload"):
        fleet.query("waste_breakdown", by="planet")
    with pytest.raises(BadInput, match="unknown parameter"):
        fleet.query("waste_breakdown", colour="red")
    with pytest.raises(BadInput, match="not a valid TIMESTAMP"):
        fleet.query("waste_breakdown", since="yesterday-ish")


def test_config_window_limits_every_windowed_model(tmp_path: Path, fleet: gi.GpuInsight) -> None:
    fleet.close()
    cfg = gi.Config(db_path=fleet.config.db_path, window_days=1 / 24)  # the last hour
    with gi.GpuInsight(cfg) as g:
        n1 = g.query("waste_breakdown", by="node").filter(pl.col("group") == "n1").row(0, named=True)
        assert n1["total_usd"] == pytest.approx(55.04)
        # an explicit since wins over the configured window
        full = g.query("waste_breakdown", by="node", since=None).filter(pl.col("group") == "n1").row(0, named=True)
        assert full["total_usd"] == pytest.approx(2 * 55.04)


def test_filters_by_namespace_queue_and_pool(fleet: gi.GpuInsight) -> None:
    only_train = fleet.query("waste_breakdown", by="namespace", namespace="train")
    assert only_train["group"].to_list() == ["train"]
    q = fleet.query("chargeback", by="namespace", queue="q-research")
    assert q["group"].to_list() == ["research"]
    pool = fleet.query("waste_hourly_by", by="node", node_pool="nope")
    assert pool.height == 0


def test_each_cluster_keeps_its_own_window(tmp_path: Path) -> None:
    a = MiniFleet(cluster="a")
    a.price("g6.xlarge", "L4", 1, 1.0)
    a.node("a1", "g6.xlarge", "L4", 1, last=H2 - timedelta(seconds=300))
    a.pod("pa", "a1")
    a.series("a1", 0, "pa", "ns", 0.5, end=H2)
    later = H2 + timedelta(days=30)
    b = MiniFleet(cluster="b")
    b.node("b1", "g6.xlarge", "L4", 1, first=later, last=later + timedelta(minutes=55))
    b.pod("pb", "b1", start=later)
    b.series("b1", 0, "pb", "ns", 0.5, start=later, end=later + timedelta(hours=1))
    with gi.open(tmp_path / "two.duckdb") as g:
        a.load(g.wh)
        b.load(g.wh)
        g.refresh()
        w = {r["cluster"]: r for r in g.query("analysis_window").to_dicts()}
        assert w["a"]["hours"] == pytest.approx(2) and w["b"]["hours"] == pytest.approx(1)
        hours = dict(g.sql("SELECT cluster, sum(covered_s) / 3600 FROM node_hours GROUP BY ALL").rows())
        assert hours == {"a": pytest.approx(2), "b": pytest.approx(1)}  # not stretched over 30 days
        s = g.query("fleet_summary").row(0, named=True)
        assert s["clusters"] == "a, b" and s["total_usd"] == pytest.approx(3.0)
        # each cluster's cost over its own hours: $1/h in each, not $3 over 30 days
        assert s["monthly_spend_usd"] == pytest.approx(2 * 730)


def assert_same_frame(kept: pl.DataFrame, live: pl.DataFrame) -> None:
    """Equal up to the last bits of floating-point sums (DuckDB's parallel sums vary run to run)."""
    assert kept.schema == live.schema and kept.height == live.height
    for c in kept.columns:
        if kept.schema[c] == pl.Float64:
            pairs = list(zip(kept[c].to_list(), live[c].to_list(), strict=True))
            assert all((a is None) == (b is None) for a, b in pairs), c
            assert [a for a, _ in pairs if a is not None] == pytest.approx(
                [b for _, b in pairs if b is not None], rel=1e-12, nan_ok=True), c
        else:
            assert kept[c].to_list() == live[c].to_list(), c


def test_kept_default_answers_equal_the_live_model_and_windows_still_run(fleet: gi.GpuInsight,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-workload models every rule reads (materialize: default) answer their default
    parameters from the table refresh built; other parameters run the model; after a load and
    refresh the kept answer is the new data's; a warehouse without the table runs the model."""
    from gpuinsight.sql.registry import _execute

    kept = fleet.registry.kept_defaults()
    assert {q.name for q in kept} >= {"workload_gpu_profile", "workload_input_profile", "idle_stretches"}
    for q in kept:
        assert_same_frame(fleet.query(q.name), _execute(fleet.wh.con, q, q.text, q.bind({})))
    statements: list[str] = []
    original = fleet.wh.con.sql

    class Spy:
        def __getattr__(self, name: str) -> object:
            return getattr(fleet.wh.con_real, name)

        def sql(self, sql: str, params: object = None) -> object:
            statements.append(sql)
            return original(sql, params=params) if params else original(sql)

    fleet.wh.con_real = fleet.wh.con  # type: ignore[attr-defined]
    monkeypatch.setattr(fleet.wh, "con", Spy())
    whole = fleet.query("workload_gpu_profile")
    assert statements == ['SELECT * FROM "workload_gpu_profile__default"']
    windowed = fleet.query("workload_gpu_profile", since=H1.isoformat())
    assert "WITH a AS" in statements[-1]  # the model itself, over the last hour only
    busy = {r["workload"]: r for r in windowed.iter_rows(named=True)}["busy"]
    assert busy["gpu_hours"] == pytest.approx(1.0)
    assert {r["workload"]: r for r in whole.iter_rows(named=True)}["busy"]["gpu_hours"] == pytest.approx(2.0)
    monkeypatch.undo()
    # a new pod loaded and refreshed is in the kept answer
    f = MiniFleet()
    f.node("n1", "p5.48xlarge", "H100-80GB", 8, last=H2 - timedelta(seconds=300))
    f.pod("late", "n1", namespace="train", queue="q-train", start=H1)
    f.series("n1", 2, "late", "train", 0.9, start=H1, end=H2)
    f.load(fleet.wh)
    fleet.refresh()
    assert "late" in fleet.query("workload_gpu_profile")["workload"].to_list()
    fleet.wh.con.execute('DROP TABLE "workload_gpu_profile__default"')
    assert "late" in fleet.query("workload_gpu_profile")["workload"].to_list()


REFERENCE_STATS = """
SELECT n.cluster, n.namespace, n.workload_kind, n.workload, {
    'samples': count(*), 'gr_mean': avg(gr_active), 'grq': quantile_cont(gr_active, [0.5, 0.95, 0.99]),
    'gr_max': max(gr_active_max), 'sm_mean': avg(sm_active), 'smq': quantile_cont(sm_active, [0.95, 0.99]),
    'sm_max': max(sm_active_max), 'fbq': quantile_cont(fb_used_mib, [0.95, 0.99]), 'fb_max_mib': max(fb_used_max_mib),
    'peak_p95': quantile_cont(greatest(coalesce(gr_active_max, gr_active), coalesce(sm_active_max, sm_active)), 0.95),
    'step_s': max(step_s),
    'max_pushed_down': coalesce(bool_or(gr_active_max > gr_active + 1e-9 OR sm_active_max > sm_active + 1e-9), false),
    'gpu_memory_mib': max(fb_used_mib + fb_free_mib),
    'active_fraction': avg(CASE WHEN gr_active > 0.05 THEN 1.0 ELSE 0.0 END)} AS st
FROM gpu_samples g
JOIN (SELECT cluster, namespace, pod, any_value(workload_kind) AS workload_kind, any_value(workload) AS workload
      FROM pod_gpu_allocations GROUP BY ALL) n USING (cluster, namespace, pod)
WHERE g.pod <> ''
GROUP BY ALL ORDER BY ALL
"""


def test_sample_stats_in_two_aggregates_equal_the_one_aggregate_definition(fleet: gi.GpuInsight) -> None:
    """workload_sample_stats computes the statistics as two aggregates (two exact quantiles each,
    migration 015) put together in one struct: the same struct, field for field and in the same
    order, as one aggregate of everything; and workload_gpu_profile over a window that holds every
    sample (computed from the raw samples) equals its answer from the stored statistics."""
    stored = fleet.wh.con.sql("SELECT * FROM workload_sample_stats ORDER BY ALL").pl()
    reference = fleet.wh.con.sql(REFERENCE_STATS).pl()
    assert stored.height == reference.height > 0
    assert stored.schema == reference.schema  # the struct's fields and their order
    assert_same_frame(stored.unnest("st"), reference.unnest("st"))
    whole = fleet.query("workload_gpu_profile").sort("namespace", "workload")
    windowed = fleet.query("workload_gpu_profile", since="2000-01-01", until="2100-01-01").sort("namespace", "workload")
    stats = ["samples", "gr_mean", "gr_p50", "gr_p95", "gr_p99", "gr_max", "sm_p95", "sm_p99", "peak_p95",
             "fb_p95_mib", "fb_p99_mib", "fb_max_mib", "gpu_memory_mib", "active_fraction", "max_pushed_down"]
    assert_same_frame(whole.select(stats), windowed.select(stats))


def test_every_answer_has_the_columns_its_header_declares(tmp_path: Path) -> None:
    """A model's header lists its columns; an answer with others (a column renamed, added, dropped
    or moved in the SQL but not in the header) is refused at the header's ``columns`` line. The
    models of ``queries/`` are checked on every run: the other model tests run all of them."""
    import duckdb

    from gpuinsight.errors import RuntimeFailure
    from gpuinsight.sql import load_registry

    assert all(load_registry().get(n).columns for n in load_registry().names())
    head = "-- name: m\n-- grain: one row\n-- param: n INTEGER = 1 -- a number\n"
    con = duckdb.connect()
    for declared, body, error in [
        ("a, b", "SELECT $n AS a, 2 AS b", None),
        ("a, b", "SELECT $n AS a", "m.sql:4: does not return b"),
        ("a", "SELECT $n AS a, 2 AS b", "m.sql:4: returns b, not declared"),
        ("b,\n--   a", "SELECT $n AS a, 2 AS b", r"m.sql:4: returns its columns in another order \(a, b\)"),
    ]:
        (tmp_path / "m.sql").write_text(f"{head}-- columns: {declared}\n-- description: a test model\n{body}\n")
        registry = load_registry(tmp_path)
        if error is None:
            assert registry.run(con, "m", n=3).rows() == [(3, 2)]
        else:
            with pytest.raises(RuntimeFailure, match=error):
                registry.run(con, "m")
    (tmp_path / "m.sql").write_text(f"{head}-- description: a test model\nSELECT 1 AS a\n")
    with pytest.raises(RuntimeFailure, match=r"m.sql:1: header lacks '-- columns:'"):
        load_registry(tmp_path)

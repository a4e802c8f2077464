"""The waste & savings report: chart builders on literal frames, the "who wastes it" tables, the
HTML file (units, the price catalog named once, node-level findings, the plan it is given),
PNG/SVG, S3, and the `report` command with rule settings or a saved plan."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl
import pytest

from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.plan import Plan, Recommendation
from gpuinsight.plan.render import plan_table
from gpuinsight.reports import charts, theme
from gpuinsight.reports.frames import MAX_ROWS, bin_hours, recommendations_frame, savings_by_basis, target_of
from gpuinsight.reports.html import write_report
from gpuinsight.reports.mig import smallest_fit
from gpuinsight.reports.tables import waste_table
from gpuinsight.reports.upload import parse_s3_url, upload_files
from tests.report_preview import MIG_CATALOG, FrameSource, synthetic_fleet

T0 = datetime(2025, 3, 1)
CHART_IDS = ("savings-by-rule", "top-findings", "waste-breakdown", "waste-by-namespace", "waste-by-queue",
             "utilization-heatmap", "mig-fit", "fragmentation", "queue-usage")


def hours(n: int) -> list[datetime]:
    return [T0 + timedelta(hours=i) for i in range(n)]


def spec_rows(chart: alt.TopLevelMixin) -> list[int]:
    """Row counts of every inline dataset of a chart."""
    return [len(v) for v in chart.to_dict().get("datasets", {}).values()]


def specs_of(html: str) -> dict[str, dict[str, Any]]:
    m = re.search(r'<script type="application/json" id="gi-specs">(.*?)</script>', html, re.S)
    assert m, "no embedded chart specs"
    return json.loads(m.group(1).replace("<\\/", "</"))  # type: ignore[no-any-return]


def texts(spec: dict[str, Any]) -> str:
    return json.dumps(spec)


def data_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for d in spec.get("datasets", {}).values() for r in d]


def legend_domains(spec: Any) -> list[tuple[str, list[Any]]]:
    """(field, explicit domain) of every categorical colour and shape encoding in a spec, at any depth."""
    found: list[tuple[str, list[Any]]] = []
    if isinstance(spec, dict):
        enc = spec.get("encoding", {})
        for channel in ("color", "shape"):
            ch = enc.get(channel) if isinstance(enc, dict) else None
            if (isinstance(ch, dict) and ch.get("type") == "nominal" and isinstance(ch.get("scale"), dict)
                    and "domain" in ch["scale"]):
                found.append((ch["field"], ch["scale"]["domain"]))
        for v in spec.values():
            found += legend_domains(v)
    elif isinstance(spec, list):
        for v in spec:
            found += legend_domains(v)
    return found


def assert_no_empty_legend_entries(name: str, spec: dict[str, Any]) -> None:
    rows = data_rows(spec)
    for fld, domain in legend_domains(spec):
        drawn = {r.get(fld) for r in rows}
        assert set(domain) <= drawn, f"{name}: legend entries {set(domain) - drawn} of {fld} have no data"


def waste_totals(html: str, by: str) -> dict[str, float]:
    """The totals row of a "who wastes it" table: column -> exact $ per month."""
    m = re.search(rf'<table class="waste" data-by="{by}">.*?<tfoot>(.*?)</tfoot>', html, re.S)
    assert m, f"no waste table by {by}"
    return {c: float(v) for c, v in re.findall(r'data-col="(\w+)" data-usd="([-\d.]+)"', m.group(1))}


# -- chart builders on literal frames -----------------------------------------------------------

HEATMAP = pl.DataFrame({
    "node": ["a", "a", "b", "b"], "node_pool": ["p1", "p1", "p2", "p2"],
    "hour": hours(2) * 2, "gr_active_avg": [0.0, 0.5, 0.9, None], "allocated_gpus": [8, 8, 2, 0],
})

WASTE_HOURLY = pl.DataFrame({
    "hour": hours(3) * 3,
    "group": ["ml"] * 3 + ["web"] * 3 + ["(unallocated)"] * 3,
    "bucket": ["idle"] * 3 + ["underused"] * 3 + ["unallocated"] * 3,
    "gpu_hours": [1.0] * 9, "usd": [10.0, 20.0, 30.0, 1.0, 2.0, 3.0, 5.0, 5.0, 5.0],
})

BREAKDOWN = pl.DataFrame({
    "group": ["ml", "web", "(unallocated)"],
    "used_usd": [100.0, 10.0, 0.0], "idle_usd": [50.0, 0.0, 0.0], "underused_usd": [25.0, 5.0, 0.0],
    "unallocated_usd": [0.0, 0.0, 80.0], "unmeasured_usd": [0.0, 1.0, 0.0], "total_usd": [175.0, 16.0, 80.0],
    "used_gpu_hours": [10.0, 1.0, 0.0], "idle_gpu_hours": [5.0, 0.0, 0.0], "underused_gpu_hours": [2.5, 0.5, 0.0],
    "unallocated_gpu_hours": [0.0, 0.0, 8.0],
})

PROFILES = pl.DataFrame({
    "namespace": ["prod", "dev", "dev", "dev"], "workload": ["embed", "nb", "l4-svc", "blind"],
    "workload_kind": ["Deployment"] * 4, "gpu_model": ["H100-80GB", "H100-80GB", "L4", "H100-80GB"],
    "production": [True, False, False, False], "gpu_hours": [100.0, 50.0, 10.0, 5.0],
    "gr_mean": [0.1, 0.0, 0.3, None], "gr_p95": [0.12, 0.01, 0.5, None], "sm_p95": [0.1, None, 0.4, None],
    "fb_p95_mib": [7000.0, 500.0, 9000.0, None], "fb_max_mib": [8000.0, None, 9500.0, None],
    "gpu_memory_mib": [81559.0, 81559.0, 22888.0, 81559.0], "cost_usd": [1200.0, 600.0, 8.0, 60.0],
})

FRAG = pl.DataFrame({
    "hour": hours(2) * 2, "node_pool": ["p1", "p1", None, None],
    "free_gpus_partial_nodes": [3, 4, 1, 0], "free_gpus_empty_nodes": [8, 0, 0, 16],
    "partial_nodes": [2, 2, 1, 0], "empty_nodes": [1, 0, 0, 2],
})

QUEUES = pl.DataFrame({
    "queue": ["research", "prod"], "weight": [1, 4], "deserved_gpu": [16.0, 32.0],
    "capability_gpu": [None, 1e9], "guarantee_gpu": [0.0, 8.0], "allocated_gpu_avg": [4.0, 30.0],
    "allocated_gpu_p95": [9.0, 32.0], "used_gpu_avg": [0.5, 20.0], "pending_p95_s": [10.0, 600.0],
})

RECS = [
    Recommendation(rule="mig", namespace="prod", workload="embed", title="embed fits 1g.10gb",
                   monthly_savings_usd=3000, confidence=0.9),
    Recommendation(rule="idle", namespace="dev", workload="nb", title="<b>nb</b> idle for 7 days",
                   monthly_savings_usd=5000, confidence=0.8),
    Recommendation(rule="queue", queue="research", title="shrink research", monthly_savings_usd=100, confidence=0.4),
]


def test_heatmap_is_node_by_hour_with_pool_strip() -> None:
    chart = charts.utilization_heatmap(HEATMAP)
    spec = chart.to_dict()
    assert isinstance(chart, alt.HConcatChart)
    assert "GPU activity by node" in texts(spec) and "GR engine active" in texts(spec)
    assert sorted(spec_rows(chart)) == [2, 2, 4]  # 2 nodes (strip), 2 nodes (lookup), 2 x 2 cells


def test_heatmap_keeps_the_most_wasteful_nodes_of_a_big_fleet() -> None:
    n_nodes, n_hours = 1000, 48
    big = pl.DataFrame({
        "node": [f"n{i:04d}" for i in range(n_nodes) for _ in range(n_hours)],
        "node_pool": ["pool"] * (n_nodes * n_hours),
        "hour": hours(n_hours) * n_nodes,
        # node i is idle for i/1000 of its allocation: the highest numbers waste the most
        "gr_active_avg": [1 - i / n_nodes for i in range(n_nodes) for _ in range(n_hours)],
        "allocated_gpus": [8] * (n_nodes * n_hours),
    })
    chart = charts.utilization_heatmap(big, max_nodes=200)
    rows = spec_rows(chart)
    assert max(rows) <= MAX_ROWS
    nodes = {r["node"] for d in chart.to_dict()["datasets"].values() for r in d if "pool" in r and "n" in r}
    assert len(nodes) == 200 and min(nodes) == "n0800"
    assert "200 of 1000 nodes" in texts(chart.to_dict())


def test_waste_over_time_stacks_groups_and_labels_unallocated() -> None:
    chart = charts.waste_over_time(WASTE_HOURLY, by="namespace", price_note="prices: cat, as of 2025-01-01")
    spec = texts(chart.to_dict())
    assert "prices: cat, as of 2025-01-01" in spec and "$ per hour" in spec
    rows = [r for d in chart.to_dict()["datasets"].values() for r in d]
    first = sorted((r for r in rows if r["t0"] == "2025-03-01T00:00:00"), key=lambda r: r["y0"])
    assert [r["group"] for r in first] == ["ml", "web", "(unallocated)"]  # biggest waste at the bottom
    assert [(r["y0"], r["y1"]) for r in first] == [(0, 10), (10, 11), (11, 16)]


def test_waste_by_queue_without_queues_says_so() -> None:
    no_queues = WASTE_HOURLY.with_columns(
        pl.when(pl.col("group") == "(unallocated)").then(pl.col("group")).otherwise(pl.lit("(no queue)")).alias("group"))
    for frame in (no_queues, WASTE_HOURLY.clear()):
        spec = texts(charts.waste_over_time(frame, by="queue").to_dict())
        assert "no Volcano queues in the data" in spec


def test_waste_breakdown_dollars_and_gpu_hours_in_bucket_colours() -> None:
    chart = charts.waste_breakdown(BREAKDOWN, price_note="prices: cat")
    spec = chart.to_dict()
    assert len(spec["hconcat"]) == 2
    s = texts(spec)
    assert "cost in the window ($)" in s and "GPU-hours" in s and "prices: cat" in s
    scale = spec["hconcat"][0]["encoding"]["color"]["scale"]
    assert scale["domain"] == list(theme.BUCKETS)
    assert scale["range"] == [theme.BUCKET_COLORS[b] for b in theme.BUCKETS]
    rows = next(iter(spec["datasets"].values()))
    assert {r["group"] for r in rows} == {"ml", "web", "(unallocated)"}
    ml_usd = {r["bucket"]: r["value"] for r in rows if r["group"] == "ml" and r["unit"] == "$"}
    assert ml_usd == {"used": 100, "idle": 50, "underused": 25}  # no $0 bars
    assert not any("used: used" in str(r.get("meaning")) for r in rows)


def test_waste_breakdown_per_month_and_average_gpus_with_a_window() -> None:
    no_unmeasured = BREAKDOWN.with_columns(pl.lit(0.0).alias("unmeasured_usd"))
    spec = charts.waste_breakdown(no_unmeasured, window_hours=73.0).to_dict()
    s = texts(spec)
    assert "$ per month" in s and "GPUs (average over the window)" in s and "cost in the window" not in s
    rows = next(iter(spec["datasets"].values()))
    ml = {(r["unit"], r["bucket"]): r["value"] for r in rows if r["group"] == "ml"}
    assert ml[("$", "idle")] == 500.0  # $50 in 73 h = $500 per 730 h month
    assert ml[("GPUs", "used")] == pytest.approx(10 / 73, abs=0.01)
    # no GPU-hours or dollars unmeasured: no "unmeasured" legend entry
    assert spec["hconcat"][0]["encoding"]["color"]["scale"]["domain"] == ["used", "idle", "underused", "unallocated"]
    assert_no_empty_legend_entries("waste-breakdown", spec)


def test_savings_and_top_findings() -> None:
    recs = recommendations_frame(RECS)
    assert recs.get_column("rule").to_list() == ["idle", "mig", "queue"]
    by_rule = charts.savings_by_rule(recs, price_note="prices: cat")
    rows = [r for d in by_rule.to_dict()["datasets"].values() for r in d]
    assert {r["rule"]: r["usd"] for r in rows} == {"idle": 5000, "mig": 3000, "queue": 100}
    top = charts.top_findings(recs, n=2)
    labels = [r["label"] for d in top.to_dict()["datasets"].values() for r in d]
    assert labels == ["1. dev/nb", "2. prod/embed"]
    assert "Top 2 findings" in texts(top.to_dict())


def test_no_zero_dollar_bars_and_legends_list_only_drawn_rules() -> None:
    zero = Recommendation(rule="queue", queue="q", title="entitlement only", monthly_savings_usd=0, confidence=0.5)
    recs = recommendations_frame([*RECS, zero])
    for chart in (charts.savings_by_rule(recs), charts.top_findings(recs)):
        spec = chart.to_dict()
        rows = data_rows(spec)
        assert rows and all((r.get("usd") or r.get("monthly_savings_usd")) > 0 for r in rows)
        assert "Not drawn: 1 finding without a direct monthly saving" in texts(spec)
        assert_no_empty_legend_entries("savings", spec)
    only_zero = charts.top_findings(recommendations_frame([zero])).to_dict()
    assert only_zero["mark"]["type"] == "text" and "no finding has a direct monthly saving" in texts(only_zero)


def test_node_level_findings_are_credited_to_their_node_and_pool() -> None:
    binpack = Recommendation(rule="binpack", node="h100-od-4", namespace="vision", workload="detector-train",
                             title="Move 1 pod off h100-od-4 and release it", monthly_savings_usd=40179,
                             confidence=0.7, evidence={"pool": "gpu-h100-od", "saving_basis": "nodes_released"},
                             proposed={"nodes_freed": ["h100-od-4"]})
    assert target_of(binpack) == "node h100-od-4 (pool gpu-h100-od)"
    two = Recommendation(rule="binpack", node="a", title="t", proposed={"nodes_freed": ["a", "b"], "node_pool": "p"})
    assert target_of(two) == "node a + 1 more (pool p)"
    recs = recommendations_frame([binpack, *RECS])
    labels = [r["label"] for r in data_rows(charts.top_findings(recs).to_dict())]
    assert labels[0] == "1. node h100-od-4 (pool gpu-h100-od)"
    assert not any("detector-train" in label for label in labels)
    # the CLI's table names the same target as the report, for every rule with a node-level finding
    released = Recommendation(rule="idle", node="gpu-7", title="release idle node gpu-7", monthly_savings_usd=900,
                              confidence=0.8, evidence={"pool": "gpu-a10g", "saving_basis": "nodes_released"})
    queue = Recommendation(rule="queue", queue="research", title="resize research", confidence=0.5)
    plan = Plan(plan_id="plan-t", created_at=T0, catalog="cat", window=(None, None),
                recommendations=[binpack, released, queue])
    rows = plan_table(plan).splitlines()
    for rec, line in zip(plan.recommendations, rows[2:5], strict=True):
        assert target_of(rec) in line and rec.title in line
    assert not any("detector-train" in line or "None" in line for line in rows)


def test_savings_by_basis_when_the_plan_states_it() -> None:
    assert savings_by_basis(recommendations_frame(RECS)) == []  # plans from before the ledger
    stated = [Recommendation(rule=r.rule, namespace=r.namespace, workload=r.workload, queue=r.queue, title=r.title,
                             monthly_savings_usd=r.monthly_savings_usd, confidence=r.confidence,
                             evidence={"saving_basis": b})
              for r, b in zip(RECS, ("gpus_returned", "gpus_returned", "entitlement"), strict=True)]
    stated.append(Recommendation(rule="spot", namespace="b", workload="w", title="t", monthly_savings_usd=7,
                                 evidence={"saving_basis": "something new"}))
    assert savings_by_basis(recommendations_frame(stated)) == [
        ("GPUs returned to the pool", 8000.0, 2), ("queue entitlement", 100.0, 1), ("basis not stated", 7.0, 1)]


def test_mig_fit_draws_profile_boundaries_per_mig_capable_model() -> None:
    chart = charts.mig_fit(PROFILES, MIG_CATALOG)
    spec = chart.to_dict()
    assert [p["title"] for p in spec["vconcat"]] == ["H100-80GB"]  # the L4 workload has no MIG
    rows = [r for d in spec["datasets"].values() for r in d]
    pts = {r["workload"]: r for r in rows if "workload" in r and "label" not in r}
    assert pts["embed"]["fits"] == "1g.10gb" and pts["embed"]["fit_class"] == "1g"
    assert pts["nb"]["fits"] == "1g.10gb"  # no SM / FB max: GR p95 and FB p95 stand in
    # a workload with no samples has no position: not drawn, no "not measured" legend entry, said so
    assert "blind" not in pts and "1 workload without compute or memory samples not drawn" in texts(spec)
    assert_no_empty_legend_entries("mig-fit", spec)
    # every drawn point carries its workload's name
    labels = {(r["label"], r["sm_pct"], r["fb_gib"]) for r in rows if "label" in r and "workload" in r}
    assert labels == {(w, p["sm_pct"], p["fb_gib"]) for w, p in pts.items()}
    assert {r["label"] for r in rows if "compute_slices" in r and "x" in r and "y" in r} == {"1g", "2g", "3g", "4g", "7g"}
    assert smallest_fit(MIG_CATALOG, "H100-80GB", 0.5, 30_000) == "4g.40gb"
    assert smallest_fit(MIG_CATALOG, "H100-80GB", 0.1, 90_000) == "whole GPU"


def test_fragmentation_and_queue_usage() -> None:
    frag = charts.fragmentation(FRAG)
    assert isinstance(frag, alt.FacetChart)
    rows = [r for d in frag.to_dict()["datasets"].values() for r in d]
    assert {r["node_pool"] for r in rows} == {"p1", "(no pool)"}
    assert sum(r["free_gpus"] for r in rows if r["kind"] == "on empty nodes") == 24
    # a pool without a free GPU all window gets no empty panel: the subtitle names it
    full = pl.DataFrame({"hour": hours(2), "node_pool": ["busy", "busy"], "free_gpus_partial_nodes": [0, 0],
                         "free_gpus_empty_nodes": [0, 0], "partial_nodes": [0, 0], "empty_nodes": [0, 0]})
    spec = charts.fragmentation(pl.concat([FRAG, full], how="vertical_relaxed")).to_dict()
    assert {r["node_pool"] for d in spec["datasets"].values() for r in d} == {"p1", "(no pool)"}
    assert "Not drawn, no free GPU all window: busy." in spec["title"]["subtitle"]
    assert "no free GPUs" in str(charts.fragmentation(full).to_dict())
    q = charts.queue_usage(QUEUES)
    rows = [r for d in q.to_dict()["datasets"].values() for r in d]
    assert not any(r["measure"] == "capability" for r in rows)  # None and 1e9 both mean unlimited
    assert {r["capability"] for r in rows} == {"unlimited"}
    assert {(r["queue"], r["measure"]): r["gpus"] for r in rows}[("prod", "used (avg)")] == 20
    no_guarantee = charts.queue_usage(QUEUES.with_columns(pl.lit(None, dtype=pl.Float64).alias("guarantee_gpu")))
    spec = no_guarantee.to_dict()
    assert "guarantee" not in spec["encoding"]["color"]["scale"]["domain"]
    assert_no_empty_legend_entries("queue-usage", spec)


@pytest.mark.parametrize("builder", [
    lambda: charts.utilization_heatmap(HEATMAP.clear()),
    lambda: charts.waste_over_time(WASTE_HOURLY.clear()),
    lambda: charts.waste_breakdown(BREAKDOWN.clear()),
    lambda: charts.savings_by_rule(recommendations_frame([])),
    lambda: charts.top_findings(recommendations_frame([])),
    lambda: charts.mig_fit(PROFILES.clear(), MIG_CATALOG),
    lambda: charts.fragmentation(FRAG.clear()),
    lambda: charts.queue_usage(QUEUES.clear()),
    lambda: charts.queue_usage(QUEUES.with_columns(pl.col(c).cast(pl.Float64) * 0 for c in QUEUES.columns[1:])),
    lambda: charts.waste_breakdown(BREAKDOWN.with_columns(pl.col(pl.Float64) * 0)),
])
def test_empty_frames_give_a_chart_that_says_why(builder: Any) -> None:
    chart = builder()
    spec = chart.to_dict()
    assert spec["mark"]["type"] == "text" and spec_rows(chart) == [1]


def test_time_bins_widen_for_long_windows() -> None:
    assert bin_hours(T0, T0 + timedelta(hours=23), 120) == 1
    assert bin_hours(T0, T0 + timedelta(days=7), 120) == 2
    assert bin_hours(T0, T0 + timedelta(days=90), 120) == 24


# -- the HTML file -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sample_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    return write_report(synthetic_fleet(256), out)


def test_report_is_self_contained_and_ordered(sample_report: Path) -> None:
    html = sample_report.read_text()
    assert not re.search(r"""<(script|link|img|iframe)[^>]+(src|href)\s*=\s*["']?(https?:)?//""", html, re.I)
    for cdn in ("cdn.jsdelivr", "unpkg.com", "cdnjs", "googleapis"):
        assert cdn not in html
    assert "vegaEmbed" in html and "vega-lite" in html.lower()
    spend, first_chart, findings = (html.index("Monthly GPU spend"), html.index('id="chart-'),
                                    html.index('<section id="findings">'))
    assert spend < first_chart < findings
    assert list(specs_of(html)) == list(CHART_IDS)


def test_prices_named_once_and_units_per_month(sample_report: Path) -> None:
    html = sample_report.read_text()
    note = "prices: aws-us-east-1-on-demand, as of 2025-01-01"
    assert html.count(note) == 1  # once, under the headline, for every dollar figure
    basis = html[html.index('id="basis"'):]
    basis = basis[:basis.index("</p>")]
    assert note in basis and "per 730-hour month" in basis and "2025-01-01 00:00 UTC → 2025-01-08 00:00 UTC" in basis
    headline = html[html.index('<section class="headline">'):html.index('id="basis"')]
    cards = headline.split('<div class="card">')[1:]
    assert len(cards) == 3 and all("/ month</div>" in c for c in cards)
    specs = specs_of(html)
    assert "$ per month" in texts(specs["waste-breakdown"]) and "cost in the window" not in texts(specs["waste-breakdown"])
    assert "waste, $ per hour" in texts(specs["waste-by-namespace"])
    for name, spec in specs.items():
        assert "prices:" not in texts(spec), name
        assert_no_empty_legend_entries(name, spec)
    legend = html[html.index("<footer>"):]
    for bucket in ("used", "idle", "underused", "unallocated", "unmeasured"):
        assert f"<b>{bucket}</b>: {bucket}" not in legend  # no "used: used"


def test_who_wastes_it_tables_add_up_to_the_headline(sample_report: Path) -> None:
    html = sample_report.read_text()
    src = synthetic_fleet(256)
    summary = src.query("fleet_summary").row(0, named=True)
    for by in ("namespace", "queue"):
        totals = waste_totals(html, by)
        assert totals["spend"] == pytest.approx(summary["monthly_spend_usd"], abs=0.01), by
        assert totals["waste"] == pytest.approx(summary["monthly_waste_usd"], abs=0.01), by
        assert totals["idle"] + totals["underused"] + totals["unallocated"] == pytest.approx(totals["waste"])
    assert "These totals differ" not in html
    # the headline shows the same figures
    assert f"${summary['monthly_spend_usd']:,.0f} / month" in html and f"${summary['monthly_waste_usd']:,.0f} / month" in html
    # the savings card breaks the plan's total down by where the saving comes from
    card = html[html.index("Potential monthly savings"):html.index('id="basis"')]
    assert "nodes released (3 findings)" in card and "queue entitlement (1 finding, no direct saving)" in card


def test_waste_table_folds_the_tail_and_keeps_every_dollar() -> None:
    groups = [f"ns{i}" for i in range(20)]
    df = pl.DataFrame({
        "group": [*groups, None, "(unallocated)"],
        "used_usd": [10.0] * 20 + [1.0, 0.0], "idle_usd": [float(i) for i in range(20)] + [2.0, 0.0],
        "underused_usd": [1.0] * 20 + [0.0, 0.0], "unallocated_usd": [0.0] * 21 + [50.0],
        "unmeasured_usd": [0.0] * 22,
    })
    t = waste_table(df, by="namespace", factor=2.0, top_n=5)
    names = t.rows.get_column("group").to_list()
    assert names == ["ns19", "ns18", "ns17", "ns16", "ns15", "(other)", "(no namespace)", "(unallocated)"]
    assert t.folded == 15
    assert t.totals["spend"] == pytest.approx(2 * (200 + 190 + 20 + 3 + 50))
    assert t.rows.get_column("spend").sum() == pytest.approx(t.totals["spend"])
    assert t.totals["waste"] == pytest.approx(2 * (190 + 20 + 2 + 50))
    assert not t.has_unmeasured


def test_findings_table_biggest_first_and_escaped(tmp_path: Path) -> None:
    src = FrameSource(synthetic_fleet(16).frames, RECS, catalog="cat")
    html = write_report(src, tmp_path / "r.html").read_text()
    table = html[html.index('<section id="findings">'):]
    assert "&lt;b&gt;nb&lt;/b&gt; idle for 7 days" in table and "<b>nb</b>" not in table
    assert table.index("dev/nb") < table.index("prod/embed") < table.index("queue research")
    assert "$5,000" in table and "80%" in table
    assert "saving from" not in table  # no basis column for plans that do not state one
    assert "from 3 findings below</div>" in html
    zero = Recommendation(rule="queue", queue="q", title="entitlement only", monthly_savings_usd=0, confidence=0.5)
    html = write_report(FrameSource(synthetic_fleet(16).frames, [*RECS, zero]), tmp_path / "z.html").read_text()
    assert "from 3 findings below; 1 more without a direct saving</div>" in html


class NoRules(FrameSource):
    def recommend(self, settings: dict[str, dict[str, Any]] | None = None) -> Plan:
        raise AssertionError("the report must render the plan it is given, not run the rules")


def test_report_renders_the_plan_it_is_given(tmp_path: Path) -> None:
    binpack = Recommendation(rule="binpack", node="h100-od-4", namespace="vision", workload="detector-train",
                             title="Move 1 pod off h100-od-4 and release it", monthly_savings_usd=40179,
                             confidence=0.7, evidence={"pool": "gpu-h100-od", "saving_basis": "nodes_released"})
    plan = Plan(plan_id="plan-20250108T000000Z", created_at=T0, catalog="cat", window=(None, None),
                recommendations=[binpack, *RECS[:1]], notes=["given, not re-run"])
    src = NoRules(synthetic_fleet(16).frames, catalog="cat")
    html = write_report(src, tmp_path / "r.html", plan=plan).read_text()
    table = html[html.index('<section id="findings">'):]
    assert "plan-20250108T000000Z" in table and "given, not re-run" in html
    assert "node h100-od-4 (pool gpu-h100-od)" in table and "detector-train" not in table
    assert "nodes released" in table  # the basis column
    assert f"${plan.total_monthly_savings_usd:,.0f} / month" in html




def test_ten_thousand_gpu_fleet_gives_a_small_file(tmp_path: Path) -> None:
    out = write_report(synthetic_fleet(10_000), tmp_path / "big.html")
    size = out.stat().st_size
    assert size < 2_500_000, f"{size} bytes"
    for name, spec in specs_of(out.read_text()).items():
        for rows in spec.get("datasets", {}).values():
            assert len(rows) <= MAX_ROWS, name


def test_empty_warehouse_still_writes_a_report(tmp_path: Path) -> None:
    full = synthetic_fleet(16, queues=False)
    empty = {name: (f.clear() if isinstance(f, pl.DataFrame) else f(by="queue").clear())
             for name, f in full.frames.items() if name != "mig_catalog"}
    empty["mig_catalog"] = MIG_CATALOG
    html = write_report(FrameSource(empty, []), tmp_path / "empty.html").read_text()
    assert "no Volcano queues in the data" in html and "holds no GPU data yet" in html
    assert "No findings" in html and len(specs_of(html)) == len(CHART_IDS)


# -- with the real SQL models and rules ---------------------------------------------------------

@pytest.fixture(scope="module")
def mini_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-hour, two-node warehouse built through the real schema and SQL models."""
    import gpuinsight as gi
    from tests.fleet_tables import T0 as W0
    from tests.fleet_tables import MiniFleet

    end = W0 + timedelta(hours=3)
    f = MiniFleet()
    f.price("p5.48xlarge", "H100-80GB", 8, 55.04)
    f.price("g6.xlarge", "L4", 1, 0.8048, 0.30)
    f.node("n1", "p5.48xlarge", "H100-80GB", 8, pool="h100", last=end - timedelta(seconds=300))
    f.pod("train-0", "n1", namespace="train", queue="q-train", workload="train")
    f.series("n1", 0, "train-0", "train", 0.7, end=end, fb_mib=60_000)
    f.pod("nb-0", "n1", namespace="research", queue="q-research", workload="notebook")
    f.series("n1", 1, "nb-0", "research", 0.02, end=end, fb_mib=3_000, sm=0.03)
    for g in range(2, 8):
        f.series("n1", g, "", "", 0.0, end=end)
    f.node("n2", "g6.xlarge", "L4", 1, pool="l4", capacity_type="spot", last=end - timedelta(seconds=300))
    f.pod("svc-0", "n2", namespace="dev", workload="svc")
    f.series("n2", 0, "svc-0", "dev", 0.2, end=end, mem_mib=22_888)
    f.queue("q-train", weight=4, deserved=16, capability=16)
    f.queue("q-research", weight=4, deserved=24, capability=32)
    db = tmp_path_factory.mktemp("mini") / "w.duckdb"
    with gi.open(db) as g:
        f.load(g.wh)
        g.refresh()
    return db


def test_report_from_a_real_warehouse(mini_db: Path, tmp_path: Path) -> None:
    import gpuinsight as gi

    with gi.open(mini_db) as g:
        html = g.report(tmp_path / "report.html").read_text()
        summary = g.query("fleet_summary").row(0, named=True)
    assert html.count("prices: test-catalog, as of 2026-11-01") == 1
    specs = specs_of(html)
    assert list(specs) == list(CHART_IDS)
    placeholders = {name for name, spec in specs.items() if spec.get("mark", {}).get("type") == "text"}
    assert placeholders <= {"savings-by-rule", "top-findings"}  # the rules may find nothing here
    rows = {name: data_rows(spec) for name, spec in specs.items()}
    assert {r["queue"] for r in rows["queue-usage"]} == {"q-train", "q-research"}
    assert {r["workload"] for r in rows["mig-fit"] if "workload" in r} == {"train", "notebook"}
    assert {r["group"] for r in rows["waste-by-queue"]} >= {"q-research", "(unallocated)"}
    for name, spec in specs.items():  # e.g. no "guarantee" entry: no queue has one
        assert_no_empty_legend_entries(name, spec)
    # the "who wastes it" totals are the headline's figures (fleet_summary's own run rates)
    for by in ("namespace", "queue"):
        totals = waste_totals(html, by)
        assert totals["spend"] == pytest.approx(summary["monthly_spend_usd"], abs=0.01), by
        assert totals["waste"] == pytest.approx(summary["monthly_waste_usd"], abs=0.01), by
    # and the breakdown chart draws the same dollars per month
    usd = sum(r["value"] for r in rows["waste-breakdown"] if r["unit"] == "$")
    assert usd == pytest.approx(summary["monthly_spend_usd"], rel=1e-4)


def test_report_runs_each_model_once_and_keeps_no_answer_after(mini_db: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules and the charts both read workload_gpu_profile: a report runs it once. Outside a
    report (or after a refresh) a model runs anew, so a later load is seen."""
    import gpuinsight as gi
    from gpuinsight.sql.registry import QueryRegistry

    runs: list[str] = []
    original = QueryRegistry.run

    def counting(self: QueryRegistry, con: Any, name: str, **params: Any) -> pl.DataFrame:
        runs.append(name)
        return original(self, con, name, **params)

    monkeypatch.setattr(QueryRegistry, "run", counting)
    with gi.open(mini_db) as g:
        alone = g.report(tmp_path / "report.html").read_text()
        assert runs.count("workload_gpu_profile") == 1 and runs.count("fleet_summary") == 1
        runs.clear()
        with g.reusing_answers():
            first = g.query("workload_gpu_profile")
            assert g.query("workload_gpu_profile") is first
            g.refresh()
            assert g.query("workload_gpu_profile") is not first
        assert runs.count("workload_gpu_profile") == 2
        g.query("workload_gpu_profile")
        assert runs.count("workload_gpu_profile") == 3
    # the report drew its MIG-fit chart from the same per-workload profile the rules read
    assert {r["workload"] for r in data_rows(specs_of(alone)["mig-fit"]) if "workload" in r} == {"train", "notebook"}


# Settings under which the 3-hour mini fleet's research notebook (2 % active) is idle; with the
# defaults it is not judged (too few hours).
IDLE_SETS = ("idle.min_hours=1", "idle.max_median_activity=0.05")


def finding_targets(html: str) -> list[str]:
    table = html[html.index('<section id="findings">'):]
    return re.findall(r'<td class="rule">.*?</td><td>(.*?)</td>', table)


def test_report_cli_takes_the_rule_settings_and_saved_plans_of_recommend(mini_db: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gpuinsight.cli import main

    run = CliRunner().invoke
    sets = [a for item in IDLE_SETS for a in ("--set", item)]
    plain = run(main, ["report", "--db", str(mini_db), "--out", str(tmp_path / "plain.html")])
    assert plain.exit_code == 0, plain.output
    tuned = run(main, ["report", "--db", str(mini_db), "--out", str(tmp_path / "tuned.html"), *sets])
    assert tuned.exit_code == 0, tuned.output
    default_targets = finding_targets((tmp_path / "plain.html").read_text())
    tuned_targets = finding_targets((tmp_path / "tuned.html").read_text())
    assert "research/notebook" in tuned_targets and "research/notebook" not in default_targets

    # a plan saved by recommend (with the same settings, given as a file) renders as saved
    cfg = tmp_path / "rules.yaml"
    cfg.write_text("idle:\n  min_hours: 1\n  max_median_activity: 0.05\n")
    saved = run(main, ["recommend", "--db", str(mini_db), "--config", str(cfg), "--format", "json",
                       "--save-plan", str(tmp_path / "plan.json")])
    assert saved.exit_code == 0, saved.output
    plan = json.loads((tmp_path / "plan.json").read_text())
    from_plan = run(main, ["report", "--db", str(mini_db), "--out", str(tmp_path / "planned.html"),
                           "--plan", str(tmp_path / "plan.json")])
    assert from_plan.exit_code == 0, from_plan.output
    html = (tmp_path / "planned.html").read_text()
    assert plan["plan_id"] in html and finding_targets(html) == tuned_targets
    both = run(main, ["report", "--db", str(mini_db), "--out", str(tmp_path / "x.html"),
                      "--plan", str(tmp_path / "plan.json"), "--set", IDLE_SETS[0]])
    assert both.exit_code == 2 and "--config and --set do not apply" in both.output
    assert not (tmp_path / "x.html").exists()


# -- upload ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture()
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    import boto3

    for k, v in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}.items():
        monkeypatch.setenv(k, v)
    client = boto3.session.Session().client("s3", endpoint_url=s3_endpoint)
    return client


def test_png_svg_per_chart_and_upload_to_s3(tmp_path: Path, s3: Any, s3_endpoint: str) -> None:
    s3.create_bucket(Bucket="reports")
    write_report(synthetic_fleet(16), tmp_path / "report.html", png_dir=tmp_path / "charts",
                 upload="s3://reports/gpu/2025-03-01/", s3_endpoint_url=s3_endpoint)
    for name in CHART_IDS:
        assert (tmp_path / "charts" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "<svg" in (tmp_path / "charts" / f"{name}.svg").read_text()[:500]
    # an image travels without the page: the charts in dollars name their prices themselves
    note = "prices: aws-us-east-1-on-demand, as of 2025-01-01"
    for name in ("savings-by-rule", "waste-breakdown", "waste-by-queue"):
        assert note in (tmp_path / "charts" / f"{name}.svg").read_text(), name
    assert note not in (tmp_path / "charts" / "utilization-heatmap.svg").read_text()
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="reports")["Contents"]}
    assert "gpu/2025-03-01/report.html" in keys
    assert {f"gpu/2025-03-01/charts/{n}.{ext}" for n in CHART_IDS for ext in ("png", "svg")} <= keys
    head = s3.head_object(Bucket="reports", Key="gpu/2025-03-01/report.html")
    assert head["ContentType"] == "text/html; charset=utf-8"
    body = s3.get_object(Bucket="reports", Key="gpu/2025-03-01/report.html")["Body"].read()
    assert body == (tmp_path / "report.html").read_bytes()


def test_upload_errors_are_one_line(tmp_path: Path, s3: Any, s3_endpoint: str) -> None:
    f = tmp_path / "x.html"
    f.write_text("x")
    with pytest.raises(RuntimeFailure, match=r"s3://missing-bucket/p/x\.html failed: NoSuchBucket") as exc:
        upload_files([(f, "x.html")], "s3://missing-bucket/p", endpoint_url=s3_endpoint)
    assert "\n" not in str(exc.value)
    with pytest.raises(BadInput):
        parse_s3_url("https://bucket/prefix")
    assert parse_s3_url("s3://b") == ("b", "")


# -- the scheduled job ---------------------------------------------------------------------------

def test_cronjob_runs_collect_then_report_and_fails_loudly(tmp_path: Path) -> None:
    import os
    import subprocess

    import yaml

    docs = list(yaml.safe_load_all((Path(__file__).resolve().parents[1] / "deploy" / "cronjob.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert "Secret" not in kinds  # secrets by reference only
    binding = kinds["ClusterRoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "gpuinsight-collect"}
    pod = kinds["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == binding["subjects"][0]["name"] == kinds["ServiceAccount"]["metadata"]["name"]
    assert pod["restartPolicy"] == "Never"
    script = pod["containers"][0]["args"][0]
    # run the script with a stand-in CLI that fails at the report step: the job must fail
    fake = tmp_path / "gpuinsight"
    fake.write_text('#!/bin/sh\necho "$*" >> "$LOG"\n[ "$1" = report ] && exit 1\nexit 0\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "LOG": str(tmp_path / "log"), "CLUSTER": "prod",
           "PROMETHEUS_URL": "http://prometheus:9090", "REPORT_WINDOW": "7d", "REPORT_S3_URL": "s3://b/p",
           "HOME": os.environ.get("HOME", "/tmp")}
    done = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 1
    calls = (tmp_path / "log").read_text().splitlines()
    assert [c.split()[0] + " " + c.split()[1] for c in calls] == [
        "collect prometheus", "collect kubernetes", "collect prices", "report --out"]
    assert "--url http://prometheus:9090 --since 7d" in calls[0]
    assert re.search(r"--upload s3://b/p/prod/\d{4}-\d{2}-\d{2}$", calls[3])
    # the lake: exported after the report when LAKE_S3_URL is set, not otherwise; a failed export fails the job
    fake.write_text('#!/bin/sh\necho "$*" >> "$LOG"\n[ "$1" = export ] && [ -n "$FAIL_EXPORT" ] && exit 1\nexit 0\n')
    for lake, fail, code, last in (("", "", 0, "report"), ("s3://lake/gpu", "", 0, "export --to s3://lake/gpu"),
                                   ("s3://lake/gpu", "1", 1, "export --to s3://lake/gpu")):
        (tmp_path / "log").unlink()
        done = subprocess.run(["/bin/sh", "-c", script], env={**env, "LAKE_S3_URL": lake, "FAIL_EXPORT": fail},
                              capture_output=True, text=True, check=False)
        assert done.returncode == code, (lake, fail, done.stderr)
        assert (tmp_path / "log").read_text().splitlines()[-1].startswith(last)


def test_vega_bundle_is_built_once_per_vl_convert_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JavaScript bundle is kept in the user's cache folder by vl-convert version; a file cut
    short is rebuilt; without a usable folder it is simply built."""
    from gpuinsight.reports import assets

    builds: list[str | None] = []

    def bundle(vl_version: str | None = None) -> str:
        builds.append(vl_version)
        return "a</SCRIPT>b"

    monkeypatch.setattr(assets.vlc, "javascript_bundle", bundle)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assets.vega_bundle.cache_clear()
    try:
        assert assets.vega_bundle() == "a<\\/SCRIPT>b" and len(builds) == 1
        assets.vega_bundle.cache_clear()
        assert assets.vega_bundle() == "a<\\/SCRIPT>b" and len(builds) == 1  # from the file
        (cached,) = (tmp_path / "gpuinsight").iterdir()
        assert assets.vlc.__version__ in cached.name
        cached.write_text("a<\\/SCR")  # cut short
        assets.vega_bundle.cache_clear()
        assert assets.vega_bundle() == "a<\\/SCRIPT>b" and len(builds) == 2
        (tmp_path / "gpuinsight").rename(tmp_path / "moved")
        (tmp_path / "gpuinsight").write_text("not a folder")
        assets.vega_bundle.cache_clear()
        assert assets.vega_bundle() == "a<\\/SCRIPT>b" and len(builds) == 3
    finally:
        assets.vega_bundle.cache_clear()


# -- KubeRay and scale-to-zero parts ------------------------------------------------------------

def ray_keda_recs() -> list[Recommendation]:
    """A scale_to_zero finding idle on nights and the weekend, and a RayJob cleanup, as the rules
    write them (only the fields the report reads)."""
    gr = [None if how >= 48 else (0.1 if how % 24 < 7 or how % 24 >= 19 else 45.0) for how in range(168)]
    idle = [None if v is None else float(v < 1) for v in gr]
    stz = Recommendation(rule="scale_to_zero", title="sleeps", namespace="ml-demo", workload="summarizer",
                         monthly_savings_usd=428.4, proposed={"active_hours_utc": None},
                         evidence={"hour_of_week_gr_active_pct": gr, "hour_of_week_idle_share": idle,
                                   "idle_hours_in_long_stretches": 24, "hours_held": 48, "longest_idle_stretch_h": 12,
                                   "hours_at_zero": 23.0, "expected_cold_starts_per_day": 1.0})
    job = Recommendation(rule="ray", title="job", namespace="ml", workload="embed", monthly_savings_usd=3079.2,
                         current={"shutdown_after_finish": False}, proposed={"change": "job_cleanup",
                                                                             "ttl_after_finish_s": 300},
                         evidence={"gpu_hours_after_end": 176.0, "hours_held_after_end": 44},
                         target={"kind": "RayJob", "name": "embed", "namespace": "ml", "ray_cluster": "embed-x7k2p"})
    return [stz, job]


def test_kuberay_and_scale_to_zero_sections_and_week_chart() -> None:
    from gpuinsight.reports import ray_keda

    recs = ray_keda_recs()
    rows = ray_keda.week_frame([recs[0]])
    assert rows.height == 48 and set(rows["day"]) == {"Mon", "Tue"}  # only the observed week hours
    assert rows.filter(pl.col("hour") == 12)["gr_active_pct"].to_list() == [45.0, 45.0]
    spec = ray_keda.scale_to_zero_week([recs[0]]).to_dict()
    assert spec["spec"]["mark"]["type"] == "rect" and spec["facet"]["row"]["field"] == "workload"
    ray, stz = ray_keda.sections(recs)
    assert "ml/embed-x7k2p" in ray and "shutdownAfterJobFinishes, TTL 300 s" in ray and "$3,079" in ray
    assert "ml-demo/summarizer" in stz and "24 of 48 h" in stz and ">1.0<" in stz and "$428" in stz
    assert ray_keda.sections([]) == []
    # a large fleet's hundreds of findings: the biggest savings only, and the chart says so
    many = [Recommendation(rule="scale_to_zero", title="sleeps", namespace="ns", workload=f"svc-{i}",
                           monthly_savings_usd=float(i), evidence=recs[0].evidence) for i in range(200)]
    big = ray_keda.scale_to_zero_week(many).to_dict()
    shown = {r["workload"] for r in data_rows(big)}
    assert shown == {f"ns/svc-{i}" for i in range(188, 200)}
    assert "the 12 biggest savings of 200" in texts(big)

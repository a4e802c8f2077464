"""``gpuinsight demo``: the whole pipeline on the embedded sample fleet, no cluster needed."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from gpuinsight.api import GpuInsight
from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.plan import Plan
from gpuinsight.plan.render import plan_json
from gpuinsight.progress import Progress
from gpuinsight.sources.gpu_nodes import unmatched_note
from gpuinsight.warehouse.writes import clear_tables, data_tables

DEMO_SOURCE = "demo"  # ingest_state.source of the row a demo build leaves (what it loaded, table by table)


def run_demo(config: Config, out: Path, sample: Path | None = None, *, replace: bool = False) -> str:
    """Rebuild the warehouse at ``config.db_path`` from the sample fleet, in place and under its
    lock, in one write session: an existing warehouse keeps its previous state whole if anything
    fails. A warehouse holding more than an earlier demo loaded is refused unless ``replace``;
    applied actions and reviewed plans are always kept, and the summary says how many."""
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    created = not Path(config.db_path).exists()
    with GpuInsight(config, rebuild_stale=False) as gi:  # the demo's session rebuilds them
        text, report, kept = _build(gi, out, sample, replace, created)
    took = time.perf_counter() - started
    return (f"{text}{kept}\n\nwrote {report} and {out / 'recommendations.json'} "
            f"(warehouse {config.db_path}) in {took:.1f} s")


def _build(gi: GpuInsight, out: Path, sample: Path | None, replace: bool, created: bool) -> tuple[str, Path, str]:
    from gpuinsight.sources.loaders import SampleFleet

    progress = Progress(gi.config.progress)
    progress.stage("loading the sample fleet")
    try:
        with gi.writing():
            tables = data_tables(gi.wh, gi.registry.model_tables())
            _check_replaceable(gi, tables, replace)
            kept = _kept_records(gi)
            clear_tables(gi.wh, tables)
            loads = gi.load(SampleFleet(sample))
            _mark_demo(gi, tables, sample)
    except BaseException:
        if created:  # the state before was no file: remove the empty one while still holding it
            for leftover in (gi.wh.path, Path(f"{gi.wh.path}.wal")):
                leftover.unlink(missing_ok=True)
        raise
    progress.stage("running the rules")
    plan = gi.recommend()
    gi.store_plan(plan)
    (out / "recommendations.json").write_text(plan_json(plan) + "\n")
    progress.stage("writing the report")
    report = gi.report(out / "report.html", plan=plan)
    progress.close()
    text = summarize(gi, plan, loads_line="; ".join(r.summary() for r in loads))
    return text, report, kept


def _table_rows(gi: GpuInsight, tables: list[str]) -> dict[str, int]:
    """Rows per data table (the load bookkeeping aside: the demo's own row is in it)."""
    return {t: gi.wh.count(t) for t in tables if t != "ingest_state"}


def _check_replaceable(gi: GpuInsight, tables: list[str], replace: bool) -> None:
    """A demo replaces only what a demo loaded: the rows of an earlier demo, unchanged since."""
    rows = _table_rows(gi, tables)
    if replace or not any(rows.values()):
        return
    state = gi.wh.sql("SELECT details FROM ingest_state WHERE source = ?", [DEMO_SOURCE])
    if state.height and json.loads(state.item() or "{}").get("rows") == rows:
        return
    named = {"nodes": "nodes", "pods": "pods", "gpu_sample_facts": "GPU samples"}
    held = ", ".join(f"{rows[t]:,} {what}" for t, what in named.items() if rows.get(t)) or "rows"
    raise BadInput(f"{gi.config.db_path} holds data a demo did not load ({held}): the demo rebuilds a warehouse from "
                   "the sample fleet and would replace it; give another --db (the demo's default is OUT/demo.duckdb), "
                   "or --replace to replace it (applied actions and reviewed plans are kept)")


def _kept_records(gi: GpuInsight) -> str:
    """What a rebuild keeps that matters to people: the audit trail and the reviews."""
    applied = gi.wh.sql("SELECT count(*) AS n, count(DISTINCT plan_id) AS plans, "
                        "count(*) FILTER (WHERE status = 'applied') AS live FROM applied_actions").row(0, named=True)
    reviewed = gi.wh.count("reviewed_plans")
    if not applied["n"] and not reviewed:
        return ""
    return (f"\nkept from the warehouse it replaced: {applied['n']} applied-action record(s) of {applied['plans']} "
            f"plan(s) ({applied['live']} change(s) still applied: `gpuinsight rollback PLAN_ID` undoes them) and "
            f"{reviewed} reviewed plan(s)")


def _mark_demo(gi: GpuInsight, tables: list[str], sample: Path | None) -> None:
    state = pl.DataFrame([{
        "source": DEMO_SOURCE, "scope": "sample", "cursor": None, "run_id": None, "status": "complete",
        "rows_loaded": None, "updated_at": datetime.now(UTC).replace(tzinfo=None, microsecond=0),
        "details": json.dumps({"sample": str(sample) if sample else "embedded",
                               "rows": _table_rows(gi, tables)}),
    }], schema={"source": pl.Utf8, "scope": pl.Utf8, "cursor": pl.Datetime("us"), "run_id": pl.Utf8,
                "status": pl.Utf8, "rows_loaded": pl.Int64, "updated_at": pl.Datetime("us"), "details": pl.Utf8})
    gi.wh.merge("ingest_state", state, ("source", "scope"))


def summarize(gi: GpuInsight, plan: Plan, *, loads_line: str = "") -> str:
    # the report's modules (Altair) once the load's frames are gone, not during the load
    from gpuinsight.reports import ray_keda, signals

    s = gi.query("fleet_summary").row(0, named=True)
    catalog = f"{s['catalog']} ({s['catalog_as_of']})" if s.get("catalog") else "no price catalog"
    lines = []
    if loads_line:
        lines.append(f"loaded: {loads_line}")
    lines += [
        f"fleet: {s['gpus'] or 0:g} GPUs on {s['nodes'] or 0} nodes, {s['hours'] or 0:.0f} h "
        f"({s['window_start']} .. {s['window_end']} UTC); prices: {catalog}",
        f"GPU-hours: {s['gpu_hours'] or 0:,.0f} capacity, {s['allocated_gpu_hours'] or 0:,.0f} allocated, "
        f"{s['used_gpu_hours'] or 0:,.0f} used (GR engine active)",
        f"spend ${s['total_usd'] or 0:,.0f} in the window = ${s['monthly_spend_usd'] or 0:,.0f}/month; "
        f"waste ${s['monthly_waste_usd'] or 0:,.0f}/month (idle ${s['idle_usd'] or 0:,.0f}, underused "
        f"${s['underused_usd'] or 0:,.0f}, unallocated ${s['unallocated_usd'] or 0:,.0f} in the window)",
    ]
    unmatched = unmatched_note(s)
    if unmatched:
        lines.append(f"note: {unmatched}")
    charge = gi.query("chargeback", by="namespace")
    several = charge.get_column("cluster").n_unique() > 1  # a namespace is its cluster's
    idle = charge.filter(pl.col("group") != "(unallocated)").sort("idle_usd", descending=True).head(5)
    if idle.height:
        lines.append("idle cost by namespace (requested but idle or underused, in the window):")
        for r in idle.to_dicts():
            name = f"{r['cluster']}/{r['group']}" if several else r["group"]
            lines.append(f"  {name:<24} ${r['idle_usd']:>10,.0f} of ${r['total_usd'] or 0:>10,.0f}")
        lines.append(f"  {'(nobody requested)':<24} ${s['unallocated_usd'] or 0:>10,.0f} of unallocated capacity")
    if plan.recommendations:
        by_rule: dict[str, list[float]] = {}
        for rec in plan.recommendations:
            by_rule.setdefault(rec.rule, []).append(rec.monthly_savings_usd)
        lines.append(f"{len(plan.recommendations)} recommendations, ${plan.total_monthly_savings_usd:,.0f}/month "
                     f"potential savings ({catalog}):")
        for rule, savings in sorted(by_rule.items(), key=lambda kv: -sum(kv[1])):
            lines.append(f"  {rule:<13} {len(savings):>3} finding(s)  ${sum(savings):>10,.0f}/month")
        lines += ray_keda.summary_lines(plan.recommendations)
        lines += signals.summary_lines(plan.recommendations)
        basis = plan.savings_by_basis
        lines.append(f"  nodes released ${basis.get('nodes_released', 0):,.0f}/month; GPUs returned to the pool "
                     f"${basis.get('gpus_returned', 0):,.0f}/month; spot price difference "
                     f"${basis.get('price_difference', 0):,.0f}/month (each node and GPU-hour counted once)")
    else:
        lines.append("no recommendations: nothing in this fleet crossed a rule's thresholds")
    return "\n".join(lines)

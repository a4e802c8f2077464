"""``gpuinsight demo``: the whole pipeline on the embedded sample fleet, no cluster needed."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from gpuinsight.api import GpuInsight
from gpuinsight.config import Config
from gpuinsight.progress import Progress
from gpuinsight.reports import ray_keda, signals
from gpuinsight.rules.base import Plan
from gpuinsight.sources.gpu_nodes import unmatched_note


def run_demo(config: Config, out: Path, sample: Path | None = None) -> str:
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    final = Path(config.db_path)
    # The demo starts from an empty warehouse so its figures are the sample's alone. It is built
    # in a temporary file next to the target and swapped in only when everything succeeded: a
    # broken --sample leaves an existing warehouse as it was.
    with building(final) as tmp_db:
        text, report = _build(config.with_(db_path=tmp_db), out, sample)
    took = time.perf_counter() - started
    return (f"{text}\n\nwrote {report} and {out / 'recommendations.json'} "
            f"(warehouse {final}) in {took:.1f} s")


@contextlib.contextmanager
def building(final: Path) -> Iterator[Path]:
    """A fresh temporary warehouse path beside ``final``, renamed onto it if the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".building", dir=final.parent)
    os.close(fd)
    tmp = Path(name)
    tmp.unlink()  # DuckDB creates the file itself
    try:
        yield tmp
        Path(f"{final}.wal").unlink(missing_ok=True)  # an old WAL must not replay onto the new file
        os.replace(tmp, final)
    finally:
        for leftover in (tmp, Path(f"{tmp}.wal")):
            leftover.unlink(missing_ok=True)


def _build(config: Config, out: Path, sample: Path | None) -> tuple[str, Path]:
    progress = Progress(config.progress)
    with GpuInsight(config) as gi:
        progress.stage("loading the sample fleet")
        loads = gi.load_sample(sample)
        progress.stage("running the rules")
        plan = gi.recommend()
        (out / "recommendations.json").write_text(json.dumps(plan.to_json_obj(), indent=2, default=str) + "\n")
        progress.stage("writing the report")
        report = gi.report(out / "report.html", plan=plan)
        progress.close()
        text = summarize(gi, plan, loads_line="; ".join(r.summary() for r in loads))
    return text, report


def summarize(gi: GpuInsight, plan: Plan, *, loads_line: str = "") -> str:
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

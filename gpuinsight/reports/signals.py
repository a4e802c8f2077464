"""The report's view of issue 14's findings: input-starved GPUs (a typical hour of the pod's
activity next to its CPU and PCIe receive), gangs spread wider than needed (their domains and
what each 1 % of slowdown costs), and spot moves whose rework the checkpoints bound.

Charts take a SQL-model frame (``workload_activity_timeline``); the section takes the plan's
recommendation objects and reads their evidence as their kind declares it
(:mod:`gpuinsight.plan.kinds`), so both work in a notebook too.
"""

from __future__ import annotations

import html
from typing import Any

import altair as alt
import polars as pl

from gpuinsight.plan import SETTLE_DIGITS
from gpuinsight.plan.kinds import INPUT_STARVED, SPOT, TOPOLOGY
from gpuinsight.reports.chartkit import ChartLike, heading, placeholder
from gpuinsight.reports.theme import WIDTH

esc = html.escape
GB = 1e9


def typical_hour(timeline: pl.DataFrame) -> pl.DataFrame:
    """The steps of the clock hour whose mean GR activity is closest to the median hour's, among
    the hours with the most steps (a whole hour, not one cut by the window's edge); the
    ``workload_activity_timeline`` model picks the same hour with ``typical_hour``."""
    if timeline.is_empty():
        return timeline
    t = timeline.with_columns(pl.col("ts").dt.truncate("1h").alias("_hour"))
    hours = t.group_by("_hour").agg(pl.col("gr_active").mean().alias("g"), pl.len().alias("n"))
    full = hours.filter(pl.col("n") == pl.col("n").max())
    median = full.get_column("g").median()
    # distances equal to SETTLE_DIGITS decimals are equal (the earliest hour), whatever order the means
    # were summed in (workload_activity_timeline.sql rounds to the same 9 decimals)
    pick = full.with_columns((pl.col("g") - median).abs().round(SETTLE_DIGITS).alias("d")).sort("d", "_hour").get_column("_hour")[0]
    return t.filter(pl.col("_hour") == pick).drop("_hour").sort("ts")


def activity_hour(timeline: pl.DataFrame, title: str, subtitle: str = "") -> ChartLike:
    """A typical hour of one workload: GR activity (mean, with the per-step min-max band), PCIe/NVLink
    receive (GB/s) and container CPU against its request (cores), one panel each."""
    hour = typical_hour(timeline)
    if hour.is_empty():
        return placeholder(title, "no samples of this workload in the data")
    start = hour.get_column("ts").min()
    when = start.strftime("%Y-%m-%d") if start is not None else ""
    step = int(hour.get_column("step_s").max() or 0)
    base = hour.with_columns(
        (pl.col("gr_active") * 100).round(1).alias("gr"),
        (pl.col("gr_active_min") * 100).round(1).alias("gr_min"),
        (pl.col("gr_active_max") * 100).round(1).alias("gr_max"),
        ((pl.col("pcie_rx_bps").fill_null(0) + pl.col("nvlink_rx_bps").fill_null(0)) / GB).round(3).alias("rx"),
        pl.col("cpu_cores").round(3), pl.col("cpu_request"),
    ).select("ts", "gr", "gr_min", "gr_max", "rx", "cpu_cores", "cpu_request",
             pl.col("pcie_rx_bps").is_not_null().any().alias("has_rx"))
    x = alt.X("ts:T", title=f"{when} UTC ({step} s steps)", axis=alt.Axis(format="%H:%M"))
    w = WIDTH
    gr = alt.Chart(base).encode(x=x)
    gr_panel = (gr.mark_area(opacity=0.25, color="#827717").encode(y=alt.Y("gr_min:Q", title="GR active %",
                                                                         scale=alt.Scale(domain=[0, 100])),
                                                                  y2="gr_max:Q")
                + gr.mark_line(point=alt.OverlayMarkDef(color="#827717"), color="#827717").encode(
                    y="gr:Q", tooltip=[alt.Tooltip("ts:T", format="%H:%M"), "gr:Q", "gr_min:Q", "gr_max:Q"])
                ).properties(width=w, height=120)
    panels: list[Any] = [gr_panel]
    if bool(base.get_column("has_rx").any()):
        panels.append(alt.Chart(base).mark_line(point=alt.OverlayMarkDef(color="#1565c0"), color="#1565c0").encode(
            x=x, y=alt.Y("rx:Q", title="PCIe+NVLink RX GB/s"), tooltip=["rx:Q"]).properties(width=w, height=90))
    if base.get_column("cpu_cores").drop_nulls().len():
        cpu = alt.Chart(base).encode(x=x)
        layer = cpu.mark_line(point=alt.OverlayMarkDef(color="#c62828"), color="#c62828").encode(
            y=alt.Y("cpu_cores:Q", title="container CPU (cores)"), tooltip=["cpu_cores:Q", "cpu_request:Q"])
        if base.get_column("cpu_request").drop_nulls().len():
            layer = layer + cpu.mark_line(strokeDash=[4, 3], color="#546e7a").encode(y="cpu_request:Q")
        panels.append(layer.properties(width=w, height=90))
    missing = [what for what, ok in (("PCIe/NVLink RX", len(panels) > 1 and bool(base["has_rx"].any())),
                                     ("container CPU", bool(base["cpu_cores"].drop_nulls().len()))) if not ok]
    note = f"not collected for this workload: {', '.join(missing)}" if missing else ""
    return alt.vconcat(*panels, spacing=6).properties(title=heading(title, subtitle, note))


def input_starved_charts(query: Any, recs: list[Any], *, top_n: int = 3) -> list[tuple[str, ChartLike]]:
    """One chart per input-starved finding (the biggest ``top_n``): a typical hour of the pod."""
    out = []
    starved = sorted(INPUT_STARVED.of(recs), key=lambda r: -r.monthly_savings_usd)
    for i, r in enumerate(starved[:top_n]):
        e = INPUT_STARVED.evidence_of(r)
        # the model picks the hour: only its steps leave the warehouse
        timeline = query("workload_activity_timeline", namespace=r.namespace, workload=r.workload,
                         cluster=getattr(r, "cluster", None), typical_hour=True)
        sub = (f"duty cycle {e.duty_cycle_pct}% of bursts at {e.burst_level_pct}%; "
               f"cause: {e.cause} ({e.resolution})")
        out.append((f"input-starved-{i + 1}", activity_hour(
            timeline, f"{r.namespace}/{r.workload}: a typical hour of a GPU waiting for its input", sub)))
    return out


def _row(cells: list[Any]) -> str:
    return "<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in cells) + "</tr>"


def _table(head: list[str], rows: list[list[Any]]) -> str:
    return ("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(_row(r) for r in rows) + "</tbody></table>")


def signals_section(recs: list[Any]) -> str:
    """HTML for the input-starved, topology and checkpoint-aware spot findings ("" when none)."""
    parts = []
    starved = INPUT_STARVED.of(recs)
    if starved:
        rows = [[f"{r.namespace}/{r.workload}", f"{e.duty_cycle_pct}%", e.burst_period_min or "not resolved", e.cause,
                 f"${e.waiting_usd_per_month or 0:,.0f}", f"${r.monthly_savings_usd:,.0f}",
                 "; ".join(r.proposed.get("fixes") or [])]
                for r in starved for e in [INPUT_STARVED.evidence_of(r)]]
        parts.append("<h3>GPUs waiting for their input</h3><p class=\"sub\">Busy when fed, stalled in between with "
                     "the model resident: not idle, and not for a smaller slice. Waiting = GPU cost x (1 - duty "
                     "cycle); saving = what a fed pipeline removes. The charts above show a typical hour.</p>"
                     + _table(["workload", "duty cycle", "burst period (min)", "cause", "waiting $/month",
                               "saving $/month", "fix"], rows))
    topo = TOPOLOGY.of(recs)
    if topo:
        rows = [[f"{r.namespace}/{r.workload}", e.pods, e.spread, f"{e.tightest_feasible} {e.feasible_domain}",
                 e.nvlink_reach, e.topology_source, f"${e.gang_gpu_cost_usd_per_month or 0:,.0f}",
                 f"${e.usd_per_month_per_pct_slowdown or 0:,.0f}"]
                for r in topo for e in [TOPOLOGY.evidence_of(r)]]
        parts.append("<h3>Gangs spread wider than they need</h3><p class=\"sub\">Not priced: the slowdown depends "
                     "on how much of each step is communication. The last column is what each 1 % of slowdown "
                     "costs.</p>" + _table(["gang", "pods", "spans", "could fit in", "NVLink", "domains from",
                                            "GPU cost $/month", "$/month per 1 % slowdown"], rows))
    ckpt = checkpointed(recs)
    if ckpt:
        rows = [[f"{r.namespace}/{r.workload}", f"{e.checkpoint_interval_min:g} min", e.checkpoint_basis,
                 e.expected_rework_gpu_hours_per_month, e.rework_without_checkpoints_gpu_hours_per_month,
                 f"${r.monthly_savings_usd:,.0f}"] for r in ckpt for e in [SPOT.evidence_of(r)]]
        parts.append("<h3>Spot moves bounded by checkpoints</h3><p class=\"sub\">Rework on an interruption is the "
                     "work since the last checkpoint (half an interval on average), not the whole run.</p>"
                     + _table(["workload", "checkpoint every", "known from", "rework GPU-h/month",
                               "without checkpoints", "saving $/month"], rows))
    if not parts:
        return ""
    return '<section id="signals"><h2>Input, topology and checkpoints</h2>' + "".join(parts) + "</section>"


def checkpointed(recs: list[Any]) -> list[Any]:
    """The spot findings whose jobs checkpoint at a known interval."""
    return [r for r in SPOT.of(recs) if SPOT.evidence_of(r).checkpoint_interval_min]


def summary_lines(recs: list[Any]) -> list[str]:
    """The demo summary's lines for these findings (one per kind present)."""
    out = []
    starved = INPUT_STARVED.of(recs)
    if starved:
        r = max(starved, key=lambda r: r.monthly_savings_usd)
        e = INPUT_STARVED.evidence_of(r)
        out.append(f"  input-starved GPUs: {len(starved)} workload(s) wait for their input, e.g. {r.namespace}/"
                   f"{r.workload} {100 - (e.duty_cycle_pct or 0):.0f}% of the time (cause: "
                   f"{e.cause}); ${sum(x.monthly_savings_usd for x in starved):,.0f}/month of waiting "
                   "a fed pipeline removes")
    topo = TOPOLOGY.of(recs)
    if topo:
        r, e = topo[0], TOPOLOGY.evidence_of(topo[0])
        slowdown = sum(TOPOLOGY.evidence_of(x).usd_per_month_per_pct_slowdown or 0 for x in topo)
        out.append(f"  topology: {len(topo)} gang(s) spread wider than needed, e.g. {r.namespace}/{r.workload} over "
                   f"{e.spread} while {e.feasible_domain} could hold it; not "
                   f"priced: ${slowdown:,.0f}/month per 1% slowdown")
    ckpt = checkpointed(recs)
    if ckpt:
        names = ", ".join(f"{r.namespace}/{r.workload} every {e.checkpoint_interval_min:g} min"
                          + (" (inferred)" if str(e.checkpoint_basis or "").startswith("inferred") else "")
                          for r in ckpt for e in [SPOT.evidence_of(r)])
        out.append(f"  checkpoint-aware spot: {len(ckpt)} job(s) spot-tolerant by their checkpoints ({names}): "
                   f"${sum(r.monthly_savings_usd for r in ckpt):,.0f}/month")
    return out

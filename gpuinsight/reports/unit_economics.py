"""The report's unit-economics section: cost per 1M tokens per deployment (with its trend) and GPU
energy per team. Takes SQL-model frames (``unit_economics``, ``unit_economics_daily``,
``energy_by``), so a notebook draws the same tables and chart."""

from __future__ import annotations

import html
from typing import Any

import altair as alt
import polars as pl

from gpuinsight.reports.chartkit import ChartLike, heading, placeholder
from gpuinsight.reports.frames import cluster_scoped
from gpuinsight.reports.theme import WIDTH

esc = html.escape


def _fmt(v: Any, spec: str) -> str:
    return "—" if v is None else format(float(v), spec)


def cost_per_token_trend(daily: pl.DataFrame) -> ChartLike:
    """$ per 1M tokens per deployment and day."""
    title = "Cost per 1M tokens per deployment and day"
    data = daily.filter(pl.col("usd_per_1m_tokens").is_not_null())
    if data.is_empty():
        return placeholder(title, "no inference-server metrics in the data")
    data = cluster_scoped(data.with_columns(
        (pl.col("namespace") + "/" + pl.col("workload") + " (" + pl.col("model_name").fill_null("—") + ")")
        .alias("deployment"), pl.col("usd_per_1m_tokens").round(4)), "deployment")
    return alt.Chart(data.select("day", "deployment", "usd_per_1m_tokens")).mark_line(point=True).encode(
        x=alt.X("day:T", title="day (UTC)"), y=alt.Y("usd_per_1m_tokens:Q", title="$ per 1M tokens"),
        color=alt.Color("deployment:N", title=None), tooltip=["deployment:N", "day:T", "usd_per_1m_tokens:Q"],
    ).properties(width=WIDTH, height=200, title=heading(title, "on the GPU share each held; prices as stated above"))


def _table(head: list[str], rows: list[list[str]]) -> str:
    return ("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
            + "</tbody></table>")


def section(economics: pl.DataFrame, energy: pl.DataFrame) -> str:
    """HTML of the unit-economics section ("" when there is neither serving nor energy data)."""
    parts = []
    if economics.height:
        economics = cluster_scoped(economics.with_columns(
            (pl.col("namespace") + "/" + pl.col("workload")).alias("deployment")), "deployment")
        rows = [[r["deployment"], r["model_name"] or "—", r["server"] or "—",
                 _fmt(r["tokens_per_hour"], ",.0f"), _fmt(r["usd_per_1m_tokens"], ",.3f"),
                 _fmt(r["usd_per_1m_prompt_tokens"], ",.3f"), _fmt(r["usd_per_1m_generated_tokens"], ",.3f"),
                 _fmt(None if r["gr_active_avg"] is None else r["gr_active_avg"] * 100, ".0f") + " %",
                 _fmt(r["ttft_p95_s"], ".3f"), str(r["idle_hours"])]
                for r in economics.iter_rows(named=True)]
        parts.append("<h3>Cost per 1M tokens per deployment</h3><p class=\"sub\">In the window, on the GPU share "
                     "each deployment held (every dollar of its GPUs, idle hours included). The prompt and generated "
                     "columns put the whole cost on one kind of token. GR = GPU activity; TTFT = the largest hourly "
                     "p95 time to first token.</p>"
                     + _table(["deployment", "model", "server", "tokens/h", "$ / 1M tokens", "$ / 1M prompt",
                               "$ / 1M generated", "GR", "p95 TTFT (s)", "hours with no token"], rows))
    if energy.height:
        energy = cluster_scoped(energy, "group")
        rows = [[r["group"], _fmt(r["energy_kwh"], ",.1f"), _fmt(r["usd"], ",.2f"), _fmt(r["kg_co2e"], ",.1f"),
                 _fmt(None if r["share_from_counter"] is None else r["share_from_counter"] * 100, ".0f") + " %"]
                for r in energy.iter_rows(named=True)]
        parts.append("<h3>GPU energy per team</h3><p class=\"sub\">In the window: DCGM's energy counter where "
                     "scraped, else power x time; priced per region (energy_rates). In the cloud the energy is inside "
                     "the instance price: $ is what it is worth, not a cost on top.</p>"
                     + _table(["team", "kWh", "$ at the rate", "kg CO2e", "from the energy counter"], rows))
    if not parts:
        return ""
    return '<section id="unit-economics"><h2>Unit economics</h2>' + "".join(parts) + "</section>"

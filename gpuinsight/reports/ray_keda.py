"""The report's KubeRay and scale-to-zero parts: one table each, and the hour-of-week profile of
the services a KEDA ScaledObject would send to zero. Built from the findings' own evidence (read as
their kind declares it, :mod:`gpuinsight.plan.kinds`), so they show exactly what the plan decided
on."""

from __future__ import annotations

import html
from typing import Any

import altair as alt
import polars as pl

from gpuinsight.plan.kinds import RAY, SCALE_TO_ZERO
from gpuinsight.reports.chartkit import ChartLike, heading
from gpuinsight.reports.theme import WIDTH

esc = html.escape
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
RAY_CHANGES = {"job_cleanup": "finished job, cluster kept", "worker_min_replicas": "idle workers held by minReplicas",
               "head_gpus": "head pod holds GPUs"}


def _usd(v: Any) -> str:
    return f"${float(v or 0):,.0f}"


def week_frame(findings: list[Any]) -> pl.DataFrame:
    """One row per (workload, observed hour of the week) of every scale_to_zero finding."""
    rows = []
    for r in findings:
        e = SCALE_TO_ZERO.evidence_of(r)
        gr, idle = e.hour_of_week_gr_active_pct or [], e.hour_of_week_idle_share or []
        for how, (g, i) in enumerate(zip(gr, idle, strict=False)):
            if g is None and i is None:
                continue
            rows.append({"workload": f"{r.namespace}/{r.workload}", "day": DAYS[how // 24], "hour": how % 24,
                         "gr_active_pct": g, "idle_share": i})
    return pl.DataFrame(rows, schema={"workload": pl.Utf8, "day": pl.Utf8, "hour": pl.Int64,
                                      "gr_active_pct": pl.Float64, "idle_share": pl.Float64})


def scale_to_zero_week(findings: list[Any], *, top_n: int = 12) -> ChartLike:
    """Hour-of-week GPU activity of the services to scale to zero (UTC; unobserved hours blank):
    the ``top_n`` biggest savings (a large fleet has hundreds: one 168-cell row each would
    exceed what a chart can inline and what a reader can scan)."""
    shown = sorted(findings, key=lambda r: -r.monthly_savings_usd)[:top_n]
    df = week_frame(shown)
    more = f"; the {len(shown)} biggest savings of {len(findings)}" if len(findings) > len(shown) else ""
    title = heading("Scale to zero: GPU activity by hour of the week (UTC)",
                    "mean GR engine activity of each service a KEDA ScaledObject would scale to zero; "
                    f"dark = idle, blank = not observed{more}")
    return (
        alt.Chart(df)
        .mark_rect()
        .encode(
            x=alt.X("hour:O", title="hour (UTC)"),
            y=alt.Y("day:O", sort=list(DAYS), title=None),
            color=alt.Color("gr_active_pct:Q", title="GR active %", scale=alt.Scale(scheme="viridis", domain=[0, 100])),
            tooltip=["workload:N", "day:O", "hour:O", alt.Tooltip("gr_active_pct:Q", format=".1f"),
                     alt.Tooltip("idle_share:Q", format=".0%")],
        )
        .properties(width=WIDTH - 160, height=120)
        .facet(row=alt.Row("workload:N", title=None))
        .properties(title=title)
    )


def ray_section(findings: list[Any]) -> str:
    if not findings:
        return ""
    rows = []
    for r in findings:
        ev, cur, prop = RAY.evidence_of(r), r.current, r.proposed
        change = str(prop.get("change"))
        target = r.target or {}
        where = f"{r.namespace}/{target.get('ray_cluster') or r.workload}"
        if target.get("group"):
            where += f" · {target['group']}"
        if change == "job_cleanup":
            held = f"{ev.gpu_hours_after_end or 0:g} GPU-h after the job ({ev.hours_held_after_end} h)"
            to = f"shutdownAfterJobFinishes, TTL {prop.get('ttl_after_finish_s')} s"
        elif change == "worker_min_replicas":
            held = (f"{ev.idle_hours_in_long_stretches} h idle in long stretches; "
                    f"min {cur.get('min_replicas')}, {'autoscaler on' if cur.get('autoscaling') else 'no autoscaler'}")
            to = f"minReplicas {prop.get('min_replicas')}"
            if not cur.get("autoscaling"):
                to += ", in-tree autoscaler on"
            if prop.get("idle_timeout_s") is not None:
                to += f", autoscaler idle timeout {prop['idle_timeout_s']} s"
        else:
            held = f"{cur.get('head_gpus'):g} GPU(s), hourly-max p95 {ev.gr_hourly_max_p95_pct} % GR"
            to = "no GPU on the head (num-gpus 0)"
        rows.append(f"<tr><td>{esc(where)}</td><td>{esc(RAY_CHANGES.get(change, change))}</td><td>{esc(held)}</td>"
                    f"<td>{esc(to)}</td><td>{esc(str(target.get('kind')))}</td>"
                    f'<td class="num">{_usd(r.monthly_savings_usd)}</td></tr>')
    return ('<section id="kuberay"><h2>KubeRay clusters</h2>'
            '<p class="sub">Ray clusters holding GPUs for nothing, from their pods (labels ray.io/cluster, '
            "ray.io/group) and their RayCluster / RayJob specs; applied as patches of the object named. $ per "
            "month.</p><table><thead><tr><th>cluster · group</th><th>finding</th><th>evidence</th><th>change</th>"
            '<th>patched</th><th class="num">monthly saving</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></section>")


def scale_to_zero_section(findings: list[Any]) -> str:
    if not findings:
        return ""
    rows = []
    for r in findings:
        ev = SCALE_TO_ZERO.evidence_of(r)
        cron = r.proposed.get("active_hours_utc")
        rows.append(
            f"<tr><td>{esc(f'{r.namespace}/{r.workload}')}</td>"
            f'<td class="num">{ev.idle_hours_in_long_stretches} of {ev.hours_held:g} h</td>'
            f'<td class="num">{ev.longest_idle_stretch_h} h</td>'
            f'<td class="num">{ev.hours_at_zero:g} h</td>'
            f'<td class="num">{ev.expected_cold_starts_per_day}</td>'
            f"<td>{esc(', '.join(map(str, cron)) if cron else '—')}</td>"
            f'<td class="num">{_usd(r.monthly_savings_usd)}</td></tr>')
    return ('<section id="scale-to-zero"><h2>Scale to zero</h2>'
            '<p class="sub">Services and notebooks idle for long stretches (nights, weekends) get a KEDA '
            "ScaledObject: zero replicas when idle, back on the first request (request-rate trigger), while "
            "their GPUs work, and at their usual hours (cron). Only the hours at zero are counted (each idle "
            "stretch less the cooldown and the cron hours). $ per month.</p><table><thead><tr><th>workload</th>"
            '<th class="num">idle in long stretches</th><th class="num">longest</th><th class="num">at zero</th>'
            '<th class="num">cold starts / day</th><th>cron hours (UTC)</th><th class="num">monthly saving</th>'
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></section>")


def sections(recommendations: list[Any]) -> list[str]:
    """The HTML sections, in page order (empty when the plan has no such findings)."""
    out = [ray_section(RAY.of(recommendations)), scale_to_zero_section(SCALE_TO_ZERO.of(recommendations))]
    return [s for s in out if s]


RAY_SUMMARY = {"job_cleanup": "RayJob(s) whose cluster outlived the job",
               "worker_min_replicas": "GPU worker group(s) held idle by minReplicas",
               "head_gpus": "head pod(s) holding GPUs"}


def summary_lines(recs: list[Any]) -> list[str]:
    """The demo summary's lines: one for the KubeRay findings, one for the services that can sleep."""
    lines = []
    ray = RAY.of(recs)
    if ray:
        counts: dict[str, int] = {}
        for r in ray:
            change = str(r.proposed.get("change"))
            counts[change] = counts.get(change, 0) + 1
        parts = ", ".join(f"{n} {RAY_SUMMARY.get(c, c)}" for c, n in counts.items())
        lines.append(f"  KubeRay: {parts}; ${sum(r.monthly_savings_usd for r in ray):,.0f}/month as "
                     "RayJob/RayCluster patches")
    sleepy = SCALE_TO_ZERO.of(recs)
    if sleepy:
        evidence = [SCALE_TO_ZERO.evidence_of(r) for r in sleepy]
        hours = sum(float(e.hours_at_zero or 0) for e in evidence)
        starts = sum(float(e.expected_cold_starts_per_day or 0) for e in evidence)
        lines.append(f"  scale to zero: {len(sleepy)} service(s) idle on nights/weekends get a KEDA ScaledObject: "
                     f"{hours:,.0f} h at zero in the window, about {starts:.1f} cold start(s) a day, "
                     f"${sum(r.monthly_savings_usd for r in sleepy):,.0f}/month")
    return lines

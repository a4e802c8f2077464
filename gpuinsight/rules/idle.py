"""IdleRule: workloads holding GPUs that do (almost) nothing with them.

Idle means all three: the median GR activity is near zero, few samples are active, and the
peaks are low too (the short-window p95: p95 over steps of the per-step max). Work that is
busy at the same hours every day but idle in between (a nightly retraining pod) is not idle:
it gets a schedule (scale to zero between runs), and the saving counts only the hours outside
the runs. Bursty interactive use at random hours (high peaks, no recurring hours) gets nothing.
Deployments and StatefulSets that are busy at some hours are left to scale_to_zero, which gives
them a KEDA ScaledObject instead of a schedule note (docs/rules.md, "Where idle ends and
scale_to_zero begins"); workloads an earlier rule (ray) claimed are not judged again.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from gpuinsight.plan import Recommendation, finding_id
from gpuinsight.plan.kinds.idle import IDLE, IdleProposed, Schedule
from gpuinsight.plan.schema import WorkloadTarget
from gpuinsight.rules.base import Rule
from gpuinsight.rules.common import (
    FULL_CONFIDENCE,
    MIN_HOURS,
    SCALE_TARGET_KINDS,
    cluster_of,
    compute_evidence,
    compute_peak,
    evidence_confidence,
    mib_to_gb,
    monthly,
    num,
    pct,
    window_hours,
    workload_ref,
)
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.effects import WorkloadLeaves
from gpuinsight.rules.serving import served_nothing, serving_by_workload
from gpuinsight.rules.settings import FRACTION, Setting
from gpuinsight.sql.rows import Row


class IdleRule(Rule):
    name = "idle"
    summary = ("Reclaim GPUs held by workloads that are idle nearly all the time (notebooks, forgotten "
               "services); give periodic work a schedule instead.")
    needs = ("workload_gpu_profile", "analysis_window", "unit_economics")
    settings = (
        Setting("max_median_activity", 0.01, "Idle when the median GR engine activity is at most this (0..1) ...",
                bounds=FRACTION),
        Setting("max_active_fraction", 0.10, "... at most this share of samples is active (GR > 5 %) ...",
                bounds=FRACTION),
        Setting("max_peak_p95", 0.10, "... and the short-window p95 (p95 of the per-step max) is at most this.",
                bounds=FRACTION),
        MIN_HOURS,
        Setting("periodic_max_hours", 16, "Periodic work: active at most this many recurring UTC hours a day.",
                bounds=(0, 24)),
        Setting("periodic_margin_hours", 1, "Hours kept before and after each recurring run.",
                bounds=(0, 24)),
        Setting("periodic_max_stray_per_day", 1.0, "Active hours outside the recurring ones allowed per day."),
        FULL_CONFIDENCE,
    )
    kinds = (IDLE,)

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        out: list[Recommendation] = []
        serving = serving_by_workload(frames, ctx)
        for r in ctx.rows(frames, "workload_gpu_profile"):
            hours = window_hours(frames, r.cluster)
            if r.samples is None or num(r.hours_held) < settings["min_hours"] or not hours:
                continue  # unmeasured or too short to judge
            if ctx.ledger.workload_claimed(*r.workload_key):
                continue  # an earlier finding (input-starved) explains its low activity
            served = serving.get(r.workload_key)
            if served_nothing(served, settings["min_hours"]):
                # an inference server that served no token is idle whatever its GPU activity says
                out.append(self._finding(r, frames, settings, ctx, hours, None, zero_tokens=True))
                continue
            if num(r.gr_p50, 1.0) > settings["max_median_activity"]:
                continue  # used most of the time
            if ctx.ledger.workload_claimed(*r.workload_key):
                continue  # an earlier rule (ray) already acts on it
            active = num(r.active_fraction, 1.0)
            peak = compute_peak(r)
            if active <= settings["max_active_fraction"] and peak <= settings["max_peak_p95"]:
                out.append(self._finding(r, frames, settings, ctx, hours, None))
                continue
            run = periodic_hours(r, settings) if r.workload_kind not in SCALE_TARGET_KINDS else None
            if run:
                out.append(self._finding(r, frames, settings, ctx, hours, run))
        return out

    def _finding(self, r: Any, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext, hours: float, run: list[int] | None, zero_tokens: bool = False) -> Recommendation:
        rid = finding_id(IDLE.name, cluster_of(r), r.namespace, r.workload, None, None)
        share = 1.0 if run is None else 1.0 - len(run) / 24.0
        granted = ctx.claim_workload_hours(rid, r.workload_key, r.node_gpu_hours, frames, share)
        if run is None:  # scaled away: its pods leave their nodes (periodic work keeps its place)
            ctx.record(rid, WorkloadLeaves(r.workload_key))
        production, why = ctx.is_production(r)
        gpus = round(num(r.avg_gpus_held), 3)
        model = r.gpu_model or "GPU"
        if zero_tokens:
            title = (f"{r.namespace}/{r.workload} holds {gpus:g} {model} GPU(s) and its inference server "
                     f"served no token in {num(r.hours_held):g} h (GPU activity "
                     f"{pct(num(r.active_fraction))}% of the time): scale it to zero")
            proposed = IdleProposed(0, "idle")
        elif run is None:
            title = (f"{r.namespace}/{r.workload} holds {gpus:g} {model} GPU(s) but was active only "
                     f"{pct(num(r.active_fraction))}% of the time with low peaks: scale it to zero")
            proposed = IdleProposed(0, "idle")
        else:
            title = (f"{r.namespace}/{r.workload} holds {gpus:g} {model} GPU(s) all day but works only "
                     f"at {hours_label(run)} UTC: run it on a schedule and scale it to zero in between")
            proposed = IdleProposed(0, "periodic", Schedule(run).to_dict())
        return Recommendation(
            rule=IDLE.name, id=rid, cluster=cluster_of(r),
            namespace=r.namespace, workload=r.workload, queue=r.queue,
            title=title,
            current={"gpus": gpus, "workload_kind": r.workload_kind},
            proposed=proposed.to_dict(),
            monthly_savings_usd=monthly(granted),
            confidence=evidence_confidence(num(r.hours_held), settings["full_confidence_hours"]),
            evidence={
                "active_fraction_pct": pct(r.active_fraction),
                "gr_active_p50_pct": pct(r.gr_p50),
                "gr_active_p95_pct": pct(r.gr_p95),
                "gr_active_max_pct": pct(r.gr_max),
                **compute_evidence(r),
                "fb_used_max_gb": mib_to_gb(r.fb_max_mib),
                "recurring_hours_utc": list(r.recurring_hours_utc or []),
                "days_observed": r.days_observed,
                "idle_share_of_day": round(share, 3),
                "gpu_hours": round(num(r.gpu_hours), 2),
                "hours_held": num(r.hours_held),
                "cost_usd_in_window": round(num(r.cost_usd), 2),
                "window_hours": round(hours, 2),
                "production": production, "production_reason": why,
                **({"tokens_served": 0, "idle_basis": "zero tokens"} if zero_tokens else {}),
            },
            target=WorkloadTarget(**workload_ref(r)).to_dict(),
        )


def periodic_hours(r: Row, settings: dict[str, Any]) -> list[int] | None:
    """The UTC hours to keep running (recurring active hours with a margin), or None if the
    workload is not periodic: it must recur on at least two days and do little in between."""
    recurring = [int(h) for h in r.recurring_hours_utc or []]
    days = num(r.days_observed)
    if not recurring or days < 2 or len(recurring) > settings["periodic_max_hours"]:
        return None
    if num(r.stray_active_hours) > settings["periodic_max_stray_per_day"] * days:
        return None
    margin = int(settings["periodic_margin_hours"])
    run = sorted({(h + d) % 24 for h in recurring for d in range(-margin, margin + 1)})
    return run if len(run) < 24 else None


def hours_label(run: list[int]) -> str:
    """[1, 2, 3, 22, 23] -> '22:00-04:00' style ranges."""
    spans: list[tuple[int, int]] = []
    for h in sorted(run):
        if spans and h == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], h)
        else:
            spans.append((h, h))
    if len(spans) > 1 and spans[0][0] == 0 and spans[-1][1] == 23:  # wrap around midnight
        spans = [(spans[-1][0], spans[0][1] + 24)] + spans[1:-1]
    return ", ".join(f"{a:02d}:00-{(b + 1) % 24:02d}:00" for a, b in spans)

"""ScaleToZeroRule: services and notebooks that sit idle for long stretches (nights, weekends).

Such a workload is not idle all along (that is the idle rule's) but its GPUs do nothing for
hours at a time, and it is a kind KEDA can scale (a Deployment or StatefulSet). It gets a KEDA
``ScaledObject`` that takes it to zero replicas when idle and back on demand, instead of
"delete it": triggers on its request rate (seen at the ingress, so it is seen while the
workload is at zero and wakes it), on its GPU activity (keeps it up while it works), and, when
it is busy at recurring UTC hours, a cron trigger that starts it before them.

The saving counts only the hours it would really be at zero: idle stretches of at least
``min_idle_stretch_hours`` (idle_stretches: every step of the hour at most 1 % GR activity),
each less the cooldown KEDA waits before scaling down and the hours a cron trigger holds it
up. Each stretch that ends ends with a cold start: the expected cold starts per day are
those seen per day in the window. Production services are left alone unless
``include_production`` (their first request after a night would wait for a GPU pod to start).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from gpuinsight.keys import WorkloadKey
from gpuinsight.plan import Recommendation, finding_id, steady_round
from gpuinsight.plan.kinds.scale_to_zero import SCALE_TO_ZERO, ScaleToZeroProposed
from gpuinsight.plan.schema import WorkloadTarget
from gpuinsight.rules.base import Rule
from gpuinsight.rules.common import (
    FULL_CONFIDENCE,
    SCALE_TARGET_KINDS,
    WEEK_PROFILE,
    cluster_of,
    evidence_confidence,
    monthly,
    num,
    pct,
    window_hours,
    workload_ref,
)
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.idle import hours_label, periodic_hours
from gpuinsight.rules.settings import FRACTION, Setting
from gpuinsight.sources.prom.promql import regex_literal, selector
from gpuinsight.sql.rows import Row, key_cluster

HOURS_PER_WEEK = 168
# what a pod of each kind is named after its workload: Deployment <name>-<rs hash>-<suffix>,
# StatefulSet <name>-<ordinal>
POD_NAME_PATTERNS = {"Deployment": "-[a-z0-9]+-[a-z0-9]+", "StatefulSet": "-[0-9]+"}


class ScaleToZeroRule(Rule):
    name = "scale_to_zero"
    summary = ("Give services and notebooks that sit idle for long stretches (nights, weekends) a KEDA "
               "ScaledObject that scales them to zero when idle and back on demand.")
    needs = ("workload_gpu_profile", "idle_stretches", "scaled_workloads", "analysis_window")
    settings = (
        Setting("min_days", 2, "Days of history needed: an idle stretch must be seen to recur."),
        Setting("min_idle_stretch_hours", 4, "Only idle stretches at least this long count (nights, weekends)."),
        Setting("min_idle_share", 0.25, "Recommend only when the hours at zero are at least this share of the "
                                        "GPU cost.", bounds=FRACTION),
        Setting("max_cold_starts_per_day", 3.0, "Not when more idle stretches than this end per day (each ends "
                                                "with a cold start)."),
        Setting("cooldown_s", 1800, "KEDA cooldownPeriod: quiet seconds before scaling to zero (subtracted from "
                                    "every stretch)."),
        Setting("polling_interval_s", 30, "KEDA pollingInterval: how often the triggers are read.",
                bounds=(1, math.inf)),
        Setting("include_production", False, "Also scale production services to zero (cold starts hit their "
                                              "first requests)."),
        Setting("cron_margin_hours", 1, "A cron trigger starts recurring work this many hours early and keeps it "
                                        "this much later.", bounds=(0, 24)),
        Setting("prometheus_url", "http://prometheus-operated.monitoring.svc:9090",
                "serverAddress of the Prometheus KEDA queries (in-cluster address)."),
        Setting("request_metric", "nginx_ingress_controller_requests",
                "Counter of requests seen before they reach the pods (the ingress), for the request trigger."),
        Setting("request_namespace_label", "exported_namespace", "Its label holding the workload's namespace."),
        Setting("request_service_label", "service", "Its label holding the Service name (taken to be the "
                                                    "workload's name)."),
        Setting("gpu_metric", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM series of GPU activity for the GPU trigger."),
        Setting("gpu_namespace_label", "namespace", "Its pod namespace label (exported_namespace without "
                                                    "honor_labels)."),
        Setting("gpu_pod_label", "pod", "Its pod label (exported_pod without honor_labels)."),
        FULL_CONFIDENCE,
    )
    kinds = (SCALE_TO_ZERO,)

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        # the hour-of-week profiles (168 slots a workload) only for the findings' rows
        rows = ctx.rows(frames, "idle_stretches", without=WEEK_PROFILE)
        stretches = {(s.workload_key, s.workload_kind): (i, s) for i, s in enumerate(rows) if not s.ray_group}
        scaled = {(WorkloadKey(key_cluster(s), s.namespace, s.target_name), s.target_kind)
                  for s in ctx.rows(frames, "scaled_workloads")}
        out = []
        for r in ctx.rows(frames, "workload_gpu_profile"):
            key = (r.workload_key, r.workload_kind)
            i, s = stretches.get(key, (-1, None))
            if s is None or r.workload_kind not in SCALE_TARGET_KINDS or key in scaled:
                continue
            if ctx.ledger.workload_claimed(*r.workload_key):
                continue  # idle, consolidation or ray act on it already
            production, why = ctx.is_production(r)
            if production and not settings["include_production"]:
                continue
            if num(s.days_observed) < settings["min_days"]:
                continue
            rec = self._finding(r, s, i, frames, settings, ctx, production, why)
            if rec is not None:
                out.append(rec)
        return out

    def _finding(self, r: Any, s: Row, index: int, frames: dict[str, pl.DataFrame],
                 settings: dict[str, Any], ctx: PlanContext, production: bool, why: str) -> Recommendation | None:
        cron = periodic_hours(r, {"periodic_max_hours": 23, "periodic_max_stray_per_day": float("inf"),
                                  "periodic_margin_hours": settings["cron_margin_hours"]})
        plan = zero_hours(s.stretches or [], settings["min_idle_stretch_hours"], settings["cooldown_s"],
                          set(cron or ()))
        cost = num(s.cost_usd)
        if not plan.stretches or cost <= 0:
            return None
        share = plan.saved_usd / cost
        days = num(s.days_observed)
        cold_starts = plan.wakeups / days
        if share < settings["min_idle_share"] or cold_starts > settings["max_cold_starts_per_day"]:
            return None
        rid = finding_id(SCALE_TO_ZERO.name, cluster_of(r), r.namespace, r.workload, None, None)
        granted = ctx.claim_workload_hours(rid, r.workload_key, r.node_gpu_hours, frames, share)
        if granted <= 0:
            return None
        # replicas it runs on average (the builder takes spec.replicas when it sees the live object)
        replicas = max(1, int(round(num(r.avg_gpus_held) / max(num(r.gpus_per_pod, 1.0), 1e-9))))
        gpus = round(num(r.avg_gpus_held), 3)
        model = r.gpu_model or "GPU"
        idle_h = sum(st["hours"] for st in plan.stretches)
        proposed = ScaleToZeroProposed(
            0, replicas, int(settings["cooldown_s"]), int(settings["polling_interval_s"]),
            str(settings["prometheus_url"]), request_query(r, settings), gpu_query(r, settings), "0.01", cron)
        schedule = f"; started by cron at {hours_label(cron)} UTC" if cron else ""
        week = ctx.cell(frames, "idle_stretches", index, WEEK_PROFILE[0])
        return Recommendation(
            rule=SCALE_TO_ZERO.name, id=rid, cluster=cluster_of(r),
            namespace=r.namespace, workload=r.workload, queue=r.queue,
            title=(f"{r.namespace}/{r.workload} holds {gpus:g} {model} GPU(s) but sat idle {idle_h} h of "
                   f"{int(num(s.hours_held))} in stretches of {settings['min_idle_stretch_hours']} h or more: "
                   f"scale it to zero when idle with KEDA (about {cold_starts:.1f} cold start(s) a day{schedule})"),
            current={"gpus": gpus, "replicas": replicas, "workload_kind": r.workload_kind},
            proposed=proposed.to_dict(),
            monthly_savings_usd=monthly(granted),
            # GPU activity cannot see a few requests an hour: the request trigger keeps such a
            # service up at run time, and the saving would then be smaller than estimated
            confidence=evidence_confidence(num(s.hours_held), settings["full_confidence_hours"], cap=0.8),
            evidence={
                "hours_held": num(s.hours_held),
                "idle_hours": num(s.idle_hours),
                "idle_hours_in_long_stretches": idle_h,
                "hours_at_zero": round(plan.zero_hours, 2),
                "saved_share_of_cost": round(share, 3),
                "idle_stretches": [{"start": _iso(st["start"]), "hours": st["hours"], "woke": bool(st.get("woke"))}
                                   for st in plan.stretches[:50]],
                "longest_idle_stretch_h": max(st["hours"] for st in plan.stretches),
                "expected_cold_starts_per_day": round(cold_starts, 2),
                "days_observed": days,
                "weeks_observed": num(s.weeks_observed),
                "hour_of_week_gr_active_pct": week_profile(week, "gr_avg", 100.0),
                "hour_of_week_idle_share": week_profile(week, "idle_share", 1.0),
                "hour_of_week_start": "Monday 00:00 UTC",
                "recurring_hours_utc": list(r.recurring_hours_utc or []),
                "cooldown_s": int(settings["cooldown_s"]),
                "idle_hour_basis": ("an hour is idle when every DCGM step in it was at most 1 % GR engine active; "
                                    "a few requests an hour may not show on the GPU: the request trigger then keeps "
                                    "the service up and less is saved"),
                "gpu_hours": round(num(s.gpu_hours), 2),
                "cost_usd_in_window": round(cost, 2),
                "window_hours": round(window_hours(frames, r.cluster), 2),
                "gr_active_p95_pct": pct(r.gr_p95),
                "production": production, "production_reason": why,
            },
            target=WorkloadTarget(**workload_ref(r)).to_dict(),
        )


@dataclass
class ZeroPlan:
    stretches: list[dict[str, Any]]   # the idle stretches that count
    zero_hours: float                 # hours at zero replicas (after cooldown and cron hours)
    saved_usd: float                  # their list cost
    wakeups: int                      # stretches that ended with the workload coming back


def zero_hours(stretches: list[dict[str, Any]], min_hours: float, cooldown_s: float, cron: set[int]) -> ZeroPlan:
    """Hours a workload would spend at zero: in each idle stretch of at least ``min_hours``, the
    hours after the cooldown that no cron trigger holds up, at the stretch's cost per hour."""
    kept, zero, saved, wakeups = [], 0.0, 0.0, 0
    cooldown_h = cooldown_s / 3600.0
    for st in stretches:
        hours = int(num(st.get("hours")))
        if hours < min_hours or hours <= 0:
            continue
        start: datetime = st["start"]
        free = sum(1 for i in range(hours) if (start + timedelta(hours=i)).hour not in cron)
        at_zero = max(0.0, free - cooldown_h)
        if at_zero <= 0:
            continue
        kept.append(st)
        zero += at_zero
        saved += num(st.get("usd")) / hours * at_zero
        wakeups += bool(st.get("woke"))
    return ZeroPlan(kept, zero, saved, wakeups)


def week_profile(slots: list[dict[str, Any]] | None, field: str, scale: float) -> list[float | None]:
    """168 values (Monday 00:00 UTC first) from the observed hour-of-week slots; None where unseen."""
    out: list[float | None] = [None] * HOURS_PER_WEEK
    for slot in slots or []:
        value = slot.get(field)
        if value is not None and 0 <= int(slot["how"]) < HOURS_PER_WEEK:
            out[int(slot["how"])] = steady_round(float(value) * scale, 2)
    return out


def request_query(r: Row, settings: dict[str, Any]) -> str:
    """Requests per second reaching the workload's Service at the ingress (0 when none)."""
    sel = selector(settings["request_metric"], [(settings["request_namespace_label"], "=", r.namespace),
                                                (settings["request_service_label"], "=", r.workload)])
    return f"sum(rate({sel}[2m])) or vector(0)"


def gpu_query(r: Row, settings: dict[str, Any]) -> str:
    """The busiest GPU of the workload's pods (0 when it has none running)."""
    pods = regex_literal(r.workload) + POD_NAME_PATTERNS.get(str(r.workload_kind), "-.+")
    sel = selector(settings["gpu_metric"], [(settings["gpu_namespace_label"], "=", r.namespace),
                                            (settings["gpu_pod_label"], "=~", pods)])
    return f"max({sel}) or vector(0)"


def _iso(ts: Any) -> str:
    return ts.isoformat() if isinstance(ts, datetime) else str(ts)

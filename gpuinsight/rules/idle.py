"""IdleRule: workloads holding GPUs that stay near zero activity most of the time."""

from __future__ import annotations

from typing import Any

import polars as pl

from gpuinsight.rules.base import Recommendation, Rule, Setting
from gpuinsight.rules.common import (
    evidence_confidence,
    mib_to_gb,
    monthly,
    num,
    pct,
    rows,
    window_hours,
    workload_ref,
)


class IdleRule(Rule):
    name = "idle"
    summary = "Reclaim GPUs held by workloads that are idle nearly all the time (notebooks, forgotten services)."
    needs = ("workload_gpu_profile", "analysis_window")
    settings = (
        Setting("max_median_activity", 0.01, "Flag when the median GR engine activity is at most this (0..1)."),
        Setting("max_active_fraction", 0.10, "...and at most this share of samples is active (GR > 5 %)."),
        Setting("min_hours", 12.0, "Minimum hours of GPU holding observed before judging."),
        Setting("full_confidence_hours", 72.0, "Hours of evidence that give full confidence."),
    )

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any]) -> list[Recommendation]:
        out: list[Recommendation] = []
        for r in rows(frames.get("workload_gpu_profile")):
            hours = window_hours(frames, r.get("cluster"))
            if r.get("samples") is None or num(r.get("hours_held")) < settings["min_hours"]:
                continue  # unmeasured or too short to judge
            active = num(r.get("active_fraction"), 1.0)
            # idle = essentially nothing most of the time; low but steady use is a sharing case
            if active > settings["max_active_fraction"] or num(r.get("gr_p50")) > settings["max_median_activity"]:
                continue
            saving = monthly(num(r.get("cost_usd")) / hours) if hours else 0.0
            gpus = round(num(r.get("avg_gpus_held")), 3)
            out.append(Recommendation(
                rule="idle",
                namespace=r["namespace"], workload=r["workload"], queue=r.get("queue"),
                title=(f"{r['namespace']}/{r['workload']} holds {gpus:g} {r.get('gpu_model') or 'GPU'} GPU(s) "
                       f"but was active only {pct(active)}% of the time: scale it to zero"),
                current={"gpus": gpus, "workload_kind": r.get("workload_kind")},
                proposed={"replicas": 0, "reason": "idle"},
                monthly_savings_usd=saving,
                confidence=evidence_confidence(num(r.get("hours_held")), settings["full_confidence_hours"]),
                evidence={
                    "active_fraction_pct": pct(active),
                    "gr_active_p50_pct": pct(r.get("gr_p50")),
                    "gr_active_p95_pct": pct(r.get("gr_p95")),
                    "gr_active_max_pct": pct(r.get("gr_max")),
                    "fb_used_max_gb": mib_to_gb(r.get("fb_max_mib")),
                    "gpu_hours": round(num(r.get("gpu_hours")), 2),
                    "hours_held": num(r.get("hours_held")),
                    "cost_usd_in_window": round(num(r.get("cost_usd")), 2),
                    "window_hours": round(hours, 2),
                },
                target=workload_ref(r),
            ))
        return out

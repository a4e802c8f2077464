"""MigRule: production workloads whose memory and compute fit a smaller MIG slice.

Right-size to the smallest profile of the GPU model whose memory holds the p99 framebuffer
use plus headroom and whose compute slices cover the p95 activity at a target load. Moving
into free instances of existing MIG nodes frees the GPU less the slice's share; the rest are
packed into valid per-GPU layouts and the GPUs left over are the saving.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import polars as pl

from gpuinsight.gpumodels import is_mig_capable
from gpuinsight.rules.base import Recommendation, Rule, Setting
from gpuinsight.rules.common import evidence_confidence, mib_to_gb, monthly, num, pct, rows, workload_ref
from gpuinsight.rules.mig_packing import MigProfile, layout_label, pack, parse_layouts


class MigRule(Rule):
    name = "mig"
    summary = "Move small production workloads from whole GPUs to right-sized MIG slices."
    needs = ("workload_gpu_profile", "mig_catalog", "mig_capacity", "analysis_window")
    settings = (
        Setting("memory_headroom", 0.20, "Extra framebuffer over the p99 use the slice must hold (fraction)."),
        Setting("compute_target", 0.80, "Plan for at most this share of a slice's compute at p95 activity."),
        Setting("production_only", True, "Only production workloads (others are left to MPS / time-slicing)."),
        Setting("min_hours", 12.0, "Minimum hours of samples before judging."),
        Setting("full_confidence_hours", 72.0, "Hours of evidence that give full confidence."),
    )

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any]) -> list[Recommendation]:
        catalog = rows(frames.get("mig_catalog"))
        if not catalog:
            return []
        layouts = parse_layouts(catalog[0]["layouts"] or [])
        profiles: dict[str, list[MigProfile]] = defaultdict(list)
        for c in catalog:
            profiles[c["gpu_model"]].append(MigProfile(c["gpu_model"], c["profile"], c["memory_gb"],
                                                       c["compute_slices"], c["memory_slices"], c["max_instances"]))
        free: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for f in rows(frames.get("mig_capacity")):
            for _ in range(int(num(f.get("free")))):
                free[(f["gpu_model"], f["profile"])].append(f)

        fits: list[tuple[dict[str, Any], MigProfile]] = []
        for r in rows(frames.get("workload_gpu_profile")):
            model = r.get("gpu_model")
            if not is_mig_capable(model) or r.get("mig_profile") or r.get("samples") is None:
                continue
            if num(r.get("gpu_request_per_pod")) != 1 or num(r.get("hours_held")) < settings["min_hours"]:
                continue
            if settings["production_only"] and not r.get("production"):
                continue
            choice = smallest_fit(r, profiles.get(model, []), settings)
            if choice is not None and choice.compute_slices < 7:
                fits.append((r, choice))

        out: list[Recommendation] = []
        by_model: dict[str, list[tuple[dict[str, Any], MigProfile]]] = defaultdict(list)
        for r, prof in fits:
            replicas = max(1, round(num(r.get("avg_gpus_held"), 1)))
            slots = free[(prof.gpu_model, prof.profile)]
            if len(slots) >= replicas:  # free instances on a MIG node already: use them
                target = [slots.pop(0) for _ in range(replicas)]
                # the slice is still paid for, so each replica frees its GPU less the slice
                freed = replicas * (1 - prof.compute_slices / 7)
                out.append(self._rec(r, prof, replicas, freed, target[0]["node"], None, settings))
            else:
                by_model[prof.gpu_model].append((r, prof))
        for items in by_model.values():
            instances = [prof for r, prof in items for _ in range(max(1, round(num(r.get("avg_gpus_held"), 1))))]
            gpus = pack(instances, layouts)
            freed = len(instances) - len(gpus)
            if freed <= 0:
                continue
            share = freed / len(instances)
            config = layout_label(gpus[0]) if len(gpus) == 1 else "all-balanced"
            for r, prof in items:
                replicas = max(1, round(num(r.get("avg_gpus_held"), 1)))
                out.append(self._rec(r, prof, replicas, share * replicas, None, config, settings))
        return out

    def _rec(self, r: dict[str, Any], prof: MigProfile, replicas: int, gpus_freed: float, node: str | None,
             config: str | None, settings: dict[str, Any]) -> Recommendation:
        price = num(r.get("usd_per_gpu_hour"))
        where = f"free {prof.profile} instances on {node}" if node else f"{config} GPUs shared with similar services"
        return Recommendation(
            rule="mig",
            namespace=r["namespace"], workload=r["workload"], queue=r.get("queue"),
            title=(f"{r['namespace']}/{r['workload']} uses {mib_to_gb(r.get('fb_p99_mib'))} GB and "
                   f"{pct(max(num(r.get('sm_p95')), num(r.get('gr_p95'))))}% of a {prof.gpu_model}: "
                   f"run it on a {prof.profile} MIG slice ({where})"),
            current={"gpus": replicas, "gpu_model": prof.gpu_model, "resource": "nvidia.com/gpu"},
            proposed={"mig_profile": prof.profile, "resource": f"nvidia.com/mig-{prof.profile}", "count": replicas,
                      "gpu_model": prof.gpu_model, "node": node, "node_mig_config": config or f"all-{prof.profile}",
                      "gpus_freed": round(gpus_freed, 3)},
            monthly_savings_usd=monthly(gpus_freed * price),
            confidence=evidence_confidence(num(r.get("hours_held")), settings["full_confidence_hours"]),
            evidence={
                "fb_used_p99_gb": mib_to_gb(r.get("fb_p99_mib")),
                "fb_used_max_gb": mib_to_gb(r.get("fb_max_mib")),
                "sm_active_p95_pct": pct(r.get("sm_p95")),
                "gr_active_p95_pct": pct(r.get("gr_p95")),
                "slice_memory_gb": prof.memory_gb,
                "slice_compute_fraction": round(prof.compute_slices / 7, 3),
                "usd_per_gpu_hour": round(price, 4),
                "production": bool(r.get("production")),
                "hours_observed": num(r.get("hours_held")),
            },
            target=workload_ref(r),
        )


def smallest_fit(r: dict[str, Any], profiles: list[MigProfile], settings: dict[str, Any]) -> MigProfile | None:
    need_mib = num(r.get("fb_p99_mib")) * (1 + settings["memory_headroom"])
    # a slice runs the same work at 7/compute_slices times the activity of the whole GPU
    compute = max(num(r.get("sm_p95")), num(r.get("gr_p95")))
    need_slices = max(1, math.ceil(compute * 7 / settings["compute_target"] - 1e-9))
    candidates = [p for p in profiles if p.usable_mib >= need_mib and p.compute_slices >= need_slices]
    if not candidates:
        return None
    return min(candidates, key=lambda p: (p.compute_slices, p.memory_slices))

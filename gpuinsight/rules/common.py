"""Small helpers the rules share (no I/O)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from gpuinsight.config import DEFAULT_CLUSTER
from gpuinsight.plan import HOURS_PER_MONTH, steady_round
from gpuinsight.rules.settings import Setting
from gpuinsight.sql.rows import Row

# how much history a workload-level verdict needs (shared by idle and consolidation)
MIN_HOURS = Setting("min_hours", 12.0, "Minimum hours of GPU holding observed before judging.")
FULL_CONFIDENCE = Setting("full_confidence_hours", 72.0, "Hours of evidence that give full confidence.")
# Workloads KEDA can scale to zero and back (a scale subresource and long-running pods): idle work
# of these kinds that is busy at some hours gets a ScaledObject (scale_to_zero), other kinds a
# schedule note (idle, reason periodic). docs/rules.md, "Where idle ends and scale_to_zero begins".
SCALE_TARGET_KINDS = ("Deployment", "StatefulSet")
# idle_stretches' hour-of-week profile (168 slots a workload): read for the findings alone, so the
# rules' rows of that model leave it out (PlanContext.rows ``without``, PlanContext.cell)
WEEK_PROFILE = ("hour_of_week",)


@dataclass(frozen=True)
class Targets:
    """What a workload sharing a GPU is sized for (consolidation's settings): the consolidation
    plan and an inference server's memory sizing (rules.serving) both read it."""

    memory_headroom: float
    compute_target: float
    ts_memory_fill: float
    max_clients: int
    kv_headroom: float = 0.5          # KV cache kept over its measured peak use (inference servers)
    min_kv_hours: float = 24.0        # hours of KV-cache readings before sizing on them
    server_context_mib: float = 1024.0  # the CUDA context a server holds beside the share it reserves


def num(value: Any, default: float = 0.0) -> float:
    """A float from a maybe-null, maybe-NaN cell."""
    if value is None:
        return default
    try:
        f = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(f) else f


def monthly(per_hour: float) -> float:
    """A per-hour rate (dollars, GPU-hours) as a run rate per 730-hour month."""
    return per_hour * HOURS_PER_MONTH


def evidence_confidence(hours: float, full_at_hours: float, *, cap: float = 0.95) -> float:
    """More observed hours, more confidence; saturates at ``full_at_hours``."""
    if full_at_hours <= 0:
        return cap
    return round(min(cap, 0.3 + 0.7 * min(1.0, hours / full_at_hours) * cap), 3)


def window_hours(frames: dict[str, pl.DataFrame], cluster: str | None = None) -> float:
    """Hours of data for ``cluster`` (the analysis window is per cluster); else the longest."""
    w = frames.get("analysis_window")
    if w is None or w.height == 0:
        return 0.0
    if cluster is not None and "cluster" in w.columns:
        for c, h in zip(w["cluster"].to_list(), w["hours"].to_list(), strict=True):
            if c == cluster:
                return num(h)
    return num(w["hours"].max())


def cluster_of(r: Row) -> str:
    """The cluster a model row (typed, :mod:`gpuinsight.sql.rows`) is about (none: the default one)."""
    return str(r.cluster or DEFAULT_CLUSTER)


def workload_ref(r: Row) -> dict[str, Any]:
    """A workload row's (kind, namespace, name, cluster), as a finding's target names it."""
    return {"kind": r.workload_kind or "Pod", "namespace": r.namespace, "name": r.workload, "cluster": cluster_of(r)}


def pct(x: float | None) -> float | None:
    return None if x is None else steady_round(100.0 * x, 1)


def mib_to_gb(x: float | None) -> float | None:
    return None if x is None else steady_round(x / 1024.0, 2)


def compute_peak_of(peak_p95: Any, gr_p95: Any, sm_p95: Any) -> float:
    """The compute a workload must be sized for: its short-window p95 (``peak_p95``: p95 over
    steps of the per-step max of GR and SM activity), falling back to the p95 of the step means."""
    peak = num(peak_p95)
    return peak if peak > 0 else max(num(gr_p95), num(sm_p95))


def compute_peak(r: Row) -> float:
    """:func:`compute_peak_of` a ``workload_gpu_profile`` row."""
    return compute_peak_of(r.peak_p95, r.gr_p95, r.sm_p95)


def compute_evidence(r: Row) -> dict[str, Any]:
    """The peak compute figure of a ``workload_gpu_profile`` row and the resolution it was
    measured at, for a finding's evidence."""
    step = r.step_s
    pushed = bool(r.max_pushed_down)
    basis = (f"p95 over {int(num(step))} s steps of the per-step max of GR/SM activity "
             + ("(the max within each step, pushed down to the source)" if pushed
                else "(one sample per step: the step's value is its max)")) if step else "p95 of GR/SM activity"
    return {"compute_peak_p95_pct": pct(compute_peak(r)), "compute_resolution_s": step,
            "max_per_step_pushed_down": pushed, "compute_basis": basis}

"""Small helpers the rules share (no I/O)."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from gpuinsight.rules.base import HOURS_PER_MONTH


def rows(frame: pl.DataFrame | None) -> list[dict[str, Any]]:
    return [] if frame is None or frame.height == 0 else frame.to_dicts()


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
        mine = w.filter(pl.col("cluster") == cluster)
        if mine.height:
            return num(mine["hours"][0])
    return num(w["hours"].max())


def workload_ref(r: dict[str, Any]) -> dict[str, Any]:
    return {"kind": r.get("workload_kind") or "Pod", "namespace": r.get("namespace"), "name": r.get("workload")}


def pct(x: float | None) -> float | None:
    return None if x is None else round(100.0 * x, 1)


def mib_to_gb(x: float | None) -> float | None:
    return None if x is None else round(x / 1024.0, 2)

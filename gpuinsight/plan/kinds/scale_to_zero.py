"""``scale_to_zero``: a service idle for long stretches (nights, weekends) gets a KEDA ScaledObject."""

from __future__ import annotations

from dataclasses import dataclass

from gpuinsight.plan.kind import Evidence, FindingKind, figure, figure_value
from gpuinsight.plan.schema import Schema, WorkloadTarget, integer, list_of, optional, spec, text


@dataclass
class ScaleToZeroProposed(Schema):
    replicas_when_idle: int = spec(integer(0, 0))
    replicas_when_active: int = spec(integer(1))
    cooldown_s: int = spec(integer(0))
    polling_interval_s: int = spec(integer(1))
    prometheus_url: str = spec(text())
    request_query: str = spec(text())
    gpu_query: str = spec(text())
    gpu_activation: str = spec(text())
    active_hours_utc: list[int] | None = spec(optional(list_of(integer(0, 23), non_empty=True)), None)
    scaler: str = spec(text(choices=("keda",)), "keda")


@dataclass
class ScaleToZeroEvidence(Evidence):
    """The idle stretches and the hour-of-week profile (168 values from Monday 00:00 UTC, null
    where not observed)."""

    hours_held: float | None = figure()
    idle_hours_in_long_stretches: float | None = figure()
    longest_idle_stretch_h: float | None = figure()
    hours_at_zero: float | None = figure()
    expected_cold_starts_per_day: float | None = figure()
    hour_of_week_gr_active_pct: list[float | None] | None = spec(optional(list_of(figure_value)), None)
    hour_of_week_idle_share: list[float | None] | None = spec(optional(list_of(figure_value)), None)


SCALE_TO_ZERO = FindingKind("scale_to_zero", "scale to zero", "#e57373", "gpus_returned", ScaleToZeroProposed,
                            WorkloadTarget, ScaleToZeroEvidence)

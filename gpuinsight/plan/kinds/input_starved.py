"""``input_starved``: a pod whose GPUs wait for their data (CPU, host-to-device copies or storage)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuinsight.plan.kind import Evidence, FindingKind, figure, words
from gpuinsight.plan.schema import Schema, WorkloadTarget, list_of, number, optional, spec, text

CAUSES = ("cpu", "transfer", "storage", "undiagnosed")


@dataclass
class InputStarvedProposed(Schema):
    cause: str = spec(text(choices=CAUSES))
    fixes: list[str] = spec(list_of(text(), non_empty=True))
    target_duty_cycle: float = spec(number, 0.95)
    cpu_request: float | None = spec(optional(number), None)   # cores per pod (cause "cpu")


@dataclass
class InputStarvedEvidence(Evidence):
    """The bursts and the waits between them."""

    duty_cycle_pct: float | None = figure()
    burst_level_pct: float | None = figure()
    burst_period_min: float | None = figure()
    cause: str | None = words()
    resolution: str | None = words()
    waiting_usd_per_month: float | None = figure()


INPUT_STARVED = FindingKind("input_starved", "input-starved GPUs", "#827717", "waiting_time", InputStarvedProposed,
                            WorkloadTarget, InputStarvedEvidence)

"""TimesliceRule: low-utilization dev/test workloads sharing one GPU by time-slicing.

No memory isolation, so only non-production work; the group's summed memory must fit.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from gpuinsight.rules.base import Recommendation, Rule
from gpuinsight.rules.common import rows
from gpuinsight.rules.sharing import SHARING_SETTINGS, candidates, group, recommend_groups


class TimesliceRule(Rule):
    name = "timeslice"
    summary = "Consolidate low-utilization dev/test workloads onto shared GPUs by time-slicing."
    needs = ("workload_gpu_profile",)
    settings = SHARING_SETTINGS

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any]) -> list[Recommendation]:
        cands = candidates(rows(frames.get("workload_gpu_profile")), settings, production=False)
        return recommend_groups("timeslice", group(cands, settings, mps=False), settings, "dev/test")

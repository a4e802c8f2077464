"""MpsRule: small production services sharing one GPU through MPS (memory limits per client).

Production workloads on GPUs without MIG (L4, A10G, L40S) or where MIG is not wanted get MPS:
each client is held to an equal share of memory and compute. Production never shares with dev.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from gpuinsight.gpumodels import is_mig_capable
from gpuinsight.rules.base import Recommendation, Rule
from gpuinsight.rules.common import rows
from gpuinsight.rules.sharing import SHARING_SETTINGS, candidates, group, recommend_groups


class MpsRule(Rule):
    name = "mps"
    summary = "Consolidate small production services onto shared GPUs with MPS (isolated memory)."
    needs = ("workload_gpu_profile",)
    settings = SHARING_SETTINGS

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any]) -> list[Recommendation]:
        # MIG-capable GPUs are the MIG rule's for production; MPS is for the rest.
        cands = [r for r in candidates(rows(frames.get("workload_gpu_profile")), settings, production=True)
                 if not is_mig_capable(r.get("gpu_model"))]
        return recommend_groups("mps", group(cands, settings, mps=True), settings, "production: MPS limits memory")

"""Every rule, in the order they claim workloads (a workload gets one workload-level change)."""

from __future__ import annotations

from gpuinsight.rules.base import Rule
from gpuinsight.rules.binpack import BinpackRule
from gpuinsight.rules.idle import IdleRule
from gpuinsight.rules.mig import MigRule
from gpuinsight.rules.mps import MpsRule
from gpuinsight.rules.queue import QueueRule
from gpuinsight.rules.spot import SpotRule
from gpuinsight.rules.timeslice import TimesliceRule

ALL_RULES: tuple[type[Rule], ...] = (IdleRule, MigRule, MpsRule, TimesliceRule, SpotRule, BinpackRule, QueueRule)
# Idle work is reclaimed rather than resized or shared; a right-sized or shared workload is
# not also moved to spot in the same plan.
CLAIMS_WORKLOADS = frozenset({"idle", "mig", "mps", "timeslice", "spot"})


def rule_by_name(name: str) -> type[Rule]:
    for rule in ALL_RULES:
        if rule.name == name:
            return rule
    raise KeyError(name)

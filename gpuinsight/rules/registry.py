"""Every rule, in the order the savings ledger lets them claim (docs/rules.md, "Savings ledger").

This is the one place a rule is registered (its place in that order is a decision); its class
names the finding kinds it emits (:mod:`gpuinsight.plan.kinds`). Every kind has exactly one rule
here: checked on import.
"""

from __future__ import annotations

from gpuinsight.plan import KINDS
from gpuinsight.rules.base import Rule
from gpuinsight.rules.binpack import BinpackRule
from gpuinsight.rules.consolidation import ConsolidationRule
from gpuinsight.rules.cpu_pods import CpuPodsOnGpuNodesRule
from gpuinsight.rules.idle import IdleRule
from gpuinsight.rules.input_starved import InputStarvedRule
from gpuinsight.rules.production import SETTINGS as PRODUCTION_SETTINGS
from gpuinsight.rules.queue import QueueRule
from gpuinsight.rules.ray import RayRule
from gpuinsight.rules.scale_to_zero import ScaleToZeroRule
from gpuinsight.rules.spot import SpotRule
from gpuinsight.rules.topology import TopologyRule

# input-starved pods first (claimed, so nothing scales them away or slices them), then KubeRay
# clusters (judged as Ray clusters, not as generic workloads), idle reclaim, consolidation,
# scale-to-zero of what is idle part of the time, binpack on what is left, topology of the gangs
# binpack left in place ($0), GPU nodes CPU-only pods keep up (what binpack did not release), spot,
# then queues
ALL_RULES: tuple[type[Rule], ...] = (InputStarvedRule, RayRule, IdleRule, ConsolidationRule, ScaleToZeroRule,
                                     BinpackRule, TopologyRule, CpuPodsOnGpuNodesRule, SpotRule, QueueRule)


class ProductionSettings(Rule):
    """Not a rule: the production classifier's settings (``--set production.tokens=...``)."""

    name = "production"
    summary = ("Which workloads are production (whole-token match on priority class, labels, annotations, "
               "namespace); read by every rule.")
    needs = ()
    settings = PRODUCTION_SETTINGS


# every group of settings `recommend --set GROUP.NAME=VALUE` accepts, as `gpuinsight rules` lists them
SETTING_GROUPS: tuple[type[Rule], ...] = (*ALL_RULES, ProductionSettings)

# finding kind -> the rule that emits it
RULE_OF_KIND: dict[str, type[Rule]] = {k.name: rule for rule in ALL_RULES for k in rule.kinds}


def _check_kinds() -> None:
    emitted = [k.name for rule in ALL_RULES for k in rule.kinds]
    twice = sorted({n for n in emitted if emitted.count(n) > 1})
    missing = [k.name for k in KINDS if k.name not in RULE_OF_KIND]
    unknown = sorted(set(RULE_OF_KIND) - {k.name for k in KINDS})
    if twice or missing or unknown:
        raise RuntimeError(f"rules and finding kinds disagree: emitted by two rules {twice}, emitted by none "
                           f"{missing}, not in gpuinsight.plan.kinds.KINDS {unknown}")


_check_kinds()

"""Every rule, in the order the savings ledger lets them claim (docs/rules.md, "Savings ledger").

This is the one place a rule is registered: its class names the finding kinds it emits, and
each kind names its action builder and the schemas its plan entries are validated against.
"""

from __future__ import annotations

from typing import Any

from gpuinsight.errors import BadInput
from gpuinsight.rules.base import RULE_NAMES, FindingKind, Rule
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

KINDS: dict[str, FindingKind] = {k.name: k for rule in ALL_RULES for k in rule.kinds}
assert set(KINDS) <= set(RULE_NAMES), "a finding kind outside the recommendation contract"


def validate_finding(rec: dict[str, Any], where: str) -> None:
    """Check a recommendation read from a plan file: its kind's ``proposed`` and ``target``."""
    try:
        kind = KINDS[rec.get("rule")]  # type: ignore[index]
    except (KeyError, TypeError):
        raise BadInput(f"{where}.rule: unknown rule {rec.get('rule')!r} (one of {', '.join(KINDS)})") from None
    kind.validate(rec, where)

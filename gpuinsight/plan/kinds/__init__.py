"""Every finding kind, in one list (design.md's ``rule`` values, then the documented further ones).

This is the one place a kind is registered. The recommendation contract (which ``rule`` values
exist), plan-file validation, the report's colours, labels and saving bases, and the checks that
every kind has a rule and an action builder all read :data:`KINDS`. A new kind is a module here
(its schemas and its :class:`~gpuinsight.plan.kind.FindingKind`), its rule in
``gpuinsight.rules`` and its builder in ``gpuinsight.actions.builders`` (docs/rules.md,
"Adding a finding kind").
"""

from __future__ import annotations

from typing import Any

from gpuinsight.errors import BadInput
from gpuinsight.plan.kind import SAVING_BASES, Evidence, FindingKind
from gpuinsight.plan.kinds.binpack import BINPACK
from gpuinsight.plan.kinds.cpu_pods import CPU_PODS
from gpuinsight.plan.kinds.idle import IDLE
from gpuinsight.plan.kinds.input_starved import INPUT_STARVED
from gpuinsight.plan.kinds.mig import MIG
from gpuinsight.plan.kinds.queue import QUEUE
from gpuinsight.plan.kinds.ray import RAY
from gpuinsight.plan.kinds.scale_to_zero import SCALE_TO_ZERO
from gpuinsight.plan.kinds.sharing import MPS, TIMESLICE
from gpuinsight.plan.kinds.spot import SPOT
from gpuinsight.plan.kinds.topology import TOPOLOGY

KINDS: tuple[FindingKind[Any], ...] = (IDLE, MIG, MPS, TIMESLICE, SPOT, BINPACK, QUEUE, RAY, INPUT_STARVED,
                                       SCALE_TO_ZERO, TOPOLOGY, CPU_PODS)
BY_NAME: dict[str, FindingKind[Any]] = {k.name: k for k in KINDS}
RULE_NAMES: tuple[str, ...] = tuple(BY_NAME)
assert len(BY_NAME) == len(KINDS), "two finding kinds with one name"


def kind_of(name: Any, where: str = "rule") -> FindingKind[Any]:
    """The kind named ``name``; anything else is bad input naming ``where``."""
    try:
        return BY_NAME[name]
    except (KeyError, TypeError):
        raise BadInput(f"{where}: unknown rule {name!r} (one of {', '.join(BY_NAME)})") from None


def validate_finding(rec: dict[str, Any], where: str) -> None:
    """Check a recommendation read from a plan file: its kind's ``proposed``, ``target`` and
    ``evidence``."""
    kind_of(rec.get("rule"), f"{where}.rule").validate(rec, where)


__all__ = ["BINPACK", "BY_NAME", "CPU_PODS", "IDLE", "INPUT_STARVED", "KINDS", "MIG", "MPS", "QUEUE", "RAY",
           "RULE_NAMES", "SAVING_BASES", "SCALE_TO_ZERO", "SPOT", "TIMESLICE", "TOPOLOGY", "Evidence",
           "FindingKind", "kind_of", "validate_finding"]

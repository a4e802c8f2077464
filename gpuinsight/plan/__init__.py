"""The plan contract: what the rules produce and everything downstream reads.

* :mod:`~gpuinsight.plan.kinds`: every finding kind, with its typed ``proposed`` / ``target`` /
  ``evidence``, its saving basis, colour and label (the one list the other layers derive from);
* :mod:`~gpuinsight.plan.model`: :class:`Recommendation` and :class:`Plan`;
* :mod:`~gpuinsight.plan.ids`: finding ids (a hash of the rule and its target, cluster included);
* :mod:`~gpuinsight.plan.io`: plan files (write, read back, validate, digest);
* :mod:`~gpuinsight.plan.store`: plans in the warehouse (stored plans, reviewed plans);
* :mod:`~gpuinsight.plan.render`: a plan as a table, CSV, JSON or YAML.
"""

from gpuinsight.plan.ids import finding_id, stable_id
from gpuinsight.plan.kinds import KINDS, RULE_NAMES, FindingKind, kind_of
from gpuinsight.plan.model import (
    HOURS_PER_MONTH,
    SETTLE_DIGITS,
    Plan,
    Recommendation,
    steady_round,
    steady_round_expr,
    target_of,
)

__all__ = ["HOURS_PER_MONTH", "KINDS", "SETTLE_DIGITS", "RULE_NAMES", "FindingKind", "Plan", "Recommendation", "finding_id",
           "kind_of", "stable_id", "steady_round", "steady_round_expr",
           "target_of"]

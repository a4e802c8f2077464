"""What a finding kind is: one entry of :data:`gpuinsight.plan.kinds.KINDS`.

A kind (the ``rule`` field of a recommendation) carries everything the plan's readers need to
know about it, so that no reader keeps a list of its own: the schemas of its ``proposed``,
``target`` and ``evidence`` (a plan file is checked against them; the report reads its evidence
through them), where its saving comes from, and its colour and label in reports. The rule that
finds it (``gpuinsight.rules``) and the builder of its actions (``gpuinsight.actions.builders``)
name it from their own layers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gpuinsight.plan.schema import Schema, Target, any_text, bad, list_of, mapping, optional, show, spec, text

# evidence.saving_basis: where a finding's dollars come from (the rules' savings ledger), each
# with what a report calls it
SAVING_BASES: dict[str, str] = {
    "nodes_released": "nodes released",
    "gpus_returned": "GPUs returned to the pool",
    "price_difference": "cheaper capacity (price difference)",
    "entitlement": "queue entitlement",
    "waiting_time": "GPU time no longer spent waiting for input",
    "slowdown_risk": "slowdown risk (evidence only, not priced)",
}


@dataclass
class Evidence(Schema):
    """What every finding's evidence holds once the plan is made (the engine adds both): where
    its saving comes from and its claims in the savings ledger. A kind's own evidence schema
    extends this with the measured figures its readers use; a rule may add more (kept as they
    are, unchecked)."""

    saving_basis: str | None = spec(optional(text(choices=tuple(SAVING_BASES))), None)
    claims: list[Any] | None = spec(optional(list_of(mapping)), None)


def figure_value(value: Any, where: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                              or not math.isfinite(value)):
        raise bad(where, f"{show(value)} is not a finite number")


def figure(default: Any = None) -> Any:
    """An evidence figure: a finite number, absent or null when not measured."""
    return spec(figure_value, default)


def words(default: Any = None) -> Any:
    """An evidence text (how something was measured, a cause), absent or null when not known."""
    return spec(optional(any_text), default)


E = TypeVar("E", bound=Evidence)


@dataclass(frozen=True)
class FindingKind(Generic[E]):
    """One kind of finding and what every layer reads of it."""

    name: str                      # the recommendation's ``rule`` (design.md's list, snake_case)
    label: str                     # what a person reads (reports, ``gpuinsight rules``)
    colour: str                    # its colour in every chart and table of the report
    saving_basis: str              # one of SAVING_BASES
    proposed: type[Schema]
    target: type[Target]
    evidence: type[E]

    def __post_init__(self) -> None:
        if self.saving_basis not in SAVING_BASES:
            raise ValueError(f"finding kind {self.name}: saving basis {self.saving_basis!r} is not one of "
                             f"{', '.join(SAVING_BASES)}")

    def validate(self, rec: dict[str, Any], where: str) -> None:
        """Check a recommendation (as read from a plan file) against this kind's schemas."""
        self.proposed.check(rec.get("proposed") or {}, f"{where}.proposed")
        self.target.check(rec.get("target") or {}, f"{where}.target")
        self.evidence.check(rec.get("evidence") or {}, f"{where}.evidence")

    def of(self, recs: Iterable[Any]) -> list[Any]:
        """The recommendations of this kind, in their order."""
        return [r for r in recs if r.rule == self.name]

    def evidence_of(self, rec: Any) -> E:
        """A recommendation's evidence as this kind declares it (attribute access; a figure the
        finding does not carry is its default)."""
        return self.evidence.read(rec.evidence)  # type: ignore[no-any-return]

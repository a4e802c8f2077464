"""The rule interface.

A rule is a pure function of DataFrames: it names the SQL models it needs, declares its
settings (:mod:`gpuinsight.rules.settings`: typed, bounded, with help, shown by the CLI), the
finding kinds it emits (:mod:`gpuinsight.plan.kinds`), and turns frames into recommendations
(:class:`gpuinsight.plan.Recommendation`), claiming what it saves in the plan's savings ledger.
Rules never talk to Prometheus, Kubernetes or AWS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import polars as pl

from gpuinsight.rules.settings import Resolved, Setting, resolve

if TYPE_CHECKING:
    from gpuinsight.plan import FindingKind, Recommendation
    from gpuinsight.rules.context import PlanContext


class Rule:
    """Subclass per rule: set ``name``, ``needs`` (SQL model names), ``settings`` and ``kinds``."""

    name: ClassVar[str]
    summary: ClassVar[str]
    needs: ClassVar[tuple[str, ...]]
    settings: ClassVar[tuple[Setting, ...]] = ()
    kinds: ClassVar[tuple[FindingKind[Any], ...]] = ()

    @classmethod
    def resolve_settings(cls, overrides: Mapping[str, Any] | None = None) -> Resolved:
        """Every setting, given or default, checked against its type and bounds (ValueError naming
        ``rule.setting``); read-only."""
        return resolve(cls.name, cls.settings, overrides)

    def evaluate(self, frames: Mapping[str, pl.DataFrame], settings: Resolved,
                 ctx: PlanContext) -> list[Recommendation]:
        raise NotImplementedError

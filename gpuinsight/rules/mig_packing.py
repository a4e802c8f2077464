"""MIG profiles, the valid per-GPU layouts of their instances, and whether a demand fits an
instance: the one MIG fit the rules and the report's MIG fit chart both use (pure functions)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MigProfile:
    gpu_model: str
    profile: str
    memory_gb: float
    compute_slices: int
    memory_slices: int
    max_instances: int

    @classmethod
    def from_row(cls, row: Any) -> MigProfile:
        """A typed row of the ``mig_catalog`` model (:mod:`gpuinsight.sql.rows`)."""
        return cls(row.gpu_model, row.profile, row.memory_gb, row.compute_slices, row.memory_slices, row.max_instances)

    @property
    def slice_class(self) -> str:
        """The class name the layout table uses: '3g', or '1g.2x' for a double-memory 1g."""
        if self.compute_slices == 1 and self.memory_slices == 2:
            return "1g.2x"
        return f"{self.compute_slices}g"

    @property
    def usable_mib(self) -> float:
        # DCGM reports e.g. 9984 MiB for a "10gb" instance: plan on ~998 MiB per nominal GB.
        return self.memory_gb * 998.0


def slices_for(compute: float, compute_target: float = 1.0) -> int:
    """Compute slices (of 7) a demand needs so that its peak (a share of the whole GPU) is at
    most ``compute_target`` of the instance."""
    return max(1, math.ceil(compute * 7 / compute_target - 1e-9))


def fits(p: MigProfile, mem_mib: float, compute_slices: int) -> bool:
    """Does an instance of ``p`` give ``mem_mib`` of framebuffer and ``compute_slices`` slices,
    short of the whole GPU?"""
    return p.usable_mib >= mem_mib and p.compute_slices >= compute_slices and p.compute_slices < 7


def slice_profiles(profiles: Iterable[MigProfile]) -> list[MigProfile]:
    """The instances a demand may get: less than the whole GPU, no media-extension variants;
    smallest first."""
    return sorted((p for p in profiles if p.compute_slices < 7 and "+me" not in p.profile),
                  key=lambda p: (p.compute_slices, p.memory_slices, p.profile))


def smallest_fit(profiles: Iterable[MigProfile], mem_mib: float, compute_slices: int) -> MigProfile | None:
    """The smallest instance a demand fits (None: only the whole GPU)."""
    return next((p for p in slice_profiles(profiles) if fits(p, mem_mib, compute_slices)), None)


def parse_layouts(layouts: list[str]) -> list[Counter[str]]:
    return [Counter(layout.split("+")) for layout in layouts]


def fits_a_layout(classes: Counter[str], layouts: list[Counter[str]]) -> bool:
    """A multiset of slice classes is valid when some maximal layout contains it."""
    return any(all(layout[c] >= n for c, n in classes.items()) for layout in layouts)

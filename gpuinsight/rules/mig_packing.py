"""MIG profiles and the valid per-GPU layouts of their instances (pure functions)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class MigProfile:
    gpu_model: str
    profile: str
    memory_gb: float
    compute_slices: int
    memory_slices: int
    max_instances: int

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


def parse_layouts(layouts: list[str]) -> list[Counter[str]]:
    return [Counter(layout.split("+")) for layout in layouts]


def fits_a_layout(classes: Counter[str], layouts: list[Counter[str]]) -> bool:
    """A multiset of slice classes is valid when some maximal layout contains it."""
    return any(all(layout[c] >= n for c, n in classes.items()) for layout in layouts)

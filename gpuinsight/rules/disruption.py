"""PodDisruptionBudget arithmetic shared by the binpack planner and its action builder."""

from __future__ import annotations

import math
from typing import Any


def allowed_disruptions(pdb: dict[str, Any], expected: int, healthy: int) -> int:
    """How many covered pods may be evicted now (minAvailable or maxUnavailable, int or %)."""
    def count(value: Any) -> int:  # percentages round up, as the disruption controller does
        value = str(value)
        return math.ceil(float(value[:-1]) * expected / 100) if value.endswith("%") else int(value)

    if pdb.get("min_available") is not None:
        return max(0, healthy - count(pdb["min_available"]))
    if pdb.get("max_unavailable") is not None:
        return max(0, count(pdb["max_unavailable"]) - (expected - healthy))
    return expected

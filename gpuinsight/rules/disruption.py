"""PodDisruptionBudget arithmetic shared by the binpack planner and its action builder."""

from __future__ import annotations

import json
import math
from typing import Any


def as_map(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) against a pod's labels; an empty
    selector matches nothing here (policy/v1 would match every pod: be conservative elsewhere)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        ok = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}.get(op, False)
        if not ok:
            return False
    return bool(selector.get("matchLabels") or selector.get("matchExpressions"))


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

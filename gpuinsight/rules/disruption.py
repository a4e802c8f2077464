"""PodDisruptionBudget arithmetic shared by the binpack planner and its action builder."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


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


class LabelIndex:
    """Items (pods) of each namespace (any key naming one: (cluster, namespace) when items of
    several clusters are indexed together) indexed by their (label, value) pairs, so a selector with
    matchLabels is checked only against the items carrying its rarest pair instead of every item
    of the namespace (at fleet scale: hundreds of PDBs x thousands of pods). ``covered`` gives
    exactly the items ``selector_matches`` accepts."""

    def __init__(self, items: Iterable[T], namespace: Callable[[T], Hashable],
                 labels: Callable[[T], dict[str, Any]]) -> None:
        self.all: dict[Hashable, list[tuple[T, dict[str, Any]]]] = {}
        self.by_pair: dict[tuple[Hashable, str, Any], list[tuple[T, dict[str, Any]]]] = {}
        for item in items:
            ns, item_labels = namespace(item), labels(item)
            entry = (item, item_labels)
            self.all.setdefault(ns, []).append(entry)
            for key, value in item_labels.items():
                with contextlib.suppress(TypeError):  # an unhashable value is never a selector's
                    self.by_pair.setdefault((ns, key, value), []).append(entry)

    def covered(self, namespace: Hashable, selector: dict[str, Any]) -> list[T]:
        candidates = self.all.get(namespace, [])
        for key, value in (selector.get("matchLabels") or {}).items():
            try:
                found = self.by_pair.get((namespace, key, value), [])
            except TypeError:
                found = candidates
            if len(found) < len(candidates):
                candidates = found
        return [item for item, item_labels in candidates if selector_matches(selector, item_labels)]


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

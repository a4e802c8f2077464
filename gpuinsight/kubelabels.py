"""Kubernetes label helpers, the one place each is written: label maps as the warehouse stores
them, label selectors (``matchLabels`` and ``matchExpressions``, as policy/v1 and the scheduler
read them), and node eligibility (does a pod tolerate a node's taint).

Rules, planners and action builders all read these; none keeps its own copy (a PDB selected
by ``matchExpressions`` is seen by every reader or by none).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


# -- label maps -------------------------------------------------------------------------------
def json_object(value: Any) -> dict[str, Any]:
    """An object column (a JSON string or a dict: a selector, a spec) as a dict; {} if neither."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def label_map(value: Any) -> dict[str, str]:
    """A labels / annotations column (a JSON string or a dict) as a str -> str dict; {} if neither."""
    return {str(k): str(v) for k, v in json_object(value).items()}


# -- label selectors --------------------------------------------------------------------------
def _expression_holds(expr: Any, labels: Mapping[str, Any]) -> bool:
    if not isinstance(expr, dict):
        return False
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False  # an operator this reader does not know selects nothing


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, Any], *,
                     empty_matches: bool = False) -> bool:
    """A label selector (``matchLabels`` and ``matchExpressions``, all of them must hold) against
    an object's labels. An empty selector matches everything in policy/v1 and in a HyperNode's
    ``labelMatch``; a reader deciding what a PodDisruptionBudget protects takes the safe side
    (``empty_matches=False``: it matches nothing)."""
    selector = selector or {}
    match = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not match and not exprs:
        return empty_matches
    if not isinstance(match, Mapping) or not isinstance(exprs, list):
        return False
    return (all(k in labels and labels[k] == v for k, v in match.items())
            and all(_expression_holds(e, labels) for e in exprs))


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
        match = selector.get("matchLabels") or {}
        for key, value in (match.items() if isinstance(match, Mapping) else ()):
            try:
                found = self.by_pair.get((namespace, key, value), [])
            except TypeError:
                found = candidates
            if len(found) < len(candidates):
                candidates = found
        return [item for item, item_labels in candidates if selector_matches(selector, item_labels)]


# -- node eligibility -------------------------------------------------------------------------
def tolerates(tolerations: Iterable[dict[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether ``tolerations`` tolerate ``taint`` (the scheduler's rule: the effect, when the
    toleration names one, and the key must match; ``Exists`` takes any value, ``Equal`` only
    the taint's; an ``Exists`` without a key tolerates every taint)."""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("key") and tol["key"] != taint.get("key"):
            continue
        if (tol.get("operator") or "Equal") == "Exists" or (
                tol.get("key") and tol.get("value", "") == taint.get("value", "")):
            return True
    return False


__all__ = ["LabelIndex", "json_object", "label_map", "selector_matches", "tolerates"]

"""Which workloads are production: a documented setting, decided by whole tokens, with a reason.

The rules treat production work more carefully (MIG or MPS rather than plain time-slicing, no
spot for services). Whether a pod is production is read, in this order, from:

1. an explicit annotation or label (``gpuinsight.io/production: "true"`` / ``"false"``),
2. its priority class, 3. labels such as ``env`` / ``environment`` / ``tier``, 4. its namespace.

Names are split into tokens on ``-``, ``_``, ``.``, ``/`` and ``:`` and compared whole, so
``products`` is not ``prod`` and ``system-cluster-critical`` is not production; a name holding
a negating token (``non-production``, ``pre-prod``) is not production either. Every verdict
carries the reason, which the findings show in their evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from gpuinsight.kubelabels import label_map
from gpuinsight.rules.settings import Setting

_SPLIT = re.compile(r"[-_./:\s]+")
TRUE_WORDS = frozenset({"true", "yes", "1", "on"})
FALSE_WORDS = frozenset({"false", "no", "0", "off"})

SETTINGS = (
    Setting("tokens", "prod,production,prd",
            "Whole tokens that mark production in a priority class, label value or namespace."),
    Setting("negating_tokens", "non,not,no,pre,preprod,nonprod",
            "A name holding one of these tokens is not production (non-production, pre-prod)."),
    Setting("priority_classes", "",
            "Priority class names that are production whatever their tokens (comma-separated)."),
    Setting("label_keys", "env,environment,tier,stage",
            "Pod labels whose value is read for the production tokens."),
    Setting("override_keys", "gpuinsight.io/production",
            "Annotations or labels whose true/false value decides outright."),
    Setting("namespaces", "",
            "Namespaces that are production whatever their tokens (comma-separated)."),
    Setting("use_namespace_tokens", True, "Read the production tokens in namespace names too."),
)


def _csv(value: Any) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        return tuple(str(v).strip().lower() for v in value if str(v).strip())
    return tuple(v.strip().lower() for v in str(value or "").split(",") if v.strip())


def tokens(name: str) -> list[str]:
    return [t for t in _SPLIT.split(name.lower()) if t]


@dataclass(frozen=True)
class ProductionClassifier:
    tokens: tuple[str, ...] = ("prod", "production", "prd")
    negating_tokens: tuple[str, ...] = ("non", "not", "no", "pre", "preprod", "nonprod")
    priority_classes: tuple[str, ...] = ()
    label_keys: tuple[str, ...] = ("env", "environment", "tier", "stage")
    override_keys: tuple[str, ...] = ("gpuinsight.io/production",)
    namespaces: tuple[str, ...] = ()
    use_namespace_tokens: bool = True

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> ProductionClassifier:
        return cls(tokens=_csv(settings["tokens"]), negating_tokens=_csv(settings["negating_tokens"]),
                   priority_classes=_csv(settings["priority_classes"]), label_keys=_csv(settings["label_keys"]),
                   override_keys=_csv(settings["override_keys"]), namespaces=_csv(settings["namespaces"]),
                   use_namespace_tokens=bool(settings["use_namespace_tokens"]))

    def _marks(self, value: str) -> str | None:
        """The production token in ``value`` (None if none, or if a negating token is there)."""
        toks = tokens(value)
        if any(t in self.negating_tokens for t in toks):
            return None
        return next((t for t in toks if t in self.tokens), None)

    def classify(self, namespace: str | None, priority_class: str | None = None, labels: Any = None,
                 annotations: Any = None) -> tuple[bool, str]:
        """(is production, why) for one pod or workload."""
        labels, annotations = label_map(labels), label_map(annotations)
        # kube-state-metrics spells label keys with underscores; compare in that spelling too
        flat = {k.lower(): v for k, v in labels.items()} | {re.sub(r"[^a-z0-9]", "_", k.lower()): v
                                                            for k, v in labels.items()}
        flat_ann = {k.lower(): v for k, v in annotations.items()} | {re.sub(r"[^a-z0-9]", "_", k.lower()): v
                                                                     for k, v in annotations.items()}
        for key in self.override_keys:
            for where, found in (("annotation", flat_ann), ("label", flat)):
                value = found.get(key) or found.get(re.sub(r"[^a-z0-9]", "_", key))
                if value is not None and value.strip().lower() in TRUE_WORDS | FALSE_WORDS:
                    yes = value.strip().lower() in TRUE_WORDS
                    return yes, f"{where} {key}={value}"
        pc = (priority_class or "").strip()
        if pc:
            if pc.lower() in self.priority_classes:
                return True, f"priorityClassName {pc} is listed as production"
            token = self._marks(pc)
            if token:
                return True, f"priorityClassName {pc} (token '{token}')"
        for key in self.label_keys:
            value = flat.get(key)
            if value:
                token = self._marks(value)
                if token:
                    return True, f"label {key}={value} (token '{token}')"
        ns = (namespace or "").strip()
        if ns.lower() in self.namespaces:
            return True, f"namespace {ns} is listed as production"
        if ns and self.use_namespace_tokens:
            token = self._marks(ns)
            if token:
                return True, f"namespace {ns} (token '{token}')"
        return False, "no production marker (priority class, labels, annotations, namespace)"

    def classify_row(self, row: dict[str, Any]) -> tuple[bool, str]:
        return self.classify(row.get("namespace"), row.get("priority_class"), row.get("labels"),
                             row.get("annotations"))


DEFAULT = ProductionClassifier()


def with_production(frame: pl.DataFrame, settings: dict[str, Any] | None = None) -> pl.DataFrame:
    """``frame`` (rows with namespace, priority_class, labels, annotations) with ``production``
    and ``production_reason`` columns, decided by the classifier with these settings."""
    if "production" in frame.columns or frame.is_empty():
        return frame
    given = settings or {}
    clf = ProductionClassifier.from_settings({s.name: s.coerce(given.get(s.name, s.default)) for s in SETTINGS})
    cols = [c for c in ("namespace", "priority_class", "labels", "annotations") if c in frame.columns]
    verdicts = [clf.classify_row(r) for r in frame.select(cols).iter_rows(named=True)]
    return frame.with_columns(pl.Series("production", [v[0] for v in verdicts], dtype=pl.Boolean),
                              pl.Series("production_reason", [v[1] for v in verdicts], dtype=pl.Utf8))

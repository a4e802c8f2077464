"""Typed ``proposed``, ``target`` and ``evidence`` objects: one small schema per finding kind
(:mod:`gpuinsight.plan.kinds`).

A rule builds its ``proposed`` / ``target`` from these classes (so a typo is a TypeError, not
a silently different plan), and a plan read back from a file is checked against the same
classes (``Schema.check``): a hand-edited field that is missing or malformed is refused naming
the field. In the JSON contract they stay plain objects (``to_dict``); unknown extra keys are
tolerated so that newer plans can carry more.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

from gpuinsight.errors import BadInput

QUANTITY = re.compile(r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE]\+?[0-9]+))?\Z")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
KIND = re.compile(r"^[A-Z][A-Za-z0-9]{0,62}\Z")
MIG_PROFILE = re.compile(r"^[1-7]g\.[0-9]+gb(\+me)?\Z")
MAX_TEXT = 4000  # free text (titles, descriptions); object names are at most 253 characters

Check = Callable[[Any, str], None]


def bad(where: str, message: str) -> BadInput:
    return BadInput(f"{where}: {message}")


def show(value: Any) -> str:
    """A value in an error message: one line, at most 60 characters."""
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def text(pattern: re.Pattern[str] | None = None, *, choices: tuple[str, ...] = (), max_len: int | None = None) -> Check:
    limit = max_len or (253 if pattern is DNS_NAME else 63 if pattern in (DNS_LABEL, LABEL_VALUE) else MAX_TEXT)

    def check(value: Any, where: str) -> None:
        if not isinstance(value, str) or not value:
            raise bad(where, f"{show(value)} is not a non-empty string")
        if len(value) > limit:
            raise bad(where, f"{len(value)} characters (at most {limit})")
        if choices and value not in choices:
            raise bad(where, f"{show(value)} is not one of {', '.join(choices)}")
        if pattern is not None and not pattern.match(value):
            raise bad(where, f"{show(value)} is not a valid name here")
    return check


def integer(lo: int = 0, hi: int | None = None) -> Check:
    def check(value: Any, where: str) -> None:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad(where, f"{value!r} is not an integer")
        if value < lo or (hi is not None and value > hi):
            raise bad(where, f"{value} is out of range ({lo}..{hi if hi is not None else ''})")
    return check


def number(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad(where, f"{show(value)} is not a finite number")
    if value < 0:
        raise bad(where, f"{value} is negative")


def quantity(value: Any, where: str) -> None:
    if isinstance(value, bool):
        raise bad(where, f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        number(value, where)
    elif not isinstance(value, str) or not QUANTITY.match(value):
        raise bad(where, f"{show(value)} is not a quantity (a non-negative number such as 4 or \"500m\")")


def resource_list(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise bad(where, f"{value!r} is not a resource list ({{name: quantity}})")
    for name, qty in value.items():
        if not LABEL_KEY.match(str(name)):
            raise bad(f"{where}.{name}", "not a resource name")
        quantity(qty, f"{where}.{name}")


def optional(inner: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if value is not None:
            inner(value, where)
    return check


def list_of(inner: Check, *, non_empty: bool = False) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, list) or (non_empty and not value):
            raise bad(where, "a non-empty list" if non_empty else "a list")
        for i, item in enumerate(value):
            inner(item, f"{where}[{i}]")
    return check


def any_text(value: Any, where: str) -> None:
    """Any string (evidence: measured figures and how they were measured, shown as they are)."""
    if not isinstance(value, str):
        raise bad(where, f"{show(value)} is not a string")


def boolean(value: Any, where: str) -> None:
    if not isinstance(value, bool):
        raise bad(where, f"{value!r} is not true or false")


def mapping(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise bad(where, "not an object")


def schema(cls: type[Schema]) -> Check:
    def check(value: Any, where: str) -> None:
        cls.check(value, where)
    return check


def spec(check: Check, default: Any = MISSING, *, kw_only: bool = False) -> Any:
    """A schema field: its checker, and a default when it may be left out of a plan file."""
    from dataclasses import field

    if default is MISSING:
        return field(metadata={"check": check}, kw_only=kw_only)
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"check": check}, kw_only=kw_only)
    return field(default=default, metadata={"check": check}, kw_only=kw_only)


@dataclass
class Schema:
    """Base of the per-kind ``proposed`` / ``target`` classes (dataclasses with checked fields)."""

    extra_checks: ClassVar[tuple[Callable[[dict[str, Any], str], None], ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain fields in declaration order (nested schemas are given as dicts already)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def read(cls, data: dict[str, Any] | None) -> Any:
        """An instance from a plan's plain object: the fields it has (unknown keys ignored, a
        missing field its default); for reading what a schema declares, with attribute access."""
        data = data or {}
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    @classmethod
    def check(cls, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise bad(where, "not an object")
        for f in fields(cls):
            checker = f.metadata.get("check")
            if f.name not in data:
                if f.default is MISSING and f.default_factory is MISSING:  # type: ignore[misc]
                    raise bad(f"{where}.{f.name}", "missing")
                continue
            if checker is not None:
                checker(data[f.name], f"{where}.{f.name}")
        for extra in cls.extra_checks:
            extra(data, where)


def cluster_name(value: Any, where: str) -> None:
    """A cluster name (``--cluster``): free text on one line, at most 253 characters, with no
    control, format or line-separator character (it is shown, slugged for folder names and
    quoted in scripts, never able to start a new line)."""
    import unicodedata

    text()(value, where)
    if len(value) > 253:
        raise bad(where, f"{len(value)} characters (at most 253)")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in value):
        raise bad(where, f"{show(value)} holds a control or line-separator character")


@dataclass
class Target(Schema):
    """Base of the per-kind ``target`` classes: what a finding changes is in one cluster.

    ``cluster`` is keyword-only and last; left out, the recommendation fills in its own (a
    target naming another cluster than its finding is refused)."""

    cluster: str | None = spec(optional(cluster_name), None, kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        cluster = out.pop("cluster")
        return out if cluster is None else {**out, "cluster": cluster}


@dataclass
class WorkloadTarget(Target):
    """A workload a finding changes (Deployment, StatefulSet, CronJob, VolcanoJob, Pod ...)."""

    kind: str = spec(text(KIND))
    name: str = spec(text(DNS_NAME))
    namespace: str | None = spec(optional(text(DNS_LABEL)), None)


workload = schema(WorkloadTarget)

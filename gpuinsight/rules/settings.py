"""Rule settings: typed by their default, bounded, documented by their help, frozen once resolved.

A setting's type is its default's: a bool takes true/false (yes/no, 1/0, on/off); an int whole
numbers; a float any finite number; a text setting text, from ``choices`` when it has them. A
number is refused outside ``bounds`` (inclusive), which default to non-negative: every figure a
rule takes (hours, shares, counts, prices, seconds) is. Anything else is an error naming the
setting, never a silent fallback (``"maybe"`` for a bool is refused, not read as false). ``gpuinsight
rules`` prints each setting with its bounds or choices.

Resolved settings are read-only mappings: a rule cannot change what the next one reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

TRUE = ("true", "yes", "1", "on")
FALSE = ("false", "no", "0", "off")
NON_NEGATIVE = (0.0, math.inf)
FRACTION = (0.0, 1.0)

Resolved = Mapping[str, Any]


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    help: str
    # the inclusive range of a numeric setting (None: non-negative); a value outside it, or not a
    # number of the default's type (an int setting takes whole numbers only), is refused
    bounds: tuple[float, float] | None = None
    # the only values a text setting takes (empty: any text)
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.coerce(self.default)  # a default outside its own bounds is a bug here, raised at import

    @property
    def range(self) -> tuple[float, float]:
        return self.bounds if self.bounds is not None else NON_NEGATIVE

    def describe(self) -> str:
        """What the setting takes, for ``gpuinsight rules``: ``[0..1]``, ``{soft, hard}``, ``true|false``."""
        if isinstance(self.default, bool):
            return "true|false"
        if isinstance(self.default, int | float):
            low, high = self.range
            return f"[{low:g}..{'' if math.isinf(high) else f'{high:g}'}]"
        return "{" + ", ".join(self.choices) + "}" if self.choices else "text"

    def coerce(self, value: Any) -> Any:
        """``value`` as this setting's type, or ValueError saying why not."""
        kind = type(self.default)
        if kind is bool:
            return _boolean(value)
        if kind in (int, float):
            number = _number(value, whole=kind is int)
            low, high = self.range
            if not low <= number <= high:
                raise ValueError(f"{value!r} is outside {low:g}..{'' if math.isinf(high) else f'{high:g}'}")
            return kind(number)
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not text")
        if self.choices and value not in self.choices:
            raise ValueError(f"{value!r} is not one of {', '.join(self.choices)}")
        return value


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in TRUE + FALSE:
        return value.strip().lower() in TRUE
    raise ValueError(f"{value!r} is not true or false")


def _number(value: Any, *, whole: bool) -> float:
    given = value
    if isinstance(value, bool):
        raise ValueError(f"{given!r} is not a number")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"{given!r} is not a number") from None
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{given!r} is not a finite number")
    if whole and value != int(value):
        raise ValueError(f"{given!r} is not a whole number")
    return value


def resolve(group: str, declared: tuple[Setting, ...], overrides: Mapping[str, Any] | None = None) -> Resolved:
    """Every declared setting of ``group``, its override (coerced) or its default; read-only.
    An unknown name or a bad value is a ValueError naming ``group.setting``."""
    overrides = overrides or {}
    known = {s.name: s for s in declared}
    unknown = set(overrides) - set(known)
    if unknown:
        raise ValueError(f"rule {group}: unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
    out = {}
    for s in declared:
        try:
            out[s.name] = s.coerce(overrides[s.name]) if s.name in overrides else s.default
        except ValueError as exc:
            raise ValueError(f"{group}.{s.name}: {exc}") from None
    return MappingProxyType(out)


def read_settings(path: Path | None, sets: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
    """Rule settings from a YAML/JSON file (``{rule: {setting: value}}``) and ``rule.setting=value``
    items (``--set``, which win); not yet checked against the rules (:func:`resolve` does)."""
    import yaml

    from gpuinsight.errors import BadInput

    settings: dict[str, dict[str, Any]] = {}
    if path:
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f":{mark.line + 1}" if mark else ""
            raise BadInput(f"{path}{where}: not valid YAML/JSON") from exc
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise BadInput(f"{path}: expected {{rule: {{setting: value}}}}")
        settings = {k: dict(v) for k, v in data.items()}
    for item in sets:
        key, sep, value = item.partition("=")
        rule, dot, name = key.partition(".")
        if not sep or not dot:
            raise BadInput(f"--set {item!r}: expected rule.setting=value")
        settings.setdefault(rule, {})[name] = value
    return settings

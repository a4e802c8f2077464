"""Shared helpers for the Kubernetes object -> warehouse row mappers.

Objects are plain dicts in the API's JSON form (camelCase), as ``kubectl get -o json`` writes
them and as the API server returns them; the dump path and the live path feed the same
mappers. A mapper raises :class:`MapError` naming the field; the caller adds file and item.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson


class MapError(ValueError):
    """An object lacks a required field or has one of the wrong shape."""

    def __init__(self, field_path: str, what: str) -> None:
        super().__init__(f"{field_path}: {what}")
        self.field_path = field_path
        self.what = what


@dataclass
class MapContext:
    """What every mapper needs besides the object: the cluster, the source tag, and the
    observation time (``None`` while reading a dump: it is then the latest timestamp found
    in the dump, which :meth:`observe` tracks)."""

    cluster: str
    source: str
    observed_at: datetime | None = None
    latest: datetime | None = field(default=None)

    def observe(self, ts: datetime | None) -> None:
        if ts is not None and (self.latest is None or ts > self.latest):
            self.latest = ts


# -- safe accessors -------------------------------------------------------------------------

def _walk(obj: Any, path: tuple[str, ...]) -> Any:
    cur = obj
    for i, key in enumerate(path):
        if cur is None:
            return None
        if not isinstance(cur, dict):
            raise MapError(".".join(path[:i]) or "(object)", f"expected an object, got {_kind(cur)}")
        cur = cur.get(key)
    return cur


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def get_map(obj: Any, *path: str) -> dict[str, Any]:
    value = _walk(obj, path)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MapError(".".join(path), f"expected an object, got {_kind(value)}")
    return value


def get_list(obj: Any, *path: str) -> list[Any]:
    value = _walk(obj, path)
    if value is None:
        return []
    if not isinstance(value, list):
        raise MapError(".".join(path), f"expected a list, got {_kind(value)}")
    return value


def get_str(obj: Any, *path: str) -> str | None:
    value = _walk(obj, path)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise MapError(".".join(path), f"expected a string, got {_kind(value)}")
    return str(value)


def require_str(obj: Any, *path: str) -> str:
    value = get_str(obj, *path)
    if not value:
        raise MapError(".".join(path), "missing")
    return value


def get_int(obj: Any, *path: str) -> int | None:
    value = _walk(obj, path)
    if value is None:
        return None
    if isinstance(value, bool):
        raise MapError(".".join(path), "expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value)
    raise MapError(".".join(path), f"expected an integer, got {value!r}")


def get_bool(obj: Any, *path: str) -> bool | None:
    value = _walk(obj, path)
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise MapError(".".join(path), f"expected a boolean, got {value!r}")


def str_map(obj: Any, *path: str) -> dict[str, str]:
    """A string map such as labels or annotations (values coerced to str)."""
    return {str(k): "" if v is None else str(v) for k, v in get_map(obj, *path).items()}


# -- times ----------------------------------------------------------------------------------

_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_time(value: Any, field_path: str) -> datetime | None:
    """RFC 3339 (``Time`` and ``MicroTime``) -> naive UTC datetime; empty -> None."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise MapError(field_path, f"expected an RFC 3339 time, got {_kind(value)}")
    text = _FRACTION.sub(r"\1", value.strip())
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        raise MapError(field_path, f"not an RFC 3339 time: {value!r}") from None
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC).replace(tzinfo=None)
    return ts


def get_time(obj: Any, *path: str) -> datetime | None:
    return parse_time(_walk(obj, path), ".".join(path))


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


# -- quantities -----------------------------------------------------------------------------

_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<dec>[numkMGTPE])|[eE](?P<exp>[+-]?\d+))?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal(10**3),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15),
            "E": Decimal(10**18)}


def parse_quantity(value: Any, field_path: str) -> float:
    """A Kubernetes resource.Quantity ("8", "500m", "16Gi", "1e3", 2.5) as a float."""
    if isinstance(value, bool):
        raise MapError(field_path, "expected a quantity, got a boolean")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise MapError(field_path, f"expected a quantity, got {_kind(value)}")
    m = _QUANTITY.match(value.strip())
    if not m:
        raise MapError(field_path, f"not a Kubernetes quantity: {value!r}")
    try:
        num = Decimal(m.group("num"))
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        raise MapError(field_path, f"not a Kubernetes quantity: {value!r}") from None
    if m.group("bin"):
        num *= _BINARY[m.group("bin")]
    elif m.group("dec"):
        num *= _DECIMAL[m.group("dec")]
    elif m.group("exp"):
        num = num.scaleb(int(m.group("exp")))
    return float(num)


def resource_list(obj: Any, *path: str) -> dict[str, float]:
    """A ResourceList (``{"nvidia.com/gpu": "8", "memory": "16Gi"}``) with numeric values."""
    where = ".".join(path)
    return {str(k): parse_quantity(v, f"{where}.{k}") for k, v in get_map(obj, *path).items()}


GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"


def is_gpu_resource(name: str) -> bool:
    """NVIDIA resources (whole GPUs, MIG slices, shared replicas) and other vendors' GPUs."""
    lowered = name.lower()
    return lowered.startswith("nvidia.com/") or "gpu" in lowered


# -- output ---------------------------------------------------------------------------------

def to_json(value: Any) -> str | None:
    """Compact, key-sorted JSON text for a JSON column; None stays NULL."""
    if value is None:
        return None
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


def owner_ref(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The controlling owner reference, else the first one."""
    refs = [r for r in get_list(obj, "metadata", "ownerReferences") if isinstance(r, dict)]
    for ref in refs:
        if ref.get("controller") is True:
            return ref
    return refs[0] if refs else None

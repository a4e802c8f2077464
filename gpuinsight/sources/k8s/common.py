"""Shared helpers for the Kubernetes object -> warehouse row mappers.

Objects are plain dicts in the API's JSON form (camelCase), as ``kubectl get -o json`` writes
them and as the API server returns them; the dump path and the live path feed the same
mappers. A mapper raises :class:`MapError` naming the field; the caller adds file and item.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

from gpuinsight.sources.plausible import INT32_MAX, INT32_MIN, MAX_DEVICES_PER_OBJECT, time_problem


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
    # instance type -> (GPU model, GPU count) from the loaded price catalogs, for nodes without GPU labels
    instance_facts: dict[str, tuple[str, int]] | None = None

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


def get_int(obj: Any, *path: str, lo: int = INT32_MIN, hi: int = INT32_MAX, where: str = "") -> int | None:
    """An integer field within ``lo..hi`` (default: the int32 the Kubernetes schemas declare);
    ``where`` prefixes the field path in messages when ``obj`` is a part of the object."""
    value = _walk(obj, path)
    if value is None:
        return None
    where = ".".join((where, *path) if where else path)
    if isinstance(value, bool):
        raise MapError(where, "expected an integer, got a boolean")
    if isinstance(value, int):
        out = value
    elif isinstance(value, float) and value.is_integer() or isinstance(value, str) and re.fullmatch(r"[+-]?\d{1,30}", value.strip()):
        out = int(value)
    else:
        raise MapError(where, f"expected an integer, got {str(value)[:40]!r}")
    if not lo <= out <= hi:
        raise MapError(where, f"{str(out)[:30]} is out of range ({lo}..{hi})")
    return out


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
    """RFC 3339 (``Time`` and ``MicroTime``) -> naive UTC datetime; empty -> None.

    YAML dumps of older kubectl versions leave times unquoted, which YAML reads as timestamps:
    those are taken as they are. A time before 2000 or in the future is refused (it would
    stretch every window)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, date):
        ts = datetime(value.year, value.month, value.day)
    elif not isinstance(value, str):
        raise MapError(field_path, f"expected an RFC 3339 time, got {_kind(value)}")
    else:
        text = _FRACTION.sub(r"\1", value.strip())
        try:
            ts = datetime.fromisoformat(text)
        except ValueError:
            raise MapError(field_path, f"not an RFC 3339 time: {value[:60]!r}") from None
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC).replace(tzinfo=None)
    problem = time_problem(ts)
    if problem:
        raise MapError(field_path, f"implausible time: {problem}")
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
    """A Kubernetes resource.Quantity ("8", "500m", "16Gi", "1e3", 2.5) as a float; negative,
    NaN and infinite quantities are refused (the API server never stores them)."""
    out = _quantity(value, field_path)
    if not math.isfinite(out) or out < 0:
        raise MapError(field_path, f"{value!r} is not a valid quantity (must be finite and >= 0)")
    return out


def gpu_quantity(value: Any, field_path: str, limit: int) -> float:
    """A GPU resource (whole devices: the device plugin advertises integers, the API server
    refuses fractions of extended resources) up to ``limit``."""
    out = parse_quantity(value, field_path)
    if out != int(out) or out > limit:
        raise MapError(field_path, f"{str(value)[:30]!r} is not a plausible number of GPU devices "
                                   f"(whole, 0..{limit})")
    return out


def _quantity(value: Any, field_path: str) -> float:
    if isinstance(value, bool):
        raise MapError(field_path, "expected a quantity, got a boolean")
    if isinstance(value, int):
        if abs(value) > 1 << 63:
            raise MapError(field_path, f"{str(value)[:30]} is out of range for a quantity")
        return float(value)
    if isinstance(value, float):
        return value
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


def resource_list(obj: Any, *path: str, gpu_limit: int | None = None) -> dict[str, float]:
    """A ResourceList (``{"nvidia.com/gpu": "8", "memory": "16Gi"}``) with numeric values; GPU
    resources must be whole devices up to ``gpu_limit`` (default: what one node can hold)."""
    where = ".".join(path)
    limit = gpu_limit or MAX_DEVICES_PER_OBJECT
    return {str(k): gpu_quantity(v, f"{where}.{k}", limit) if is_device_resource(str(k))
            else parse_quantity(v, f"{where}.{k}") for k, v in get_map(obj, *path).items()}


GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
# GPU resources that count no devices: HAMi's and Volcano vGPU's memory (MiB), memory and core
# percentages per vGPU (sources/k8s/shares.py reads them)
SHARE_RESOURCES = ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores",
                   "volcano.sh/vgpu-memory", "volcano.sh/vgpu-memory-percentage", "volcano.sh/vgpu-cores")


def is_gpu_resource(name: str) -> bool:
    """NVIDIA resources (whole GPUs, MIG slices, shared replicas) and other vendors' GPUs."""
    lowered = name.lower()
    return lowered.startswith("nvidia.com/") or "gpu" in lowered


def is_device_resource(name: str) -> bool:
    """GPU resources counted in whole devices (NVIDIA's device plugin, ``<vendor>/gpu``,
    ``volcano.sh/vgpu-number``), unlike GPU-memory or GPU-core shares such as
    ``nvidia.com/gpumem`` or ``volcano.sh/vgpu-memory`` (MiB)."""
    lowered = name.lower()
    if lowered in SHARE_RESOURCES:
        return False
    return lowered.startswith("nvidia.com/") or lowered.endswith("/gpu") or lowered == "volcano.sh/vgpu-number"


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

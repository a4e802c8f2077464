"""The "series frame" every metrics path produces, and small helpers over it.

A series frame is long: one row per sample, columns ``metric`` (Utf8), ``ts`` (Datetime(us),
naive UTC), ``value`` (Float64) and one Utf8 column per label, null where a series lacks it.
An empty label value counts as absent, as it does in Prometheus (``pod=""`` is no label).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import polars as pl

BASE_COLUMNS = ("metric", "ts", "value")
TS = pl.Datetime("us")


def empty_series() -> pl.DataFrame:
    return pl.DataFrame(schema={"metric": pl.Utf8, "ts": TS, "value": pl.Float64})


def label_columns(series: pl.DataFrame) -> list[str]:
    return [c for c in series.columns if c not in BASE_COLUMNS]


def lab(series: pl.DataFrame, name: str) -> pl.Expr:
    """A label column as an expression; '' and missing columns read as null."""
    if name not in series.columns:
        return pl.lit(None, dtype=pl.Utf8)
    col = pl.col(name).cast(pl.Utf8)
    return pl.when(col == "").then(None).otherwise(col)


def first_label(series: pl.DataFrame, *names: str) -> pl.Expr:
    return pl.coalesce([lab(series, n) for n in names] + [pl.lit(None, dtype=pl.Utf8)])


def concat_series(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Union of series frames whose label sets differ (missing labels become null)."""
    frames = [f for f in frames if f.height]
    if not frames:
        return empty_series()
    if len(frames) == 1:
        return frames[0]
    return pl.concat(frames, how="diagonal_relaxed")


def to_naive_utc(t: datetime) -> datetime:
    """Warehouse timestamps are naive UTC; accept aware datetimes from callers."""
    if t.tzinfo is not None:
        t = t.astimezone(UTC).replace(tzinfo=None)
    return t


def epoch_s(t: datetime) -> float:
    return to_naive_utc(t).replace(tzinfo=UTC).timestamp()


def from_epoch_s(x: float) -> datetime:
    return datetime.fromtimestamp(x, UTC).replace(tzinfo=None)


def describe_series(row: dict[str, Any]) -> str:
    """``metric{a="1",b="2"}`` for error messages (only the labels the series has)."""
    labels = ",".join(f'{k}="{v}"' for k, v in row.items() if k not in BASE_COLUMNS and v not in (None, ""))
    return f"{row.get('metric')}{{{labels}}}"


def unsanitize_resource(resource: str) -> str:
    """kube-state-metrics' sanitised resource name back to the Kubernetes one.

    ``[^a-zA-Z0-9_]`` became ``_``; for NVIDIA's resources the original separators are known:
    ``nvidia_com_gpu`` -> ``nvidia.com/gpu``, ``nvidia_com_mig_1g_10gb`` -> ``nvidia.com/mig-1g.10gb``,
    ``nvidia_com_gpu_shared`` -> ``nvidia.com/gpu.shared``.
    """
    if resource.startswith("nvidia_com_mig_"):
        return "nvidia.com/mig-" + mig_profile_of(resource)
    if resource.startswith("nvidia_com_"):
        return "nvidia.com/" + resource[len("nvidia_com_"):].replace("_", ".")
    return resource


def mig_profile_of(resource: str) -> str:
    """``nvidia_com_mig_1g_10gb`` -> ``1g.10gb`` (MIG profile names only use '.' inside)."""
    return resource[len("nvidia_com_mig_"):].replace("_", ".")

"""The "series frame" every metrics path produces, the columnar range answer, and helpers.

A series frame is long: one row per sample, columns ``metric`` (Utf8), ``ts`` (Datetime(us),
naive UTC), ``value`` (Float64) and one Utf8 column per label, null where a series lacks it.
An empty label value counts as absent, as it does in Prometheus (``pod=""`` is no label).

A :class:`Matrix` is one decoded range answer kept columnar: the label sets once per series
and the points as two flat float columns. Expanding it into a series frame repeats every
label on every point, so the bulk (DCGM) path never does; the small kube-state-metrics
answers are expanded with :meth:`Matrix.series_frame`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl

from gpuinsight.sources.k8s.common import SHARE_RESOURCES

BASE_COLUMNS = ("metric", "ts", "value")
TS = pl.Datetime("us")


def resolve_polars_lazy_imports() -> None:
    """Make polars swap its lazy numpy/pyarrow proxies for the real modules, once, now.

    Call before polars runs in worker threads: polars (2.x) resolves a proxy on first use, and
    two threads doing so at once can read the proxy half-updated (numpy's own ``_globals``
    submodule shadows the proxy's ``_globals``) and fail with "'module' object does not
    support item assignment".
    """
    from polars import _dependencies as deps

    for name in ("numpy", "pyarrow"):
        proxy = getattr(deps, name, None)
        if getattr(proxy, "__lazy__", False) and getattr(deps, f"_{name.upper()}_AVAILABLE", False):
            proxy._import()


def empty_series() -> pl.DataFrame:
    return pl.DataFrame(schema={"metric": pl.Utf8, "ts": TS, "value": pl.Float64})


_RESERVED = ("__name__", "metric", "ts", "value")


@dataclass
class Matrix:
    """A range-query answer: ``labels[i]`` holds for points ``offsets[i]:offsets[i+1]``."""

    labels: list[dict[str, str]]
    lens: np.ndarray                 # int64, points per series
    ts: pl.Series                    # Float64, evaluation time (unix seconds) of each point
    values: pl.Series                # Float64
    warnings: list[str] = field(default_factory=list)
    # ``times_us``' answers by shift: made once, in the fetch worker that decoded the answer
    _times: dict[float, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @property
    def points(self) -> int:
        return len(self.ts)

    def without_labels(self) -> Matrix:
        """The same points and warnings, the label sets dropped (kept: how many series)."""
        return Matrix([{}] * len(self.labels), self.lens, self.ts, self.values, self.warnings)

    def select_points(self, mask: np.ndarray) -> Matrix:
        """The points where ``mask`` holds (every series kept, perhaps with no point)."""
        lens = np.bincount(self.series_index()[mask], minlength=len(self.labels)).astype(np.int64)
        keep = pl.Series(mask)
        return Matrix(self.labels, lens, self.ts.filter(keep), self.values.filter(keep), self.warnings)

    def ends(self) -> Matrix:
        """Each series' first and last point only (both the same point for a series of one)."""
        if not self.points:
            return self
        last = np.cumsum(self.lens) - 1
        mask = np.zeros(self.points, dtype=bool)
        mask[last[self.lens > 0]] = True
        mask[(last - self.lens + 1)[self.lens > 0]] = True
        return self.select_points(mask)

    def times_us(self, shift_s: float) -> np.ndarray:
        """Each point's row time (:func:`eval_to_ts` of ``ts``) as int64 microseconds, kept: the
        fetch worker makes it while other answers are on the wire, so the chunk's rows, made
        once its last answer is in, only gather it."""
        got = self._times.get(shift_s)
        if got is None:
            got = self._times[shift_s] = eval_to_ts(self.ts, shift_s).cast(pl.Int64).to_numpy()
        return got

    def series_index(self) -> np.ndarray:
        """The series (index into ``labels``) of every point."""
        return np.repeat(np.arange(len(self.labels), dtype=np.uint32), self.lens)

    def label_frame(self, keep: frozenset[str] | None = None) -> pl.DataFrame:
        """One row per series, one Utf8 column per label (``keep``: only those labels).

        Without any label at all the frame has no columns (and so no rows): check ``width``.
        """
        names = [n for n in dict.fromkeys(k for m in self.labels for k in m)
                 if n not in _RESERVED and (keep is None or n in keep)]
        return pl.DataFrame({n: [m.get(n) for m in self.labels] for n in names}, schema=dict.fromkeys(names, pl.Utf8))

    def series_frame(self, metric: str, shift_s: float = 0, keep: frozenset[str] | None = None, *,
                     categorical: bool = False) -> pl.DataFrame:
        """The long series frame: ``ts`` = evaluation time - ``shift_s``. ``categorical``: the labels
        as pl.Categorical (a label repeated on every point then costs 4 bytes, not a string)."""
        if not self.points:
            return empty_series()
        frame = pl.DataFrame([
            pl.Series("metric", [metric], dtype=pl.Utf8).new_from_index(0, self.points),
            eval_to_ts(self.ts, shift_s).alias("ts"),
            self.values.alias("value"),
        ])
        labels = self.label_frame(keep)
        if labels.width:
            if categorical:
                labels = labels.with_columns(pl.all().cast(pl.Categorical))
            idx = pl.Series(self.series_index())
            frame = pl.concat([frame, labels.select(pl.all().gather(idx))], how="horizontal")
        return frame


def eval_to_ts(eval_s: pl.Series, shift_s: float) -> pl.Series:
    """Evaluation times (float unix seconds) -> row timestamps, rounded to the microsecond."""
    return ((eval_s - shift_s) * 1_000_000).round(0).cast(pl.Int64).cast(TS)


def label_columns(series: pl.DataFrame) -> list[str]:
    return [c for c in series.columns if c not in BASE_COLUMNS]


def without_absent_labels(series: pl.DataFrame) -> pl.DataFrame:
    """``series`` without the label columns none of its rows has: a frame that held other
    series too (a file's) carries their labels as nulls, which tell no series apart but cost
    every sort, group and window over the labels."""
    if series.height == 0:  # keeps its columns: what reads it finds the ones it names
        return series
    absent = [c for c in label_columns(series) if series[c].null_count() == series.height]
    return series.drop(absent) if absent else series


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


@lru_cache(maxsize=1024)  # a handful of resource names, asked for every pod
def sanitized_resource(resource: str) -> str:
    """kube-state-metrics' spelling of a resource name (``nvidia.com/gpu`` -> ``nvidia_com_gpu``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", resource)


@lru_cache(maxsize=1024)
def unsanitize_resource(resource: str) -> str:
    """kube-state-metrics' sanitised resource name back to the Kubernetes one.

    ``[^a-zA-Z0-9_]`` became ``_``; for NVIDIA's resources the original separators are known:
    ``nvidia_com_gpu`` -> ``nvidia.com/gpu``, ``nvidia_com_mig_1g_10gb`` -> ``nvidia.com/mig-1g.10gb``,
    ``nvidia_com_gpu_shared`` -> ``nvidia.com/gpu.shared``.
    """
    for known in SHARE_RESOURCES:  # HAMi's names hold '-' where the rule below would put '.'
        if resource == sanitized_resource(known):
            return known
    if resource.startswith("nvidia_com_mig_"):
        return "nvidia.com/mig-" + mig_profile_of(resource)
    if resource.startswith("nvidia_com_"):
        return "nvidia.com/" + resource[len("nvidia_com_"):].replace("_", ".")
    return resource


def mig_profile_of(resource: str) -> str:
    """``nvidia_com_mig_1g_10gb`` -> ``1g.10gb`` (MIG profile names only use '.' inside)."""
    return resource[len("nvidia_com_mig_"):].replace("_", ".")

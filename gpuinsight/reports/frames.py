"""Shaping SQL-model frames for charts: time bins, top-N groups, MIG fit, findings.

Everything here is a pure function of polars frames. The point is to keep the data behind
every chart small (a few thousand rows at most) whatever the fleet size, so the report stays
a small file and no chart hits Altair's inline row limit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import polars as pl

from gpuinsight.plan import target_of
from gpuinsight.plan.kind import SAVING_BASES
from gpuinsight.reports.theme import OTHER

# Altair's default inline limit; every chart's data stays below it.
MAX_ROWS = 5000
_BIN_HOURS = (1, 2, 3, 4, 6, 8, 12, 24, 48, 72, 168)
ISO = "%Y-%m-%dT%H:%M:%S"  # no zone: values are UTC and are drawn as wall-clock times


def bin_hours(start: datetime | None, end: datetime | None, max_bins: int) -> int:
    """The smallest "nice" bin width (hours) that cuts [start, end] into at most max_bins."""
    if start is None or end is None:
        return 1
    span_h = max(1.0, (end - start).total_seconds() / 3600 + 1)
    for h in _BIN_HOURS:
        if math.ceil(span_h / h) <= max_bins:
            return h
    return max(_BIN_HOURS[-1], math.ceil(span_h / max_bins))


def bin_label(hours: int) -> str:
    if hours % 24 == 0:
        days = hours // 24
        return "day" if days == 1 else f"{days} days"
    return "hour" if hours == 1 else f"{hours} hours"


def with_time_bins(df: pl.DataFrame, col: str, hours: int) -> pl.DataFrame:
    """Add ``t0``, the start of the ``hours``-wide bin, as an ISO string (the chart derives
    the bin end with :func:`bin_end_expr`, which keeps the inline data smaller)."""
    return df.with_columns(pl.col(col).dt.truncate(f"{hours}h").dt.strftime(ISO).alias("t0"))


def bin_end_expr(hours: int) -> str:
    """Vega expression for the end of the bin that starts at ``datum.t0``."""
    return f"timeOffset('hours', toDate(datum.t0), {int(hours)})"


def time_span(df: pl.DataFrame, col: str) -> tuple[datetime | None, datetime | None]:
    if df.is_empty():
        return None, None
    s = df.get_column(col).drop_nulls()
    if s.is_empty():
        return None, None
    return s.min(), s.max()  # type: ignore[return-value]


def label_groups(df: pl.DataFrame, col: str, missing: str) -> pl.DataFrame:
    """Nulls and empty strings in a grouping column become a readable label."""
    return df.with_columns(
        pl.when(pl.col(col).is_null() | (pl.col(col).cast(pl.Utf8) == ""))
        .then(pl.lit(missing))
        .otherwise(pl.col(col).cast(pl.Utf8))
        .alias(col)
    )


def top_groups(df: pl.DataFrame, col: str, weight: str, n: int, keep: Iterable[str] = ()) -> list[str]:
    """The ``n`` heaviest groups (by the sum of ``weight``), heaviest first.

    Groups in ``keep`` (labels such as "(unallocated)") are never folded into "(other)" and
    come last.
    """
    keep = list(keep)
    ranked = (
        df.filter(~pl.col(col).is_in(keep))
        .group_by(col)
        .agg(pl.col(weight).sum().alias("_w"))
        .sort(["_w", col], descending=[True, False])
        .get_column(col)
        .to_list()
    )
    shown = ranked[:n]
    if len(ranked) > n:
        shown.append(OTHER)
    present = set(df.get_column(col).unique().to_list())
    return shown + [k for k in keep if k in present]


def clusters_in(df: pl.DataFrame) -> list[str]:
    """The clusters a frame's rows are about (none without a ``cluster`` column)."""
    if "cluster" not in df.columns:
        return []
    return sorted(str(c) for c in df.get_column("cluster").drop_nulls().unique().to_list())


def cluster_scoped(df: pl.DataFrame, col: str, sep: str = " / ") -> pl.DataFrame:
    """With rows of several clusters, ``col`` names the cluster too ("east / ml-team"): the same
    namespace, node or pool name in two clusters is two things. One cluster: unchanged."""
    if len(clusters_in(df)) <= 1:
        return df
    return df.with_columns(
        pl.concat_str([pl.col("cluster").cast(pl.Utf8), pl.lit(sep), pl.col(col).cast(pl.Utf8)]).alias(col))


def fold_other(df: pl.DataFrame, col: str, shown: list[str]) -> pl.DataFrame:
    return df.with_columns(
        pl.when(pl.col(col).is_in(shown)).then(pl.col(col)).otherwise(pl.lit(OTHER)).alias(col)
    )


# -- recommendations -----------------------------------------------------------------------

NO_BASIS = "basis not stated"


def saving_basis(r: Any) -> str | None:
    """The finding's ``evidence.saving_basis`` when it is one of :data:`SAVING_BASES`."""
    basis = (getattr(r, "evidence", None) or {}).get("saving_basis")
    return basis if basis in SAVING_BASES else None


def recommendations_frame(recs: Iterable[Any]) -> pl.DataFrame:
    """Recommendation objects as a frame, biggest saving first."""
    rows = [
        {
            "id": getattr(r, "id", ""),
            "rule": r.rule,
            "cluster": getattr(r, "cluster", None),
            "title": r.title,
            "target": target_of(r),
            "monthly_savings_usd": float(r.monthly_savings_usd or 0.0),
            "confidence": float(r.confidence),
            "basis": saving_basis(r),
        }
        for r in recs
    ]
    schema = {"id": pl.Utf8, "rule": pl.Utf8, "cluster": pl.Utf8, "title": pl.Utf8, "target": pl.Utf8,
              "monthly_savings_usd": pl.Float64, "confidence": pl.Float64, "basis": pl.Utf8}
    df = pl.DataFrame(rows, schema=schema)
    return df.sort(["monthly_savings_usd", "id"], descending=[True, False])


def savings_by_basis(recs: pl.DataFrame) -> list[tuple[str, float, int]]:
    """(basis label, monthly saving, findings) per saving basis, biggest first; empty when no
    finding states a known basis (plans from before the savings ledger)."""
    if recs.is_empty() or recs.get_column("basis").drop_nulls().is_empty():
        return []
    agg = (recs.with_columns(pl.col("basis").fill_null("").replace_strict(SAVING_BASES, default=NO_BASIS))
           .group_by("basis").agg(pl.col("monthly_savings_usd").sum().alias("usd"), pl.len().alias("n"))
           .sort(["usd", "basis"], descending=[True, False]))
    return [(b, float(u), int(n)) for b, u, n in agg.iter_rows()]

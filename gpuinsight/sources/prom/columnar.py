"""DCGM range answers -> ``gpu_samples`` rows, without a long series frame.

:func:`gpuinsight.sources.series.dcgm_samples` is the one definition of how DCGM labels name
a GPU, its pod and its node, and of how the fields of one step become a row. It reads long
series frames (a row per point, every label repeated on it), which for a Prometheus answer
would be most of the collector's time and memory. This module applies the same definition
to columnar answers (:class:`~gpuinsight.sources.prom.frames.Matrix`) in two steps:

1. **identity, once per series**: ``dcgm_samples`` on one point per series, each series at
   an instant of its own so that no two merge, gives every series its row identity (GPU, MIG
   instance, pod, container, node, index, model, profile) or refuses it as it would;
2. **the points**, on integer codes only: grouped by (identity key, ts) with the reductions
   ``dcgm_samples`` makes (mean of the per-step averages, max of the per-step maxima, the
   greatest container, the last non-null node / index / model / profile in answer order),
   then :func:`~gpuinsight.sources.series.finish_samples`, as there.

``tests/test_prometheus.py`` checks both routes give the same rows, on the real server's
answers and on random label mixes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from gpuinsight.sources.prom.frames import TS, Matrix, concat_series, eval_to_ts
from gpuinsight.sources.prom.promql import Query
from gpuinsight.sources.series import (
    MAX_COLUMNS,
    SAMPLE_COLUMNS,
    dcgm_samples,
    finish_samples,
    sample_column,
)

KEY = ["gpu_uuid", "mig_instance", "namespace", "pod"]  # + ts: the rows of one step
_LAST_NON_NULL = ("node", "gpu_index", "model_name", "mig_profile")
_VALUES = [c for c, t in SAMPLE_COLUMNS.items() if t == pl.Float64()]


def is_dcgm(q: Query) -> bool:
    return sample_column(q.metric) is not None


def dcgm_rows(answers: Sequence[tuple[Query, Matrix]], cluster: str, step_s: int,
              stats: dict[str, int] | None = None) -> pl.DataFrame:
    """``gpu_samples`` rows from the DCGM answers of one chunk (any shards, any fields).

    ``stats`` receives ``nonfinite_dropped`` like :func:`dcgm_samples`.
    """
    answers = [(q, m) for q, m in answers if m.points]
    if not answers:
        return pl.DataFrame(schema=SAMPLE_COLUMNS)
    series = _identity(answers, cluster, step_s)
    n_series = sum(len(m.labels) for _, m in answers)

    # per series (index g, in answer order): its key, and codes for the per-row reductions
    key_of = np.full(n_series, -1, dtype=np.int64)
    keys = series.select(KEY).unique(maintain_order=True).with_row_index("_k")
    series = series.join(keys, on=KEY, how="left", nulls_equal=True)
    g = series["_g"].to_numpy()
    key_of[g] = series["_k"].to_numpy()
    containers = series["container"].unique().sort()
    container_of = np.zeros(n_series, dtype=np.int64)
    container_of[g] = series["container"].cast(pl.Enum(containers)).to_physical().to_numpy()
    has = {c: np.zeros(n_series, dtype=bool) for c in _LAST_NON_NULL}
    for c in _LAST_NON_NULL:
        has[c][g] = series[c].is_not_null().to_numpy()
    attrs = series.sort("_g")  # attrs row i <-> series g_sorted[i]
    attr_row = np.full(n_series, -1, dtype=np.int64)
    attr_row[attrs["_g"].to_numpy()] = np.arange(attrs.height)

    # the points: series, row timestamp (us), field, value
    g_pts, ts_pts, field_pts, val_pts = [], [], [], []
    offset = 0
    for q, m in answers:
        g_pts.append(m.series_index().astype(np.int64) + offset)
        ts_pts.append(eval_to_ts(m.ts, q.shift_s).cast(pl.Int64).to_numpy())
        field_pts.append(np.full(m.points, _VALUES.index(sample_column(q.metric) or ""), dtype=np.int8))
        val_pts.append(m.values.to_numpy())
        offset += len(m.labels)
    gp, tsp, fp, vp = (np.concatenate(a) for a in (g_pts, ts_pts, field_pts, val_pts))
    finite = np.isfinite(vp)
    if stats is not None:
        stats["nonfinite_dropped"] = stats.get("nonfinite_dropped", 0) + int((~finite).sum())
    kp = key_of[gp]
    keep = finite & (kp >= 0)
    gp, tsp, fp, vp, kp = gp[keep], tsp[keep], fp[keep], vp[keep], kp[keep]
    if not len(gp):
        return pl.DataFrame(schema=SAMPLE_COLUMNS)

    # rows = distinct (key, ts); ``row`` maps every point to its row
    times, t_idx = np.unique(tsp, return_inverse=True)
    cells, row = np.unique(kp * len(times) + t_idx, return_inverse=True)
    n_rows = len(cells)
    out: dict[str, pl.Series] = {}
    for i, col in enumerate(_VALUES):
        sel = fp == i
        out[col] = pl.Series(col, _reduce(row[sel], vp[sel], n_rows, col in MAX_COLUMNS), nan_to_null=True)

    rows = pl.DataFrame({"_k": cells // len(times)}).cast({"_k": pl.UInt32}).join(
        keys, on="_k", how="left", maintain_order="left")
    frame = rows.select(KEY).with_columns(pl.Series("ts", times[cells % len(times)]).cast(TS))
    best = np.full(n_rows, -1, dtype=np.int64)
    np.maximum.at(best, row, container_of[gp])
    frame = frame.with_columns(pl.Series("container", containers.gather(best)))
    for c in _LAST_NON_NULL:
        last = np.full(n_rows, -1, dtype=np.int64)
        sel = has[c][gp]
        np.maximum.at(last, row[sel], gp[sel])
        idx = pl.Series(np.where(last >= 0, attr_row[np.maximum(last, 0)], -1)).cast(pl.Int64)
        frame = frame.with_columns(attrs[c].gather(idx.replace(-1, None)).alias(c))
    frame = frame.with_columns(**out)
    return finish_samples(frame, cluster, step_s)


def _identity(answers: Sequence[tuple[Query, Matrix]], cluster: str, step_s: int) -> pl.DataFrame:
    """``dcgm_samples`` identity columns for every series; ``_g`` = its index in answer order."""
    frames = []
    offset = 0
    for q, m in answers:
        n = len(m.labels)
        frame = pl.DataFrame({
            "metric": pl.Series([q.metric], dtype=pl.Utf8).new_from_index(0, n),
            "ts": pl.Series(np.arange(offset, offset + n, dtype=np.int64)).cast(TS),  # a distinct instant each
            "value": np.zeros(n),
        })
        labels = m.label_frame(q.keep)
        frame = pl.concat([frame, labels], how="horizontal") if labels.width else frame
        frames.append(frame.filter(pl.Series(m.lens > 0)))  # a series without points is no row
        offset += n
    rows = dcgm_samples(concat_series(frames), cluster, step_s)
    return rows.select(pl.col("ts").cast(pl.Int64).alias("_g"), *KEY, "container", *_LAST_NON_NULL)


def _reduce(row: np.ndarray, values: np.ndarray, n_rows: int, take_max: bool) -> np.ndarray:
    """Per row, the mean (or max) of ``values``; NaN where a row has none."""
    count = np.bincount(row, minlength=n_rows)
    if not len(row):
        return np.full(n_rows, np.nan)
    if count.max() <= 1:  # the usual case: one series per key, field and step
        out = np.full(n_rows, np.nan)
        out[row] = values
        return out
    if take_max:
        out = np.full(n_rows, np.nan)
        np.fmax.at(out, row, values)
        return out
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.bincount(row, weights=values, minlength=n_rows) / count

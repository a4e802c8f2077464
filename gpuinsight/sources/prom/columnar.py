"""DCGM range answers -> ``gpu_samples`` rows, without a long series frame.

:mod:`gpuinsight.sources.series` is the one definition of how DCGM labels name a GPU, its pod
and its node (:func:`~gpuinsight.sources.series.dcgm_identified`: the field table, series
without a GPU identity skipped and counted, node resolution with its hint), which readings
are not measurements (:func:`~gpuinsight.sources.series.reading_bounds` and
:func:`~gpuinsight.sources.dcgm.reading_class`, dropped readings counted) and how the fields of
one step become a row. It reads long series frames (a row per point, every label repeated on
it), which for a Prometheus answer would be most of the collector's time and memory. This
module applies the same definitions to columnar answers
(:class:`~gpuinsight.sources.prom.frames.Matrix`) in three steps:

1. **identity, once per series**: ``dcgm_identified`` on one point per series, each series at
   an instant of its own, gives every series its row identity (GPU, MIG instance, pod,
   container, node, node hint, index, model, profile) or skips it as it would;
2. **the readings' bounds, once per series** (field and GPU model), then every point is
   classified by ``reading_class`` in one vectorised pass, and the ones that are not
   measurements dropped and counted;
3. **the points**, on integer codes only: grouped by (identity key, ts) with the reductions
   ``dcgm_samples`` makes (:func:`~gpuinsight.sources.series.reduction`: mean of the per-step
   averages, max of the per-step maxima, min of the per-step minima; the
   greatest container, the last non-null node / hint / index / model / profile in answer
   order), then :func:`~gpuinsight.sources.series.finish_samples`, as there.

``tests/test_prometheus.py`` checks both routes give the same rows and the same counts, on the
real server's answers and on random label mixes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from gpuinsight.sources.dcgm import reading_class
from gpuinsight.sources.gpu_nodes import DEFAULT_NODE_LABELS, NodeDirectory
from gpuinsight.sources.prom.frames import TS, Matrix
from gpuinsight.sources.prom.promql import Query
from gpuinsight.sources.series import (
    HINT,
    IDENTITY_COLUMNS,
    LAST_NON_NULL,
    SAMPLE_COLUMNS,
    TransformStats,
    count_dropped,
    dcgm_identified,
    finish_sample_rows,
    reading_bounds,
    reduction,
    sample_column,
)
from gpuinsight.warehouse.samples import LABEL_ID, SampleRows

KEY = ["gpu_uuid", "mig_instance", "namespace", "pod"]  # + ts: the rows of one step
_VALUES = [c for c, t in SAMPLE_COLUMNS.items() if t == pl.Float64()]


def is_dcgm(q: Query) -> bool:
    return sample_column(q.metric) is not None


def dcgm_rows(answers: Sequence[tuple[Query, Matrix]], cluster: str, step_s: int, stats: TransformStats,
              nodes: NodeDirectory, node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS,
              label_frames: Sequence[pl.DataFrame | None] | None = None) -> pl.DataFrame:
    """``gpu_samples`` rows (with :data:`~gpuinsight.sources.series.HINT`) from the DCGM answers
    of one chunk (any shards, any fields), as ``dcgm_samples`` makes them from the same series.

    ``stats`` receives what ``dcgm_samples`` counts (series without identity, dropped readings,
    GPUs placed or not); ``nodes`` is the evidence for node resolution. ``label_frames``: each
    answer's ``Matrix.label_frame(q.keep)``, if already made (the collector makes them as
    answers arrive).
    """
    frames = list(label_frames) if label_frames is not None else [None] * len(answers)
    kept = [(a, f) for a, f in zip(answers, frames, strict=True) if a[1].points]
    answers, frames = [a for a, _ in kept], [f for _, f in kept]
    if not answers:
        return _no_rows()
    offsets = np.cumsum([0] + [len(m.labels) for _, m in answers[:-1]])
    series = series_identity(answers, stats, nodes, node_labels, frames)
    n_series = sum(len(m.labels) for _, m in answers)

    # per series (index g, in answer order): its key, the bounds of its readings, and codes
    # for the per-row reductions
    keys = series.select(KEY).unique(maintain_order=True).with_row_index("_k")
    series = series.join(keys, on=KEY, how="left", nulls_equal=True).sort("_g")
    g = series["_g"].to_numpy()
    key_of = _per_series(n_series, g, series["_k"].cast(pl.Int64).to_numpy(), -1)
    lo, hi = reading_bounds(series)
    bounds_of = series.select(lo.alias("lo"), hi.alias("hi"))
    lo_of = _per_series(n_series, g, bounds_of["lo"].to_numpy(), np.nan)
    hi_of = _per_series(n_series, g, bounds_of["hi"].to_numpy(), np.nan)
    containers = series["container"].unique().sort()
    container_of = _per_series(
        n_series, g, series["container"].cast(pl.Enum(containers)).to_physical().cast(pl.Int64).to_numpy(), 0)
    attr_row = _per_series(n_series, g, np.arange(series.height), -1)  # series g -> its row of ``series``

    # the points, answer after answer (each answer one slice): series, time, value
    fields = [_VALUES.index(sample_column(q.metric) or "") for q, _ in answers]
    sizes = np.array([m.points for _, m in answers])
    gp = np.concatenate([m.series_index() for _, m in answers])
    gp += np.repeat(offsets.astype(np.uint32), sizes)
    tsp = np.concatenate([m.times_us(q.shift_s) for q, m in answers])
    vp = np.concatenate([m.values.to_numpy() for _, m in answers])
    kp = key_of[gp]
    keep = kp >= 0  # series without a GPU identity: skipped (and counted) whole
    # the points outside [lo, hi] (NaN and missing bounds included): a superset of the readings
    # ``reading_class`` drops, found in one numpy pass; it alone then says which of them and why
    lo_p, hi_p = lo_of[gp], hi_of[gp]
    with np.errstate(invalid="ignore"):
        maybe = np.flatnonzero(~((vp >= lo_p) & (vp <= hi_p)) & keep)
    why = pl.DataFrame({"value": vp[maybe], "lo": lo_p[maybe], "hi": hi_p[maybe]}).select(
        reading_class(pl.col("value"), pl.col("lo"), pl.col("hi"))).to_series()
    dropped = why.is_not_null().to_numpy()
    del lo_p, hi_p
    if dropped.any():
        metric = np.array([q.metric for q, _ in answers], dtype=object)
        at = maybe[dropped]
        count_dropped(pl.DataFrame({"metric": metric[np.searchsorted(np.cumsum(sizes), at, side="right")],
                                    "_why": why.filter(pl.Series(dropped))}), stats)
        keep[at] = False
    del why, dropped, maybe
    if not keep.all():  # rare: compress, and the answers' slices with them
        sizes = np.add.reduceat(keep, np.cumsum(sizes) - sizes) if keep.any() else sizes * 0
        gp, tsp, vp, kp = gp[keep], tsp[keep], vp[keep], kp[keep]
    del keep
    if not len(gp):
        return _no_rows()

    # rows = distinct (ts, key), in time order; ``row`` maps every point to its row
    times, t_idx = _time_index(tsp, int(round(answers[0][0].step * 1_000_000)))
    del tsp
    n_keys = keys.height
    cells, row = _dense_rank(t_idx * n_keys + kp, len(times) * n_keys)
    del kp, t_idx
    n_rows = len(cells)
    bounds = np.cumsum(sizes) - sizes
    out: dict[str, pl.Series] = {}
    for i, col in enumerate(_VALUES):
        parts = [slice(b, b + n) for b, n, f in zip(bounds, sizes, fields, strict=True) if f == i]
        rows_i = np.concatenate([row[p] for p in parts]) if parts else row[:0]
        vals_i = np.concatenate([vp[p] for p in parts]) if parts else vp[:0]
        out[col] = pl.Series(col, _reduce(rows_i, vals_i, n_rows, reduction(col)), nan_to_null=True)
    del vp
    row_key = cells % n_keys

    # The label set of a row: its key, the greatest container and the last non-null node / hint /
    # index / model / profile among its series (in answer order). When every series of a key
    # agrees on one (nearly always), it is the key's, and a key is one label set.
    attrs = ["container", *LAST_NON_NULL]
    per_key = series.group_by("_k").agg(*[pl.col(c).first() for c in attrs],
                                        *[(pl.col(c).n_unique() == 1).alias(f"_{c}") for c in attrs])
    uniform = [c for c in attrs if per_key[f"_{c}"].all()]
    codes: dict[str, np.ndarray] = {}  # per row, for an attribute that is not its key's: where it comes from
    if "container" not in uniform:
        best = np.zeros(n_rows, dtype=np.int64)
        np.maximum.at(best, row, container_of[gp])
        codes["container"] = best
    last_any = None
    for c in LAST_NON_NULL:  # the last series (in answer order) with the attribute gives it
        if c in uniform:
            continue
        has = series[c].is_not_null().to_numpy()
        if has.all():
            if last_any is None:
                last_any = np.full(n_rows, -1, dtype=np.int64)
                np.maximum.at(last_any, row, gp)
            last = last_any
        else:
            last = np.full(n_rows, -1, dtype=np.int64)
            sel = _per_series(n_series, g, has, False)[gp]
            np.maximum.at(last, row[sel], gp[sel])
        codes[c] = np.where(last >= 0, attr_row[np.maximum(last, 0)], -1)  # a row of ``series``, -1: none
    del gp, row
    label_of = keys.join(per_key.select("_k", *uniform), on="_k", how="left", maintain_order="left")
    if codes:  # rare: label sets within a key, numbered by their codes
        sets = pl.DataFrame({"_k": row_key, **codes}).with_columns(pl.col("_k").cast(pl.UInt32))
        distinct = sets.unique(maintain_order=True)
        label_id = sets.join(distinct.with_row_index(LABEL_ID), on=list(sets.columns), how="left",
                             maintain_order="left")[LABEL_ID].to_numpy()
        values = [containers.gather(distinct[c]) if c == "container" else series[c].gather(distinct[c].replace(-1, None))
                  for c in codes]
        label_of = distinct.join(label_of, on="_k", how="left", maintain_order="left").with_columns(
            [v.alias(c) for v, c in zip(values, codes, strict=True)])
        del sets, distinct
    else:  # the keys with rows (a key whose every reading was dropped has none)
        used = np.zeros(n_keys, dtype=bool)
        used[row_key] = True
        if used.all():
            label_id = row_key
        else:
            label_id = (np.cumsum(used) - 1)[row_key]
            label_of = label_of.filter(pl.Series(used))
    rows = pl.DataFrame({LABEL_ID: label_id.astype(np.uint32)}).with_columns(
        pl.Series("ts", times[cells // n_keys]).cast(TS), **out)
    return finish_sample_rows(SampleRows(label_of.drop("_k"), rows), cluster, step_s, stats)


def _no_rows() -> SampleRows:
    empty = SampleRows.empty()
    return SampleRows(empty.labels.with_columns(pl.lit(None, dtype=pl.Utf8).alias(HINT)), empty.rows)


def _per_series(n: int, g: np.ndarray, values: np.ndarray, missing: object) -> np.ndarray:
    """An array over all series indices: ``values`` at ``g``, ``missing`` elsewhere."""
    out = np.full(n, missing, dtype=values.dtype)
    out[g] = values
    return out


def _time_index(ts_us: np.ndarray, step_us: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct row times and each point's index among them (grid arithmetic if it fits)."""
    t0 = int(ts_us.min())
    steps, off = np.divmod(ts_us - t0, step_us) if step_us > 0 else (ts_us, ts_us)
    if step_us > 0 and not off.any():
        return t0 + step_us * np.arange(int(steps.max()) + 1, dtype=np.int64), steps
    return np.unique(ts_us, return_inverse=True)


def _dense_rank(cell: np.ndarray, n_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``cell`` values in order and each point's rank among them.

    By marking a table of all possible cells when that table is not much larger than the
    points (the usual case: most keys have a row at most steps), else by sorting.
    """
    if n_cells > 4 * len(cell) + (1 << 20):
        return np.unique(cell, return_inverse=True)
    seen = np.zeros(n_cells, dtype=bool)
    seen[cell] = True
    rank = np.cumsum(seen, dtype=np.int64) - 1
    return np.flatnonzero(seen), rank[cell]


def series_identity(answers: Sequence[tuple[Query, Matrix]], stats: TransformStats, nodes: NodeDirectory,
                    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS,
                    label_frames: Sequence[pl.DataFrame | None] | None = None) -> pl.DataFrame:
    """``dcgm_identified``'s identity columns for every series of the answers (``_g``: its index,
    answer after answer; ``_col``: the column it feeds).

    Each series enters as one reading at an instant of its own, so no two series merge: its
    row is its identity, or it is skipped (and counted) as ``dcgm_samples`` would skip it.
    One call for all answers: a GPU's fields share their label sets, resolved once.
    """
    frames = []
    for (q, m), labels in zip(answers, label_frames or [None] * len(answers), strict=True):
        n = len(m.labels)
        frame = pl.DataFrame({"metric": pl.Series([q.metric], dtype=pl.Utf8).new_from_index(0, n)})
        labels = m.label_frame(q.keep) if labels is None else labels
        frames.append(pl.concat([frame, labels], how="horizontal") if labels.width else frame)
    frame = pl.concat(frames, how="diagonal_relaxed")
    lens = np.concatenate([m.lens for _, m in answers])
    frame = frame.with_columns(pl.Series("ts", np.arange(frame.height, dtype=np.int64)).cast(TS),
                               pl.lit(0.0).alias("value"))
    rows = dcgm_identified(frame.filter(pl.Series(lens > 0)), stats, nodes, node_labels)  # no points: no row
    return rows.select(pl.col("ts").cast(pl.Int64).alias("_g"), "_col", *IDENTITY_COLUMNS)


def _reduce(row: np.ndarray, values: np.ndarray, n_rows: int, how: str) -> np.ndarray:
    """Per row, the mean, max or min (``how``) of ``values``; NaN where a row has none."""
    count = np.bincount(row, minlength=n_rows)
    if not len(row):
        return np.full(n_rows, np.nan)
    if count.max() <= 1:  # the usual case: one series per key, field and step
        out = np.full(n_rows, np.nan)
        out[row] = values
        return out
    if how in ("max", "min"):
        out = np.full(n_rows, np.nan)
        (np.fmax if how == "max" else np.fmin).at(out, row, values)
        return out
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.bincount(row, weights=values, minlength=n_rows) / count

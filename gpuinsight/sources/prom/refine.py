"""Readings that are not measurements, on the Prometheus path: spotted in the plain per-step
reductions, read again with the filter on the server.

The collector asks for the per-step average (and, for GR/SM activity and framebuffer used, the
maximum) of every DCGM field: one scan of the samples. A step holding a reading that is not a
measurement shows it there: a NaN makes the average NaN, a DCGM blank sentinel (>= 2**31 - 16)
lifts it far above the field's ceiling whatever the other readings, and the per-step maximum
shows any reading above the ceiling. Only those steps of those series are queried again, with
the filter inside the ``*_over_time`` (:func:`promql.dcgm_filtered_exprs`: one reading per
scrape interval, out-of-range readings dropped before averaging) and the dropped readings
counted on the server (:func:`promql.dcgm_dropped_expr`). Filtering every step that way costs
the server 17x the plain reductions (``bench/dcgm_filter.py``); spotting first costs nothing
when the data is clean, which it nearly always is.

What this cannot see: a reading slightly outside its range hidden in a plausible step average
(one 101 % among 50 % readings of GPU util, a field without a per-step maximum); it moves that
step's average by its excess divided by the readings in the step. The file path checks every
reading.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import polars as pl

from gpuinsight.sources.dcgm import BY_SPELLING, DROPPED_SUFFIX, MAX_SUFFIX, MIN_SUFFIX
from gpuinsight.sources.prom import promql
from gpuinsight.sources.prom.frames import concat_series, epoch_s
from gpuinsight.sources.prom.promql import Matcher, Query
from gpuinsight.sources.series import SeriesBatch

EPS_S = 0.001
UUIDS_PER_QUERY = 50  # the UUID alternation stays well inside any proxy's URL limit


class Refiner:
    def __init__(self, client: Any, matchers: list[Matcher], resolution_s: int, step: int,
                 keep: frozenset[str]) -> None:
        self.client = client
        self.matchers = matchers
        self.resolution_s = resolution_s
        self.step = step
        self.keep = keep
        self.refined_steps = 0

    def refine_all(self, batches: Iterator[SeriesBatch]) -> Iterator[SeriesBatch]:
        try:
            for batch in batches:
                yield self.refine(batch)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def refine(self, batch: SeriesBatch) -> SeriesBatch:
        s = batch.series
        if s.height == 0:
            return batch
        base = pl.col("metric").str.strip_suffix(MAX_SUFFIX).str.strip_suffix(MIN_SUFFIX)
        metrics = set(s.get_column("metric").unique().to_list())
        fields = {n: f for n, f in BY_SPELLING.items() if n in metrics or n + MAX_SUFFIX in metrics
                  or n + MIN_SUFFIX in metrics}
        if not fields:
            return batch
        lo = base.replace_strict({n: f.lo for n, f in fields.items()}, default=None, return_dtype=pl.Float64)
        hi = base.replace_strict({n: f.hi for n, f in fields.items()}, default=None, return_dtype=pl.Float64)
        v = pl.col("value")
        bad = s.filter(lo.is_not_null() & ~(v.is_finite() & (v >= lo) & (v <= hi)))
        if bad.height == 0 or "UUID" not in s.columns and "uuid" not in s.columns:
            return batch
        labels = [c for c in s.columns if c not in ("metric", "ts", "value")]
        keys = bad.with_columns(base.alias("_base")).select("_base", "ts", *labels).unique()
        self.refined_steps += keys.height
        fresh = [self._query(name, keys.filter(pl.col("_base") == name)) for name in keys["_base"].unique().to_list()]
        fresh_rows = concat_series([f for f in fresh if f.height])
        # drop the spotted steps' rows (average, maximum, minimum) and put the filtered ones instead
        ident = ["_base", "ts", *labels]
        marked = s.with_columns(base.alias("_base"))
        kept_rows = marked.join(keys, on=ident, how="anti", nulls_equal=True).drop("_base")
        if fresh_rows.height:
            fresh_rows = _align(fresh_rows, labels).with_columns(pl.col("metric").str.strip_suffix(MAX_SUFFIX)
                                                                 .str.strip_suffix(MIN_SUFFIX)
                                                                 .str.strip_suffix(DROPPED_SUFFIX).alias("_base"))
            fresh_rows = fresh_rows.join(keys, on=ident, how="semi", nulls_equal=True).drop("_base")
        return replace(batch, series=concat_series([kept_rows, fresh_rows]))

    def _query(self, name: str, keys: pl.DataFrame) -> pl.DataFrame:
        """Filtered avg/max and dropped counts of one field for the GPUs and steps in ``keys``."""
        f = BY_SPELLING[name]
        uuid_label = "UUID" if "UUID" in keys.columns and keys["UUID"].drop_nulls().len() else "uuid"
        uuids = sorted(keys[uuid_label].drop_nulls().unique().to_list()) if uuid_label in keys.columns else []
        t0 = epoch_s(keys["ts"].min()) + self.step - EPS_S
        t1 = epoch_s(keys["ts"].max()) + self.step - EPS_S
        shift = self.step - EPS_S
        frames = []
        for i in range(0, len(uuids), UUIDS_PER_QUERY):
            group = "|".join(promql.regex_literal(u) for u in uuids[i:i + UUIDS_PER_QUERY])
            m = [*self.matchers, (uuid_label, "=~", group)]
            exprs = promql.dcgm_filtered_exprs(name, self.step, m, want_max=f.max_column is not None, lo=f.lo,
                                               hi=f.hi, resolution_s=self.resolution_s)
            exprs.append(promql.dcgm_dropped_expr(name, self.step, m, lo=f.lo, hi=f.hi,
                                                  resolution_s=self.resolution_s))
            frames += [self.client.query_range(Query(e, metric, t0, t1, self.step, shift, keep=self.keep))
                       for e, metric in exprs]
        return concat_series([fr for fr in frames if fr.height])


def _align(frame: pl.DataFrame, labels: list[str]) -> pl.DataFrame:
    """``frame`` with exactly the batch's label columns (missing ones null, extra ones dropped)."""
    return frame.select("metric", "ts", "value", *[pl.col(c) if c in frame.columns else pl.lit(None, pl.Utf8).alias(c)
                                                   for c in labels])

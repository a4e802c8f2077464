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

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from gpuinsight.sources.dcgm import BY_SPELLING, DROPPED_SUFFIX, base_name, reading_class
from gpuinsight.sources.prom import promql
from gpuinsight.sources.prom.frames import Matrix
from gpuinsight.sources.prom.promql import Matcher, Query

EPS_S = 0.001
UUIDS_PER_QUERY = 50  # the UUID alternation stays well inside any proxy's URL limit
Answer = tuple[Query, Matrix]


class Refiner:
    def __init__(self, client: Any, matchers: list[Matcher], resolution_s: int, step: int,
                 keep: frozenset[str]) -> None:
        self.client = client
        self.matchers = matchers
        self.resolution_s = resolution_s
        self.step = step
        self.keep = keep
        self.refined_steps = 0

    def refine(self, answers: list[Answer], spots: Sequence[np.ndarray] | None = None
               ) -> tuple[list[Answer], list[pl.DataFrame]]:
        """The DCGM answers of one chunk with the spotted steps' points (average, maximum, minimum)
        replaced by the filtered ones, and the series frames of the readings the server dropped
        (``NAME:dropped``, for :func:`~gpuinsight.sources.series.server_dropped`). ``spots``:
        :func:`spot` of each answer, if already made (the collector makes them as answers arrive)."""
        ids: dict[tuple[tuple[str, str], ...], int] = {}  # label set of a spotted series -> its id
        spotted: dict[str, list[pl.DataFrame]] = {}       # field spelling -> (series id, ts) to read again
        for i, (q, m) in enumerate(answers):
            at = spot(q, m) if spots is None else spots[i]
            if not len(at):
                continue
            name = base_name(q.metric)
            g = m.series_index()[at]
            with_uuid = np.array([bool(m.labels[i].get("UUID") or m.labels[i].get("uuid")) for i in g], dtype=bool)
            if not with_uuid.any():  # not a GPU: the transform skips the series and counts it
                continue
            sid = [ids.setdefault(_label_key(m.labels[i]), len(ids)) for i in g[with_uuid]]
            ts = m.times_us(q.shift_s)[at[with_uuid]]
            spotted.setdefault(name, []).append(pl.DataFrame({"_s": sid, "ts": ts}, schema={"_s": pl.Int64,
                                                                                             "ts": pl.Int64}))
        if not spotted:
            return answers, []
        keys = {name: pl.concat(frames).unique() for name, frames in spotted.items()}
        self.refined_steps += sum(k.height for k in keys.values())
        labels_of = {i: dict(key) for key, i in ids.items()}
        out = [(q, _points(q, m, ids, keys.get(base_name(q.metric)), keep=False)) for q, m in answers]
        dropped = []
        for name, k in keys.items():
            for q, m in self._query(name, k, labels_of):
                base = base_name(q.metric.removesuffix(DROPPED_SUFFIX))
                fresh = _points(q, m, ids, keys[base], keep=True)
                if q.metric.endswith(DROPPED_SUFFIX):
                    dropped.append(fresh.series_frame(q.metric, q.shift_s, q.keep))
                else:
                    out.append((q, fresh))
        return out, dropped

    def _query(self, name: str, keys: pl.DataFrame, labels_of: dict[int, dict[str, str]]) -> list[Answer]:
        """Filtered avg/max and dropped counts of one field for the GPUs and steps in ``keys``."""
        f = BY_SPELLING[name]
        spotted = [labels_of[i] for i in keys["_s"].unique().to_list()]
        uuid_label = "UUID" if any(lbl.get("UUID") for lbl in spotted) else "uuid"
        uuids = sorted({lbl[uuid_label] for lbl in spotted if lbl.get(uuid_label)})
        t0 = int(keys["ts"].min()) / 1e6 + self.step - EPS_S
        t1 = int(keys["ts"].max()) / 1e6 + self.step - EPS_S
        shift = self.step - EPS_S
        answers = []
        for i in range(0, len(uuids), UUIDS_PER_QUERY):
            group = "|".join(promql.regex_literal(u) for u in uuids[i:i + UUIDS_PER_QUERY])
            m = [*self.matchers, (uuid_label, "=~", group)]
            exprs = promql.dcgm_filtered_exprs(name, self.step, m, want_max=f.max_column is not None, lo=f.lo,
                                               hi=f.hi, resolution_s=self.resolution_s)
            exprs.append(promql.dcgm_dropped_expr(name, self.step, m, lo=f.lo, hi=f.hi,
                                                  resolution_s=self.resolution_s))
            for e, metric in exprs:
                q = Query(e, metric, t0, t1, self.step, shift, keep=self.keep)
                answers.append((q, self.client.query_range(q)))
        return answers


def spot(q: Query, m: Matrix) -> np.ndarray:
    """The points of one DCGM answer whose step holds a reading that is not a measurement (a
    per-step average or extreme outside the field's range: NaN, blank sentinel, glitch)."""
    f = BY_SPELLING.get(base_name(q.metric))
    if f is None or not m.points:
        return np.zeros(0, dtype=np.int64)
    why = m.values.to_frame("value").select(reading_class(pl.col("value"), pl.lit(f.lo), pl.lit(f.hi)))
    return np.flatnonzero(why.to_series().is_not_null().to_numpy())


def _label_key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _points(q: Query, m: Matrix, ids: dict[tuple[tuple[str, str], ...], int], keys: pl.DataFrame | None,
            *, keep: bool) -> Matrix:
    """``m`` without (``keep=False``) or with only (``keep=True``) the points of ``keys``."""
    if keys is None or not m.points:
        return m.select_points(np.zeros(m.points, dtype=bool)) if keep else m
    sid = np.array([ids.get(_label_key(lbl), -1) for lbl in m.labels], dtype=np.int64)
    s_p = sid[m.series_index()]
    cand = np.flatnonzero(s_p >= 0)
    hit = np.zeros(m.points, dtype=bool)
    if len(cand):
        ts = m.times_us(q.shift_s)[cand]
        found = pl.DataFrame({"_s": s_p[cand], "ts": ts, "_i": cand}).join(keys, on=["_s", "ts"], how="semi")
        hit[found["_i"].to_numpy()] = True
    if not keep and not hit.any():
        return m
    return m.select_points(hit if keep else ~hit)

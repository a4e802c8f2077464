"""GPU energy from DCGM's energy counter -> ``gpu_energy_samples``: joules per physical GPU and step.

``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` counts millijoules since the driver loaded (a reset
restarts it). Where it is not scraped, the models integrate ``DCGM_FI_DEV_POWER_USAGE``
(``gpu_samples.power_w``) instead (docs/models.md, "Energy"). Two shapes, as for cAdvisor:

* **files**: the increase between consecutive samples of one series (a decrease is a reset: the
  new value is what was used since), given to the step the interval starts in;
* **Prometheus**: ``max by (UUID, uuid, gpu, modelName) (rate(...[step + r]))`` evaluated one scrape
  interval late (:func:`energy_expr`), mJ/s per GPU, times the step.

MIG instances repeat their GPU's counter: a GPU's steps take the largest of its series. A step
whose average power would exceed the GPU's power ceiling (``sources/dcgm.py``) is not a
measurement: dropped and counted.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from gpuinsight.gpumodels import canonical_gpu_model
from gpuinsight.sources.dcgm import MAX_POWER_W, power_ceiling
from gpuinsight.sources.prom.frames import TS, first_label, without_absent_labels

COUNTER = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
SPELLINGS = (COUNTER, COUNTER.lower())
RATE_METRIC = COUNTER + ":rate"
KEY = ["cluster", "gpu_uuid", "ts"]
COLUMNS: dict[str, pl.DataType] = {"cluster": pl.Utf8(), "gpu_uuid": pl.Utf8(), "ts": TS, "energy_j": pl.Float64(),
                                   "step_s": pl.Int32()}
KEEP_LABELS = frozenset({"UUID", "uuid", "gpu", "modelName"})


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=COLUMNS)


def energy_expr(step: int, resolution_s: int, matchers: Sequence[tuple[str, str, str]]) -> tuple[str, str]:
    from gpuinsight.sources.prom.promql import dur, selector

    sel = selector(COUNTER, matchers)
    return f"max by (UUID, uuid, gpu, modelName) (rate({sel}[{dur(step + resolution_s)}]))", RATE_METRIC


def gpu_energy_samples(series: pl.DataFrame, cluster: str, step_s: int,
                       dropped: dict[str, int] | None = None) -> pl.DataFrame:
    """``gpu_energy_samples`` rows from the energy series in ``series`` (either shape)."""
    if series.height == 0 or "metric" not in series.columns:
        return empty()
    s = without_absent_labels(series.filter(pl.col("metric").is_in([*SPELLINGS, RATE_METRIC])))
    if s.height == 0:
        return empty()
    s = s.with_columns(first_label(s, "UUID", "uuid").alias("gpu_uuid"), first_label(s, "modelName").alias("_model"))
    s = s.filter(pl.col("gpu_uuid").is_not_null())
    step_us = int(step_s) * 1_000_000
    parts = []
    rate = s.filter(pl.col("metric") == RATE_METRIC)
    if rate.height:
        parts.append(rate.select("gpu_uuid", "_model", "ts", (pl.col("value") * step_s / 1000.0).alias("energy_j")))
    raw = s.filter(pl.col("metric") != RATE_METRIC)
    if raw.height:
        keys = [c for c in raw.columns if c not in ("ts", "value", "@line", "_model")]
        r = raw.sort("ts").with_columns(pl.col("value").shift(1).over(keys).alias("_prev"),
                                        pl.col("ts").shift(1).over(keys).alias("_t0"))
        r = r.filter(pl.col("_prev").is_not_null())
        reset = pl.col("value") < pl.col("_prev")
        n = r.filter(reset).height
        if dropped is not None and n:
            dropped[COUNTER + " (counter resets)"] = dropped.get(COUNTER + " (counter resets)", 0) + n
        inc = pl.when(reset).then(pl.col("value")).otherwise(pl.col("value") - pl.col("_prev"))
        # an interval longer than a step (the exporter was down) is spread over the steps it covers
        first = pl.col("_t0").dt.epoch("us") // step_us
        last = (pl.col("ts").dt.epoch("us") - 1) // step_us
        spread = r.select(*keys, "_model", (inc / 1000.0).alias("_j"), first.alias("_a"),
                          pl.max_horizontal(first, last).alias("_b"))
        spread = spread.with_columns(pl.int_ranges("_a", pl.col("_b") + 1).alias("_k"),
                                     (pl.col("_j") / (pl.col("_b") - pl.col("_a") + 1)).alias("energy_j")).explode("_k")
        per_series = spread.select(*keys, "_model", (pl.col("_k") * step_us).cast(TS).alias("ts"), "energy_j") \
            .group_by([*keys, "_model", "ts"]).agg(pl.col("energy_j").sum())
        parts.append(per_series.select("gpu_uuid", "_model", "ts", "energy_j"))
    rows = pl.concat(parts).group_by("gpu_uuid", "ts").agg(pl.col("energy_j").max(), pl.col("_model").drop_nulls().last())
    models = {m: canonical_gpu_model(m) for m in rows.get_column("_model").unique().to_list() if m}
    ceiling = pl.col("_model").replace_strict({m: power_ceiling(c) if c else MAX_POWER_W for m, c in models.items()},
                                              default=MAX_POWER_W, return_dtype=pl.Float64)
    bad = ~pl.col("energy_j").is_finite() | (pl.col("energy_j") < 0) | (pl.col("energy_j") > ceiling * step_s)
    n_bad = rows.filter(bad).height
    if dropped is not None and n_bad:
        dropped[COUNTER] = dropped.get(COUNTER, 0) + n_bad
    return rows.filter(~bad).with_columns(
        pl.lit(cluster, dtype=pl.Utf8).alias("cluster"), pl.lit(int(step_s), dtype=pl.Int32).alias("step_s"),
    ).select([pl.col(c).cast(t) for c, t in COLUMNS.items()]).sort("gpu_uuid", "ts")

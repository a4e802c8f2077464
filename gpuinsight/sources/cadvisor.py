"""Container CPU use (cAdvisor, through the kubelet) -> ``pod_cpu_samples``: one row per pod and step.

``container_cpu_usage_seconds_total`` is a counter of CPU seconds per container. What the
input-starved rule needs is the pod's CPU use while its GPUs wait: cores, per step, summed over
the pod's containers. Two shapes arrive:

* **Files** hold the raw counter: the rate is the increase between consecutive samples of one
  container series divided by the time between them (a decrease is a counter reset, i.e. a
  restarted container: that interval is skipped), given to the step the later sample falls in,
  averaged per step and summed over the pod's containers.
* **Prometheus** computes the rate itself (``sum by (namespace, pod) (rate(...))``, see
  :func:`gpuinsight.sources.prom.promql.container_cpu_expr`): the frame's metric is
  :data:`RATE_METRIC` and holds cores per pod and step already.

Series for the pod's own cgroup (``container=""``) and the pause container (``container="POD"``)
are left out: they double count or hold nothing. Older cAdvisor spells the labels
``pod_name`` / ``container_name``. A reading that is negative or not finite is not CPU use and
is dropped (counted in the load notes).
"""

from __future__ import annotations

import polars as pl

from gpuinsight.sources.prom.frames import TS, first_label, without_absent_labels

COUNTER = "container_cpu_usage_seconds_total"
RATE_METRIC = COUNTER + ":rate"
KEY = ["cluster", "namespace", "pod", "ts"]
COLUMNS: dict[str, pl.DataType] = {"cluster": pl.Utf8(), "ts": TS, "namespace": pl.Utf8(), "pod": pl.Utf8(),
                                   "cpu_cores": pl.Float64(), "step_s": pl.Int32()}
# a container on one node cannot use more cores than the largest machine has (448 vCPU on
# AWS u7i instances; 1,024 leaves room): above it a reading is a glitch, not CPU use
MAX_CORES = 1024.0


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=COLUMNS)


def pod_cpu_samples(series: pl.DataFrame, cluster: str, step_s: int,
                    dropped: dict[str, int] | None = None) -> pl.DataFrame:
    """``pod_cpu_samples`` rows from the cAdvisor series in ``series`` (either shape)."""
    if series.height == 0 or "metric" not in series.columns:
        return empty()
    names = set(series.get_column("metric").unique().to_list())
    parts = []
    if COUNTER in names:
        parts.append(_from_counter(without_absent_labels(series.filter(pl.col("metric") == COUNTER)), step_s, dropped))
    if RATE_METRIC in names:
        s = series.filter(pl.col("metric") == RATE_METRIC)
        parts.append(s.select(first_label(s, "namespace").alias("namespace"), first_label(s, "pod").alias("pod"),
                              pl.col("ts"), pl.col("value").alias("cpu_cores")))
    parts = [p for p in parts if p.height]
    if not parts:
        return empty()
    rows = pl.concat(parts).filter(pl.col("namespace").is_not_null() & pl.col("pod").is_not_null())
    bad = ~pl.col("cpu_cores").is_finite() | (pl.col("cpu_cores") < 0) | (pl.col("cpu_cores") > MAX_CORES)
    n_bad = rows.filter(bad).height
    if dropped is not None and n_bad:
        dropped[COUNTER] = dropped.get(COUNTER, 0) + n_bad
    rows = rows.filter(~bad)
    return rows.group_by("namespace", "pod", "ts").agg(pl.col("cpu_cores").sum()).with_columns(
        pl.lit(cluster, dtype=pl.Utf8).alias("cluster"), pl.lit(int(step_s), dtype=pl.Int32).alias("step_s"),
    ).select([pl.col(c).cast(t) for c, t in COLUMNS.items()]).sort("namespace", "pod", "ts")


def _from_counter(s: pl.DataFrame, step_s: int, dropped: dict[str, int] | None) -> pl.DataFrame:
    container = first_label(s, "container", "container_name")
    s = s.with_columns(first_label(s, "namespace", "namespace_name").alias("namespace"),
                       first_label(s, "pod", "pod_name").alias("pod"), container.alias("_c"))
    s = s.filter(pl.col("_c").is_not_null() & (pl.col("_c") != "POD") & pl.col("pod").is_not_null())
    if s.height == 0:
        return pl.DataFrame(schema={"namespace": pl.Utf8, "pod": pl.Utf8, "ts": TS, "cpu_cores": pl.Float64})
    labels = [c for c in s.columns if c not in ("metric", "ts", "value", "@line")]
    s = s.sort("ts").with_columns(
        pl.col("value").diff().over(labels).alias("_dv"),
        pl.col("ts").diff().over(labels).dt.total_microseconds().alias("_dt"),
    )
    resets = s.filter(pl.col("_dv") < 0).height
    if dropped is not None and resets:
        dropped[COUNTER + " (counter resets)"] = dropped.get(COUNTER + " (counter resets)", 0) + resets
    s = s.filter((pl.col("_dt") > 0) & (pl.col("_dv") >= 0))
    step_us = int(step_s) * 1_000_000
    # the interval (t_prev, t] belongs to the step holding t_prev (rows stand for [ts, ts + step))
    start = (pl.col("ts").dt.epoch("us") - pl.col("_dt"))
    bucket = ((start // step_us) * step_us).cast(pl.Int64).cast(TS)
    per_container = s.with_columns(bucket.alias("_b"), (pl.col("_dv") / (pl.col("_dt") / 1e6)).alias("_rate")) \
        .group_by("namespace", "pod", "_c", "_b").agg(pl.col("_rate").mean())
    return per_container.select("namespace", "pod", pl.col("_b").alias("ts"), pl.col("_rate").alias("cpu_cores"))

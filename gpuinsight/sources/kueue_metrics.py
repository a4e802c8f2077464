"""Kueue's own ClusterQueue series -> ``kueue_quota_samples``: one row per queue, flavor, resource
and step.

Kueue's controller publishes, per ClusterQueue, flavor and resource (``pkg/metrics``):
``kueue_cluster_queue_resource_usage`` (the quota its admitted workloads use),
``kueue_cluster_queue_resource_reservation`` (what it reserves, admitted or not) and
``kueue_cluster_queue_nominal_quota``. Where they are collected the ``kueue_quota_usage`` model
takes a queue's use from them rather than from its pods. A value that is negative or not finite
is no quota: it is dropped. With several Kueue replicas (``replica_role``), the followers' series
are left out: the leader's (or a standalone one's) are the queue's.
"""

from __future__ import annotations

import polars as pl

from gpuinsight.sources.prom.frames import TS, first_label

METRICS: dict[str, str] = {
    "kueue_cluster_queue_resource_usage": "usage",
    "kueue_cluster_queue_resource_reservation": "reservation",
    "kueue_cluster_queue_nominal_quota": "nominal_quota",
}
KEY = ["cluster", "cluster_queue", "flavor", "resource", "ts"]
COLUMNS: dict[str, pl.DataType] = {"cluster": pl.Utf8(), "ts": TS, "cluster_queue": pl.Utf8(), "flavor": pl.Utf8(),
                                   "resource": pl.Utf8(), "usage": pl.Float64(), "reservation": pl.Float64(),
                                   "nominal_quota": pl.Float64(), "step_s": pl.Int32()}


def kueue_quota_samples(series: pl.DataFrame, cluster: str, step_s: int) -> pl.DataFrame:
    """The Kueue ClusterQueue series in ``series`` as ``kueue_quota_samples`` rows."""
    if series.height == 0 or "metric" not in series.columns:
        return pl.DataFrame(schema=COLUMNS)
    s = series.filter(pl.col("metric").is_in(list(METRICS)))
    if s.height and "replica_role" in s.columns:
        s = s.filter(pl.col("replica_role").fill_null("") != "follower")
    if s.height == 0:
        return pl.DataFrame(schema=COLUMNS)
    rows = s.select(
        pl.col("metric").replace_strict(METRICS).alias("what"),
        first_label(s, "cluster_queue").alias("cluster_queue"), first_label(s, "flavor").alias("flavor"),
        first_label(s, "resource").alias("resource"),
        # the step a reading falls in (files hold raw samples; range queries are on the grid already)
        pl.col("ts").dt.truncate(f"{int(step_s)}s").alias("ts"), pl.col("value"),
    ).filter(pl.col("cluster_queue").is_not_null() & pl.col("resource").is_not_null()
             & pl.col("value").is_finite() & (pl.col("value") >= 0))
    if rows.height == 0:
        return pl.DataFrame(schema=COLUMNS)
    wide = rows.with_columns(pl.col("flavor").fill_null("")).pivot(
        on="what", index=["cluster_queue", "flavor", "resource", "ts"], values="value", aggregate_function="mean")
    return wide.select([
        (pl.col(c) if c in wide.columns else pl.lit(None)).cast(t).alias(c) if c not in ("cluster", "step_s")
        else (pl.lit(cluster) if c == "cluster" else pl.lit(int(step_s))).cast(t).alias(c)
        for c, t in COLUMNS.items()])

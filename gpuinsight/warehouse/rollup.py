"""The hourly rollup of ``gpu_samples`` (``gpu_hourly``), rebuilt for the hours a load touched.

A sample at ``ts`` stands for the interval ``(ts - step_s, ts]`` (a Prometheus range
function evaluated at ``ts`` looks back one step), so it belongs to the hour in which that
interval starts: ``date_trunc('hour', ts - step_s)``. ``covered_s`` adds the steps, capped at
one hour, so GPU-hours are ``sum(covered_s) / 3600`` whatever the step.
"""

from __future__ import annotations

from datetime import timedelta

import duckdb
import polars as pl

_REBUILD = """
DELETE FROM gpu_hourly WHERE cluster = $cluster AND hour >= $h0 AND hour <= $h1;
INSERT INTO gpu_hourly
SELECT cluster,
       date_trunc('hour', ts - to_seconds(step_s)) AS hour,
       gpu_uuid, mig_instance,
       max(mig_profile)                AS mig_profile,
       namespace, pod,
       arg_max(node, ts)               AS node,
       arg_max(model_name, ts)         AS model_name,
       count(*)                        AS samples,
       least(sum(step_s), 3600)        AS covered_s,
       avg(gr_active)                  AS gr_active_avg,
       max(gr_active_max)              AS gr_active_max,
       avg(sm_active)                  AS sm_active_avg,
       max(sm_active_max)              AS sm_active_max,
       avg(gpu_util)                   AS gpu_util_avg,
       avg(fb_used_mib)                AS fb_used_avg_mib,
       max(fb_used_max_mib)            AS fb_used_max_mib,
       min(fb_free_mib)                AS fb_free_min_mib,
       avg(power_w)                    AS power_avg_w
FROM gpu_samples
WHERE cluster = $cluster
  -- the loose bound on ts lets DuckDB skip row groups; the exact one picks the hours
  AND ts >= $h0 AND ts <= $ts_max
  AND date_trunc('hour', ts - to_seconds(step_s)) BETWEEN $h0 AND $h1
GROUP BY ALL;
"""


def rebuild_gpu_hourly(con: duckdb.DuckDBPyConnection, cluster: str, samples: pl.DataFrame) -> int:
    """Recompute ``gpu_hourly`` for every hour the ``samples`` batch falls in; returns rows written."""
    if samples.height == 0:
        return 0
    bounds = samples.select(
        (pl.col("ts") - pl.duration(seconds=pl.col("step_s"))).dt.truncate("1h").min().alias("h0"),
        (pl.col("ts") - pl.duration(seconds=pl.col("step_s"))).dt.truncate("1h").max().alias("h1"),
        pl.col("step_s").max().alias("max_step"),
    ).row(0, named=True)
    h0, h1 = bounds["h0"], bounds["h1"]
    ts_max = h1 + timedelta(hours=1) + timedelta(seconds=int(bounds["max_step"]))
    params = {"cluster": cluster, "h0": h0, "h1": h1, "ts_max": ts_max}
    before = con.execute("SELECT count(*) FROM gpu_hourly WHERE cluster = $cluster AND hour BETWEEN $h0 AND $h1",
                         {"cluster": cluster, "h0": h0, "h1": h1}).fetchone()
    del before
    for stmt in (s for s in _REBUILD.split(";") if s.strip()):
        con.execute(stmt, {k: v for k, v in params.items() if f"${k}" in stmt})
    row = con.execute("SELECT count(*) FROM gpu_hourly WHERE cluster = $cluster AND hour BETWEEN $h0 AND $h1",
                      {"cluster": cluster, "h0": h0, "h1": h1}).fetchone()
    return int(row[0]) if row else 0

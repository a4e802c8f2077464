"""The hourly rollup of ``gpu_samples`` (``gpu_hourly``), rebuilt for the hours a load touched.

The statement itself is the SQL model ``queries/transforms/rollup_gpu_hourly.sql`` (one
definition of "hour" and of the step-weighted means for every loader); this module picks the
hours, deletes them and re-runs the transform for them, inside the caller's transaction.
A sample row stands for ``[ts, ts + step_s)``, so it belongs to ``date_trunc('hour', ts)``.
"""

from __future__ import annotations

from functools import lru_cache

import duckdb
import polars as pl

from gpuinsight.errors import RuntimeFailure
from gpuinsight.paths import queries_dir
from gpuinsight.sql.registry import Query, parse_query_file


@lru_cache(maxsize=1)
def _transform() -> Query:
    return parse_query_file(queries_dir() / "transforms" / "rollup_gpu_hourly.sql")


def rebuild_gpu_hourly(con: duckdb.DuckDBPyConnection, samples: pl.DataFrame) -> int:
    """Recompute ``gpu_hourly`` for every hour ``samples`` falls in; returns the rows now there.

    With a ``cluster`` column only those clusters' hours are rebuilt (a sharded collection of one
    cluster leaves the others' rollups alone); without it, every cluster's.
    """
    if samples.height == 0:
        return 0
    bounds = samples.select(pl.col("ts").dt.truncate("1h").min().alias("h0"),
                            pl.col("ts").dt.truncate("1h").max().alias("h1")).row(0)
    clusters: list[str | None] = (sorted(samples["cluster"].unique().to_list()) if "cluster" in samples.columns
                                  else [None])
    q = _transform()
    rows = 0
    for cluster in clusters:
        scope = [*bounds, cluster]
        con.execute("DELETE FROM gpu_hourly WHERE hour BETWEEN ? AND ? AND (?::VARCHAR IS NULL OR cluster = ?)",
                    [*scope, cluster])
        try:
            con.execute(q.text, q.bind({"hour_from": bounds[0], "hour_to": bounds[1], "cluster": cluster}))
        except duckdb.Error as exc:
            raise RuntimeFailure(f"{q.path.name}: {str(exc).splitlines()[0]}") from exc
        row = con.execute("SELECT count(*) FROM gpu_hourly WHERE hour BETWEEN ? AND ? "
                          "AND (?::VARCHAR IS NULL OR cluster = ?)", [*scope, cluster]).fetchone()
        rows += int(row[0]) if row else 0
    return rows

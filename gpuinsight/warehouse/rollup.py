"""The rollups of ``gpu_samples``, rebuilt for the hours a load touched, inside the load's transaction.

* ``gpu_hourly`` (per GPU or MIG instance, holder pod and hour): the SQL model
  ``queries/transforms/rollup_gpu_hourly.sql`` (one definition of "hour" and of the
  step-weighted means for every loader). A sample row stands for ``[ts, ts + step_s)``, so it
  belongs to ``date_trunc('hour', ts)``.
* ``gpu_pod_steps`` (per pod and step, what ``workload_input_profile`` reads) and the pod numbers
  in ``pod_keys``: the table macros ``new_pod_keys`` and ``pod_steps_of`` of migration
  ``014_pod_steps.sql``.

This module picks the hours, deletes them and re-runs the statements for them. Every loader of
samples calls :func:`rebuild_rollups` in the transaction that stored them, so a re-collected or
merged hour is rebuilt from the samples now there and a failed load leaves both as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import lru_cache

import duckdb
import polars as pl

from gpuinsight.errors import RuntimeFailure
from gpuinsight.paths import queries_dir
from gpuinsight.sql.registry import Query, parse_query_file


@lru_cache(maxsize=1)
def _transform() -> Query:
    return parse_query_file(queries_dir() / "transforms" / "rollup_gpu_hourly.sql")


def rollup_scope(samples: pl.DataFrame) -> tuple[tuple[datetime, datetime], list[str | None]]:
    """The hours (first, last) a non-empty batch of samples falls in, and its clusters (with no
    ``cluster`` column: [None], every cluster)."""
    bounds = samples.select(pl.col("ts").dt.truncate("1h").min().alias("h0"),
                            pl.col("ts").dt.truncate("1h").max().alias("h1")).row(0)
    clusters: list[str | None] = (sorted(samples["cluster"].unique().to_list()) if "cluster" in samples.columns
                                  else [None])
    return bounds, clusters


def rebuild_rollups(con: duckdb.DuckDBPyConnection, samples: pl.DataFrame) -> dict[str, int]:
    """Recompute each of :data:`ROLLUPS` (``gpu_hourly``, ``gpu_pod_steps``) for every hour
    ``samples`` falls in.

    Returns the rows now in those hours of each. With a ``cluster`` column only those clusters'
    hours are rebuilt (a sharded collection of one cluster leaves the others' rollups alone);
    without it, every cluster's.
    """
    rows = {table: 0 for table, _ in ROLLUPS}
    if samples.height == 0:
        return rows
    bounds, clusters = rollup_scope(samples)
    for cluster in clusters:
        for table, rebuild in ROLLUPS:
            rows[table] += rebuild(con, bounds, cluster)
    return rows


def rebuild_hourly(con: duckdb.DuckDBPyConnection, bounds: tuple[datetime, datetime], cluster: str | None) -> int:
    q = _transform()
    # the INSERT names no columns: what it selects must be gpu_hourly's, in order
    table = tuple(r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'gpu_hourly' AND schema_name = 'main' "
        "ORDER BY column_index").fetchall())
    if table != q.columns:
        raise RuntimeFailure(f"{q.path.name}:{q.columns_line}: inserts {', '.join(q.columns)} into gpu_hourly, "
                             f"whose columns are {', '.join(table)}")
    where, scope = "hour BETWEEN ? AND ? AND (?::VARCHAR IS NULL OR cluster = ?)", [*bounds, cluster, cluster]
    con.execute(f"DELETE FROM gpu_hourly WHERE {where}", scope)
    try:
        con.execute(q.text, q.bind({"hour_from": bounds[0], "hour_to": bounds[1], "cluster": cluster}))
    except duckdb.Error as exc:
        raise RuntimeFailure(f"{q.path.name}: {str(exc).splitlines()[0]}") from exc
    row = con.execute(f"SELECT count(*) FROM gpu_hourly WHERE {where}", scope).fetchone()
    return int(row[0]) if row else 0


def rebuild_pod_steps(con: duckdb.DuckDBPyConnection, bounds: tuple[datetime, datetime], cluster: str | None) -> int:
    """``gpu_pod_steps`` of the hours ``bounds`` (first, last) rebuilt; returns its rows there."""
    return _rebuild_pod_steps(con, bounds[0], bounds[1] + timedelta(hours=1), cluster)


def _rebuild_pod_steps(con: duckdb.DuckDBPyConnection, ts_from: datetime, ts_to: datetime,
                       cluster: str | None) -> int:
    """``gpu_pod_steps`` in ``[ts_from, ts_to)`` rebuilt from the samples there; returns its rows.

    Every pod-step of the range goes, not only those of pods in the batch: a merge may have
    handed a GPU-step to another pod, leaving the old holder's step with fewer GPUs or none.
    """
    scope = [ts_from, ts_to, cluster]
    where = "ts >= ? AND ts < ? AND (?::VARCHAR IS NULL OR pod_key IN (SELECT pod_key FROM pod_keys WHERE cluster = ?))"
    try:
        con.execute(f"DELETE FROM gpu_pod_steps WHERE {where}", [*scope, cluster])
        con.execute("INSERT INTO pod_keys SELECT * FROM new_pod_keys(?::TIMESTAMP, ?::TIMESTAMP, ?::VARCHAR)", scope)
        con.execute("INSERT INTO gpu_pod_steps SELECT * FROM pod_steps_of(?::TIMESTAMP, ?::TIMESTAMP, ?::VARCHAR)",
                    scope)
    except duckdb.Error as exc:
        raise RuntimeFailure(f"014_pod_steps.sql (pod_steps_of): {str(exc).splitlines()[0]}") from exc
    row = con.execute(f"SELECT count(*) FROM gpu_pod_steps WHERE {where}", [*scope, cluster]).fetchone()
    return int(row[0]) if row else 0


# the rollups of a batch of samples, in the order they are rebuilt: (table, rebuild(con, hours, cluster))
ROLLUPS: tuple[tuple[str, Callable[[duckdb.DuckDBPyConnection, tuple[datetime, datetime], str | None], int]], ...] = (
    ("gpu_hourly", rebuild_hourly), ("gpu_pod_steps", rebuild_pod_steps))

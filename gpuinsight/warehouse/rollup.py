"""The rollups of the samples, rebuilt for the hours a load touched, inside the load's transaction.

* ``gpu_hourly`` (per GPU or MIG instance, holder pod and hour; stored keyed in
  ``gpu_hourly_facts``): the table macro ``gpu_hourly_of`` of migration ``019_narrow_samples.sql``
  (one definition of "hour" and of the step-weighted means for every loader). A sample row
  stands for ``[ts, ts + step_s)``, so it belongs to ``date_trunc('hour', ts)``.
* ``gpu_pod_steps`` (per pod and step, what ``workload_input_profile`` reads): the table macro
  ``pod_steps_of`` (migrations 014, 019 and 024).

This module picks the hours, deletes them and re-runs the macros for them, and notes the hours
for the next model refresh (``model_pending``). Every loader of samples calls
:func:`rebuild_rollups` in the transaction that stored them, so a re-collected or merged hour is
rebuilt from the samples now there and a failed load leaves all three as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb
import polars as pl

from gpuinsight.errors import RuntimeFailure
from gpuinsight.warehouse.pending import note_hours

# the rows of a cluster (every cluster when the parameter is NULL), by GPU or by pod
_GPUS_OF = "(?::VARCHAR IS NULL OR gpu_key IN (SELECT gpu_key FROM gpu_keys WHERE cluster = ?))"
_PODS_OF = "(?::VARCHAR IS NULL OR pod_key IN (SELECT pod_key FROM pod_keys WHERE cluster = ?))"


def rollup_scope(samples: pl.DataFrame) -> tuple[tuple[datetime, datetime], list[str | None]]:
    """The hours ``[first, last + 1 h)`` a non-empty batch of samples falls in, and its clusters
    (with no ``cluster`` column: [None], every cluster)."""
    h0, h1 = samples.select(pl.col("ts").dt.truncate("1h").min().alias("h0"),
                            pl.col("ts").dt.truncate("1h").max().alias("h1")).row(0)
    clusters: list[str | None] = (sorted(samples["cluster"].unique().to_list()) if "cluster" in samples.columns
                                  else [None])
    return (h0, h1 + timedelta(hours=1)), clusters


def rebuild_scopes(con: duckdb.DuckDBPyConnection, clusters: list[str | None]) -> list[str | None]:
    """The clusters to rebuild one by one: [None] (the hours of every cluster, at once) when the
    batch's clusters are all the warehouse has. The same rows either way; rebuilding by cluster
    joins every sample of the hours to its GPU's or pod's cluster, about a sixth of
    ``gpu_hourly``'s cost, which a warehouse of one cluster (the common case) need not pay."""
    if None in clusters:
        return [None]
    stored = {c for (c,) in con.execute("SELECT cluster FROM gpu_keys UNION SELECT cluster FROM pod_keys").fetchall()}
    return [None] if stored <= set(clusters) else clusters


def rebuild_rollups(con: duckdb.DuckDBPyConnection, samples: pl.DataFrame) -> dict[str, int]:
    """Recompute each of :data:`ROLLUPS` (``gpu_hourly``, ``gpu_pod_steps``) for every hour
    ``samples`` falls in, and note those hours for the next model refresh.

    ``samples`` needs ``ts`` (only its range is read: the stored samples are rolled up); with
    a ``cluster`` column only those clusters' hours are rebuilt (a sharded collection of one
    cluster leaves the others' rollups alone); without it, every cluster's. Returns the rows
    now in those hours of each.
    """
    rows = {table: 0 for table, _ in ROLLUPS}
    if samples.height == 0:
        return rows
    (ts_from, ts_to), clusters = rollup_scope(samples)
    note_hours(con, ts_from, ts_to)
    for cluster in rebuild_scopes(con, clusters):
        for table, rebuild in ROLLUPS:
            rows[table] += rebuild(con, ts_from, ts_to, cluster)
    return rows


@dataclass(frozen=True)
class Rollup:
    """A rollup table rebuilt for a range of its time column from its table macro (the macro's
    file named in errors); ``of_cluster`` limits the rows to a cluster's (NULL: every cluster)."""

    table: str
    time_column: str
    of_cluster: str
    macro: str
    source: str

    def __call__(self, con: duckdb.DuckDBPyConnection, ts_from: datetime, ts_to: datetime, cluster: str | None) -> int:
        """The table's rows in ``[ts_from, ts_to)`` (of ``cluster``) rebuilt from the samples
        there; returns the rows now there. Every row of the range goes, not only those of the
        batch's GPUs or pods: a merge may have handed a GPU-step to another pod, leaving the old
        holder's step with fewer GPUs or none."""
        where = f"{self.time_column} >= ? AND {self.time_column} < ? AND {self.of_cluster}"
        try:
            con.execute(f"DELETE FROM {self.table} WHERE {where}", [ts_from, ts_to, cluster, cluster])
            # the scope's rows were all deleted: the rows inserted are the rows now there
            row = con.execute(f"INSERT INTO {self.table} SELECT * FROM {self.macro}(?::TIMESTAMP, ?::TIMESTAMP, "
                              "?::VARCHAR)", [ts_from, ts_to, cluster]).fetchone()
        except duckdb.Error as exc:
            raise RuntimeFailure(f"{self.source} ({self.macro}): {str(exc).splitlines()[0]}") from exc
        return int(row[0]) if row else 0


# the rollups of a batch of samples, in the order they are rebuilt: (table, rebuild(con, from, to, cluster))
ROLLUPS: tuple[tuple[str, Callable[[duckdb.DuckDBPyConnection, datetime, datetime, str | None], int]], ...] = (
    ("gpu_hourly", Rollup("gpu_hourly_facts", "hour", _GPUS_OF, "gpu_hourly_of", "019_narrow_samples.sql")),
    ("gpu_pod_steps", Rollup("gpu_pod_steps", "ts", _PODS_OF, "pod_steps_of", "024_pod_steps_of_one_gpu.sql")))

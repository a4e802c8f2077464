"""Warehouse writes shared by the metrics loaders: dimension upserts, the ingest cursor, and
DuckDB's checkpoints while a collection streams into it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import duckdb
import orjson
import polars as pl

from gpuinsight.warehouse.db import Warehouse, registered, size_setting


def merge_spans(
    wh: Warehouse, con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame, key: Sequence[str]
) -> int:
    """Upsert dimension rows (nodes, gpus, pods, clusters) without losing history.

    A batch only sees its own time chunk, so a plain replace would shrink ``first_seen`` to
    the chunk start and null out facts another chunk (or another source, e.g. the Kubernetes
    dump) knew. Instead: ``first_seen`` = min, ``last_seen`` = max, and every other column
    takes the newest non-null value (newest by ``last_seen``; the batch wins ties), over the
    stored row and every row of the batch with that key.
    """
    if frame.height == 0:
        return 0
    wh.columns(table)  # validates the table name before it is quoted below
    keys = frame.select(list(key)).unique()
    with registered(con, "_gi_keys", keys.to_arrow()):
        on = " AND ".join(f't."{k}" = k."{k}"' for k in key)
        existing = con.sql(f'SELECT t.* FROM "{table}" t SEMI JOIN _gi_keys k ON {on}').pl()
    if existing.height == 0 and keys.height == frame.height:  # nothing to combine
        return wh.merge(table, frame, key, con=con)
    both = pl.concat(
        [existing.with_columns(pl.lit(0).alias("_new")), frame.with_columns(pl.lit(1).alias("_new"))],
        how="diagonal_relaxed",
    )
    # oldest first, the batch after the stored rows it ties with: a group keeps its rows' order,
    # so each column's newest non-null value is its last (one sort, not one per column and group)
    order = ["last_seen", "_new"] if "last_seen" in both.columns else ["_new"]
    both = both.sort(order, nulls_last=False, maintain_order=True)
    aggs = []
    for c in both.columns:
        if c in key or c == "_new":
            continue
        if c == "first_seen":
            aggs.append(pl.col(c).min())
        elif c == "last_seen":
            aggs.append(pl.col(c).max())
        else:
            aggs.append(pl.col(c).drop_nulls().last())
    merged = both.group_by(list(key)).agg(aggs)
    return wh.merge(table, merged, key, con=con)


def get_state(wh: Warehouse, source: str, scope: str) -> dict[str, Any] | None:
    with wh._lock:
        rows = wh.con.execute(
            "SELECT cursor, status, details, run_id FROM ingest_state WHERE source = ? AND scope = ?",
            [source, scope],
        ).fetchall()  # fetched to the end: an open result would block the connection's next statement
    if not rows:
        return None
    row = rows[0]
    details = orjson.loads(row[2]) if row[2] else {}
    return {"cursor": row[0], "status": row[1], "details": details, "run_id": row[3]}


def set_state(
    wh: Warehouse,
    source: str,
    scope: str,
    *,
    status: str,
    cursor: datetime | None = None,
    details: dict[str, Any] | None = None,
    rows_loaded: int | None = None,
    run_id: str | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> None:
    """Record progress. The cursor only moves forward: it means "complete up to here"."""
    sql = """
        INSERT INTO ingest_state (source, scope, cursor, run_id, status, rows_loaded, details, updated_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, now()::TIMESTAMP)
        ON CONFLICT (source, scope) DO UPDATE SET
            cursor = CASE WHEN ingest_state.cursor IS NULL THEN excluded.cursor
                          WHEN excluded.cursor IS NULL THEN ingest_state.cursor
                          ELSE greatest(ingest_state.cursor, excluded.cursor) END,
            run_id = coalesce(excluded.run_id, ingest_state.run_id),
            status = excluded.status,
            rows_loaded = coalesce(excluded.rows_loaded, ingest_state.rows_loaded),
            details = excluded.details,
            updated_at = excluded.updated_at
    """
    params = [source, scope, cursor, run_id, status, rows_loaded,
              orjson.dumps(details or {}, default=str).decode()]
    if con is not None:
        con.execute(sql, params)
        return
    with wh.transaction() as tx:
        tx.execute(sql, params)


@contextlib.contextmanager
def checkpoints_deferred(wh: Warehouse, threshold: str) -> Iterator[None]:
    """DuckDB's ``checkpoint_threshold`` raised to ``threshold`` for the duration, then put back,
    and (outside a write session, which checkpoints when it ends) the warehouse checkpointed.

    DuckDB writes the log into the file (a checkpoint) at the first commit after the log passes
    the threshold, 16 MB by default; a collection's chunk logs more than that, so each chunk's
    commit was also a checkpoint, rewriting the tables' last blocks every time (docs/performance.md).
    Each chunk is still committed on its own, durable in the log: a killed run keeps its committed
    chunks, the log replayed when the warehouse is next opened. A higher threshold already set is kept.
    """
    with size_setting(wh, "checkpoint_threshold", threshold, lower=False) as raised:
        yield
    if raised and not wh.in_transaction:  # after a whole collection only: a failure is raised as itself
        wh.checkpoint()

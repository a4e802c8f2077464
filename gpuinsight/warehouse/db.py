"""Connection handling and the one load primitive every source uses: ``merge``.

``merge`` stages a batch and, inside one transaction, deletes the rows whose natural key is in
the batch and inserts the batch. Loading the same batch twice therefore leaves the same rows,
and a crash mid-load leaves the previous state (DuckDB rolls back an unfinished transaction).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.warehouse.migrations import migrate


def to_polars(
    con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] | dict[str, Any] | None = None
) -> pl.DataFrame:
    """Run one query with bound parameters and return a polars DataFrame (via Arrow)."""
    rel = con.sql(sql, params=params) if params else con.sql(sql)
    if rel is None:  # a statement without a result
        return pl.DataFrame()
    return rel.pl()


def connect(path: str | Path, *, read_only: bool = False, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    path = Path(path)
    if read_only and not path.exists():
        raise BadInput(f"{path}: no warehouse here (run a collection or `gpuinsight demo` first)")
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as exc:
        first = str(exc).splitlines()[0]
        if "not a valid DuckDB database" in first:
            raise BadInput(f"{path}: not a DuckDB warehouse file") from exc
        raise RuntimeFailure(f"{path}: cannot open warehouse: {first}") from exc
    except duckdb.Error as exc:
        raise BadInput(f"{path}: not a DuckDB warehouse: {exc}") from exc
    if memory_limit:
        try:  # bound as a value, never pasted
            con.execute("SET memory_limit = $v", {"v": memory_limit})
        except duckdb.Error as exc:
            con.close()
            raise BadInput(f"memory limit {memory_limit!r}: {str(exc).splitlines()[0]} "
                           "(a size like 8GB or a share of RAM like 25%)") from None
    return without_progress_bar(con)


def without_progress_bar(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """DuckDB's own progress bar writes to stdout during long queries, which corrupts
    `recommend --format json` and friends (gpuinsight.progress reports on a terminal instead).
    Under Jupyter DuckDB refuses to change the setting without ipywidgets, and draws no text
    bar there anyway: then it is left as it is."""
    with contextlib.suppress(duckdb.Error):
        con.execute("SET enable_progress_bar = false")
    return con


def _time_bound(batch: pl.DataFrame, key: Sequence[str]) -> tuple[str, list[Any]]:
    """An extra predicate for merge's DELETE: the batch's range of the first time column of the
    delete key. A row the key matches has that column equal to a batch value, so it lies in the
    range: the predicate removes nothing the key would keep, and lets DuckDB's zone maps skip
    every row group outside the batch's time span (without it each batch probes the whole table,
    quadratic over a backfill). No bound when the column holds nulls (they match stored nulls),
    carries a time zone or nanoseconds (Python's datetime would shift or truncate the bounds)."""
    for k in key:
        dtype = batch.schema[k]
        exact = dtype == pl.Date or (isinstance(dtype, pl.Datetime) and dtype.time_zone is None
                                     and dtype.time_unit in ("us", "ms"))
        if exact and batch[k].null_count() == 0:
            return f' AND t."{k}" BETWEEN ? AND ?', [batch[k].min(), batch[k].max()]
    return "", []


class Warehouse:
    """An open warehouse: a DuckDB connection with the schema migrated."""

    def __init__(self, path: str | Path, *, read_only: bool = False, memory_limit: str | None = None) -> None:
        self.path = Path(path)
        self.con = connect(self.path, read_only=read_only, memory_limit=memory_limit)
        self._lock = threading.RLock()
        # table -> its columns, read from information_schema once per table and connection (every
        # merge checks its batch against them); emptied whenever this process changes the schema
        self._columns: dict[str, tuple[str, ...]] = {}
        if not read_only:
            self.migrate()

    def migrate(self, root: Path | None = None) -> list[int]:
        """Apply the pending schema migrations (``queries/schema/``, or ``root``)."""
        try:
            return migrate(self.con, root)
        finally:
            self.schema_changed()

    def schema_changed(self) -> None:
        """Forget the cached table columns: call after DDL (migrations, rebuilt model tables)."""
        self._columns.clear()

    # -- plumbing --------------------------------------------------------------------------
    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._lock:
            self.con.execute("BEGIN TRANSACTION")
            try:
                yield self.con
            except BaseException:
                self.con.execute("ROLLBACK")
                raise
            self.con.execute("COMMIT")

    def columns(self, table: str) -> list[str]:
        """The table's columns in order; an unknown table is a RuntimeFailure (names are checked
        here before they are quoted into SQL)."""
        if table not in self._columns:  # one catalog query reads every table's columns
            with self._lock:
                rows = self.con.execute("SELECT table_name, column_name FROM information_schema.columns "
                                        "ORDER BY table_name, ordinal_position").fetchall()
            found: dict[str, list[str]] = {}
            for name, column in rows:
                found.setdefault(name, []).append(column)
            self._columns = {name: tuple(cols) for name, cols in found.items()}
        cached = self._columns.get(table)
        if cached is None:
            raise RuntimeFailure(f"unknown warehouse table {table!r}")
        return list(cached)

    def count(self, table: str) -> int:
        self.columns(table)  # validates the name against the catalog before it is quoted
        rows = self.con.execute(f'SELECT count(*) FROM "{table}"').fetchall()
        return int(rows[0][0]) if rows else 0

    # -- loads -----------------------------------------------------------------------------
    def merge(
        self,
        table: str,
        frame: pl.DataFrame,
        key: Sequence[str],
        *,
        con: duckdb.DuckDBPyConnection | None = None,
        replace_on: Sequence[str] | None = None,
    ) -> int:
        """Upsert ``frame`` into ``table`` by natural ``key``; returns rows written.

        Pass ``con`` to take part in a caller's transaction (several tables loaded atomically).
        ``replace_on`` (a prefix of the key) replaces whole groups instead: every stored row whose
        ``replace_on`` columns match the batch goes, so a group the source now reports with
        fewer rows (a GPU step that lost one of its sharing pods) holds exactly the new rows.
        """
        if frame.height == 0:
            return 0
        cols = self.columns(table)
        extra = [c for c in frame.columns if c not in cols]
        if extra:
            raise RuntimeFailure(f"{table}: loader produced unknown columns {extra}")
        missing_key = [k for k in (*key, *(replace_on or ())) if k not in frame.columns]
        if missing_key:
            raise RuntimeFailure(f"{table}: batch lacks key columns {missing_key}")
        batch = frame.unique(subset=list(key), keep="last", maintain_order=True)
        delete_on = list(replace_on or key)
        if con is None:
            with self.transaction() as tx:
                return self._merge(tx, table, batch, delete_on)
        return self._merge(con, table, batch, delete_on)

    @staticmethod
    def _merge(
        con: duckdb.DuckDBPyConnection, table: str, batch: pl.DataFrame, key: Sequence[str]
    ) -> int:
        # Names come from the catalog check above, never from user input.
        arrow = batch.to_arrow()
        con.register("_gi_batch", arrow)
        try:
            on = " AND ".join(f't."{k}" IS NOT DISTINCT FROM b."{k}"' for k in key)
            bound, params = _time_bound(batch, key)
            con.execute(f'DELETE FROM "{table}" AS t USING _gi_batch AS b WHERE {on}{bound}', params)
            col_list = ", ".join(f'"{c}"' for c in batch.columns)
            con.execute(f'INSERT INTO "{table}" ({col_list}) SELECT {col_list} FROM _gi_batch')
        finally:
            con.unregister("_gi_batch")
        return batch.height

    def replace_where(
        self,
        table: str,
        frame: pl.DataFrame,
        where_sql: str,
        params: Sequence[Any],
        *,
        con: duckdb.DuckDBPyConnection | None = None,
    ) -> int:
        """Delete the rows matching a fixed predicate (bound parameters) and insert ``frame``.

        For sources whose unit of replacement is a window or a snapshot rather than a key.
        """
        self.columns(table)

        def run(tx: duckdb.DuckDBPyConnection) -> int:
            tx.execute(f'DELETE FROM "{table}" WHERE {where_sql}', list(params))
            if frame.height:
                tx.register("_gi_batch", frame.to_arrow())
                try:
                    col_list = ", ".join(f'"{c}"' for c in frame.columns)
                    tx.execute(f'INSERT INTO "{table}" ({col_list}) SELECT {col_list} FROM _gi_batch')
                finally:
                    tx.unregister("_gi_batch")
            return frame.height

        if con is None:
            with self.transaction() as tx:
                return run(tx)
        return run(con)

    # -- reads -----------------------------------------------------------------------------
    def sql(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> pl.DataFrame:
        """Ad-hoc SQL with bound parameters, as a polars DataFrame."""
        with self._lock:
            try:
                return to_polars(self.con, sql, params)
            except duckdb.Error as exc:
                raise BadInput(f"SQL error: {str(exc).splitlines()[0]}") from exc


_UNITS = {"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def _size_bytes(text: str) -> float:
    """DuckDB's memory setting (``18.8 GiB``, ``256MB``) in bytes; unreadable = unlimited."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        return float("inf")
    return float(m.group(1)) * _UNITS[m.group(2).upper()]


@contextlib.contextmanager
def memory_capped(wh: Warehouse, cap: str) -> Iterator[None]:
    """DuckDB's ``memory_limit`` lowered to ``cap`` for the duration, then put back.

    DuckDB keeps the blocks it reads cached up to its limit (80 % of RAM by default): a
    collection reading the table it appends to (merges, the hourly rollup) or an export
    streaming every table out would grow that cache with the warehouse, though each step needs
    far less; what does not fit spills to disk. A lower limit already set is kept.
    """
    def setting(con: duckdb.DuckDBPyConnection) -> str:
        return str(con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0])

    with wh._lock:
        before = setting(wh.con)
        if _size_bytes(before) <= _size_bytes(cap):
            before = ""
        else:
            wh.con.execute(f"SET memory_limit='{_size_bytes(cap):.0f}B'")
    try:
        yield
    finally:
        if before:
            # DuckDB prints the limit rounded down: the default goes back by RESET, a limit
            # someone chose by its printed value nudged up (so that it prints the same again
            # instead of drifting down a digit per collection)
            default = setting(duckdb.connect())
            with wh._lock:
                if before == default:
                    wh.con.execute("RESET memory_limit")
                else:
                    wh.con.execute(f"SET memory_limit='{_size_bytes(before) * 1.0005:.0f}B'")

"""Connections, transactions and the one load primitive every source uses: ``merge``.

``connect`` is the one place the package opens DuckDB (the warehouse file, or an in-memory
database): it never lets DuckDB install or load an extension behind our back, refuses a file that
is not a DuckDB database before DuckDB sees it, and waits (saying so) while another process holds
the file's lock. ``merge`` stages a batch and, inside one transaction, deletes the rows whose
natural key is in the batch and inserts the batch: loading the same batch twice leaves the same
rows. How writes group into transactions, rebuild the models and reach the file is the write path
of :mod:`gpuinsight.warehouse.writes` (docs/warehouse.md).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import polars as pl
import pyarrow as pa

from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.warehouse.migrations import migrate

if TYPE_CHECKING:
    from gpuinsight.warehouse.writes import ModelBuilder, WriteSession

# Every connection's settings. DuckDB would otherwise fetch an extension from the network the
# moment a statement or a file needs one (a SQLite file given as the warehouse made it download
# sqlite_scanner): gpuinsight runs next to clusters and credentials, often air-gapped, and uses
# none, and no statement of the package installs or loads one (tests/test_write_path.py checks both).
NO_EXTENSIONS: dict[str, Any] = {"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                 "allow_community_extensions": False}
# A DuckDB database file says "DUCK" at bytes 8..11 (its main header's magic bytes).
DUCKDB_MAGIC = (8, b"DUCK")
LOCK_CONFLICT = "Could not set lock"
_HOLDER = re.compile(r"held in (?P<exe>\S+) \(PID (?P<pid>\d+)\)")


def to_polars(
    con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] | dict[str, Any] | None = None
) -> pl.DataFrame:
    """Run one query with bound parameters and return a polars DataFrame (via Arrow)."""
    rel = con.sql(sql, params=params) if params else con.sql(sql)
    if rel is None:  # a statement without a result
        return pl.DataFrame()
    return rel.pl()


class NotWritable(RuntimeFailure):
    """The warehouse file cannot be opened for writing (a read-only filesystem or file)."""


def connect_memory() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the same settings as a warehouse connection."""
    return without_progress_bar(duckdb.connect(":memory:", config=dict(NO_EXTENSIONS)))


def check_duckdb_file(path: Path) -> None:
    """Refuse a file that is not a DuckDB database before DuckDB opens it: for a SQLite file (and
    other formats it has a scanner for) DuckDB would reach for an extension instead of failing."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise BadInput(f"{path}: a directory, not a DuckDB warehouse file") from None
    except OSError as exc:
        raise RuntimeFailure(f"{path}: cannot read: {exc.strerror or exc}") from None
    offset, magic = DUCKDB_MAGIC
    if head[offset:offset + len(magic)] != magic:
        what = " (a SQLite database)" if head.startswith(b"SQLite format 3") else ""
        raise BadInput(f"{path}: not a DuckDB warehouse file{what}")


def _holder(message: str) -> str:
    m = _HOLDER.search(message)
    return f"PID {m.group('pid')} ({Path(m.group('exe')).name})" if m else "another process"


def connect(path: str | Path, *, read_only: bool = False, memory_limit: str | None = None,
            lock_timeout_s: float = 0.0, on_wait: Callable[[str], None] | None = None) -> duckdb.DuckDBPyConnection:
    """Open the warehouse file (DuckDB's file lock: one writer, or any number of readers).

    While another process holds a conflicting lock (a writer, or readers when writing) this waits
    up to ``lock_timeout_s``, telling ``on_wait`` once why, then gives up (RuntimeFailure). A
    process that already has the file open read-write and asks for reading gets the same
    database instance (DuckDB opens a file once per process).
    """
    path = Path(path)
    if read_only and not path.exists():
        raise BadInput(f"{path}: no warehouse here (run a collection or `gpuinsight demo` first)")
    check_duckdb_file(path)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + max(0.0, lock_timeout_s)
    delay, told = 0.05, False
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only, config=dict(NO_EXTENSIONS))
            break
        except duckdb.IOException as exc:
            first = str(exc).splitlines()[0]
            if LOCK_CONFLICT in first:
                holder = _holder(first)
                if time.monotonic() >= deadline:
                    raise RuntimeFailure(
                        f"{path}: in use by {holder}, which {'writes' if read_only else 'has'} it"
                        f" (waited {lock_timeout_s:g} s; GPUINSIGHT_LOCK_TIMEOUT sets how long)") from exc
                if not told and on_wait is not None:
                    on_wait(f"{path} is being {'written' if read_only else 'used'} by {holder}: waiting for it "
                            f"(up to {lock_timeout_s:g} s)")
                told = True
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 1.0)
                continue
            if "not a valid DuckDB database" in first:
                raise BadInput(f"{path}: not a DuckDB warehouse file") from exc
            if not read_only and ("Read-only file system" in first or "Permission denied" in first):
                raise NotWritable(f"{path}: cannot open for writing: {first}") from exc
            raise RuntimeFailure(f"{path}: cannot open warehouse: {first}") from exc
        except duckdb.ConnectionException as exc:
            # this process already has the file open in the other mode (DuckDB keeps one instance
            # per file and process): reading through its read-write instance is safe
            if read_only and "different configuration" in str(exc):
                con = duckdb.connect(str(path), read_only=False, config=dict(NO_EXTENSIONS))
                break
            raise RuntimeFailure(f"{path}: cannot open warehouse: {str(exc).splitlines()[0]} "
                                 "(this process has it open read-only: close that first)") from exc
        except duckdb.Error as exc:
            raise BadInput(f"{path}: not a DuckDB warehouse: {str(exc).splitlines()[0]}") from exc
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


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, data: pa.Table | Any) -> Iterator[None]:
    """``data`` visible to SQL as ``name`` for the block. When the block fails inside a
    transaction, DuckDB refuses every statement until ROLLBACK, unregistering included: that
    refusal must not replace the error that caused it."""
    con.register(name, data)
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        try:
            con.unregister(name)
        except duckdb.Error:
            if not failed:
                raise


def _one_line(exc: BaseException) -> str:
    """An error's first line (DuckDB's carry hints on the lines after)."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip()[:500] if lines else type(exc).__name__


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


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
    """An open warehouse: a DuckDB connection with the schema migrated.

    Opened read-write it holds the file's lock (no other process reads or writes it meanwhile);
    read-only, it shares the lock with other readers. Transactions nest: a transaction opened
    inside another (a loader's, inside a write session) is part of it, and a failure in the
    inner one fails the whole (:meth:`transaction`).
    """

    def __init__(self, path: str | Path, *, read_only: bool = False, memory_limit: str | None = None,
                 lock_timeout_s: float = 0.0, on_wait: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        self.read_only = read_only
        # the file this connection writes, taken before DuckDB opens it (a file moved over the path
        # meanwhile is caught here or at the checkpoint: check_identity)
        self._identity = _file_identity(self.path)
        self.con = connect(self.path, read_only=read_only, memory_limit=memory_limit,
                           lock_timeout_s=lock_timeout_s, on_wait=on_wait)
        if self._identity is None:  # created by this open
            self._identity = _file_identity(self.path)
        self._lock = threading.RLock()
        self._depth = 0                                  # open transactions (nested ones counted)
        self._inner_failure: BaseException | None = None  # a nested block that failed
        self.session: WriteSession | None = None         # the write session under way (writes.py)
        # table -> its columns, read from information_schema once per table and connection (every
        # merge checks its batch against them); emptied whenever this process changes the schema
        self._columns: dict[str, tuple[str, ...]] = {}
        if not read_only:
            try:
                self.migrate()
            except BaseException:
                self.con.close()
                raise

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

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction; inside another it joins it (DuckDB has no savepoints). A nested block
        that fails leaves its half-done writes in the outer transaction, so the outer one then
        rolls back and raises that failure even if the code between caught it. An error is
        always raised as itself: a ROLLBACK that fails too (DuckDB refuses statements in a
        transaction an error aborted, and out of memory may invalidate the database) is only a
        note on it."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self.con
                except BaseException as exc:
                    if self._inner_failure is None:
                        self._inner_failure = exc
                    raise
                finally:
                    self._depth -= 1
                return
            self.con.execute("BEGIN TRANSACTION")
            self._depth, self._inner_failure = 1, None
            try:
                yield self.con
                if self._inner_failure is not None:
                    raise self._inner_failure
                self._commit()
            except BaseException as exc:
                self._rollback(exc)
                raise
            finally:
                self._depth, self._inner_failure = 0, None

    def _commit(self) -> None:
        try:
            self.con.execute("COMMIT")
        except duckdb.Error as exc:
            # DuckDB writes a large transaction into the file at commit (a checkpoint): a full
            # disk shows here, and the commit does not happen
            raise RuntimeFailure(f"{self.path}: the write could not be committed, the warehouse keeps its last "
                                 f"committed state: {_one_line(exc)}") from exc

    def _rollback(self, exc: BaseException) -> None:
        try:
            self.con.execute("ROLLBACK")
        except duckdb.Error as failed:
            exc.add_note(f"(the rollback failed too: {str(failed).splitlines()[0]})")

    def commit_so_far(self) -> None:
        """Inside a write session (:mod:`gpuinsight.warehouse.writes`), commit what it loaded so
        far and go on in a new transaction: for a collection of many chunks, each committed whole
        (a killed run keeps them; the next one resumes after them). The models are marked stale in
        the same commit and rebuilt when the session ends. Outside a session nothing is pending:
        each transaction committed itself."""
        with self._lock:
            if self._depth == 0:
                return
            if self._depth > 1:
                raise RuntimeFailure("commit_so_far inside a nested transaction")  # a bug, not input
            if self._inner_failure is not None:
                raise self._inner_failure
            if self.session is not None and self.session.models is not None:
                self.session.models.invalidate(self.con)
            self._commit()
            self.con.execute("BEGIN TRANSACTION")
            if self.session is not None:
                self.session.commits += 1

    def checkpoint(self) -> None:
        """Move every committed write from the write-ahead log into the file, and check that the
        path still names the file this process wrote: before a command reports success."""
        if self.read_only:
            return
        with self._lock:
            if self._depth:
                raise RuntimeFailure("checkpoint inside a transaction")  # a bug, not input
            try:
                self.con.execute("CHECKPOINT")
            except duckdb.Error as exc:
                raise RuntimeFailure(
                    f"{self.path}: the write is committed to {self.path.name}.wal but could not be written into "
                    f"the file: {_one_line(exc)} (the log is replayed when the warehouse is next opened)") from exc
        self.check_identity()

    def check_identity(self) -> None:
        """The path still names the file opened: nobody moved another file over it or removed it
        (the lock is on the file, not the name: a write into a replaced file is lost)."""
        now = _file_identity(self.path)
        if self._identity is not None and now != self._identity:
            raise RuntimeFailure(f"{self.path} was {'removed' if now is None else 'replaced by another file'} "
                                 "while this process wrote it: what it wrote is not in the file at that path")

    def writing(self, models: ModelBuilder | None = None) -> contextlib.AbstractContextManager[WriteSession]:
        """The write path: see :func:`gpuinsight.warehouse.writes.writing`."""
        from gpuinsight.warehouse.writes import writing

        return writing(self, models)

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
        if self.session is not None and self.session.guard is not None:
            self.session.guard("merge", table, key)
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
        with registered(con, "_gi_batch", batch.to_arrow()):
            on = " AND ".join(f't."{k}" IS NOT DISTINCT FROM b."{k}"' for k in key)
            bound, params = _time_bound(batch, key)
            # a batch of times not stored yet (a collection moving on) replaces nothing, and the
            # delete would still build a hash table of the whole batch to find that out
            if not bound or con.execute(f'SELECT 1 FROM "{table}" AS t WHERE TRUE{bound} LIMIT 1', params).fetchall():
                con.execute(f'DELETE FROM "{table}" AS t USING _gi_batch AS b WHERE {on}{bound}', params)
            col_list = ", ".join(f'"{c}"' for c in batch.columns)
            con.execute(f'INSERT INTO "{table}" ({col_list}) SELECT {col_list} FROM _gi_batch')
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
        if self.session is not None and self.session.guard is not None:
            self.session.guard("replace", table, ())
        self.columns(table)

        def run(tx: duckdb.DuckDBPyConnection) -> int:
            tx.execute(f'DELETE FROM "{table}" WHERE {where_sql}', list(params))
            if frame.height:
                with registered(tx, "_gi_batch", frame.to_arrow()):
                    col_list = ", ".join(f'"{c}"' for c in frame.columns)
                    tx.execute(f'INSERT INTO "{table}" ({col_list}) SELECT {col_list} FROM _gi_batch')
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
def size_setting(wh: Warehouse, name: str, value: str, *, lower: bool) -> Iterator[bool]:
    """DuckDB's size setting ``name`` (``memory_limit``, ``checkpoint_threshold``) set to ``value``
    for the duration, then put back; with ``lower`` only lowered (a lower setting already made is
    kept), else only raised. Yields whether it changed the setting."""
    def setting(con: duckdb.DuckDBPyConnection) -> str:
        return str(con.execute(f"SELECT current_setting('{name}')").fetchall()[0][0])

    wanted = _size_bytes(value)
    with wh._lock:
        before = setting(wh.con)
        if (_size_bytes(before) <= wanted) if lower else (_size_bytes(before) >= wanted):
            before = ""
        else:
            wh.con.execute(f"SET {name}='{wanted:.0f}B'")
    try:
        yield bool(before)
    finally:
        if before:
            # DuckDB prints a size rounded down: the default goes back by RESET, a size someone
            # chose by its printed value nudged up (so that it prints the same again instead of
            # drifting down a digit per use)
            default = setting(connect_memory())
            with wh._lock:
                if before == default:
                    wh.con.execute(f"RESET {name}")
                else:
                    wh.con.execute(f"SET {name}='{_size_bytes(before) * 1.0005:.0f}B'")


@contextlib.contextmanager
def memory_capped(wh: Warehouse, cap: str) -> Iterator[None]:
    """DuckDB's ``memory_limit`` lowered to ``cap`` for the duration, then put back.

    DuckDB keeps the blocks it reads cached up to its limit (80 % of RAM by default): a
    collection reading the table it appends to (merges, the hourly rollup) or an export
    streaming every table out would grow that cache with the warehouse, though each step needs
    far less; what does not fit spills to disk. A lower limit already set is kept.
    """
    with size_setting(wh, "memory_limit", cap, lower=True):
        yield

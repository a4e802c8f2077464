"""The one write path: every command that changes a warehouse goes through :func:`writing`.

A write session runs on a :class:`~gpuinsight.warehouse.db.Warehouse` opened read-write, so it
holds the file's lock (DuckDB's, on the file itself) from the open to the close: no other process
reads or writes the file meanwhile; they wait (docs/warehouse.md). Inside the session:

1. one transaction holds everything the command loads (the loaders' own transactions join it),
   the rollups they rebuild, and at the end the model rebuild (:class:`ModelBuilder`);
2. it commits, then checkpoints: the committed state is written into the file and the path is
   checked to still name that file;
3. only then does the command report success. Any failure before the commit (bad input, a full
   disk, out of memory, a kill) leaves the warehouse as it was: DuckDB discards an uncommitted
   transaction, also when the process dies.

The one exception is a collection of many chunks (Prometheus history): it may commit each chunk
whole (:meth:`Warehouse.commit_so_far`), marking the models stale in the same commit, so a
killed backfill keeps its whole chunks and its cursor; the models are rebuilt in the session's
last transaction, or by the next process that opens the warehouse.

The model rebuild is a hook so that a rebuild of only what a load touched can replace the full
one without changing the path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import duckdb

from gpuinsight.errors import RuntimeFailure

if TYPE_CHECKING:
    from gpuinsight.warehouse.db import Warehouse

# What a rebuild from scratch (``demo`` on an existing warehouse) keeps: the schema's bookkeeping
# and reference data (the energy rates with them), and the records of what was done to clusters and reviewed: applied actions
# (what ``rollback`` needs to undo a change), reviewed plans (what ``--apply`` checks a plan file
# against) and stored plans. Every other table is fleet data.
KEPT_BY_REBUILD: frozenset[str] = frozenset({
    "schema_version", "model_state", "mig_profiles", "mig_layouts",
    "energy_rates",  # reference data the user may have set (what a kWh costs and emits per region)
    "applied_actions", "reviewed_plans", "recommendations",
})


class ModelBuilder(Protocol):
    """Rebuilds the materialized models inside the session's transaction."""

    def rebuild(self, con: duckdb.DuckDBPyConnection) -> list[str]:
        """Rebuild from the data now in the transaction; returns the tables built."""
        ...

    def invalidate(self, con: duckdb.DuckDBPyConnection) -> None:
        """Mark the models stale (data was committed they were not rebuilt from)."""
        ...


@dataclass
class WriteSession:
    con: duckdb.DuckDBPyConnection
    models: ModelBuilder | None
    rebuilt: list[str] = field(default_factory=list)
    commits: int = 0  # intermediate commits (commit_so_far)
    # bookkeeping to record once a failed session is rolled back (a collection's "failed" state),
    # each in a transaction of its own; their own failures never hide the session's
    after_rollback: list[Callable[[], None]] = field(default_factory=list)


@contextlib.contextmanager
def writing(wh: Warehouse, models: ModelBuilder | None = None) -> Iterator[WriteSession]:
    """Load inside the block; on leaving it, rebuild ``models``, commit and checkpoint.

    A session opened inside another joins it (the outer one rebuilds and commits)."""
    if wh.read_only:
        raise RuntimeFailure(f"{wh.path}: opened read-only; writing needs it opened read-write")
    if wh.session is not None:
        yield wh.session
        return
    session = WriteSession(wh.con, models)
    try:
        with wh.transaction() as con:
            wh.session = session
            try:
                yield session
                if models is not None:
                    session.rebuilt = models.rebuild(con)
            finally:
                wh.session = None
                wh.schema_changed()  # rebuilt model tables are new tables
    except BaseException:
        for record in session.after_rollback:
            with contextlib.suppress(Exception):
                record()
        raise
    wh.checkpoint()


def data_tables(wh: Warehouse, models: Collection[str] = ()) -> list[str]:
    """The fleet's data tables: every base table but those a rebuild keeps and the ``models``
    (materialized model tables, which the rebuild recreates)."""
    rows = wh.con.execute("SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                          "AND table_schema = 'main' ORDER BY table_name").fetchall()
    return [r[0] for r in rows if r[0] not in KEPT_BY_REBUILD and r[0] not in models]


def clear_tables(wh: Warehouse, tables: Collection[str]) -> None:
    """Empty ``tables`` inside the session's transaction (a rebuild from scratch)."""
    if not wh.in_transaction:
        raise RuntimeFailure("clear_tables outside a write session")  # a bug, not input
    known = set(data_tables(wh))
    for table in tables:
        if table not in known:
            raise RuntimeFailure(f"{table}: not a data table a rebuild may clear")
        wh.con.execute(f'DELETE FROM "{table}"')

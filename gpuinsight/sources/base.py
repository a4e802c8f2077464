"""The loading contract every source declares (after dlt's resource hints), and what a source is
to the facade (:class:`Source`, loaded by :meth:`gpuinsight.api.GpuInsight.load`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal, Protocol

from gpuinsight.errors import RuntimeFailure

if TYPE_CHECKING:
    from gpuinsight.config import Config
    from gpuinsight.warehouse.db import Warehouse

WriteDisposition = Literal["merge", "replace", "append"]


@dataclass(frozen=True)
class LoadContract:
    """How one source feeds one table.

    * ``merge``: upsert by ``primary_key`` (re-running a window rewrites the same rows).
    * ``replace``: the source is a full snapshot of the table's rows for its scope.
    * ``append``: only for immutable facts (never used for samples; re-runs must be safe).

    ``cursor`` names the column whose max is kept in ``ingest_state`` so the next run starts
    from ``cursor - lag`` (late samples and Prometheus' out-of-order window get re-read).
    """

    table: str
    primary_key: tuple[str, ...]
    write_disposition: WriteDisposition = "merge"
    cursor: str | None = None
    lag: timedelta = timedelta(0)
    description: str = ""


@dataclass
class LoadReport:
    source: str
    rows: dict[str, int] = field(default_factory=dict)
    window: tuple[datetime, datetime] | None = None
    notes: list[str] = field(default_factory=list)
    # why the load is not known complete (e.g. a partial answer, cursor held back); None = complete
    incomplete: str | None = None

    def add(self, table: str, n: int) -> None:
        self.rows[table] = self.rows.get(table, 0) + n

    def summary(self) -> str:
        parts = ", ".join(f"{t} {n:,}" for t, n in sorted(self.rows.items())) or "nothing"
        return f"{self.source}: loaded {parts}"


# Tables every load may write besides its contracts': the load bookkeeping (``ingest_state``: each
# source's cursor and status, where incremental state lives), the clusters seen (``clusters``) and
# the kubectl snapshot times (``k8s_snapshots``)
BOOKKEEPING: frozenset[str] = frozenset({"ingest_state", "clusters", "k8s_snapshots"})


class Source(Protocol):
    """A source the facade loads in one write session: its name, the contracts it writes under
    (every table it writes, with its key and write disposition; the cursor of an incremental one),
    and the load itself. The session refuses a write outside the contracts
    (:class:`ContractGuard`)."""

    name: str
    contracts: tuple[LoadContract, ...]

    def load(self, wh: Warehouse, config: Config) -> LoadReport | list[LoadReport]: ...


class ContractGuard:
    """Checks each write of a load against its source's contracts: a ``merge`` into a table
    declared ``merge`` by exactly its primary key, a replacement into a table declared
    ``replace``; bookkeeping tables aside. A write outside them is a bug of the loader (it would
    break re-running a collection), raised before anything is written."""

    def __init__(self, source: str, contracts: Sequence[LoadContract]) -> None:
        self.source = source
        self.by_table: dict[str, list[LoadContract]] = {}
        for c in contracts:
            self.by_table.setdefault(c.table, []).append(c)

    def __call__(self, operation: str, table: str, key: Sequence[str] = ()) -> None:
        if table in BOOKKEEPING:
            return
        declared = self.by_table.get(table)
        if not declared:
            raise RuntimeFailure(f"{self.source}: writes {table}, which none of its loading contracts declares")
        if operation == "merge":
            if not any(c.write_disposition == "merge" and tuple(c.primary_key) == tuple(key) for c in declared):
                raise RuntimeFailure(f"{self.source}: merges into {table} by ({', '.join(key)}), not as its contract "
                                     f"declares: {'; '.join(_shown(c) for c in declared)}")
        elif not any(c.write_disposition == "replace" for c in declared):
            raise RuntimeFailure(f"{self.source}: replaces rows of {table}, whose contract declares "
                                 f"{'; '.join(_shown(c) for c in declared)}")


def _shown(c: LoadContract) -> str:
    return f"{c.write_disposition} by ({', '.join(c.primary_key)})"

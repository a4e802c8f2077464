"""The loading contract every source declares (after dlt's resource hints)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

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

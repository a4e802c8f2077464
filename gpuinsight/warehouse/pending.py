"""What the next model refresh has to rebuild (``model_pending``, migration 020).

Loads note here, in their own transaction, the hours whose samples they changed; a rebuild of the
fleet tables from scratch notes everything. :mod:`gpuinsight.sql.incremental` reads the notes and
empties the table once the models are rebuilt.
"""

from __future__ import annotations

from datetime import datetime

import duckdb


def note_hours(con: duckdb.DuckDBPyConnection, hour_from: datetime, hour_to: datetime) -> None:
    """The samples of the hours in ``[hour_from, hour_to)`` changed."""
    con.execute("INSERT INTO model_pending VALUES (?, ?)", [hour_from, hour_to])


def note_everything(con: duckdb.DuckDBPyConnection) -> None:
    """Data changed in ways no hour range describes (tables emptied): rebuild from scratch."""
    con.execute("INSERT INTO model_pending VALUES (NULL, NULL)")


def pending_hours(con: duckdb.DuckDBPyConnection) -> list[tuple[datetime, datetime]] | None:
    """The hour ranges noted since the last refresh; None when everything is to be rebuilt."""
    rows = con.execute("SELECT hour_from, hour_to FROM model_pending").fetchall()
    if any(a is None or b is None for a, b in rows):
        return None
    return [(a, b) for a, b in rows]


def clear(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("DELETE FROM model_pending")

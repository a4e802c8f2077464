"""Ordered schema migrations from ``queries/schema/NNN_name.sql`` with a version table."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from gpuinsight.errors import RuntimeFailure
from gpuinsight.paths import queries_dir

_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


def migration_files(root: Path | None = None) -> list[tuple[int, str, Path]]:
    folder = (root or queries_dir()) / "schema"
    found = []
    for path in sorted(folder.glob("*.sql")):
        m = _FILE.match(path.name)
        if not m:
            raise RuntimeFailure(f"{path}: migration files must be named NNN_name.sql")
        found.append((int(m.group(1)), m.group(2), path))
    versions = [v for v, _, _ in found]
    if len(set(versions)) != len(versions):
        raise RuntimeFailure(f"{folder}: two migrations share a version number")
    return found


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    # fetchall, not fetchone: a half-read result keeps the connection busy on DuckDB 2.x
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
    ).fetchall()
    if not exists or not exists[0][0]:
        return 0
    rows = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchall()
    return int(rows[0][0]) if rows else 0


def migrate(con: duckdb.DuckDBPyConnection, root: Path | None = None) -> list[int]:
    """Apply every migration newer than the recorded version, each in its own transaction."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )
    current = schema_version(con)
    applied: list[int] = []
    for version, name, path in migration_files(root):
        if version <= current:
            continue
        sql = path.read_text(encoding="utf-8")
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(sql)
            con.execute(
                "INSERT INTO schema_version VALUES (?, ?, now()::TIMESTAMP)", [version, name]
            )
            con.execute("COMMIT")
        except duckdb.Error as exc:
            con.execute("ROLLBACK")
            raise RuntimeFailure(f"{path.name}: migration failed: {exc}") from exc
        applied.append(version)
    return applied

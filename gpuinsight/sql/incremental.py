"""The refresh after a load: rebuild only the hours it changed, and what depends on them.

A full refresh (:meth:`QueryRegistry.refresh`) rebuilds every materialized model from all the
data. After a load of one day into a month, most rows of the hourly models would come out the
same: :class:`IncrementalModels` (the write path's :class:`~gpuinsight.warehouse.writes.ModelBuilder`)
rebuilds those only for the hours that can differ, and everything else as before. What it relies
on, declared in each model's header (:mod:`gpuinsight.sql.registry`):

* a model with ``partition: hour`` yields, given ``hour_from``/``hour_to``, exactly its rows of
  those hours, and its rows of an hour depend only on that hour's rows of the partitioned models
  and sample rollups it reads, and on the rows of the keyed models it reads whose span covers the
  hour (or that share a key with such a row);
* a model with ``key`` names the entity of each row (a pod, a node), ``span`` the ``[start, end)``
  it holds over.

Which hours, for a partitioned model:

1. the hours loads noted since the last refresh (``model_pending``: the hours whose samples and
   rollups they rebuilt);
2. the hours its partitioned dependencies rebuilt;
3. for each keyed dependency, rebuilt whole and compared with the table it replaces: a row gone or
   new adds its span; an entity whose row changed only in its span (a pod that ran on, a node
   seen later) adds only the hours between its old and new start and between its old and new end;
   for a keyed model without a span (the shares of a pod), the spans of the changed entities in
   the dependency with the same key and a span (the pod's allocation), old and new.

A dependency that is neither partitioned nor keyed, a span bound that is NULL, models built by
other definitions, or a rebuild of the fleet tables from scratch (noted by ``clear_tables``) make
it a full rebuild. ``tests/test_incremental.py`` compares every model after random loads,
re-loads and late data with a build from scratch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import duckdb

from gpuinsight.sql.registry import (
    Query,
    QueryRegistry,
    _execute_ddl,
    _table_exists,
    build_slices,
    hour_counts,
    hour_slices,
)
from gpuinsight.warehouse import pending

PREV_SUFFIX = "__prev"
CHANGED_SUFFIX = "__changed"  # the keys whose rows a rebuild changed (any column)
HOUR = timedelta(hours=1)
Range = tuple[datetime, datetime]  # [from, to), whole hours
MAX_RANGES = 48  # more than this many separate ranges are bridged (fewer statements, a few more hours)


@dataclass
class RefreshReport:
    """What the last rebuild did (for notes and benchmarks)."""

    full: bool = True
    why: str = ""
    hours: dict[str, list[Range]] = field(default_factory=dict)  # partitioned model -> hour ranges rebuilt

    def summary(self) -> str:
        if self.full:
            return f"models rebuilt from scratch ({self.why})" if self.why else "models rebuilt from scratch"
        parts = [f"{name} {sum(int((b - a) / HOUR) for a, b in r):,} h" for name, r in self.hours.items()]
        return "models rebuilt for the hours loads changed: " + (", ".join(parts) or "none")


class IncrementalModels:
    """The write path's model rebuild: incremental when it can be (module docstring), else full;
    ``full=True`` asks for a rebuild from scratch."""

    def __init__(self, registry: QueryRegistry, *, full: bool = False) -> None:
        self.registry = registry
        self.full = full
        self.last = RefreshReport()

    def invalidate(self, con: duckdb.DuckDBPyConnection) -> None:
        self.registry.invalidate(con)

    def rebuild(self, con: duckdb.DuckDBPyConnection) -> list[str]:
        why = self._why_full(con)
        if why is not None:
            built = self.registry.refresh(con)
            self.last = RefreshReport(full=True, why=why)
        else:
            built = self._increment(con, pending.pending_hours(con) or [])
        pending.clear(con)
        return built

    def _why_full(self, con: duckdb.DuckDBPyConnection) -> str | None:
        if self.full:
            return "asked"
        if self.registry.status(con) == "outdated":
            return "models built by other definitions, or never"
        if pending.pending_hours(con) is None:
            return "the fleet tables were rebuilt"
        missing = [t for t in self.registry.model_tables() if not _table_exists(con, t)]
        if missing:
            return f"no table {missing[0]}"
        return None

    def _increment(self, con: duckdb.DuckDBPyConnection, noted: list[Range]) -> list[str]:
        reg = self.registry
        order = reg.build_order()
        partitioned_users = {d for q in order if q.partition for d in q.depends}
        report = RefreshReport(full=False)
        built: list[str] = []
        kept: list[str] = []  # the tables replaced, kept until the partitioned models are done
        try:
            for q in order:
                if q.partition:
                    ranges = self._ranges_of(con, q, noted, report.hours)
                    self._build_hours(con, q, ranges)
                    report.hours[q.name] = ranges
                else:
                    if q.name in partitioned_users and q.key:
                        con.execute(f'ALTER TABLE "{q.name}" RENAME TO "{q.name}{PREV_SUFFIX}"')
                        kept.append(q.name)
                    _execute_ddl(con, q)
                    if q.name in kept:
                        _note_changed_keys(con, q)
                built.append(q.name)
        finally:
            for name in kept:
                if _table_exists(con, name + PREV_SUFFIX):
                    con.execute(f'DROP TABLE "{name}{PREV_SUFFIX}"')
                con.execute(f'DROP TABLE IF EXISTS temp."{name}{CHANGED_SUFFIX}"')
        for q in reg.kept_defaults():
            _execute_ddl(con, q, table=q.default_table, params=q.bind({}))
            built.append(q.default_table)
        con.execute("DELETE FROM model_state")
        con.execute("INSERT INTO model_state VALUES (?, now()::TIMESTAMP)", [reg.fingerprint()])
        self.last = report
        return built

    # -- which hours -------------------------------------------------------------------------
    def _ranges_of(self, con: duckdb.DuckDBPyConnection, q: Query, noted: list[Range],
                   done: dict[str, list[Range]]) -> list[Range] | None:
        """The hours of ``q`` to rebuild; None: all of them."""
        found: list[Range] = list(noted)
        read = _columns_read(con, q)
        for name in q.depends:
            dep = self.registry.queries[name]
            if dep.partition:
                if done.get(name) is None:
                    return None
                found += done[name]
            elif dep.span:
                spans = _span_changes(con, dep, read.get(name))
                if spans is None:
                    return None
                found += spans
            elif dep.key:
                spanned = [self.registry.queries[d] for d in q.depends
                           if self.registry.queries[d].span and self.registry.queries[d].key == dep.key]
                if not spanned:
                    return None
                spans = _key_changes(con, dep, spanned[0], read.get(name))
                if spans is None:
                    return None
                found += spans
            elif not dep.key:
                return None  # nothing says which hours it affects
        return _normalize(found)

    def _build_hours(self, con: duckdb.DuckDBPyConnection, q: Query, ranges: list[Range] | None) -> None:
        if ranges is None:  # every hour
            self.registry.build(con, q)
            return
        for lo, hi in ranges:  # a long range (a late load of many days) in slices, as a full build
            con.execute(f'DELETE FROM "{q.name}" WHERE hour >= ? AND hour < ?', [lo, hi])
            build_slices(con, q, hour_slices(hour_counts(con, lo, hi), lo, hi), replace=False)


def _columns_read(con: duckdb.DuckDBPyConnection, q: Query) -> dict[str, set[str]]:
    """The columns of each table the partitioned model ``q`` reads, as DuckDB's optimizer plans
    it (its table scans' projections, and the columns named in the filters pushed into them).
    A change in a column it does not read cannot change its rows. A table the plan does not
    scan (the optimizer may prune one its statistics say cannot contribute now) is absent:
    then every column counts."""
    body = "\n".join(q.text.splitlines()[q.header_lines:])
    try:
        rows = con.execute(f"EXPLAIN (FORMAT JSON) {body}", q.bind({})).fetchall()
        plan = json.loads(rows[0][1])
    except (duckdb.Error, ValueError, IndexError):
        return {}
    read: dict[str, set[str]] = {}

    def walk(node: object) -> None:
        if isinstance(node, list):
            for child in node:
                walk(child)
            return
        if not isinstance(node, dict):
            return
        info = node.get("extra_info")
        if isinstance(info, dict) and isinstance(info.get("Table"), str):
            table = info["Table"].rsplit(".", 1)[-1]
            cols = read.setdefault(table, set())
            projections = info.get("Projections", [])
            cols.update([projections] if isinstance(projections, str) else projections)
            filters = info.get("Filters", "")
            text = " ".join(filters) if isinstance(filters, list) else str(filters)
            cols.update(c for c in _columns(con, table) if re.search(rf"\b{re.escape(c)}\b", text))
        for child in node.values():
            walk(child)

    walk(plan)
    return read


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    rows = con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND schema_name = 'main' "
                       "ORDER BY column_index", [table]).fetchall()
    return [r[0] for r in rows]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _note_changed_keys(con: duckdb.DuckDBPyConnection, q: Query) -> None:
    """The keys of the keyed model ``q`` whose rows its rebuild changed in any column, found once
    (a hash of each row's columns) for every partitioned model that reads it: a temporary table
    ``<model>__changed``. The rows of the other keys are the same before and after, so they drop
    out of every comparison :func:`_changed` makes; two different rows of one key taken for the
    same would need their 64-bit hashes to collide."""
    new, old = _q(q.name), _q(q.name + PREV_SUFFIX)
    keys = ", ".join(_q(k) for k in q.key)
    row = f"{keys}, hash({', '.join(_q(c) for c in _columns(con, q.name))}) AS _h"
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_q(q.name + CHANGED_SUFFIX)} AS "
                f"SELECT DISTINCT {keys} FROM (SELECT {row} FROM {old} EXCEPT ALL SELECT {row} FROM {new} "
                f"UNION ALL (SELECT {row} FROM {new} EXCEPT ALL SELECT {row} FROM {old}))")


def _changed(q: Query, cols: list[str]) -> str:
    """The rows of ``q`` (its columns ``cols``) gone since the table it replaced (side 'old') or
    new in it ('new'): among the rows of the keys its rebuild changed (:func:`_note_changed_keys`)."""
    changed = "temp." + _q(q.name + CHANGED_SUFFIX)
    on = " AND ".join(f"t.{_q(k)} IS NOT DISTINCT FROM c.{_q(k)}" for k in q.key)
    sel = ", ".join(_q(c) for c in cols)
    new, old = (f"(SELECT {sel} FROM {_q(name)} t SEMI JOIN {changed} c ON {on})"
                for name in (q.name, q.name + PREV_SUFFIX))
    return (f"(SELECT 'old' AS _side, * FROM (SELECT * FROM {old} EXCEPT ALL SELECT * FROM {new}) "
            f"UNION ALL SELECT 'new' AS _side, * FROM (SELECT * FROM {new} EXCEPT ALL SELECT * FROM {old}))")


def _compared(con: duckdb.DuckDBPyConnection, q: Query, read: set[str] | None) -> list[str]:
    """The columns of ``q`` whose changes count: its key and span, and what the dependent reads."""
    cols = _columns(con, q.name)
    must = {*q.key, *(q.span or ())}
    return [c for c in cols if read is None or c in read or c in must]


def _span_changes(con: duckdb.DuckDBPyConnection, q: Query, read: set[str] | None) -> list[Range] | None:
    """The hours a changed row of the span model ``q`` moves (module docstring, 3)."""
    assert q.span is not None
    start, end = (_q(c) for c in q.span)
    cols = _compared(con, q, read)
    rest = [c for c in cols if c not in q.key and c not in q.span]
    on = " AND ".join(f"o.{_q(k)} IS NOT DISTINCT FROM n.{_q(k)}" for k in q.key)
    same = " AND ".join([f"o.{_q(c)} IS NOT DISTINCT FROM n.{_q(c)}" for c in rest] or ["true"])
    sql = f"""
        WITH c AS {_changed(q, cols)},
        j AS (
            SELECT o._side IS NOT NULL AS had, n._side IS NOT NULL AS has, ({same}) AS same,
                   o.{start} AS os, o.{end} AS oe, n.{start} AS ns, n.{end} AS ne
            FROM (SELECT * FROM c WHERE _side = 'old') o
            FULL JOIN (SELECT * FROM c WHERE _side = 'new') n ON {on}
        )
        SELECT least(os, ns), greatest(os, ns) FROM j WHERE had AND has AND same AND os IS DISTINCT FROM ns
        UNION ALL SELECT least(oe, ne), greatest(oe, ne) FROM j WHERE had AND has AND same AND oe IS DISTINCT FROM ne
        UNION ALL SELECT os, oe FROM j WHERE had AND NOT (has AND same)
        UNION ALL SELECT ns, ne FROM j WHERE has AND NOT (had AND same)
    """
    return _as_ranges(con.execute(sql).fetchall())


def _key_changes(con: duckdb.DuckDBPyConnection, q: Query, spanned: Query, read: set[str] | None
                 ) -> list[Range] | None:
    """The spans, old and new, in ``spanned`` of the entities whose rows of ``q`` changed."""
    assert spanned.span is not None
    keys = ", ".join(_q(k) for k in q.key)
    start, end = (_q(c) for c in spanned.span)
    sql = f"""
        WITH k AS (SELECT DISTINCT {keys} FROM {_changed(q, _compared(con, q, read))})
        SELECT s.{start}, s.{end} FROM {_q(spanned.name + PREV_SUFFIX)} s SEMI JOIN k USING ({keys})
        UNION ALL
        SELECT s.{start}, s.{end} FROM {_q(spanned.name)} s SEMI JOIN k USING ({keys})
    """
    return _as_ranges(con.execute(sql).fetchall())


def _as_ranges(rows: Iterable[tuple[datetime | None, datetime | None]]) -> list[Range] | None:
    """Time spans -> the hours they touch, ``[floor to the hour, the end)``; None if unbounded."""
    out: list[Range] = []
    for lo, hi in rows:
        if lo is None or hi is None:
            return None
        if hi > lo:
            out.append((lo.replace(minute=0, second=0, microsecond=0), hi))
    return out


def _normalize(ranges: list[Range]) -> list[Range]:
    """Whole hours, sorted, overlapping and adjacent ranges merged; at most MAX_RANGES."""
    hours = []
    for lo, hi in ranges:
        lo = lo.replace(minute=0, second=0, microsecond=0)
        top = hi.replace(minute=0, second=0, microsecond=0)
        hours.append((lo, top if top == hi else top + HOUR))
    merged: list[list[datetime]] = []
    for lo, hi in sorted(hours):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    while len(merged) > MAX_RANGES:  # bridge the smallest gap
        i = min(range(len(merged) - 1), key=lambda j: merged[j + 1][0] - merged[j][1])
        merged[i][1] = merged[i + 1][1]
        del merged[i + 1]
    return [(a, b) for a, b in merged]

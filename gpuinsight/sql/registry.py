"""Load ``queries/*.sql`` by name and run them with bound parameters.

Each file opens with a header of ``-- key: value`` lines::

    -- name: gpu_hourly_utilization
    -- grain: one row per GPU (or MIG instance) per hour
    -- param: since TIMESTAMP = NULL -- start of the window (inclusive)
    -- param: by VARCHAR IN (namespace, queue) = namespace -- a parameter taking only these values
    -- depends: allocation_hourly
    -- materialize: table
    -- columns: cluster, node, gpu, hour, gr_active_mean, ...
    -- partition: hour
    -- key: cluster, uid
    -- span: start_ts, end_ts
    -- description: what it answers; continuation lines start with "--   ".

Parameters are referenced in the body as ``$name`` and always bound, never pasted. A model
with ``materialize: table`` is built into a table of the same name by :meth:`refresh`, in
dependency order, so the models that read it stay simple and fast. A model with parameters and
``materialize: default`` keeps its answer for the default parameters (usually: the whole
window) in a table ``<name>__default`` built by :meth:`refresh` after the tables; asked with
the defaults it is read from there, asked with other values it runs. For the costly models
every rule and the report read (each would otherwise scan the raw samples per command). Errors
from DuckDB are reported as ``file.sql:LINE`` because the body is run with its header, line for
line. ``columns`` lists what the model returns, in order: every answer is checked against it
(a model that returns other columns is a bug, reported at its ``columns`` line), so the readers
of a model (rules, reports) can rely on its header.

A materialized model may say how a refresh rebuilds it after a load (sql/incremental.py):
``partition: hour`` (its rows belong to clock hours: it takes exactly the parameters
``hour_from`` and ``hour_to`` and, given them, yields only the rows of the hours in
``[hour_from, hour_to)``; NULL is unbounded), ``key`` (the columns that name the entity a row is
about, e.g. a pod) and ``span`` (two timestamp columns: the row holds over ``[start, end)``).
The same contract lets a build from scratch of a partitioned model run in slices of hours
(:func:`hour_slices`), one statement each, so what a statement holds in memory is bounded by the
samples of its slice, not of the whole window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from gpuinsight.errors import BadInput, NotFound, RuntimeFailure
from gpuinsight.paths import queries_dir
from gpuinsight.warehouse.db import to_polars

_HEADER = re.compile(r"^--\s*([a-z_]+):\s*(.*)$")
_CONT = re.compile(r"^--\s{2,}(.*)$")
_PARAM = re.compile(
    r"^(?P<name>[a-z_][a-z0-9_]*)\s+(?P<type>[A-Z]+)(?:\s+IN\s*\((?P<choices>[^)]*)\))?"
    r"(?:\s*=\s*(?P<default>[^-]+?))?\s*(?:--\s*(?P<help>.*))?$"
)
_REF = re.compile(r"\$([a-z_][a-z0-9_]*)")
_LINE = re.compile(r"LINE (\d+):")
_TYPES = {"TIMESTAMP", "DATE", "VARCHAR", "DOUBLE", "INTEGER", "BOOLEAN", "INTERVAL"}
STALE_SUFFIX = ":stale"  # model_state.fingerprint of models a later load left behind (invalidate)
# the parameters of a model partitioned by hour: the hours [hour_from, hour_to) to build
PARTITION_PARAMS = (("hour_from", "TIMESTAMP", None), ("hour_to", "TIMESTAMP", None))
# A partitioned model is built one slice of whole hours at a time, each holding at most this many
# DCGM samples (an hour holding more is a slice of its own). Why this many: a statement's memory
# grows with the samples it reads (energy_hourly's per-step aggregate and windows are held outside
# DuckDB's memory limit), and each statement has a fixed cost (the allocations and keys it joins
# are read again); docs/models.md, "Built in slices of hours", has the figures.
SLICE_SAMPLES = 8_000_000
Slice = tuple[datetime | None, datetime | None]  # [hour_from, hour_to); None: unbounded


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()  # ``IN (a, b, c)`` in the declaration: the only values taken

    def coerce(self, value: Any) -> Any:
        """Turn a CLI string (or a Python value) into the declared type."""
        if value is None or (isinstance(value, str) and value.lower() in ("", "null", "none")):
            return None
        if self.choices and str(value) not in self.choices:
            raise BadInput(f"parameter {self.name}: {str(value)[:60]!r} is not one of {', '.join(self.choices)}")
        if not isinstance(value, str):
            return value
        try:
            if self.type == "TIMESTAMP":
                return _parse_time(value)
            if self.type == "DATE":
                return date.fromisoformat(value)
            if self.type == "DOUBLE":
                return float(value)
            if self.type == "INTEGER":
                return int(value)
            if self.type == "BOOLEAN":
                if value.lower() in ("true", "1", "yes"):
                    return True
                if value.lower() in ("false", "0", "no"):
                    return False
                raise ValueError(value)
            if self.type == "INTERVAL":
                return parse_duration(value)
        except ValueError as exc:
            raise BadInput(f"parameter {self.name}: {value!r} is not a valid {self.type}") from exc
        return value


@dataclass(frozen=True)
class Query:
    name: str
    path: Path
    grain: str
    description: str
    params: tuple[Param, ...]
    depends: tuple[str, ...]
    materialize: bool
    text: str
    header_lines: int = field(default=0)
    keep_default: bool = False  # materialize: default (see the module's docstring)
    columns: tuple[str, ...] = ()  # what every answer holds, in order (``-- columns:``)
    columns_line: int = 0
    partition: str | None = None          # "hour": rebuilt hour by hour (module docstring)
    key: tuple[str, ...] = ()             # the entity a row is about
    span: tuple[str, str] | None = None   # [start, end) columns of the row's time span

    def check_columns(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` when it has the declared columns in their order; else RuntimeFailure naming
        the first difference at the header's ``columns`` line."""
        got = tuple(frame.columns)
        if got != self.columns:
            missing = [c for c in self.columns if c not in got]
            extra = [c for c in got if c not in self.columns]
            what = (f"does not return {', '.join(missing)}" if missing else
                    f"returns {', '.join(extra)}, not declared" if extra else
                    f"returns its columns in another order ({', '.join(got)})")
            raise RuntimeFailure(f"{self.path.name}:{self.columns_line}: {what} (columns: {', '.join(self.columns)})")
        return frame

    @property
    def default_table(self) -> str:
        return f"{self.name}__default"

    def bind(self, values: dict[str, Any]) -> dict[str, Any]:
        known = {p.name: p for p in self.params}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise BadInput(
                f"{self.name}: unknown parameter(s) {', '.join(unknown)}; "
                f"known: {', '.join(known) or 'none'}"
            )
        bound = {}
        for p in self.params:
            bound[p.name] = p.coerce(values[p.name]) if p.name in values else p.coerce(p.default)
        return bound


def parse_duration(text: str) -> timedelta:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    n = float(m.group(1))
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
    return timedelta(seconds=n * unit)


def _parse_time(text: str) -> datetime:
    text = text.strip()
    try:
        return datetime.now().astimezone().replace(tzinfo=None) - parse_duration(text)
    except ValueError:
        pass
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is not None:
        from datetime import UTC

        dt = dt.astimezone(UTC).replace(tzinfo=None)
    return dt


def parse_query_file(path: Path) -> Query:
    text = path.read_text(encoding="utf-8")
    meta: dict[str, str] = {}
    params: list[Param] = []
    last_key = None
    header_lines = 0
    lines_of: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.startswith("--"):
            break
        header_lines = lineno
        cont = _CONT.match(line)
        m = _HEADER.match(line)
        if m and not cont:
            key, value = m.group(1), m.group(2).strip()
            last_key = key
            if key == "param":
                pm = _PARAM.match(value)
                if not pm or pm.group("type") not in _TYPES:
                    raise RuntimeFailure(f"{path.name}:{lineno}: bad param declaration {value!r}")
                default = (pm.group("default") or "NULL").strip()
                choices = tuple(c.strip() for c in (pm.group("choices") or "").split(",") if c.strip())
                if choices and default.upper() != "NULL" and default not in choices:
                    raise RuntimeFailure(f"{path.name}:{lineno}: default {default!r} is not one of its choices")
                params.append(
                    Param(pm.group("name"), pm.group("type"), None if default.upper() == "NULL" else default,
                          (pm.group("help") or "").strip(), choices)
                )
            else:
                meta[key] = value
                lines_of.setdefault(key, lineno)
        elif cont and last_key and last_key != "param":
            meta[last_key] = (meta.get(last_key, "") + " " + cont.group(1).strip()).strip()
    for required in ("name", "grain", "columns", "description"):
        if not meta.get(required):
            raise RuntimeFailure(f"{path.name}:1: header lacks '-- {required}:'")
    if meta["name"] != path.stem:
        raise RuntimeFailure(f"{path.name}:1: name {meta['name']!r} differs from the file name")
    body = "\n".join(text.splitlines()[header_lines:])
    referenced = set(_REF.findall(_strip_comments(body)))
    declared = {p.name for p in params}
    if referenced - declared:
        raise RuntimeFailure(f"{path.name}: uses undeclared parameter(s) {sorted(referenced - declared)}")
    if declared - referenced:
        raise RuntimeFailure(f"{path.name}: declares unused parameter(s) {sorted(declared - referenced)}")
    how = meta.get("materialize", "").strip()
    if how not in ("", "table", "default"):
        raise RuntimeFailure(f"{path.name}: materialize is 'table' or 'default', not {how!r}")
    materialize = how == "table"
    partition = meta.get("partition", "").strip() or None
    if partition not in (None, "hour"):
        raise RuntimeFailure(f"{path.name}: partition is 'hour', not {partition!r}")
    if partition and not materialize:
        raise RuntimeFailure(f"{path.name}: only a materialized model (materialize: table) is partitioned")
    if partition and [(p.name, p.type, p.default) for p in params] != [p for p in PARTITION_PARAMS]:
        raise RuntimeFailure(f"{path.name}: a model partitioned by hour takes exactly the parameters "
                             "hour_from TIMESTAMP = NULL and hour_to TIMESTAMP = NULL")
    if materialize and params and not partition:
        raise RuntimeFailure(f"{path.name}: a materialized model cannot take parameters")
    key = tuple(k.strip() for k in meta.get("key", "").split(",") if k.strip())
    span = tuple(s.strip() for s in meta.get("span", "").split(",") if s.strip())
    if span and (len(span) != 2 or not key):
        raise RuntimeFailure(f"{path.name}: span names two columns (start, end) of a model with a key")
    depends = tuple(d.strip() for d in meta.get("depends", "").split(",") if d.strip())
    columns = tuple(c.strip() for c in meta["columns"].split(","))
    if not all(re.fullmatch(r"[a-z_][a-z0-9_]*", c) for c in columns) or len(set(columns)) != len(columns):
        raise RuntimeFailure(f"{path.name}:{lines_of['columns']}: columns must be distinct lower-case names, "
                             f"comma-separated")
    return Query(meta["name"], path, meta["grain"], meta["description"], tuple(params), depends,
                 materialize, text, header_lines, keep_default=how == "default", columns=columns,
                 columns_line=lines_of["columns"], partition=partition, key=key,
                 span=(span[0], span[1]) if span else None)


def _strip_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


class QueryRegistry:
    def __init__(self, queries: dict[str, Query]) -> None:
        self.queries = queries
        for q in queries.values():
            for dep in q.depends:
                if dep not in queries:
                    raise RuntimeFailure(f"{q.path.name}: depends on unknown model {dep!r}")
                if not queries[dep].materialize:
                    raise RuntimeFailure(f"{q.path.name}: depends on {dep!r}, which is not materialized")

    def __contains__(self, name: str) -> bool:
        return name in self.queries

    def get(self, name: str) -> Query:
        try:
            return self.queries[name]
        except KeyError:
            raise NotFound(f"no query named {name!r}; try one of: {', '.join(sorted(self.queries))}") from None

    def names(self) -> list[str]:
        return sorted(self.queries)

    def build_order(self) -> list[Query]:
        """Materialized models, dependencies first."""
        order: list[Query] = []
        seen: set[str] = set()

        def visit(q: Query, stack: tuple[str, ...]) -> None:
            if q.name in stack:
                raise RuntimeFailure(f"{q.path.name}: dependency cycle {' -> '.join((*stack, q.name))}")
            if q.name in seen:
                return
            for dep in q.depends:
                visit(self.queries[dep], (*stack, q.name))
            seen.add(q.name)
            if q.materialize:
                order.append(q)

        for name in sorted(self.queries):
            visit(self.queries[name], ())
        return order

    def run(self, con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> pl.DataFrame:
        q = self.get(name)
        if q.materialize:
            if params:
                raise BadInput(f"{name}: takes no parameters")
            return q.check_columns(_execute(con, q, f'SELECT * FROM "{q.name}"', {}, body_is_file=False))
        bound = q.bind(params)
        # a warehouse refreshed before this model kept its answer has no such table: run it (asked
        # first, not tried: inside a transaction a failed statement would abort the transaction)
        if q.keep_default and bound == q.bind({}) and _table_exists(con, q.default_table):
            # in the model's own ORDER BY
            return q.check_columns(to_polars(con, f'SELECT * FROM "{q.default_table}"'))
        return q.check_columns(_execute(con, q, q.text, bound))

    def kept_defaults(self) -> list[Query]:
        """The models whose default answer :meth:`refresh` keeps (``materialize: default``)."""
        return [self.queries[n] for n in sorted(self.queries) if self.queries[n].keep_default]

    def fingerprint(self) -> str:
        """A hash of every materialized model's SQL: changes when a model's definition does."""
        import hashlib

        digest = hashlib.sha256()
        for q in (*self.build_order(), *self.kept_defaults()):
            digest.update(q.name.encode() + b"\0" + q.text.encode() + b"\0")
        return digest.hexdigest()[:16]

    @staticmethod
    def build(con: duckdb.DuckDBPyConnection, q: Query, slices: list[Slice] | None = None) -> str:
        """Build one model's table: a materialized model's (a partitioned one slice by slice:
        ``slices``, by default :func:`hour_slices` of all the samples), or the default answer a
        model keeps (``materialize: default``); returns the table's name. What it reads must be built."""
        if q.partition:
            build_slices(con, q, hour_slices(hour_counts(con)) if slices is None else slices, replace=True)
            return q.name
        if q.materialize:
            _execute_ddl(con, q, params=q.bind({}) if q.params else None)
            return q.name
        if not q.keep_default:
            raise RuntimeFailure(f"{q.path.name}: neither materialized nor keeping its default answer")
        _execute_ddl(con, q, table=q.default_table, params=q.bind({}))
        return q.default_table

    def refresh(self, con: duckdb.DuckDBPyConnection) -> list[str]:
        """(Re)build every materialized model, then the default answers kept (they may read any
        materialized model), and record the models' fingerprint; the caller owns the transaction."""
        slices = hour_slices(hour_counts(con))  # the same for every partitioned model
        built = [self.build(con, q, slices) for q in (*self.build_order(), *self.kept_defaults())]
        con.execute("DELETE FROM model_state")
        con.execute("INSERT INTO model_state VALUES (?, now()::TIMESTAMP)", [self.fingerprint()])
        return built

    def rebuild(self, con: duckdb.DuckDBPyConnection) -> list[str]:
        """The write path's model rebuild (:class:`gpuinsight.warehouse.writes.ModelBuilder`)."""
        return self.refresh(con)

    def invalidate(self, con: duckdb.DuckDBPyConnection) -> None:
        """Mark the models stale: data they were not built from is being committed."""
        con.execute(f"UPDATE model_state SET fingerprint = fingerprint || '{STALE_SUFFIX}' "
                    f"WHERE NOT ends_with(fingerprint, '{STALE_SUFFIX}')")

    def status(self, con: duckdb.DuckDBPyConnection) -> str:
        """``current``; ``stale`` (built from these definitions, but a load committed data since
        without rebuilding them: an interrupted collection); ``outdated`` (built from other
        definitions, or never)."""
        try:
            rows = con.execute("SELECT fingerprint FROM model_state").fetchall()
        except duckdb.CatalogException:  # a warehouse older than the table (read-only: not migrated)
            return "outdated"
        found = rows[0][0] if rows else None
        if found == self.fingerprint():
            return "current"
        return "stale" if found == self.fingerprint() + STALE_SUFFIX else "outdated"

    def is_current(self, con: duckdb.DuckDBPyConnection) -> bool:
        """Were the materialized models built from these definitions and the data there is?"""
        return self.status(con) == "current"

    def model_tables(self) -> list[str]:
        """Every table :meth:`refresh` builds."""
        return [q.name for q in self.build_order()] + [q.default_table for q in self.kept_defaults()]


def _table_exists(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    rows = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND schema_name = 'main'",
                       [table]).fetchall()
    return bool(rows and rows[0][0])


def _error_location(q: Query, exc: duckdb.Error, offset: int = 0) -> str:
    msg = str(exc).splitlines()[0]
    m = _LINE.search(str(exc))
    line = int(m.group(1)) + offset if m else q.header_lines + 1
    return f"{q.path.name}:{line}: {msg}"


def _execute(
    con: duckdb.DuckDBPyConnection, q: Query, sql: str, params: dict[str, Any], *, body_is_file: bool = True
) -> pl.DataFrame:
    try:
        return to_polars(con, sql, params or None)
    except duckdb.CatalogException as exc:
        if not body_is_file:
            raise BadInput(f"{q.name}: not built yet; load data first (gpuinsight demo / collect)") from exc
        raise RuntimeFailure(_error_location(q, exc)) from exc
    except duckdb.Error as exc:
        raise RuntimeFailure(_error_location(q, exc)) from exc


def _execute_ddl(con: duckdb.DuckDBPyConnection, q: Query, *, table: str | None = None,
                 params: dict[str, Any] | None = None) -> None:
    _execute_write(con, q, f'CREATE OR REPLACE TABLE "{table or q.name}" AS', params)


def _execute_write(con: duckdb.DuckDBPyConnection, q: Query, head: str, params: dict[str, Any] | None) -> None:
    """``head`` (CREATE ... AS, INSERT INTO ...) + newline + the model's text: the header is comment
    lines, so the lines keep their numbers + 1, and an error names the model's file and line."""
    try:
        con.execute(f'{head}\n{q.text.rstrip().rstrip(";")}', params or None)
    except duckdb.Error as exc:
        raise RuntimeFailure(_error_location(q, exc, offset=-1)) from exc


def hour_counts(con: duckdb.DuckDBPyConnection, lo: datetime | None = None, hi: datetime | None = None
                ) -> list[tuple[datetime, int]]:
    """DCGM samples per clock hour in ``[lo, hi)`` (None: unbounded), in hour order: from the
    hourly rollup (``gpu_hourly_facts.samples``), a tenth of the samples' rows or less."""
    if not _table_exists(con, "gpu_hourly_facts"):
        return []
    return con.execute(
        "SELECT hour, coalesce(sum(samples), 0)::BIGINT FROM gpu_hourly_facts "
        "WHERE hour >= coalesce(?::TIMESTAMP, '-infinity'::TIMESTAMP) AND hour < coalesce(?::TIMESTAMP, 'infinity'::TIMESTAMP) "
        "GROUP BY hour ORDER BY hour", [lo, hi]).fetchall()


def hour_slices(counts: list[tuple[datetime, int]], lo: datetime | None = None, hi: datetime | None = None,
                limit: int | None = None) -> list[Slice]:
    """``[lo, hi)`` cut at whole hours into consecutive slices of at most ``limit`` samples each
    (``SLICE_SAMPLES``; ``counts``: :func:`hour_counts`), an hour holding more being a slice of its
    own. The first slice starts at ``lo`` and the last ends at ``hi`` (None: unbounded), so
    together they cover the range whatever lies outside the samples' span (a node or a pod before
    the first sample or after the last)."""
    limit = SLICE_SAMPLES if limit is None else limit
    cuts: list[datetime] = []
    held = 0
    for hour, n in counts:
        if (lo is not None and hour < lo) or (hi is not None and hour >= hi):
            continue
        if held and held + n > limit:
            cuts.append(hour)
            held = 0
        held += n
    bounds: list[datetime | None] = [lo, *cuts, hi]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def build_slices(con: duckdb.DuckDBPyConnection, q: Query, slices: list[Slice], *, replace: bool) -> None:
    """The rows of the partitioned model ``q`` for the hours of ``slices``, one statement per
    slice, in the caller's transaction: with ``replace`` the first slice creates the table anew
    (the rest are inserted), else every slice is inserted (the caller deleted those hours)."""
    for i, (lo, hi) in enumerate(slices):
        head = f'CREATE OR REPLACE TABLE "{q.name}" AS' if replace and i == 0 else f'INSERT INTO "{q.name}"'
        _execute_write(con, q, head, q.bind({"hour_from": lo, "hour_to": hi}))


def load_registry(root: Path | None = None) -> QueryRegistry:
    folder = root or queries_dir()
    queries = {}
    for path in sorted(folder.glob("*.sql")):
        q = parse_query_file(path)
        queries[q.name] = q
    return QueryRegistry(queries)

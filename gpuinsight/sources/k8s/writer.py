"""Objects -> rows -> one transaction of coalescing merges (shared by the dump and live paths).

Rows merge by natural key. Pods (and every other table here) *coalesce*: a field the new
batch leaves NULL keeps what an earlier load (e.g. Prometheus history) stored, ``first_seen``
keeps the earliest and ``last_seen`` the latest value. Re-loading the same objects therefore
leaves the same rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import duckdb
import polars as pl

from gpuinsight.errors import BadInput
from gpuinsight.sources.base import LoadReport
from gpuinsight.sources.k8s.checks import checked_rows
from gpuinsight.sources.k8s.common import MapContext, MapError, to_json, utcnow
from gpuinsight.sources.k8s.dumpfile import item_label
from gpuinsight.sources.k8s.kinds import BY_STEM, KINDS, Kind
from gpuinsight.sources.k8s.nodes import eks_nodegroup_rows
from gpuinsight.sources.prices import catalog_gpu_facts
from gpuinsight.warehouse.db import Warehouse, registered, to_polars

STALE_NOTE_AFTER = timedelta(days=1)
_DUCK_TO_POLARS: dict[str, pl.DataType] = {
    "VARCHAR": pl.Utf8(), "JSON": pl.Utf8(), "INTEGER": pl.Int32(), "BIGINT": pl.Int64(),
    "DOUBLE": pl.Float64(), "BOOLEAN": pl.Boolean(), "TIMESTAMP": pl.Datetime("us"), "DATE": pl.Date(),
}
_LEAST = ("first_seen", "first_ts")
# snapshot_at: a read earlier than the one stored (an older dump loaded after) never moves it back
_GREATEST = ("last_seen", "last_ts", "snapshot_at")
# API groups besides the kind's own: events.k8s.io Events, and the kube-batch group Volcano's
# PodGroups and Queues had before v0.2 (scheduling.incubator.k8s.io/v1alpha1, e.g. volcano#153).
_EXPECTED_GROUPS = {"events": ("", "events.k8s.io"), "pdbs": ("policy",),
                    "podgroups": ("scheduling.volcano.sh", "scheduling.incubator.k8s.io"),
                    "queues": ("scheduling.volcano.sh", "scheduling.incubator.k8s.io")}


def table_schema(wh: Warehouse, table: str) -> dict[str, pl.DataType]:
    rows = wh.con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
        "ORDER BY ordinal_position", [table]).fetchall()
    return {name: _DUCK_TO_POLARS.get(str(dtype), pl.Utf8()) for name, dtype in rows}


def _check_kind(kind: Kind, item: dict[str, Any]) -> None:
    declared = item.get("kind")
    if declared is None:
        # kubectl writes every item's kind (typed lists and the API's own lists get theirs
        # filled in by the readers): an item without one is not what this file should hold
        raise MapError("kind", f"missing (expected {kind.kind})")
    if declared != kind.kind:
        raise MapError("kind", f"expected {kind.kind}, got {str(declared)[:40]!r}")
    api = item.get("apiVersion")
    if isinstance(api, str) and api:
        group = api.rpartition("/")[0]
        if group not in _EXPECTED_GROUPS.get(kind.stem, (kind.group,)):
            raise MapError("apiVersion", f"expected {kind.group or 'v1'} objects, got {api!r}")


def map_objects(kind: Kind, objects: Sequence[dict[str, Any]], ctx: MapContext, origin: str) -> list[dict[str, Any]]:
    rows = []
    for i, obj in enumerate(objects):
        try:
            _check_kind(kind, obj)
            rows.append(kind.mapper(obj, ctx))
        except MapError as exc:
            raise BadInput(f"{origin}: item {i} ({item_label(obj)}): {exc}") from None
        except (TypeError, ValueError, AttributeError) as exc:  # a shape no field check foresaw
            raise BadInput(f"{origin}: item {i} ({item_label(obj)}): malformed object: {exc}") from None
    return rows


def _resolve_queues(wh: Warehouse, con: duckdb.DuckDBPyConnection, cluster: str,
                    rows: dict[str, list[dict[str, Any]]]) -> None:
    """Fill a pod's queue from its PodGroup, else its Volcano Job (this batch, then the warehouse)."""
    pods = [p for p in rows.get("pods", []) if not p["queue"] and (p["podgroup"] or p["vcjob"])]
    if not pods:
        return
    groups = {(r["namespace"], r["name"]): r["queue"] for r in rows.get("podgroups", []) if r["queue"]}
    jobs = {(r["namespace"], r["name"]): r["queue"] for r in rows.get("vcjobs", []) if r["queue"]}
    for table, known in (("podgroups", groups), ("vcjobs", jobs)):
        for ns, name, queue in con.execute(
            f'SELECT namespace, name, queue FROM "{table}" WHERE cluster = ? AND queue IS NOT NULL', [cluster]
        ).fetchall():
            known.setdefault((ns, name), queue)
    for p in pods:
        p["queue"] = groups.get((p["namespace"], p["podgroup"])) or jobs.get((p["namespace"], p["vcjob"]))


def coalesce_merge(wh: Warehouse, con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame,
                   key: Sequence[str]) -> int:
    """Upsert where the new batch's non-NULL values win and NULLs keep the stored value."""
    if frame.height == 0:
        return 0
    frame = frame.unique(subset=list(key), keep="last", maintain_order=True)
    cols = frame.columns
    select = []
    for c in cols:
        if c in key:
            select.append(f'b."{c}"')
        elif c in _LEAST:
            select.append(f'least(b."{c}", t."{c}") AS "{c}"')
        elif c in _GREATEST:
            select.append(f'greatest(b."{c}", t."{c}") AS "{c}"')
        else:
            select.append(f'coalesce(b."{c}", t."{c}") AS "{c}"')
    on = " AND ".join(f't."{k}" = b."{k}"' for k in key)
    with registered(con, "_gi_new", frame.to_arrow()):
        merged = to_polars(con, f'SELECT {", ".join(select)} FROM _gi_new AS b LEFT JOIN "{table}" AS t ON {on}')
    return wh.merge(table, merged.cast(dict(frame.schema)), key, con=con)


def _frame(wh: Warehouse, table: str, rows: list[dict[str, Any]], observed_at: datetime) -> pl.DataFrame:
    schema = table_schema(wh, table)
    clean = []
    for row in rows:
        alive = row.pop("_alive", False)
        if alive and row.get("last_seen") is None:
            row["last_seen"] = observed_at
        if "snapshot_at" in schema:  # this read listed it: it is in the newest snapshot of its kind
            row["snapshot_at"] = observed_at
        clean.append(row)
    used = {c: t for c, t in schema.items() if clean and c in clean[0]}
    return pl.DataFrame(clean, schema=used, orient="row") if clean else pl.DataFrame(schema=used)


def write_objects(
    wh: Warehouse,
    ctx: MapContext,
    objects: dict[str, tuple[str, Sequence[dict[str, Any]]]],
    report: LoadReport,
    *,
    scope: str,
    fallback_time: datetime | None = None,
) -> LoadReport:
    """Map every kind's objects, then write all tables in one transaction.

    ``objects`` maps a kind's stem to (origin for messages, objects). Nothing is written if
    any object is malformed.
    """
    rows: dict[str, list[dict[str, Any]]] = {}
    if ctx.instance_facts is None:
        with wh._lock:
            ctx.instance_facts = catalog_gpu_facts(wh.con)
    for kind in KINDS:
        if kind.stem in objects:
            origin, items = objects[kind.stem]
            rows[kind.stem] = checked_rows(kind, items, map_objects(kind, items, ctx, origin), ctx, origin, report)
    # when the objects were read (a live read, or a dump's --as-of / file time), never the newest
    # timestamp inside them: an object untouched for months is still there when it was read
    observed_at = ctx.observed_at or fallback_time or utcnow()
    if ctx.latest is not None and observed_at - ctx.latest > STALE_NOTE_AFTER and ctx.source == "dump":
        report.notes.append(
            f"the newest timestamp inside these objects is {ctx.latest:%Y-%m-%d %H:%M}, "
            f"{(observed_at - ctx.latest).days} day(s) before they were read ({observed_at:%Y-%m-%d %H:%M}); "
            "objects in it count as present then (give --as-of if the dump was taken at another time)")
    extra_pools = eks_nodegroup_rows(rows.get("nodes", []), ctx)
    run_id = uuid.uuid4().hex
    with wh.transaction() as con:
        _resolve_queues(wh, con, ctx.cluster, rows)
        for kind in KINDS:
            if kind.stem not in rows:
                continue
            table = kind.contract.table
            frame = _frame(wh, table, rows[kind.stem], observed_at)
            report.add(table, coalesce_merge(wh, con, table, frame, kind.contract.primary_key))
        if extra_pools:
            existing = {r[0] for r in con.execute(
                "SELECT name FROM node_pools WHERE cluster = ? AND kind = 'eks-nodegroup'", [ctx.cluster]).fetchall()}
            new = [r for r in extra_pools if r["name"] not in existing]
            frame = _frame(wh, "node_pools", new, observed_at)
            report.add("node_pools", coalesce_merge(wh, con, "node_pools", frame, BY_STEM["nodepools"].contract.primary_key))
        for stem in rows:  # the newest read of each kind (an older dump loaded later does not win)
            con.execute(
                "INSERT INTO k8s_snapshots VALUES (?, ?, ?, ?) ON CONFLICT (cluster, kind) DO UPDATE SET "
                "source = CASE WHEN excluded.observed_at >= observed_at THEN excluded.source ELSE source END, "
                "observed_at = greatest(observed_at, excluded.observed_at)",
                [ctx.cluster, stem, observed_at, ctx.source])
        clusters = pl.DataFrame([{"cluster": ctx.cluster, "first_seen": observed_at, "last_seen": observed_at}],
                                schema=table_schema(wh, "clusters"))
        coalesce_merge(wh, con, "clusters", clusters, ("cluster",))
        state = pl.DataFrame([{
            "source": f"kubernetes:{ctx.source}", "scope": scope, "cursor": observed_at, "run_id": run_id,
            "status": "complete", "rows_loaded": sum(report.rows.values()),
            "details": to_json({"cluster": ctx.cluster, "rows": report.rows, "notes": report.notes}),
            "updated_at": utcnow(),
        }], schema=table_schema(wh, "ingest_state"))
        wh.merge("ingest_state", state, ("source", "scope"), con=con)
    report.window = (observed_at, observed_at)
    return report

"""Export warehouse tables as hive-partitioned Parquet (cluster=/day=) for Athena, Trino, Spark;
and open such a lake again for querying in place.

Rows stream from DuckDB as Arrow record batches into ``pyarrow.dataset.write_dataset``; the
partitions being written are replaced, so re-exporting the same data is idempotent. A day
partition is written only when its rows changed since it was last written there, or its file is
gone: each (table, cluster) folder holds a manifest (``_gpuinsight_export.json``; readers skip
files starting with ``_``) with every day's row count and the sum of its rows' hashes, so a daily
export costs the days a load changed, not the whole history (``full=True`` writes every one). For
``s3://bucket/prefix`` the dataset is written to a temporary folder and uploaded with boto3
(credentials and endpoint come from the usual AWS configuration, e.g. ``AWS_ENDPOINT_URL``);
objects left in a rewritten partition by an earlier export are deleted, so S3 is idempotent
too. Several clusters can export into one prefix: each writes only its own ``cluster=`` folders.

``open_lake`` is the read side: an in-memory DuckDB with one view per exported table over the
Parquet files where they lie (a folder or S3, read by pyarrow's filesystem layer with ranged
GETs), partition columns typed, filters on ``cluster``/``day`` pruning whole folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.warehouse.db import Warehouse, connect_memory, memory_capped

# table -> timestamp column that gives the day partition (None: partition by cluster only)
TABLES: dict[str, str | None] = {
    "gpu_samples": "ts",
    "gpu_hourly": "hour",
    "pod_cpu_samples": "ts",
    "serving_samples": "ts",
    "gpu_energy_samples": "ts",
    "pods": "created",
    "events": "first_ts",
    "nodes": None,
    "gpus": None,
    "podgroups": None,
    "vcjobs": None,
    "queues": None,
    "node_pools": None,
    "pdbs": None,
    "hypernodes": None,
    "rayclusters": None,
    "rayjobs": None,
    "rayservices": None,
    "scaled_objects": None,
    "kueue_cluster_queues": None,
    "kueue_local_queues": None,
    "kueue_resource_flavors": None,
    "kueue_workloads": None,
    "kueue_quota_samples": "ts",
    "resource_claims": None,
    "k8s_snapshots": None,
    "clusters": None,
    "prices": None,
    "plans": None,
    "serving_config": None,
    "energy_rates": None,
    "recommendations": None,
    "applied_actions": None,
}
NO_DAY = date(1970, 1, 1)  # the day partition of rows without a timestamp
# DuckDB's cache while streaming: a day's slice needs little, and uncapped the cache grows with
# the warehouse (an export of 10,000 GPUs x 30 days peaked at 9.2 GB before this cap and slicing)
EXPORT_MEMORY = "1GB"
# slices written at once: two keep both cores of a small machine busy (one reads from DuckDB while
# the other encodes Parquet); each holds one 500,000-row batch and its file's open row group
EXPORT_WRITERS = 2


# the per-(table, cluster) folder file naming each day partition's fingerprint when it was written
MANIFEST = "_gpuinsight_export.json"
MANIFEST_FORMAT = 1


def _day(day_col: str) -> str:
    """The day partition of a row: its timestamp's date, NO_DAY without one."""
    return f'coalesce(CAST("{day_col}" AS DATE), DATE \'{NO_DAY.isoformat()}\')'


@dataclass(frozen=True)
class Slice:
    """One (cluster, day) partition written in one go: its WHERE clause and parameters (its
    partition values), and its fingerprint (``rows:sum of the rows' hashes``)."""

    where: str
    params: dict[str, Any]
    fingerprint: str


@dataclass(frozen=True)
class Destination:
    """What is already at the destination: ``files(folder)`` the names of the files directly in a
    folder, ``read(path)`` a file's bytes (None when absent); paths relative to the export's
    root, ``/``-separated."""

    files: Callable[[str], set[str]]
    read: Callable[[str], bytes | None]

    @classmethod
    def local(cls, root: Path) -> Destination:
        def files(folder: str) -> set[str]:
            path = root / folder
            return {p.name for p in path.iterdir() if p.is_file()} if path.is_dir() else set()

        def read(rel: str) -> bytes | None:
            path = root / rel
            return path.read_bytes() if path.is_file() else None

        return cls(files, read)


def _day_slices(wh: Warehouse, table: str, day_col: str, parts: list[str], columns: list[str]) -> list[Slice]:
    """One slice per partition of a day-partitioned table (``parts``: its partition columns).

    Such tables are written a (cluster, day) at a time: ``write_dataset`` buffers up to a row
    group per open partition, so one pass over 30 days held 30 of them at once and its memory
    grew with the window; a day at a time it is one, whatever the window. The parameters of a
    slice are its partition's values (``cluster`` when the table has one, ``day``); its
    fingerprint (the exported ``columns``' rows: their count and the sum of their hashes) comes
    from the same pass that finds the partitions.
    """
    day = _day(day_col)
    keys = ", ".join([f'"{p}"' if p != "day" else f"{day} AS day" for p in parts])
    exported = ", ".join(f'"{c}"' for c in columns)
    slices = []
    for row in wh.con.sql(f"SELECT {keys}, count(*)::VARCHAR || ':' || sum(hash({exported}))::VARCHAR "
                          f'FROM "{table}" GROUP BY ALL ORDER BY ALL').fetchall():
        params: dict[str, Any] = {"day": row[-2]}
        where = (f"{day} = $day" if row[-2] == NO_DAY else
                 f'"{day_col}" >= $day AND "{day_col}" < $day + INTERVAL 1 DAY')  # the range prunes blocks
        if "cluster" in parts:
            params["cluster"] = row[0]
            where += " AND cluster IS NOT DISTINCT FROM $cluster"
        slices.append(Slice(where, params, row[-1]))
    return slices


def _folder(table: str, parts: list[str], params: dict[str, Any]) -> str:
    """The hive folder of a partition (``parts``' values in ``params``), relative to the root."""
    fields = [pa.field("cluster", pa.string()), pa.field("day", pa.date32())]
    scheme = ds.partitioning(pa.schema([f for f in fields if f.name in parts]), flavor="hive")
    match = None
    for name in parts:
        cond = ds.field(name).is_null() if params[name] is None else ds.field(name) == params[name]
        match = cond if match is None else match & cond
    return "/".join(x for x in (table, scheme.format(match)[0] if match is not None else "") if x)


def _signature(wh: Warehouse, table: str, columns: list[str]) -> str:
    """The exported columns and their types: a day written with other columns is written again."""
    select = ", ".join(f'"{c}"' for c in columns)
    types = wh.con.sql(f'SELECT {select} FROM "{table}" LIMIT 0').types
    return hashlib.sha256(repr(list(zip(columns, map(str, types), strict=True))).encode()).hexdigest()[:16]


def _to_write(table: str, parts: list[str], slices: list[Slice], signature: str, dest: Destination | None,
              ) -> tuple[list[Slice], dict[str, dict[str, Any]]]:
    """The day slices whose partition at ``dest`` is missing or holds other rows (every one
    without ``dest``), and the manifests of the cluster folders they are in, to be written after
    them: each names its days' fingerprints, those kept and those about to be written."""
    folder_parts = [p for p in parts if p != "day"]
    manifests: dict[str, dict[str, Any]] = {}
    changed: set[str] = set()
    todo = []
    for sl in slices:
        folder = _folder(table, folder_parts, sl.params)
        if folder not in manifests:
            manifests[folder] = {"format": MANIFEST_FORMAT, "table": table, "columns": signature,
                                 "days": _days_written(dest, folder, signature)}
        days = manifests[folder]["days"]
        day = sl.params["day"].isoformat()
        # written again unless it holds these rows in its one file and nothing else (a file another
        # writer left beside it would be read as more rows)
        if dest is None or days.get(day) != sl.fingerprint or \
                dest.files(_folder(table, parts, sl.params)) != {f"{table}-0.parquet"}:
            todo.append(sl)
            days[day] = sl.fingerprint
            changed.add(folder)
    return todo, {f: manifests[f] for f in sorted(changed)}


def _days_written(dest: Destination | None, folder: str, signature: str) -> dict[str, str]:
    """The fingerprints a folder's manifest at ``dest`` names, if it was written with these columns
    (an unreadable or other manifest names none: its days are written again)."""
    raw = dest.read(f"{folder}/{MANIFEST}") if dest is not None else None
    if raw is None:
        return {}
    try:
        old = json.loads(raw)
    except ValueError:
        return {}
    if not (isinstance(old, dict) and old.get("format") == MANIFEST_FORMAT and old.get("columns") == signature
            and isinstance(old.get("days"), dict)):
        return {}
    return {str(k): str(v) for k, v in old["days"].items()}


def _write_manifest(root: Path, folder: str, manifest: dict[str, Any]) -> None:
    """Written after the folder's day files, replacing the old one whole (a kill leaves the old one,
    so the days it names wrongly are written again next time)."""
    path = root / folder / MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{MANIFEST}.tmp")
    tmp.write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _write_partition(con: duckdb.DuckDBPyConnection, root: Path, table: str, parts: list[str], columns: list[str],
                     where: str, params: dict[str, Any]) -> None:
    """One (cluster, day) slice into its hive folder, replacing what an earlier export left there.

    The slice is one partition, so its rows stream straight into one Parquet file: the file
    ``write_dataset`` would write (same folder, name, columns, schema metadata), without its
    per-batch partitioning (hashing every row's cluster and day) and with row groups of the
    stream's 500,000-row batches instead of one per DuckDB chunk (99 row groups of ~31,000
    rows for a day of 10,000 GPUs): half the CPU and about half the bytes at that size.
    """
    folder = root / _folder(table, parts, params)
    if folder.is_dir():  # existing_data_behavior="delete_matching", as write_dataset does
        for old in folder.iterdir():
            if old.is_file():
                old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    select = ", ".join(f'"{c}"' for c in columns)
    reader = con.sql(f'SELECT {select} FROM "{table}" WHERE {where}', params=params).to_arrow_reader(500_000)
    with pq.ParquetWriter(folder / f"{table}-0.parquet", reader.schema) as out:
        for batch in reader:
            out.write_batch(batch)


def _write_slices(wh: Warehouse, root: Path, table: str, parts: list[str], columns: list[str],
                  slices: list[Slice]) -> None:
    """The slices written EXPORT_WRITERS at a time, each from a cursor of its own: DuckDB's scan
    and pyarrow's encoder both release the GIL, so while one slice is encoded the next is read."""
    def one(sl: Slice) -> None:
        con = wh.con.cursor()
        try:
            _write_partition(con, root, table, parts, columns, sl.where, sl.params)
        finally:
            con.close()

    with ThreadPoolExecutor(max_workers=EXPORT_WRITERS) as pool:
        for _ in pool.map(one, slices):  # re-raises a slice's failure
            pass


def write_local(wh: Warehouse, root: Path, *, dest: Destination | None = None, full: bool = False) -> Iterator[str]:
    """Write the tables under ``root``; a day partition only where ``dest`` (what the destination
    holds; ``root`` itself when None) lacks it or holds other rows, every one with ``full``."""
    root.mkdir(parents=True, exist_ok=True)
    if dest is None:
        dest = Destination.local(root)
    with memory_capped(wh, EXPORT_MEMORY):
        for table, day_col in TABLES.items():
            if (rows := wh.count(table)) == 0:
                continue
            cols = wh.columns(table)  # validates the table name against the catalog
            parts = ["cluster"] if "cluster" in cols else []
            if day_col:
                parts.append("day")
                columns = [c for c in cols if c not in parts]
                slices = _day_slices(wh, table, day_col, parts, columns)
                todo, manifests = _to_write(table, parts, slices, _signature(wh, table, columns),
                                            None if full else dest)
                if wh.in_transaction:  # a cursor would not see the transaction's writes
                    for sl in todo:
                        _write_partition(wh.con, root, table, parts, columns, sl.where, sl.params)
                else:
                    _write_slices(wh, root, table, parts, columns, todo)
                for folder, manifest in manifests.items():
                    _write_manifest(root, folder, manifest)
                written = f"; {len(todo)} of {len(slices)} day partitions written"
            else:
                kwargs: dict[str, Any] = {"format": "parquet", "existing_data_behavior": "delete_matching"}
                if parts:
                    kwargs.update(partitioning=parts, partitioning_flavor="hive")
                # replaces only the partitions it writes (delete_matching)
                reader = wh.con.sql(f'SELECT * FROM "{table}"').to_arrow_reader(500_000)
                ds.write_dataset(reader, root / table, basename_template=f"{table}-{{i}}.parquet", **kwargs)
                written = ""
            yield (f"{table}: {rows:,} rows -> {root / table}"
                   + (f" (by {', '.join(parts)}{written})" if parts else ""))


def export_tables(wh: Warehouse, dest: str, *, s3_client: Any = None, full: bool = False) -> Iterator[str]:
    """Export to a folder or ``s3://bucket/prefix``: the day partitions that changed since they
    were written there (every one with ``full``), the tables without days whole."""
    if dest.startswith("s3://"):
        bucket, _, prefix = dest[5:].partition("/")
        if not bucket:
            raise BadInput(f"{dest}: expected s3://bucket/prefix")
        import boto3

        s3 = s3_client or boto3.client("s3")
        prefix = prefix.strip("/")
        with tempfile.TemporaryDirectory(prefix="gpuinsight-export-") as tmp:
            lines = list(write_local(wh, Path(tmp), dest=_s3_destination(s3, bucket, prefix), full=full))
            n = upload_tree(Path(tmp), bucket, prefix, s3)
        yield from lines
        yield f"uploaded {n} file(s) to s3://{bucket}/{prefix}"
        return
    yield from write_local(wh, Path(dest), full=full)


def _s3_destination(s3: Any, bucket: str, prefix: str) -> Destination:
    """What the prefix holds: its keys listed once, a manifest fetched when asked for."""
    from botocore.exceptions import BotoCoreError, ClientError

    def key(rel: str) -> str:
        return "/".join(x for x in (prefix, rel) if x)

    try:
        keys = {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"{prefix}/" if prefix else "") for o in page.get("Contents", [])}
    except (BotoCoreError, ClientError) as exc:
        raise RuntimeFailure(f"s3://{bucket}/{prefix}: cannot list: {str(exc).splitlines()[0]}") from exc

    def read(rel: str) -> bytes | None:
        if key(rel) not in keys:
            return None
        try:
            return s3.get_object(Bucket=bucket, Key=key(rel))["Body"].read()
        except (BotoCoreError, ClientError) as exc:
            raise RuntimeFailure(f"s3://{bucket}/{key(rel)}: cannot read: {str(exc).splitlines()[0]}") from exc

    in_folder: dict[str, set[str]] = {}
    for k in keys:
        folder, _, name = k.rpartition("/")
        in_folder.setdefault(folder, set()).add(name)

    def files(folder: str) -> set[str]:
        return in_folder.get(key(folder), set())

    return Destination(files, read)


def upload_tree(root: Path, bucket: str, prefix: str, s3_client: Any = None) -> int:
    """Upload every file under ``root``, the manifests last (a manifest names days as written only
    once they are); then delete what else an earlier export left in the partition folders just
    written (e.g. a ``-1.parquet`` from a larger earlier export)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = s3_client or boto3.client("s3")
    n = 0
    written: set[str] = set()
    folders: set[str] = set()
    try:
        for path in sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: (p.name == MANIFEST, p)):
            key = "/".join(x for x in (prefix, path.relative_to(root).as_posix()) if x)
            s3.upload_file(str(path), bucket, key)
            written.add(key)
            folders.add(key.rsplit("/", 1)[0] + "/")
            n += 1
        stale = []
        for folder in sorted(folders):
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder):
                stale += [o["Key"] for o in page.get("Contents", [])
                          if o["Key"] not in written and "/" not in o["Key"][len(folder):]]
        for i in range(0, len(stale), 1000):
            s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in stale[i:i + 1000]]})
    except (BotoCoreError, ClientError) as exc:
        raise RuntimeFailure(f"s3://{bucket}/{prefix}: upload failed: {str(exc).splitlines()[0]}") from exc
    return n


def _lake_filesystem(root: str, endpoint_url: str | None, region: str | None) -> tuple[Any, str]:
    from pyarrow import fs

    if root.startswith("s3://"):
        bucket, _, prefix = root[5:].partition("/")
        if not bucket:
            raise BadInput(f"{root}: expected s3://bucket/prefix")
        endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        kwargs: dict[str, Any] = {"region": region or os.environ.get("AWS_REGION")
                                  or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"}
        if endpoint:
            scheme, _, host = endpoint.partition("://")
            kwargs.update(endpoint_override=host.rstrip("/"), scheme=scheme or "https")
        return fs.S3FileSystem(**kwargs), "/".join(x for x in (bucket, prefix.strip("/")) if x)
    path = Path(root)
    if not path.is_dir():
        raise BadInput(f"{root}: no exported lake here (run `gpuinsight export --to {root}` first)")
    return fs.LocalFileSystem(), str(path.resolve())


def open_lake(root: str, *, endpoint_url: str | None = None, region: str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with a view per table found under ``root`` (folder or s3://bucket/prefix).

    The Parquet files are read in place, through pyarrow datasets DuckDB scans with projection
    and filter pushdown, so ``WHERE cluster = ... AND day >= ...`` reads only those folders.
    """
    from pyarrow import fs as pafs

    filesystem, base = _lake_filesystem(root, endpoint_url, region)
    con = connect_memory()
    found = 0
    for table, day_col in TABLES.items():
        where = f"{base}/{table}"
        info = filesystem.get_file_info(where)
        if info.type != pafs.FileType.Directory:
            continue
        children = filesystem.get_file_info(pafs.FileSelector(where))
        partitioning = None
        if any(c.base_name.startswith("cluster=") for c in children):
            fields = [pa.field("cluster", pa.string())]
            if day_col:
                fields.append(pa.field("day", pa.date32()))
            partitioning = ds.partitioning(pa.schema(fields), flavor="hive")
        try:
            dataset = ds.dataset(where, filesystem=filesystem, format="parquet", partitioning=partitioning)
        except (OSError, pa.ArrowInvalid) as exc:
            raise RuntimeFailure(f"{root}/{table}: cannot read the lake: {str(exc).splitlines()[0]}") from exc
        con.register(table, dataset)
        found += 1
    if not found:
        raise BadInput(f"{root}: no exported tables found (expected folders like gpu_samples/cluster=...)")
    return con

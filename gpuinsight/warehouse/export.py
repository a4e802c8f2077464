"""Export warehouse tables as hive-partitioned Parquet (cluster=/day=) for Athena, Trino, Spark;
and open such a lake again for querying in place.

Rows stream from DuckDB as Arrow record batches into ``pyarrow.dataset.write_dataset``; the
partitions being written are replaced, so re-exporting the same data is idempotent. For
``s3://bucket/prefix`` the dataset is written to a temporary folder and uploaded with boto3
(credentials and endpoint come from the usual AWS configuration, e.g. ``AWS_ENDPOINT_URL``);
objects left in a rewritten partition by an earlier export are deleted, so S3 is idempotent
too. Several clusters can export into one prefix: each writes only its own ``cluster=`` folders.

``open_lake`` is the read side: an in-memory DuckDB with one view per exported table over the
Parquet files where they lie (a folder or S3, read by pyarrow's filesystem layer with ranged
GETs), partition columns typed, filters on ``cluster``/``day`` pruning whole folders.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.warehouse.db import Warehouse, without_progress_bar

# table -> timestamp column that gives the day partition (None: partition by cluster only)
TABLES: dict[str, str | None] = {
    "gpu_samples": "ts",
    "gpu_hourly": "hour",
    "pods": "created",
    "events": "first_ts",
    "nodes": None,
    "gpus": None,
    "podgroups": None,
    "vcjobs": None,
    "queues": None,
    "node_pools": None,
    "pdbs": None,
    "clusters": None,
    "prices": None,
    "recommendations": None,
    "applied_actions": None,
}


def _select(wh: Warehouse, table: str, day_col: str | None) -> tuple[str, list[str]]:
    cols = wh.columns(table)  # validates the table name against the catalog
    parts = []
    if "cluster" in cols:
        parts.append("cluster")
    select = "*"
    if day_col:
        select = f'*, coalesce(CAST("{day_col}" AS DATE), DATE \'1970-01-01\') AS day'
        parts.append("day")
    return f'SELECT {select} FROM "{table}"', parts


def write_local(wh: Warehouse, root: Path) -> Iterator[str]:
    root.mkdir(parents=True, exist_ok=True)
    for table, day_col in TABLES.items():
        rows = wh.count(table)
        if rows == 0:
            continue
        sql, parts = _select(wh, table, day_col)
        reader = wh.con.sql(sql).to_arrow_reader(500_000)
        kwargs: dict[str, Any] = {"format": "parquet", "existing_data_behavior": "delete_matching"}
        if parts:
            kwargs.update(partitioning=parts, partitioning_flavor="hive")
        ds.write_dataset(reader, root / table, basename_template=f"{table}-{{i}}.parquet", **kwargs)
        yield f"{table}: {rows:,} rows -> {root / table}" + (f" (by {', '.join(parts)})" if parts else "")


def export_tables(wh: Warehouse, dest: str, *, s3_client: Any = None) -> Iterator[str]:
    if dest.startswith("s3://"):
        bucket, _, prefix = dest[5:].partition("/")
        if not bucket:
            raise BadInput(f"{dest}: expected s3://bucket/prefix")
        with tempfile.TemporaryDirectory(prefix="gpuinsight-export-") as tmp:
            lines = list(write_local(wh, Path(tmp)))
            n = upload_tree(Path(tmp), bucket, prefix.strip("/"), s3_client)
        yield from lines
        yield f"uploaded {n} file(s) to s3://{bucket}/{prefix.strip('/')}"
        return
    yield from write_local(wh, Path(dest))


def upload_tree(root: Path, bucket: str, prefix: str, s3_client: Any = None) -> int:
    """Upload every file under ``root``; then delete what else an earlier export left in the
    partition folders just written (e.g. a ``-1.parquet`` from a larger earlier export)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = s3_client or boto3.client("s3")
    n = 0
    written: set[str] = set()
    folders: set[str] = set()
    try:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
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
    con = without_progress_bar(duckdb.connect())
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

"""Export warehouse tables as hive-partitioned Parquet (cluster=/day=) for Athena, Trino, Spark.

Rows stream from DuckDB as Arrow record batches into ``pyarrow.dataset.write_dataset``; the
partitions being written are replaced, so re-exporting the same data is idempotent. For
``s3://bucket/prefix`` the dataset is written to a temporary folder and uploaded with boto3
(credentials and endpoint come from the usual AWS configuration, e.g. ``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.warehouse.db import Warehouse

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
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = s3_client or boto3.client("s3")
    n = 0
    try:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            key = "/".join(x for x in (prefix, path.relative_to(root).as_posix()) if x)
            s3.upload_file(str(path), bucket, key)
            n += 1
    except (BotoCoreError, ClientError) as exc:
        raise RuntimeFailure(f"s3://{bucket}/{prefix}: upload failed: {str(exc).splitlines()[0]}") from exc
    return n

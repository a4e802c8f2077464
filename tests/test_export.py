"""Hive-partitioned Parquet export, locally and to S3 (moto server)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import boto3
import duckdb
import pytest

import gpuinsight as gi
from gpuinsight.warehouse.export import export_tables
from tests.fleet_tables import T0, MiniFleet


@pytest.fixture()
def small(tmp_path: Path) -> Iterator[gi.GpuInsight]:
    from datetime import timedelta

    f = MiniFleet()
    f.price("g6.xlarge", "L4", 1, 0.8048, 0.3)
    f.node("n1", "g6.xlarge", "L4", 1)
    f.pod("p1", "n1")
    f.series("n1", 0, "p1", "ns", 0.3, end=T0 + timedelta(hours=30))  # spans two days
    g = gi.open(tmp_path / "w.duckdb")
    f.load(g.wh)
    g.refresh()
    yield g
    g.close()


def test_local_export_is_partitioned_and_idempotent(small: gi.GpuInsight, tmp_path: Path) -> None:
    out = tmp_path / "lake"
    lines = list(export_tables(small.wh, str(out)))
    assert any(line.startswith("gpu_samples: 360 rows") for line in lines)
    days = sorted(p.name for p in (out / "gpu_samples" / "cluster=test").iterdir())
    assert days == ["day=2026-11-01", "day=2026-11-02"]
    list(export_tables(small.wh, str(out)))  # again: same files, same rows
    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/gpu_samples/**/*.parquet', hive_partitioning=1)")
    assert n.fetchall()[0][0] == 360
    by_day = duckdb.sql(f"SELECT day, count(*) FROM read_parquet('{out}/gpu_samples/**/*.parquet', "
                        "hive_partitioning=1) GROUP BY day ORDER BY day").fetchall()
    assert [r[1] for r in by_day] == [288, 72]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_s3_export_through_moto(small: gi.GpuInsight, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{port}")
        s3.create_bucket(Bucket="lake")
        lines = list(export_tables(small.wh, "s3://lake/gpu/clusterA", s3_client=s3))
        assert lines[-1].startswith("uploaded")
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="lake")["Contents"]]
        assert "gpu/clusterA/gpu_samples/cluster=test/day=2026-11-01/gpu_samples-0.parquet" in keys
        assert not any("testing" in line for line in lines)
    finally:
        server.stop()


def test_every_row_lands_in_exactly_one_day_slice(small: gi.GpuInsight, tmp_path: Path) -> None:
    """Day-partitioned tables are written a (cluster, day) at a time: the slices must cover every
    row once, rows without a timestamp included (they go to day=1970-01-01)."""
    small.wh.con.execute("UPDATE pods SET created = NULL WHERE name = 'p1'")
    small.wh.con.execute("INSERT INTO pods SELECT * REPLACE ('p2' AS name, 'uid-p2' AS uid, "
                         "TIMESTAMP '2026-11-02 23:59:59.999' AS created) FROM pods WHERE name = 'p1'")
    out = tmp_path / "lake"
    lines = list(export_tables(small.wh, str(out)))
    for table in ("gpu_samples", "gpu_hourly", "pods", "nodes", "prices"):
        want = small.wh.count(table)
        got = duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/{table}/**/*.parquet', hive_partitioning=1)")
        assert got.fetchall()[0][0] == want > 0, table
        assert any(line.startswith(f"{table}: {want:,} rows") for line in lines)
    days = duckdb.sql(f"SELECT name, day FROM read_parquet('{out}/pods/**/*.parquet', hive_partitioning=1) "
                      "ORDER BY name").fetchall()
    assert [(p, str(d)) for p, d in days] == [("p1", "1970-01-01"), ("p2", "2026-11-02")]
    # DuckDB's memory limit is put back after the export
    limit = small.wh.con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert limit == duckdb.connect().execute("SELECT current_setting('memory_limit')").fetchall()[0][0]


def test_a_slice_writes_what_write_dataset_wrote_and_replaces_its_folder(small: gi.GpuInsight, tmp_path: Path) -> None:
    """A (cluster, day) slice goes straight into its partition's file: the same folder (hive
    names, URI-escaped cluster), file name, columns and schema as pyarrow's write_dataset gives,
    and a re-export removes what else an earlier one left in that folder."""
    import pyarrow.dataset as ds

    small.wh.con.execute("UPDATE gpu_keys SET cluster = 'a b/c'")  # a name hive paths must escape
    out = tmp_path / "lake"
    list(export_tables(small.wh, str(out)))
    folder = out / "gpu_samples" / "cluster=a%20b%2Fc" / "day=2026-11-01"
    assert sorted(p.name for p in folder.iterdir()) == ["gpu_samples-0.parquet"]
    (folder / "gpu_samples-1.parquet").write_bytes((folder / "gpu_samples-0.parquet").read_bytes())
    ref = tmp_path / "ref"  # what write_dataset makes of the same rows
    reader = small.wh.con.sql("SELECT *, CAST(ts AS DATE) AS day FROM gpu_samples").to_arrow_reader(1000)
    ds.write_dataset(reader, ref, format="parquet", partitioning=["cluster", "day"], partitioning_flavor="hive",
                     basename_template="gpu_samples-{i}.parquet")
    list(export_tables(small.wh, str(out)))
    assert sorted(p.name for p in folder.iterdir()) == ["gpu_samples-0.parquet"]
    got, want = ds.dataset(out / "gpu_samples", partitioning="hive"), ds.dataset(ref, partitioning="hive")
    assert sorted(str(p.relative_to(out / "gpu_samples")) for p in (out / "gpu_samples").rglob("*.parquet")) == \
        sorted(str(p.relative_to(ref)) for p in ref.rglob("*.parquet"))
    assert got.schema == want.schema
    assert got.to_table().sort_by([("ts", "ascending")]).equals(want.to_table().sort_by([("ts", "ascending")]))

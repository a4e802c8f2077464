"""Hive-partitioned Parquet export, locally and to S3 (moto server)."""

from __future__ import annotations

import json
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
    days = sorted(p.name for p in (out / "gpu_samples" / "cluster=test").iterdir() if p.is_dir())
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
        assert "gpu/clusterA/gpu_samples/cluster=test/_gpuinsight_export.json" in keys
        assert not any("testing" in line for line in lines)
        first = int(lines[-1].split()[1])

        def uploaded(lines: list[str]) -> int:
            return int(lines[-1].split()[1])

        def etag(day: str) -> str:
            return s3.head_object(Bucket="lake", Key=f"gpu/clusterA/gpu_samples/cluster=test/day={day}/"
                                  "gpu_samples-0.parquet")["ETag"]

        before = {d: etag(d) for d in ("2026-11-01", "2026-11-02")}
        again = list(export_tables(small.wh, "s3://lake/gpu/clusterA", s3_client=s3))
        assert _written(again, "gpu_samples") == "0 of 2" and uploaded(again) < first
        small.wh.con.execute("UPDATE gpu_sample_facts SET gr_active = 0.99 WHERE ts = (SELECT max(ts) FROM gpu_sample_facts)")
        changed = list(export_tables(small.wh, "s3://lake/gpu/clusterA", s3_client=s3))
        assert _written(changed, "gpu_samples") == "1 of 2"
        assert etag("2026-11-01") == before["2026-11-01"] and etag("2026-11-02") != before["2026-11-02"]
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


# -- a day partition is written again only when its rows changed ------------------------------------

def _lake_rows(out: Path, table: str, columns: list[str]) -> list[tuple]:
    return duckdb.sql(f"SELECT {', '.join(columns)} FROM read_parquet('{out}/{table}/**/*.parquet', "
                      "hive_partitioning=1) ORDER BY ALL").fetchall()


def _same_rows(g: gi.GpuInsight, out: Path, table: str) -> bool:
    columns = g.wh.columns(table)
    return _lake_rows(out, table, columns) == g.wh.con.sql(f"SELECT * FROM {table} ORDER BY ALL").fetchall()


def _written(lines: list[str], table: str) -> str:
    line = next(x for x in lines if x.startswith(f"{table}: "))
    return line.split("; ", 1)[1].split(" day partitions", 1)[0]


def _day_files(out: Path) -> dict[str, int]:
    """Each gpu_samples day file and when it was last written."""
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "gpu_samples").rglob("*.parquet")}


def test_a_second_export_writes_only_the_days_whose_rows_changed(small: gi.GpuInsight, tmp_path: Path) -> None:
    out = tmp_path / "lake"
    assert _written(list(export_tables(small.wh, str(out))), "gpu_samples") == "2 of 2"
    manifest = out / "gpu_samples" / "cluster=test" / "_gpuinsight_export.json"
    assert set(json.loads(manifest.read_text())["days"]) == {"2026-11-01", "2026-11-02"}
    first = _day_files(out)
    assert _written(list(export_tables(small.wh, str(out))), "gpu_samples") == "0 of 2"
    assert _day_files(out) == first
    # a late sample of the second day changes that day only
    small.wh.con.execute("UPDATE gpu_sample_facts SET gr_active = 0.99 WHERE ts = (SELECT max(ts) FROM gpu_sample_facts)")
    assert _written(list(export_tables(small.wh, str(out))), "gpu_samples") == "1 of 2"
    after = _day_files(out)
    assert after["day=2026-11-01"] == first["day=2026-11-01"] and after["day=2026-11-02"] != first["day=2026-11-02"]
    assert _same_rows(small, out, "gpu_samples")
    # full: every day again
    assert _written(list(export_tables(small.wh, str(out), full=True)), "gpu_samples") == "2 of 2"


def test_a_day_is_written_again_when_its_file_is_gone_or_not_alone_or_the_manifest_unreadable(
        small: gi.GpuInsight, tmp_path: Path) -> None:
    out = tmp_path / "lake"
    list(export_tables(small.wh, str(out)))
    day1 = out / "gpu_samples" / "cluster=test" / "day=2026-11-01"
    (day1 / "gpu_samples-0.parquet").unlink()
    assert _written(list(export_tables(small.wh, str(out))), "gpu_samples") == "1 of 2"
    # a file another writer left beside it would be read as more rows: the folder is written anew
    (day1 / "gpu_samples-1.parquet").write_bytes((day1 / "gpu_samples-0.parquet").read_bytes())
    assert _written(list(export_tables(small.wh, str(out))), "gpu_samples") == "1 of 2"
    assert sorted(p.name for p in day1.iterdir()) == ["gpu_samples-0.parquet"]
    (out / "gpu_samples" / "cluster=test" / "_gpuinsight_export.json").write_text("{not json")
    assert _written(list(export_tables(small.wh, str(out))), "gpu_samples") == "2 of 2"
    assert _same_rows(small, out, "gpu_samples")


def test_a_failure_before_the_manifest_leaves_the_days_to_be_written_again(
        small: gi.GpuInsight, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest is written after its days' files: an export killed between the two names the
    old rows, so the next export writes those days again instead of trusting half-written ones."""
    from gpuinsight.warehouse import export

    out = tmp_path / "lake"
    list(export_tables(small.wh, str(out)))
    small.wh.con.execute("UPDATE gpu_sample_facts SET gr_active = 0.5")

    def killed(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "_write_manifest", killed)
    with pytest.raises(KeyboardInterrupt):
        list(export_tables(small.wh, str(out)))
    monkeypatch.undo()
    assert _written(list(export_tables(small.wh, str(out))), "gpu_samples") == "2 of 2"
    assert _same_rows(small, out, "gpu_samples")


def test_random_changes_then_incremental_exports_give_the_warehouse_rows(small: gi.GpuInsight, tmp_path: Path) -> None:
    """Whatever rows change (updated, deleted, added, on either day), the lake an incremental
    export leaves holds exactly the warehouse's rows, table by table."""
    import random

    rng = random.Random(7)
    out = tmp_path / "lake"
    list(export_tables(small.wh, str(out)))
    con = small.wh.con
    for _ in range(8):
        ts = con.execute("SELECT ts FROM gpu_sample_facts USING SAMPLE 1 ROWS").fetchall()[0][0]
        change = rng.choice(["update", "delete", "insert"])
        if change == "update":
            con.execute("UPDATE gpu_sample_facts SET power_w = ? WHERE ts = ?", [rng.uniform(50, 300), ts])
        elif change == "delete":
            con.execute("DELETE FROM gpu_sample_facts WHERE ts = ?", [ts])
        else:
            con.execute("INSERT INTO gpu_sample_facts SELECT * REPLACE (ts + INTERVAL 1 SECOND AS ts) "
                        "FROM gpu_sample_facts WHERE ts = ? LIMIT 1", [ts])
        list(export_tables(small.wh, str(out)))
        for table in ("gpu_samples", "gpu_hourly", "pods"):
            assert _same_rows(small, out, table), (change, table)

"""The scale-out paths beyond one machine, against real parts.

* PromQL pushdown with ``--match`` sharding: one real Prometheus holds two clusters' series
  (as a Thanos Querier or Mimir does, told apart by a ``cluster`` external label); each cluster
  is collected with ``--match cluster=...`` into its own ``--cluster``: the two collections are
  disjoint and each is complete (equal to collecting that cluster alone), incrementally too.
* The Parquet lake from ``gpuinsight export`` on S3 (a moto server), queried in place by DuckDB
  through ``open_lake``: two clusters export into one prefix, the figures read back equal the
  warehouses', partition filters prune, and a re-export leaves no stale objects.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner

import gpuinsight as gi
from gpuinsight.cli import main
from gpuinsight.warehouse import Warehouse
from gpuinsight.warehouse.export import export_tables, open_lake
from tests.fleet_tables import T0, MiniFleet
from tests.prom_server import Series, SmallFleet, backfill, prometheus_server, write_openmetrics

SMALL_T0, SMALL_END = datetime(2026, 11, 1), datetime(2026, 11, 1, 6)
WEST_UUID = ("-000000000000", "-0000000000ff")  # the west cluster's GPUs are other GPUs


def _west(series: Series) -> Series:
    labels = dict(series.labels)
    for k in ("UUID", "uuid"):
        if k in labels:
            labels[k] = labels[k].replace(*WEST_UUID)
    if "uid" in labels:
        labels["uid"] += "-west"
    return Series(series.name, {**labels, "cluster": "west"}, series.points)


@pytest.fixture(scope="module")
def prom_two_clusters(small_fleet: SmallFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Prometheus holding two clusters with the same node, namespace and pod names."""
    east = [Series(s.name, {**s.labels, "cluster": "east"}, s.points) for s in small_fleet.series]
    om = write_openmetrics([*east, *map(_west, small_fleet.series)], tmp_path_factory.mktemp("two") / "metrics.om")
    with prometheus_server(backfill(om, om.parent / "tsdb")) as url:
        yield url


def _collect(db: Path, url: str, cluster: str | None, *extra: str) -> None:
    args = ["collect", "prometheus", "--db", str(db), "--url", url, "--step", "5m", "--until", SMALL_END.isoformat()]
    if cluster:
        args += ["--cluster", cluster, "--match", f"cluster={cluster}"]
    res = CliRunner().invoke(main, [*args, *extra])
    assert res.exit_code == 0, res.output


def _facts(wh: Warehouse, cluster: str) -> dict[str, object]:
    q = lambda sql: wh.sql(sql, [cluster]).rows()  # noqa: E731
    return {
        "samples": q("SELECT count(*) FROM gpu_samples WHERE cluster = ?")[0][0],
        "hourly": q("SELECT count(*), sum(samples) FROM gpu_hourly WHERE cluster = ?")[0],
        "gpu_hours": dict((f"{r[0]}/{r[1]}", r[2]) for r in q(
            "SELECT namespace, pod, sum(step_s) / 3600 FROM gpu_samples WHERE cluster = ? AND pod <> '' GROUP BY ALL")),
        "uuids": {r[0] for r in q("SELECT DISTINCT gpu_uuid FROM gpu_samples WHERE cluster = ?")},
        "uids": {r[0] for r in q("SELECT uid FROM pods WHERE cluster = ?")},
        "nodes": sorted(r[0] for r in q("SELECT node FROM nodes WHERE cluster = ?")),
    }


def test_match_sharding_by_cluster_is_disjoint_and_complete(prom_two_clusters: str, prom_small: str,
                                                            small_fleet: SmallFleet, tmp_path: Path) -> None:
    # the reference: the same fleet alone in its own Prometheus, collected without a matcher
    ref_db = tmp_path / "ref.duckdb"
    _collect(ref_db, prom_small, None, "--cluster", "ref", "--since", SMALL_T0.isoformat())
    with Warehouse(ref_db) as wh:
        ref = _facts(wh, "ref")
    truth = {f"{ns}/{pod}": h for (ns, pod), h in small_fleet.gpu_hours(300).items()}
    assert ref["gpu_hours"] == truth

    db = tmp_path / "fleet.duckdb"
    half = (SMALL_T0 + timedelta(hours=3)).isoformat()
    # east in two incremental runs (the second resumes from east's own cursor), west in one
    _collect(db, prom_two_clusters, "east", "--since", SMALL_T0.isoformat(), "--until", half)
    _collect(db, prom_two_clusters, "west", "--since", SMALL_T0.isoformat())
    _collect(db, prom_two_clusters, "east")
    with Warehouse(db) as wh:
        east, west = _facts(wh, "east"), _facts(wh, "west")
        assert wh.sql("SELECT DISTINCT cluster FROM gpu_samples ORDER BY 1")["cluster"].to_list() == ["east", "west"]
        cursors = dict(wh.sql("SELECT scope, cursor FROM ingest_state").rows())
    # complete: each shard holds exactly what collecting its cluster alone gives
    for shard in (east, west):
        for k in ("samples", "hourly", "gpu_hours", "nodes"):
            assert shard[k] == ref[k], k
    assert east["uuids"] == ref["uuids"] and east["uids"] == ref["uids"]
    # disjoint: no GPU or pod of one cluster in the other's collection
    assert west["uuids"] == {u.replace(*WEST_UUID) for u in ref["uuids"]}
    assert west["uids"] == {u + "-west" for u in ref["uids"]}
    assert not east["uuids"] & west["uuids"] and not east["uids"] & west["uids"]
    # each shard keeps its own incremental cursor
    assert len(cursors) == 2 and set(cursors.values()) == {SMALL_END}


# -- the Parquet lake on S3, queried in place -------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, object]]:
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    url = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", region_name="us-east-1", endpoint_url=url)
    client.create_bucket(Bucket="lake")
    try:
        yield url, client
    finally:
        server.stop()


def _cluster_warehouse(path: Path, cluster: str, gr: float, hours: int) -> gi.GpuInsight:
    f = MiniFleet(cluster=cluster)
    f.price("g6.xlarge", "L4", 1, 0.8048, 0.3)
    for n in ("n1", "n2"):
        f.node(n, "g6.xlarge", "L4", 1)
    f.pod("p1", "n1", namespace="ml")
    f.series("n1", 0, "p1", "ml", gr, end=T0 + timedelta(hours=hours))  # crosses midnight: two day partitions
    f.series("n2", 0, "", "", 0.0, end=T0 + timedelta(hours=hours))
    g = gi.open(path)
    f.load(g.wh)
    g.refresh()
    return g


def test_lake_on_s3_is_queried_in_place(s3: tuple[str, object], tmp_path: Path,
                                        caplog: pytest.LogCaptureFixture) -> None:
    url, client = s3
    expected = {}
    for cluster, gr, hours in (("east", 0.25, 30), ("west", 0.75, 36)):
        with _cluster_warehouse(tmp_path / f"{cluster}.duckdb", cluster, gr, hours) as g:
            lines = list(export_tables(g.wh, "s3://lake/gpuinsight", s3_client=client))
            assert lines[-1].startswith("uploaded")
            expected[cluster] = g.sql(
                "SELECT CAST(hour AS DATE) AS day, count(*) AS n, sum(gr_active_avg * covered_s) / 3600 AS busy "
                "FROM gpu_hourly GROUP BY ALL ORDER BY day").rows()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="lake")["Contents"])
    assert "gpuinsight/gpu_samples/cluster=east/day=2026-11-02/gpu_samples-0.parquet" in keys
    assert "gpuinsight/gpu_hourly/cluster=west/day=2026-11-01/gpu_hourly-0.parquet" in keys

    con = open_lake("s3://lake/gpuinsight", endpoint_url=url)
    got = con.execute("SELECT cluster, day, count(*), sum(gr_active_avg * covered_s) / 3600 FROM gpu_hourly "
                  "GROUP BY ALL ORDER BY cluster, day").fetchall()
    want = [(c, *r) for c in ("east", "west") for r in expected[c]]
    assert [r[:3] for r in got] == [r[:3] for r in want]
    assert [r[3] for r in got] == pytest.approx([r[3] for r in want], rel=1e-12)
    # the raw samples read back in place: west's GPU-hours held by its pod, per day
    held = con.execute("SELECT day, sum(step_s) / 3600 FROM gpu_samples WHERE cluster = 'west' AND pod = 'p1' "
                   "GROUP BY day ORDER BY day").fetchall()
    assert held == [(datetime(2026, 11, 1).date(), 24.0), (datetime(2026, 11, 2).date(), 12.0)]
    # a partition filter reads only that folder (the moto server logs every request it serves)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        one = con.execute("SELECT count(*), min(ts), max(ts) FROM gpu_samples "
                          "WHERE cluster = 'east' AND day = DATE '2026-11-02'").fetchone()
    assert one == (2 * 6 * 12, datetime(2026, 11, 2), datetime(2026, 11, 2, 5, 55))
    reads = {m.group(1) for r in caplog.records if (m := re.search(r"GET (/lake/\S+) HTTP", r.getMessage()))}
    assert reads == {"/lake/gpuinsight/gpu_samples/cluster=east/day=2026-11-02/gpu_samples-0.parquet"}
    assert con.execute("SELECT count(*) FROM nodes").fetchone() == (4,)

    # a stale object from an earlier, larger export is removed when its partition is rewritten
    stale = "gpuinsight/gpu_samples/cluster=east/day=2026-11-01/gpu_samples-1.parquet"
    client.copy_object(Bucket="lake", Key=stale,
                       CopySource={"Bucket": "lake", "Key": stale.replace("-1.parquet", "-0.parquet")})
    with gi.open(tmp_path / "east.duckdb") as g:
        list(export_tables(g.wh, "s3://lake/gpuinsight", s3_client=client))
    keys_after = sorted(o["Key"] for o in client.list_objects_v2(Bucket="lake")["Contents"])
    assert stale not in keys_after and keys_after == keys
    assert open_lake("s3://lake/gpuinsight", endpoint_url=url).execute(
        "SELECT count(*) FROM gpu_samples WHERE cluster = 'east'").fetchone() == (2 * 30 * 12,)


def test_rollup_of_one_cluster_leaves_the_others_alone(tmp_path: Path) -> None:
    import polars as pl

    from gpuinsight.warehouse.rollup import rebuild_rollups

    with Warehouse(tmp_path / "w.duckdb") as wh:
        for cluster, gr in (("east", 0.25), ("west", 0.75)):
            f = MiniFleet(cluster=cluster)
            f.series("n1", 0, "p1", "ml", gr, end=T0 + timedelta(hours=2))
            f.load(wh)
        before = wh.sql("SELECT * FROM gpu_hourly WHERE cluster = 'west' ORDER BY hour")
        assert before.height == 2
        # west's samples change under a stale rollup; a rebuild for east's batch must not touch west
        wh.con.execute("UPDATE gpu_sample_facts SET gr_active = 0 "
                       "WHERE gpu_key IN (SELECT gpu_key FROM gpu_keys WHERE cluster = 'west')")
        with wh.transaction() as con:
            n = rebuild_rollups(con, pl.DataFrame({"cluster": ["east"], "ts": [T0]}))["gpu_hourly"]
        assert n == 1
        assert wh.sql("SELECT * FROM gpu_hourly WHERE cluster = 'west' ORDER BY hour").equals(before)
        with wh.transaction() as con:  # without a cluster column: every cluster's hour
            assert rebuild_rollups(con, pl.DataFrame({"ts": [T0]}))["gpu_hourly"] == 2
        assert wh.sql("SELECT gr_active_avg FROM gpu_hourly WHERE cluster = 'west' AND hour = ?", [T0]).item() == 0


def test_rollups_of_a_batch_of_every_cluster_rebuilt_at_once(tmp_path: Path) -> None:
    """A batch holding every cluster the warehouse has is rolled up in one rebuild (no cluster
    filter): the same rows as rebuilding cluster by cluster, and the counts are the rows there."""
    import polars as pl

    from gpuinsight.warehouse.rollup import rebuild_rollups, rebuild_scopes

    with Warehouse(tmp_path / "w.duckdb") as wh:
        for cluster, gr in (("east", 0.25), ("west", 0.75)):
            f = MiniFleet(cluster=cluster)
            f.series("n1", 0, "p1", "ml", gr, end=T0 + timedelta(hours=2))
            f.series("n1", 1, "p1", "ml", gr / 2, end=T0 + timedelta(hours=2))  # p1 on two GPUs
            f.series("n1", 2, "p2", "ml", gr / 3, end=T0 + timedelta(hours=1, minutes=30))
            f.load(wh)
        assert rebuild_scopes(wh.con, ["east"]) == ["east"]
        assert rebuild_scopes(wh.con, ["west", "east"]) == [None]
        assert rebuild_scopes(wh.con, [None]) == [None]
        order = {"gpu_hourly": "cluster, hour, gpu_uuid, pod", "gpu_pod_steps": "pod_key, ts"}
        by_cluster = {t: wh.sql(f"SELECT * FROM {t} ORDER BY {o}") for t, o in order.items()}
        assert by_cluster["gpu_hourly"].height == 12 and by_cluster["gpu_pod_steps"].height > 0
        with wh.transaction() as con:
            con.execute("DELETE FROM gpu_hourly_facts")
            con.execute("DELETE FROM gpu_pod_steps")
            n = rebuild_rollups(con, pl.DataFrame({"cluster": ["east", "west"], "ts": [T0, T0 + timedelta(hours=1)]}))
        for table, o in order.items():
            assert wh.sql(f"SELECT * FROM {table} ORDER BY {o}").equals(by_cluster[table])
            assert n[table] == by_cluster[table].height

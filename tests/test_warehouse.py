"""Migrations and idempotent merge loads."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.warehouse import Warehouse, migrate, schema_version
from gpuinsight.warehouse.migrations import migration_files


def test_migrates_from_empty_and_rerun_is_a_no_op(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    applied = migrate(con)
    latest = max(v for v, _, _ in migration_files())
    assert applied == [v for v, _, _ in migration_files()]  # numbers are allotted per branch: gaps are fine
    assert schema_version(con) == latest
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    for t in ("clusters", "nodes", "gpus", "gpu_samples", "gpu_hourly", "pods", "podgroups", "queues", "prices",
              "recommendations", "applied_actions", "ingest_state", "mig_profiles", "mig_layouts"):
        assert t in tables
    assert migrate(con) == []
    assert con.execute("SELECT count(*) FROM mig_profiles").fetchone()[0] == 35


def test_a_new_migration_applies_on_top(tmp_path: Path) -> None:
    import shutil

    from gpuinsight.paths import queries_dir

    root = tmp_path / "q"
    shutil.copytree(queries_dir() / "schema", root / "schema")
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    before = migrate(con, root)
    (root / "schema" / "999_extra.sql").write_text("CREATE TABLE extra (x INTEGER);\n")
    assert migrate(con, root) == [999]
    assert schema_version(con) == 999 and before
    (root / "schema" / "998_broken.sql").write_text("CREATE TABLE broken (x NOPE);\n")
    con2 = duckdb.connect(str(tmp_path / "w2.duckdb"))
    with pytest.raises(RuntimeFailure, match="998_broken.sql"):
        migrate(con2, root)
    # the failed migration left nothing half-done; the ones before it stay applied
    assert schema_version(con2) == max(v for v, _, _ in migration_files())


class CatalogCounter:
    """A DuckDB connection that counts the statements reading ``information_schema.columns``."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con, self.catalog_reads = con, 0

    def execute(self, sql: str, *args: object) -> duckdb.DuckDBPyConnection:
        self.catalog_reads += "information_schema.columns" in sql
        return self.con.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.con, name)


def test_merges_read_the_catalog_once_until_the_schema_changes(tmp_path: Path) -> None:
    import shutil

    from gpuinsight.paths import queries_dir

    root = tmp_path / "q"
    shutil.copytree(queries_dir() / "schema", root / "schema")
    wh = Warehouse(tmp_path / "w.duckdb")
    counter = CatalogCounter(wh.con)
    wh.con = counter  # type: ignore[assignment]
    for i in range(5):
        wh.merge("nodes", pl.DataFrame({"cluster": ["c"], "node": [f"n{i}"], "gpu_count": [8]}), ["cluster", "node"])
        wh.merge("queues", pl.DataFrame({"cluster": ["c"], "name": [f"q{i}"], "weight": [1]}), ["cluster", "name"])
    assert counter.catalog_reads == 1 and wh.count("nodes") == 5
    with pytest.raises(RuntimeFailure, match="unknown columns"):  # the cached columns still check batches
        wh.merge("nodes", pl.DataFrame({"cluster": ["c"], "node": ["x"], "colour": ["red"]}), ["cluster", "node"])
    # a migration that adds a column is seen at once: the cache is dropped with every migration
    (root / "schema" / "999_colour.sql").write_text("ALTER TABLE nodes ADD COLUMN colour VARCHAR;\n")
    assert wh.migrate(root) == [999]
    wh.merge("nodes", pl.DataFrame({"cluster": ["c"], "node": ["x"], "colour": ["red"]}), ["cluster", "node"])
    assert wh.sql("SELECT colour FROM nodes WHERE node = 'x'").item() == "red"
    assert counter.catalog_reads == 2
    with pytest.raises(RuntimeFailure, match="unknown warehouse table 'nope'"):
        wh.count("nope")
    wh.close()


def test_merge_is_idempotent_and_upserts(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "w.duckdb")
    rows = pl.DataFrame({"cluster": ["c", "c"], "node": ["a", "b"], "gpu_count": [8, 4]})
    assert wh.merge("nodes", rows, ["cluster", "node"]) == 2
    wh.merge("nodes", rows, ["cluster", "node"])
    assert wh.count("nodes") == 2
    wh.merge("nodes", pl.DataFrame({"cluster": ["c"], "node": ["a"], "gpu_count": [7]}), ["cluster", "node"])
    assert wh.sql("SELECT gpu_count FROM nodes WHERE node = 'a'").item() == 7
    assert wh.count("nodes") == 2


def test_failed_batch_leaves_the_table_unchanged(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.merge("nodes", pl.DataFrame({"cluster": ["c"], "node": ["a"], "gpu_count": [8]}), ["cluster", "node"])
    with pytest.raises(RuntimeFailure, match="unknown columns"), wh.transaction() as con:
        wh.merge("nodes", pl.DataFrame({"cluster": ["c"], "node": ["b"], "gpu_count": [1]}), ["cluster", "node"],
                 con=con)
        wh.merge("nodes", pl.DataFrame({"cluster": ["c"], "node": ["z"], "colour": ["red"]}), ["cluster", "node"],
                 con=con)
    assert wh.sql("SELECT node FROM nodes ORDER BY node")["node"].to_list() == ["a"]


def test_not_a_warehouse_is_bad_input(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.duckdb"
    bogus.write_text("this is not a database")
    with pytest.raises(BadInput, match="bogus.duckdb"):
        Warehouse(bogus)


def test_reopened_warehouse_answers_queries(tmp_path: Path) -> None:
    Warehouse(tmp_path / "w.duckdb").close()
    wh = Warehouse(tmp_path / "w.duckdb")
    assert wh.count("nodes") == 0
    assert wh.sql("SELECT 1 AS one")["one"].to_list() == [1]


def test_models_built_by_another_version_are_rebuilt_on_open(tmp_path: Path) -> None:
    import gpuinsight as gi
    from tests.fleet_tables import T0, MiniFleet

    f = MiniFleet()
    f.node("n1", "g6.xlarge", "L4", 1)
    f.pod("p", "n1")
    from datetime import timedelta

    f.series("n1", 0, "p", "ns", 0.5, end=T0 + timedelta(hours=1))
    with gi.open(tmp_path / "w.duckdb") as g:
        f.load(g.wh)
        g.refresh()
        # an older gpuinsight left a materialized model of another shape and fingerprint
        g.wh.con.execute("CREATE OR REPLACE TABLE analysis_window AS SELECT 1 AS old_column")
        g.wh.con.execute("UPDATE model_state SET fingerprint = 'older'")
    with gi.open(tmp_path / "w.duckdb", read_only=True) as g, pytest.raises(BadInput, match="another gpuinsight"):
        g.query("fleet_summary")
    with gi.open(tmp_path / "w.duckdb") as g:  # read-write: rebuilt before answering
        assert g.query("analysis_window")["cluster"].to_list() == ["test"]


def _samples(day: int, pods: dict[str, list[str]]) -> pl.DataFrame:
    """Samples of GPUs (by uuid) at four steps of ``day``, one row per pod holding each GPU."""
    from datetime import datetime, timedelta

    rows = []
    for step in range(4):
        ts = datetime(2026, 11, day) + timedelta(minutes=5 * step)
        for uuid, held_by in pods.items():
            for pod in held_by:
                rows.append({"cluster": "c", "ts": ts, "gpu_uuid": uuid, "mig_instance": -1, "mig_profile": "",
                             "namespace": "ns" if pod else "", "pod": pod, "container": "", "step_s": 300,
                             "gr_active": float(day) + step / 10})
    return pl.DataFrame(rows)


def test_merge_bounded_by_the_batch_time_range_keeps_merge_semantics(tmp_path: Path) -> None:
    """Storing samples (and merge) deletes within the batch's time span (so older row groups
    are skipped): the result is still the upsert by key, whole GPU steps are replaced, a re-run
    is a no-op, and rows of other days with the same non-time key are untouched."""
    from gpuinsight.sources.series import SAMPLE_KEY
    from gpuinsight.warehouse.samples import store_sample_rows

    wh = Warehouse(tmp_path / "w.duckdb")

    def merge(frame: pl.DataFrame) -> None:
        with wh.transaction() as con:
            store_sample_rows(con, frame)

    def stored() -> list[tuple]:
        return wh.con.execute("SELECT ts, gpu_uuid, pod, gr_active FROM gpu_samples ORDER BY ALL").fetchall()

    shared = {"g1": ["a", "b"], "g2": [""]}
    for day in (1, 2, 3):
        merge(_samples(day, shared))
    three_days = stored()
    assert len(three_days) == 3 * 4 * 3
    merge(_samples(2, shared))  # re-running a day changes nothing
    assert stored() == three_days
    # day 2 again, g1 now held by one pod (a group that lost a row) and new values: exactly the new rows
    merge(_samples(2, {"g1": ["a"], "g2": [""]}).with_columns(pl.col("gr_active") + 100))
    after = stored()
    day = [r for r in after if r[0].day == 2]
    assert sorted((r[1], r[2]) for r in day) == sorted([("g1", "a"), ("g2", "")] * 4)
    assert all(r[3] >= 100 for r in day)
    assert [r for r in after if r[0].day != 2] == [r for r in three_days if r[0].day != 2]
    # the bound is a time range of the delete key when its time column allows one; none otherwise
    from gpuinsight.warehouse.db import _time_bound

    batch = _samples(2, shared)
    assert _time_bound(batch, SAMPLE_KEY[:4])[0] == ' AND t."ts" BETWEEN ? AND ?'
    assert _time_bound(batch, SAMPLE_KEY[:4])[1] == [batch["ts"].min(), batch["ts"].max()]
    assert _time_bound(batch.with_columns(pl.col("ts").dt.cast_time_unit("ns")), SAMPLE_KEY[:4]) == ("", [])
    assert _time_bound(pl.DataFrame({"cluster": ["c"], "node": ["a"]}), ["cluster", "node"]) == ("", [])
    wh.close()


def test_memory_limit_is_applied_and_a_bad_one_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuinsight as gi

    def limit(g: gi.GpuInsight) -> str:
        return str(g.sql("SELECT current_setting('memory_limit') AS m").item())

    monkeypatch.delenv("GPUINSIGHT_MEMORY_LIMIT", raising=False)
    with gi.open(tmp_path / "w.duckdb") as g, duckdb.connect() as con:  # the default: DuckDB's own
        assert limit(g) == con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    monkeypatch.setenv("GPUINSIGHT_MEMORY_LIMIT", "25%")
    with gi.open(tmp_path / "w.duckdb") as g, duckdb.connect() as con:
        con.execute("SET memory_limit = '25%'")
        assert limit(g) == con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    monkeypatch.setenv("GPUINSIGHT_MEMORY_LIMIT", "1GB")
    with gi.open(tmp_path / "w.duckdb") as g:
        assert limit(g) in ("953.6 MiB", "1.0 GiB", "1000.0 MiB")
    monkeypatch.setenv("GPUINSIGHT_MEMORY_LIMIT", "lots")
    with pytest.raises(BadInput, match="memory limit 'lots'"):
        gi.open(tmp_path / "w.duckdb")


def test_audit_rows_recorded_before_the_cluster_column_take_their_actions_cluster(tmp_path: Path) -> None:
    """Migration 022 on a warehouse with audit rows: each gets the cluster its recorded action
    named; a row whose action named none stays NULL."""
    import shutil

    from gpuinsight.paths import queries_dir

    root = tmp_path / "q"
    shutil.copytree(queries_dir() / "schema", root / "schema")
    later = [p for p in (root / "schema").glob("*.sql") if int(p.name[:3]) >= 22]
    held = {p.name: p.read_text() for p in later}
    for p in later:
        p.unlink()
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    migrate(con, root)
    assert "cluster" not in {r[0] for r in con.execute("DESCRIBE applied_actions").fetchall()}
    for seq, action in enumerate([{"cluster": "east", "target": "Queue/default"}, {"target": "Queue/default"},
                                  {"cluster": "west", "target": "Queue/default"}], start=1):
        con.execute("INSERT INTO applied_actions (plan_id, seq, target, operation, applied, status) "
                    "VALUES ('p', ?, 'Queue/default', 'patch', ?, 'applied')", [seq, json.dumps({"action": action})])
    for name, text in held.items():
        (root / "schema" / name).write_text(text)
    assert 22 in migrate(con, root)
    assert con.execute("SELECT seq, cluster FROM applied_actions ORDER BY seq").fetchall() == [
        (1, "east"), (2, None), (3, "west")]


def test_the_step_sample_tables_and_pods_lose_their_indexes_and_keep_their_rows(tmp_path: Path) -> None:
    """Migration 025 drops the primary-key indexes of the per-step sample tables and of pods: a
    warehouse at 024 keeps every row and column, and the loads' merge still holds one row per
    natural key."""
    import shutil
    from datetime import datetime, timedelta

    from gpuinsight.sources.cadvisor import KEY as CPU_KEY
    from gpuinsight.sources.energy import KEY as ENERGY_KEY

    before = tmp_path / "schema-024"
    (before / "schema").mkdir(parents=True)
    for _, _, path in migration_files():
        if int(path.name[:3]) < 25:
            shutil.copy(path, before / "schema" / path.name)
    db = tmp_path / "w.duckdb"
    t0 = datetime(2026, 11, 1)
    energy = pl.DataFrame({"cluster": ["c"] * 3, "gpu_uuid": ["GPU-1", "GPU-2", "GPU-1"],
                           "ts": [t0, t0, t0 + timedelta(minutes=5)], "energy_j": [1.5, None, 3.0],
                           "step_s": [300] * 3})
    cpu = pl.DataFrame({"cluster": ["c"] * 2, "ts": [t0, t0], "namespace": ["ns"] * 2, "pod": ["a", "b"],
                        "cpu_cores": [0.5, 2.0], "step_s": [300] * 2})
    con = duckdb.connect(str(db))
    migrate(con, before)
    for table, frame in (("gpu_energy_samples", energy), ("pod_cpu_samples", cpu)):
        con.register("_f", frame.to_arrow())
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _f")
        con.unregister("_f")
    con.execute("INSERT INTO pods (cluster, uid, namespace, name, gpu_request, labels, created) "
                "VALUES ('c', 'u1', 'ns', 'p1', 1.0, '{\"a\": \"b\"}', ?), ('c', 'u2', 'ns', 'p2', NULL, NULL, NULL)", [t0])
    tables = ("gpu_energy_samples", "serving_samples", "pod_cpu_samples", "kueue_quota_samples", "pods")

    def columns(c: duckdb.DuckDBPyConnection, table: str) -> list[tuple]:
        return c.execute("SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                         "WHERE table_name = ? ORDER BY ordinal_position", [table]).fetchall()

    before_columns = {t: columns(con, t) for t in tables}
    pod_rows = con.sql("SELECT * FROM pods").pl()
    con.close()
    with Warehouse(db) as wh:  # opening migrates
        assert schema_version(wh.con) >= 25
        indexed = wh.con.execute("SELECT DISTINCT table_name FROM duckdb_constraints() WHERE constraint_type IN "
                                 "('PRIMARY KEY', 'UNIQUE') AND table_name IN ?", [list(tables)]).fetchall()
        assert indexed == []
        assert wh.sql("SELECT * FROM gpu_energy_samples ORDER BY ALL").equals(energy.sort(energy.columns))
        assert wh.sql("SELECT * FROM pod_cpu_samples ORDER BY ALL").equals(cpu.sort(cpu.columns))
        # the merge keeps the natural key: the same batch again, and a changed value, add no rows
        wh.merge("gpu_energy_samples", energy.with_columns(energy_j=pl.lit(9.0)), ENERGY_KEY)
        wh.merge("pod_cpu_samples", cpu, CPU_KEY)
        assert wh.count("gpu_energy_samples") == 3 and wh.count("pod_cpu_samples") == 2
        assert wh.sql("SELECT DISTINCT energy_j FROM gpu_energy_samples").item() == 9.0
        with pytest.raises(duckdb.ConstraintException):  # the NOT NULL columns are still refused
            wh.con.execute("INSERT INTO gpu_energy_samples VALUES ('c', NULL, ?, 1.0, 300)", [t0])
        # every column of every table, in its order, with its type and NOT NULL, as before
        assert {t: columns(wh.con, t) for t in tables} == before_columns
        assert wh.sql("SELECT * FROM pods").equals(pod_rows)

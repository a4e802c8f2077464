"""The narrow sample table (migration 019, warehouse/samples.py): integer keys into dimension
tables, measures as before. A warehouse stored wide converts in place keeping every sample, its
pod numbers and every model's figures; the stored table holds no strings."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import duckdb
import polars as pl

import gpuinsight as gi
from gpuinsight.warehouse import migrate
from gpuinsight.warehouse.rollup import rebuild_rollups
from gpuinsight.warehouse.samples import store_sample_relation, store_sample_rows
from tests.test_incremental import T0, World, _same, assert_same, collect, model_rows, prices

ROOT = Path(__file__).resolve().parents[1]


def fleet() -> tuple[World, pl.DataFrame]:
    """A random fleet's samples with the shapes a wide table held: MIG instances (their own
    profile, one GPU index), a sample without node or GPU index, a GPU no pod holds."""
    world = World(3)
    samples = world.samples(T0, T0 + timedelta(hours=8), 0)
    mig = (samples.filter(pl.col("gpu_index") == 0).head(40)
           .with_columns(mig_instance=pl.lit(2, pl.Int32), mig_profile=pl.lit("1g.10gb"), pod=pl.lit("mig-pod"),
                         namespace=pl.lit("ml")))
    bare = samples.head(1).with_columns(node=pl.lit(None, pl.Utf8), gpu_index=pl.lit(None, pl.Int32),
                                        gpu_uuid=pl.lit("GPU-unplaced"))
    return world, pl.concat([samples, mig, bare])


def test_a_wide_warehouse_converts_in_place_keeping_every_figure(tmp_path: Path) -> None:
    world, samples = fleet()
    before = tmp_path / "schema-018"
    (before / "schema").mkdir(parents=True)
    for path in sorted((ROOT / "queries" / "schema").glob("*.sql")):
        if int(path.name[:3]) < 19:
            shutil.copy(path, before / "schema" / path.name)
    old = tmp_path / "old.duckdb"
    con = duckdb.connect(str(old))
    migrate(con, before)
    for table, frame in (("gpu_samples", samples), ("pods", world.pod_rows(T0, T0 + timedelta(hours=8))),
                         ("nodes", world.node_rows(T0, T0 + timedelta(hours=8))),
                         ("prices", prices("cat-1", 1.0, T0))):
        con.register("_f", frame.to_arrow())
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _f")
        con.unregister("_f")
    # the pod numbers and pod-steps a wide warehouse held (014's macros)
    con.execute("INSERT INTO pod_keys SELECT * FROM new_pod_keys(NULL, NULL, NULL)")
    con.execute("INSERT INTO gpu_pod_steps SELECT * FROM pod_steps_of(NULL, NULL, NULL)")
    wide = sorted(con.execute("SELECT * FROM gpu_samples").fetchall(), key=repr)
    keys = con.execute("SELECT * FROM pod_keys ORDER BY pod_key").fetchall()
    steps = sorted(con.execute("SELECT * FROM gpu_pod_steps").fetchall(), key=repr)
    con.close()

    with gi.open(old) as g:  # opening migrates
        assert sorted(g.wh.con.execute("SELECT * FROM gpu_samples").fetchall(), key=repr) == wide
        assert g.wh.con.execute("SELECT * FROM pod_keys ORDER BY pod_key").fetchall()[: len(keys)] == keys
        assert sorted(g.wh.con.execute("SELECT * FROM gpu_pod_steps").fetchall(), key=repr) == steps
        types = g.wh.con.execute("SELECT data_type FROM duckdb_columns() WHERE table_name = 'gpu_sample_facts'"
                                 ).fetchall()
        assert {t for (t,) in types} <= {"INTEGER", "TIMESTAMP", "DOUBLE"}
        g.refresh(full=True)
        migrated = model_rows(g)
        hourly = sorted(g.sql("SELECT * FROM gpu_hourly").rows(), key=repr)

    # the same data loaded by today's loads
    with gi.open(tmp_path / "new.duckdb") as g:
        with g.writing(), g.wh.transaction() as con:
            g.wh.merge("prices", prices("cat-1", 1.0, T0), ["catalog", "instance_type", "gpu_model"], con=con)
        collect(g, world, T0, T0 + timedelta(hours=8), 0)
        with g.writing(), g.wh.transaction() as con:  # the MIG and unplaced rows too
            store_sample_rows(con, samples)
            rebuild_rollups(con, samples)
        assert_same(model_rows(g), migrated, "migrated")
        loaded = sorted(g.sql("SELECT * FROM gpu_hourly").rows(), key=repr)
        assert len(loaded) == len(hourly) and all(_same(a, b) for a, b in zip(loaded, hourly, strict=True))


def _stored(g: gi.GpuInsight) -> tuple[list[tuple], ...]:
    con = g.wh.con
    return (sorted(con.execute("SELECT * FROM gpu_samples").fetchall(), key=repr),
            sorted(con.execute("SELECT * FROM gpu_hourly").fetchall(), key=repr),
            sorted(con.execute("SELECT k.cluster, k.namespace, k.pod, s.* EXCLUDE (pod_key) FROM gpu_pod_steps s "
                               "JOIN pod_keys k USING (pod_key)").fetchall(), key=repr))


def test_a_bulk_import_stores_what_a_merge_stores(tmp_path: Path, monkeypatch) -> None:
    """store_sample_relation (the bulk import of Parquet files) keys rows by their label set's
    hash; with every hash the same (a collision) it joins on the labels instead. Either way the
    warehouse holds what the merge route stores, on a first load (no dimension rows yet) and on a
    second with new label sets beside known ones."""
    from gpuinsight.warehouse import samples as narrow

    _, samples = fleet()
    first, second = samples.filter(pl.col("ts") < T0 + timedelta(hours=4)), samples.filter(
        pl.col("ts") >= T0 + timedelta(hours=4))
    second = pl.concat([second, second.head(5).with_columns(pod=pl.lit("late-pod"), ts=pl.col("ts") + timedelta(
        hours=1))])
    files = []
    for i, part in enumerate((first, second)):
        files.append(tmp_path / f"part-{i}.parquet")
        part.write_parquet(files[-1])

    def load(path: Path, bulk: bool) -> tuple[list[tuple], ...]:
        with gi.open(path) as g:
            for file, part in zip(files, (first, second), strict=True):
                with g.writing(), g.wh.transaction() as con:
                    if bulk:
                        assert store_sample_relation(con, "SELECT * FROM read_parquet(?)", [str(file)]) == part.height
                    else:
                        store_sample_rows(con, part)
                    rebuild_rollups(con, part)
            return _stored(g)

    merged = load(tmp_path / "merge.duckdb", bulk=False)
    hashed = load(tmp_path / "hashed.duckdb", bulk=True)
    monkeypatch.setattr(narrow, "_LABEL_HASH", "0::UBIGINT")
    collided = load(tmp_path / "collided.duckdb", bulk=True)
    for bulk in (hashed, collided):
        assert bulk[0] == merged[0]  # the samples, exactly
        assert all(len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
                   for a, b in zip(bulk[1:], merged[1:], strict=True))


def test_a_wide_frame_splits_into_label_sets_and_rows() -> None:
    """SampleRows.from_wide numbers label sets in the order they first appear and keeps the last
    row of a natural key, as the straightforward split does (strings or categoricals, nulls,
    a label column beyond the stored ones)."""
    from gpuinsight.warehouse.samples import LABEL_ID, MEASURES, NATURAL_KEY, SampleRows

    _, samples = fleet()
    again = samples.sample(n=50, seed=1).with_columns(gr_active=pl.col("gr_active") / 2)  # re-read: last counts
    wide = pl.concat([samples, again]).with_columns(hint=pl.col("pod").str.len_chars() % 2)
    for frame in (wide, wide.with_columns(pl.col("pod", "node").cast(pl.Categorical))):
        split = SampleRows.from_wide(frame)
        kept = frame.unique(subset=list(NATURAL_KEY), keep="last", maintain_order=True)
        label_cols = [c for c in kept.columns if c not in MEASURES and c != "ts"]
        sets = kept.select(label_cols).unique(maintain_order=True).with_row_index(LABEL_ID)
        ids = kept.join(sets, on=label_cols, how="left", nulls_equal=True, maintain_order="left")[LABEL_ID]
        assert split.labels.equals(sets.drop(LABEL_ID))
        assert split.rows[LABEL_ID].equals(ids) and split.rows["gr_active"].equals(kept["gr_active"])
        assert split.wide().select(kept.columns).equals(kept.with_columns(pl.col(c).cast(split.wide()[c].dtype)
                                                                          for c in kept.columns))

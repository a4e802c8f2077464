"""gpu_pod_steps (the per-pod, per-step rollup kept as samples arrive) and workload_input_profile
over it: the model gives the rows and values of the model it replaced (which grouped the raw
samples itself; its SQL is kept in tests/fixtures) on the sample fleet and on random fleets,
on and off a step grid; the rollup equals a from-scratch aggregate of the samples after loads,
re-loads, merges that hand GPU-steps to other pods, a failed load, and the migration's backfill."""

from __future__ import annotations

import math
import random
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import gpuinsight as gi
from gpuinsight.sources.cadvisor import KEY as CPU_KEY
from gpuinsight.sources.series import SAMPLE_KEY
from gpuinsight.warehouse import Warehouse, migrate
from gpuinsight.warehouse.db import to_polars
from gpuinsight.warehouse.rollup import rebuild_rollups
from gpuinsight.warehouse.samples import store_sample_rows
from tests.fleet_tables import T0, MiniFleet

ROOT = Path(__file__).resolve().parents[1]
OLD_MODEL = (Path(__file__).parent / "fixtures" / "workload_input_profile_raw.sql").read_text()
KEY = ["cluster", "namespace", "workload_kind", "workload"]
HOURS = 8


def assert_same_profile(new: pl.DataFrame, old: pl.DataFrame) -> None:
    """Same columns, same rows, values equal up to float rounding (1e-9 relative)."""
    assert new.columns == old.columns and new.height == old.height
    new, old = new.sort(KEY), old.sort(KEY)
    for c in old.columns:
        for a, b in zip(new[c].to_list(), old[c].to_list(), strict=True):
            if isinstance(a, float) and isinstance(b, float):
                assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (c, a, b)
            else:
                assert a == b, (c, a, b)


def old_profile(g: gi.GpuInsight, since: datetime | None = None, until: datetime | None = None) -> pl.DataFrame:
    return to_polars(g.wh.con, OLD_MODEL, {"since": since, "until": until})


def expected_pod_steps(g: gi.GpuInsight) -> list[tuple]:
    """The rollup computed from scratch from the samples now stored (rounded to compare floats)."""
    return g.sql("""
        SELECT cluster, namespace, pod, ts, max(step_s), count(*), round(avg(gr_active), 9), max(gr_active_max),
               min(coalesce(gr_active_min, gr_active)), bool_or(gr_active_min < gr_active - 1e-9),
               round(avg(fb_used_mib), 6), round(sum(pcie_rx_bps), 3), round(sum(nvlink_rx_bps), 3)
        FROM gpu_samples WHERE pod <> '' AND mig_instance < 0 AND gr_active IS NOT NULL
        GROUP BY cluster, namespace, pod, ts ORDER BY ALL""").rows()


def stored_pod_steps(g: gi.GpuInsight) -> list[tuple]:
    return g.sql("""
        SELECT k.cluster, k.namespace, k.pod, s.ts, s.step_s, s.gpus, round(s.gr, 9), s.gr_max, s.gr_min,
               s.min_below_mean, round(s.fb_mib, 6), round(s.pcie_rx_bps, 3), round(s.nvlink_rx_bps, 3)
        FROM gpu_pod_steps s JOIN pod_keys k USING (pod_key) ORDER BY ALL""").rows()


# -- random fleets ----------------------------------------------------------------------------------
def random_fleet(seed: int) -> tuple[list[MiniFleet], pl.DataFrame, pl.DataFrame]:
    """Nodes and pods (MiniFleets, one per cluster), GPU samples and container CPU of a random fleet.

    Workloads of 1-3 pods with 1-4 GPUs; pods on the 300 s grid (with missing steps and GPUs
    missing from some steps), on a 60 s grid, off any grid (jittered scrape times) or changing
    step; bursty or steady GR activity with and without per-step min/max; a GPU time-sliced by
    two pods; MIG instances and unheld GPUs (not profiled); the same pod names in two clusters.
    """
    rng = random.Random(seed)
    fleets: list[MiniFleet] = []
    samples: list[dict[str, Any]] = []
    cpu: list[dict[str, Any]] = []
    for cluster in ["c1", "c2"][: rng.choice([1, 2])]:
        fleet = MiniFleet(cluster=cluster)
        fleets.append(fleet)
        for w in range(rng.randint(3, 6)):
            namespace = rng.choice(["ml", "research"])
            kind = rng.choice(["Job", "StatefulSet", "Deployment"])
            timing = rng.choice(["grid", "grid", "grid", "fine", "jitter", "mixed"])
            burst = rng.random()
            for p in range(rng.randint(1, 3)):
                pod, node = f"w{w}-{p}", f"{cluster}-n{w}-{p}"
                gpus = rng.randint(1, 4)
                start = T0 + timedelta(minutes=5 * rng.randint(0, 24))
                end = start + timedelta(hours=rng.uniform(1, HOURS - 2))
                fleet.node(node, "p5.48xlarge", "H100-80GB", 4, first=T0, last=T0 + timedelta(hours=HOURS))
                fleet.pod(pod, node, namespace=namespace, gpus=gpus, start=start, end=end, workload=f"wl{w}",
                          kind=kind)
                fleet.pods[-1]["cpu_request"] = rng.choice([None, 2.0, 4.0 + p])
                t, k = start, 0
                while t < end:
                    step = {"grid": 300, "fine": 60, "jitter": 300, "mixed": 300 if k < 20 else 60}[timing]
                    ts = t + timedelta(seconds=rng.randint(0, 9)) if timing == "jitter" else t
                    t, k = t + timedelta(seconds=step), k + 1
                    if rng.random() < 0.1:  # a missing step: a run ends
                        continue
                    on = rng.random() < burst
                    for gpu in range(gpus):
                        if gpus > 1 and rng.random() < 0.05:  # one GPU missing from this step
                            continue
                        gr = None if rng.random() < 0.02 else (rng.uniform(0.5, 1.0) if on else rng.uniform(0, 0.04))
                        pushed = rng.random() < 0.5
                        samples.append(dict(
                            cluster=cluster, ts=ts, gpu_uuid=f"GPU-{node}-{gpu}", mig_instance=-1, mig_profile="",
                            node=node, gpu_index=gpu, model_name="NVIDIA H100 80GB HBM3", namespace=namespace,
                            pod=pod, container="c", gr_active=gr,
                            gr_active_max=None if gr is None else min(1.0, gr + (rng.uniform(0, 0.5) if pushed else 0)),
                            gr_active_min=None if gr is None or not pushed else gr * rng.random(),
                            fb_used_mib=rng.choice([20000.0, 30000.0 + rng.random()]),
                            pcie_rx_bps=None if timing == "fine" else rng.uniform(0, 1e9),
                            nvlink_rx_bps=rng.choice([None, rng.uniform(0, 1e10)]), step_s=step))
                    if gpus > 1 and rng.random() < 0.3:  # the same GPU-step held by a second, time-sliced pod
                        samples.append({**samples[-1], "pod": f"{pod}-ts"})
                    if rng.random() < 0.7:
                        cpu.append(dict(cluster=cluster, ts=ts, namespace=namespace, pod=pod,
                                        cpu_cores=rng.uniform(0, 8), step_s=step))
                if rng.random() < 0.3:
                    fleet.pod(f"{pod}-ts", node, namespace=namespace, gpus=1, start=start, end=end,
                              workload=f"wl{w}-shared", kind=kind)
        # an unheld GPU and a MIG instance: neither is a whole GPU held by a pod
        for i in range(12):
            ts = T0 + timedelta(minutes=5 * i)
            base = dict(cluster=cluster, ts=ts, node=f"{cluster}-idle", gpu_index=0, model_name="NVIDIA A100 80GB",
                        container="", gr_active=0.0, gr_active_max=0.0, gr_active_min=None, fb_used_mib=0.0,
                        pcie_rx_bps=None, nvlink_rx_bps=None, step_s=300)
            samples.append({**base, "gpu_uuid": f"GPU-{cluster}-idle", "mig_instance": -1, "mig_profile": "",
                            "namespace": "", "pod": ""})
            samples.append({**base, "gpu_uuid": f"GPU-{cluster}-mig", "mig_instance": 1, "mig_profile": "1g.10gb",
                            "namespace": "ml", "pod": "w0-0", "container": "c", "gr_active": 0.9})
    schema = {"ts": pl.Datetime("us"), "mig_instance": pl.Int32, "gpu_index": pl.Int32, "step_s": pl.Int32,
              **{c: pl.Float64 for c in ("gr_active", "gr_active_max", "gr_active_min", "fb_used_mib",
                                          "pcie_rx_bps", "nvlink_rx_bps")}}
    frame = pl.DataFrame(samples, schema_overrides=schema, infer_schema_length=None)
    cpu_frame = pl.DataFrame(cpu, schema_overrides={"ts": pl.Datetime("us"), "step_s": pl.Int32})
    return fleets, frame.unique(SAMPLE_KEY, keep="first", maintain_order=True), cpu_frame


def load_samples(g: gi.GpuInsight, batch: pl.DataFrame) -> None:
    """What a collector does with a batch: merge by the natural key, roll its hours up, one transaction."""
    with g.wh.transaction() as con:
        store_sample_rows(con, batch)
        rebuild_rollups(con, batch)


def build(path: Path, seed: int, *, batches: int = 1) -> tuple[gi.GpuInsight, pl.DataFrame]:
    fleets, samples, cpu = random_fleet(seed)
    g = gi.open(path)
    for fleet in fleets:
        fleet.load(g.wh)
    hours = samples["ts"].dt.truncate("1h")
    cuts = sorted(random.Random(seed).sample(sorted(set(hours.to_list())), k=batches - 1)) if batches > 1 else []
    edges = [datetime.min, *cuts, datetime.max]
    for lo, hi in zip(edges, edges[1:], strict=False):
        load_samples(g, samples.filter((hours >= lo) & (hours < hi)))
    if cpu.height:
        g.wh.merge("pod_cpu_samples", cpu, CPU_KEY)
    return g, samples


@pytest.mark.parametrize("seed", range(4))
def test_input_profile_equals_the_raw_sample_model_on_random_fleets(tmp_path: Path, seed: int) -> None:
    g, samples = build(tmp_path / "w.duckdb", seed, batches=1 + seed % 3)
    with g:
        assert stored_pod_steps(g) == expected_pod_steps(g)
        g.refresh()
        new = g.query("workload_input_profile")  # the answer refresh kept
        assert new.height > 0 and new["idle_runs"].sum() > 0 and new["busy_runs"].sum() > 0
        assert_same_profile(new, old_profile(g))
        since, until = T0 + timedelta(hours=1), T0 + timedelta(hours=4)
        assert_same_profile(g.query("workload_input_profile", since=since, until=until),
                            old_profile(g, since, until))


def test_input_profile_equals_the_raw_sample_model_on_the_sample_fleet(tmp_path: Path) -> None:
    from gpuinsight.sources.sample_dir import load_sample_dir

    with gi.open(tmp_path / "s.duckdb") as g:
        load_sample_dir(g.wh, g.config)
        g.refresh()
        assert stored_pod_steps(g) == expected_pod_steps(g)
        new = g.query("workload_input_profile")
        assert new.height >= 10
        assert_same_profile(new, old_profile(g))


def test_pod_steps_after_reloads_merges_and_a_failed_load_equal_a_build_from_scratch(tmp_path: Path) -> None:
    g, samples = build(tmp_path / "w.duckdb", 11, batches=3)
    rng = random.Random(11)
    with g:
        steps, keys = stored_pod_steps(g), g.sql("SELECT * FROM pod_keys ORDER BY pod_key").rows()
        hour = T0 + timedelta(hours=2)
        in_hour = samples.filter(pl.col("ts").dt.truncate("1h") == hour)
        # re-loading an hour changes nothing, not even the pod numbers
        load_samples(g, in_hour)
        assert stored_pod_steps(g) == steps and g.sql("SELECT * FROM pod_keys ORDER BY pod_key").rows() == keys
        # a re-collection hands some GPU-steps of the hour to a pod never seen and changes values:
        # the old holders' steps lose those GPUs (or vanish), the new pod gets its own steps
        moved = in_hour.with_columns(
            pod=pl.when(pl.col("gpu_uuid").hash(rng.randint(0, 99)) % 3 == 0).then(pl.lit("newcomer"))
            .otherwise(pl.col("pod")),
            gr_active=pl.col("gr_active") * 0.5)
        load_samples(g, moved)
        assert stored_pod_steps(g) == expected_pod_steps(g) != steps
        assert g.sql("SELECT count(*) FROM pod_keys WHERE pod = 'newcomer'").item() >= 1
        # a load that fails after its rollups (here: before its commit) leaves everything as it was
        after, keys = stored_pod_steps(g), g.sql("SELECT * FROM pod_keys ORDER BY pod_key").rows()
        late = samples.filter(pl.col("ts") >= T0 + timedelta(hours=3)).with_columns(pod=pl.lit("ghost"))
        with pytest.raises(RuntimeError, match="interrupted"), g.wh.transaction() as con:
            store_sample_rows(con, late)
            rebuild_rollups(con, late)
            raise RuntimeError("interrupted")
        assert stored_pod_steps(g) == after == expected_pod_steps(g)
        assert g.sql("SELECT * FROM pod_keys ORDER BY pod_key").rows() == keys
        # the model over the merged data is still the raw-sample model's answer
        g.refresh()
        assert_same_profile(g.query("workload_input_profile"), old_profile(g))


def test_migration_backfills_pod_steps_of_a_warehouse_loaded_before_it(tmp_path: Path) -> None:
    import duckdb

    before = tmp_path / "schema-013"
    (before / "schema").mkdir(parents=True)
    for path in sorted((ROOT / "queries" / "schema").glob("*.sql")):
        if int(path.name[:3]) < 14:
            shutil.copy(path, before / "schema" / path.name)
    _, samples, _ = random_fleet(3)
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    migrate(con, before)
    con.register("_s", samples.to_arrow())
    con.execute("INSERT INTO gpu_samples BY NAME SELECT * FROM _s")
    con.close()
    with Warehouse(db):  # opening migrates: 014 numbers the pods and rolls up every stored sample
        pass
    with gi.open(db) as g:
        assert g.sql("SELECT max(version) FROM schema_version").item() >= 14
        assert len(stored_pod_steps(g)) > 0 and stored_pod_steps(g) == expected_pod_steps(g)


def test_pods_on_one_gpu_and_pods_moving_between_gpus(tmp_path: Path) -> None:
    """pod_steps_of passes the samples of a pod on one GPU through as its steps and groups only
    pods seen on several GPUs in the range: a pod that moves to another GPU within an hour
    (one GPU at each step, two in the hour; the second arriving in a later, late load of the
    same hour), a pod on two GPUs, a GPU two pods time-slice, a pod on one GPU throughout, a pod
    that gains a second GPU in a later hour (a later load)."""
    def rows(pod: str, gpu: str, minutes: range, gr: float, **extra: Any) -> list[dict[str, Any]]:
        return [dict(cluster="c1", ts=T0 + timedelta(minutes=m), gpu_uuid=gpu, mig_instance=-1, mig_profile="",
                     node="n1", gpu_index=int(gpu[-1]), model_name="NVIDIA H100 80GB HBM3", namespace="ml", pod=pod,
                     container="c", gr_active=gr + m / 1000, gr_active_max=gr + m / 500,
                     gr_active_min=extra.get("gr_min"), fb_used_mib=1000.0 + m, pcie_rx_bps=extra.get("pcie"),
                     nvlink_rx_bps=None, step_s=300) for m in minutes]

    first = [*rows("steady", "GPU-0", range(0, 120, 5), 0.5, gr_min=0.1),
             *rows("mover", "GPU-1", range(0, 30, 5), 0.2),
             *rows("pair", "GPU-2", range(0, 60, 5), 0.7, pcie=1e6), *rows("pair", "GPU-3", range(0, 60, 5), 0.3),
             *rows("slice-a", "GPU-4", range(0, 60, 5), 0.4), *rows("slice-b", "GPU-4", range(0, 60, 5), 0.6)]
    late = rows("mover", "GPU-5", range(30, 60, 5), 0.9)
    # a pod on one GPU in the first hour, on a second one as well in the next (a later load): the
    # first hour's steps passed through, the next hour's grouped
    grower = [rows("grower", "GPU-6", range(0, 60, 5), 0.3),
              [*rows("grower", "GPU-6", range(60, 120, 5), 0.3), *rows("grower", "GPU-7", range(60, 120, 5), 0.8)]]
    schema = {"ts": pl.Datetime("us"), "mig_instance": pl.Int32, "gpu_index": pl.Int32, "step_s": pl.Int32,
              **{c: pl.Float64 for c in ("gr_active", "gr_active_max", "gr_active_min", "fb_used_mib",
                                          "pcie_rx_bps", "nvlink_rx_bps")}}
    with gi.open(tmp_path / "w.duckdb") as g:
        for batch in (first + grower[0], late):
            load_samples(g, pl.DataFrame(batch, schema_overrides=schema, infer_schema_length=None))
        assert stored_pod_steps(g) == expected_pod_steps(g)
        load_samples(g, pl.DataFrame(grower[1], schema_overrides=schema, infer_schema_length=None))
        assert stored_pod_steps(g) == expected_pod_steps(g)
        assert g.sql("SELECT count(*) FROM gpu_pod_steps s JOIN pod_keys k USING (pod_key) "
                     "WHERE k.pod = 'grower'").item() == 24
        gpus = dict(g.sql("SELECT k.pod, max(s.gpus) FROM gpu_pod_steps s JOIN pod_keys k USING (pod_key) "
                          "GROUP BY k.pod").rows())
        assert gpus == {"steady": 1, "mover": 1, "pair": 2, "slice-a": 1, "slice-b": 1, "grower": 2}
        assert g.sql("SELECT count(*) FROM gpu_pod_steps s JOIN pod_keys k USING (pod_key) "
                     "WHERE k.pod = 'mover'").item() == 12

"""A generated fleet as files, and its load into a warehouse: the common input of the benchmarks.

``write_fleet_files`` turns the sample generator's fleet (``tests.samplegen``: the realistic
mix of training, inference, notebooks, dev services, batch and nightly Volcano jobs, MIG, spot)
into the files a benchmark starts from, so every contender reads the same bytes:

* ``samples/part-NNNN.parquet``: DCGM samples in the ``gpu_samples`` shape, one file per day;
* ``inventory/{nodes,pods,prices}.parquet``: nodes, the full pod history (every incarnation,
  as a Prometheus collection of kube-state-metrics stores it) and the price catalog, in the
  warehouse's table shapes;
* ``kubectl/*.json``: the end-of-window ``kubectl get -o json`` dumps the generator writes,
  Volcano Queues, PodGroups and Jobs, Karpenter NodePools and PDBs included, so the spot and
  queue rules have their inputs.

A ``manifest.json`` records what was generated; a folder whose manifest matches is reused.
``load_fleet`` loads those files through the product's own paths: the warehouse's ``merge``
for the inventory, each day's samples appended (or merged by the collectors' natural key) with
the hourly rollup of its hours rebuilt in the same transaction (what a collector does as
samples arrive), and the kubectl dump loader.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from gpuinsight.gpumodels import canonical_gpu_model
from tests.samplegen import FleetSpec, build_fleet, gpu_sample_frames, write_kubectl_dumps
from tests.samplegen.fleet import Fleet
from tests.samplegen.spec import INSTANCE_TYPES, SPOT_PRICE_FRACTION

if TYPE_CHECKING:
    from gpuinsight.api import GpuInsight

FORMAT = 3  # bump when the files' shape changes, so cached folders are rebuilt (3: the sample fleet has KubeRay, KEDA, topology)


def add_fleet_args(ap: argparse.ArgumentParser, *, gpus: int, days: float, interval: int) -> None:
    """The options every bench takes to choose (and cache) its generated fleet."""
    ap.add_argument("--gpus", type=int, default=gpus)
    ap.add_argument("--days", type=float, default=days)
    ap.add_argument("--interval", type=int, default=interval, help="sample step in seconds")
    ap.add_argument("--workdir", type=Path, help="keep the generated fleet here (reused when it matches)")


def _ts(col: str) -> pl.Expr:
    return pl.from_epoch(pl.col(col), time_unit="s")


def node_rows(fleet: Fleet, cluster: str) -> pl.DataFrame:
    end = fleet.spec.start_s + fleet.spec.steps * fleet.spec.interval_s
    return fleet.nodes.select(
        pl.lit(cluster).alias("cluster"), pl.col("name").alias("node"), "instance_type", "capacity_type",
        pl.col("pool").alias("node_pool"),
        pl.when(pl.col("pool_kind") == "eks").then(pl.lit("eks-nodegroup")).otherwise(pl.lit("karpenter"))
        .alias("node_pool_kind"),
        pl.col("gpu_model").map_elements(canonical_gpu_model, return_dtype=pl.String).alias("gpu_model"),
        "gpu_count",
        pl.when(pl.col("mig")).then(pl.lit("all-1g.10gb")).otherwise(None).alias("mig_config"),
        "zone",
        pl.when(pl.col("mig")).then(pl.lit('{"nvidia.com/mig-1g.10gb": 7}'))
        .otherwise(pl.format('{{"nvidia.com/gpu": {}}}', pl.col("gpu_count"))).alias("capacity"),
        pl.max_horizontal(_ts("created_s"), pl.lit(datetime.fromtimestamp(fleet.spec.start_s, UTC).replace(tzinfo=None)))
        .alias("first_seen"),
        pl.lit(datetime.fromtimestamp(end - fleet.spec.interval_s, UTC).replace(tzinfo=None)).alias("last_seen"),
    )


def pod_rows(fleet: Fleet, cluster: str) -> pl.DataFrame:
    # pods.workload is the row number of the workload in fleet.workloads
    wl = fleet.workloads.with_row_index("workload").select(
        pl.col("workload").cast(pl.Int64), pl.col("name").alias("wname"), "kind", "queue", "podgroup")
    p = fleet.pods.join(wl, on="workload", how="left")
    end = fleet.spec.start_s + fleet.spec.steps * fleet.spec.interval_s
    mig = pl.col("resource").str.starts_with("nvidia.com/mig-")
    return p.select(
        pl.lit(cluster).alias("cluster"), "uid", "namespace", "name",
        pl.col("kind").alias("workload_kind"), pl.col("wname").alias("workload"), "node",
        pl.when(mig).then(0.0).otherwise(pl.col("gpus").cast(pl.Float64)).alias("gpu_request"),
        pl.when(mig).then(pl.col("resource").str.replace("nvidia.com/mig-", "")).otherwise(None).alias("mig_profile"),
        pl.when(mig).then(pl.col("gpus").cast(pl.Float64)).otherwise(0.0).alias("mig_request"),
        "queue", "podgroup",
        _ts("created_s").alias("created"), _ts("scheduled_s").alias("scheduled"), _ts("started_s").alias("started"),
        pl.when(pl.col("completed_s") < end).then(_ts("completed_s")).otherwise(None).alias("finished"),
        pl.when(pl.col("deleted_s") < end).then(_ts("deleted_s")).otherwise(pl.lit(end).cast(pl.Int64).pipe(
            lambda e: pl.from_epoch(e, time_unit="s"))).alias("last_seen"),
        "phase",
        pl.when(pl.col("namespace").str.starts_with("prod")).then(pl.lit('{"env": "production"}'))
        .otherwise(pl.lit("{}")).alias("labels"),
        pl.lit("bench").alias("source"),
    )


def price_rows() -> pl.DataFrame:
    return pl.DataFrame([
        {"catalog": "bench", "instance_type": it.name, "gpu_model": canonical_gpu_model(it.model_name),
         "gpu_count": it.gpu_count, "on_demand_usd_per_hour": it.on_demand_usd,
         "spot_usd_per_hour": it.on_demand_usd * SPOT_PRICE_FRACTION, "region": "us-east-1", "source": "bench",
         "as_of": datetime(2026, 7, 20).date(), "loaded_at": datetime(2026, 7, 20)}
        for it in INSTANCE_TYPES.values()
    ])


@dataclass(frozen=True)
class FleetFiles:
    root: Path
    meta: dict

    @property
    def samples(self) -> list[Path]:
        return sorted((self.root / "samples").glob("part-*.parquet"))

    def inventory(self, table: str) -> Path:
        return self.root / "inventory" / f"{table}.parquet"

    @property
    def kubectl(self) -> Path:
        return self.root / "kubectl"

    @property
    def sample_rows(self) -> int:
        return int(self.meta["sample_rows"])

    @property
    def gpus(self) -> int:
        return int(self.meta["gpus"])


def write_fleet_files(root: Path, gpus: int, days: float, interval_s: int, *, seed: int = 7,
                      dumps: bool = True, log: bool = False) -> FleetFiles:
    """Generate the fleet into ``root`` (reused when its manifest says it is this fleet)."""
    want = {"format": FORMAT, "gpus_asked": gpus, "days": days, "interval_s": interval_s, "seed": seed,
            "dumps": dumps}
    manifest = root / "manifest.json"
    if manifest.is_file():
        meta = json.loads(manifest.read_text())
        same = all(meta.get(k) == v for k, v in want.items() if k != "dumps")
        if same and (meta.get("dumps") or not dumps):  # a fleet with dumps serves one without
            return FleetFiles(root, meta)
    t0 = time.perf_counter()
    spec = FleetSpec.for_gpus(gpus, days=days, interval_s=interval_s, seed=seed)
    fleet = build_fleet(spec)
    for sub in ("samples", "inventory"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        for old in (root / sub).glob("*.parquet"):
            old.unlink()
    node_rows(fleet, spec.cluster).write_parquet(root / "inventory" / "nodes.parquet")
    pod_rows(fleet, spec.cluster).write_parquet(root / "inventory" / "pods.parquet")
    price_rows().write_parquet(root / "inventory" / "prices.parquet")
    if dumps:
        write_kubectl_dumps(fleet, root / "kubectl")
    rows = 0
    for i, frame in enumerate(gpu_sample_frames(fleet, chunk_hours=24)):
        frame.write_parquet(root / "samples" / f"part-{i:04d}.parquet", row_group_size=500_000)
        rows += frame.height
        if log:
            print(f"  generated day {i + 1}/{-(-spec.steps * interval_s // 86400)}: {rows:,} sample rows "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    meta = {**want, "gpus": int(fleet.nodes["gpu_count"].sum()), "cluster": spec.cluster, "sample_rows": rows,
            "pods": fleet.pods.height, "nodes": fleet.nodes.height, "workloads": fleet.workloads.height,
            "generate_s": round(time.perf_counter() - t0, 1)}
    manifest.write_text(json.dumps(meta, indent=1))
    return FleetFiles(root, meta)


def load_inventory(g: GpuInsight, files: FleetFiles) -> dict[str, int]:
    """Nodes, pod history and prices, atomically (the warehouse's natural-key merge)."""
    rows = {}
    keys = {"nodes": ["cluster", "node"], "pods": ["cluster", "uid"],
            "prices": ["catalog", "instance_type", "gpu_model"]}
    with g.wh.transaction() as con:
        for table, key in keys.items():
            rows[table] = g.wh.merge(table, pl.read_parquet(files.inventory(table)), key, con=con)
    return rows


def load_samples(g: GpuInsight, files: FleetFiles, *, mode: str = "append", on_batch=None,
                 cpu: dict[str, float] | None = None, parts: list[Path] | None = None) -> dict[str, int]:
    """Each day's samples in one transaction with the rollups of its hours (as they arrive: gpu_hourly,
    gpu_pod_steps).

    ``append`` inserts the Parquet file as it is (a bulk import of clean files into a new
    warehouse); ``merge`` goes through ``Warehouse.merge`` with the collectors' natural key
    (de-duplicated, idempotent: what ``collect`` does with every batch). ``cpu`` collects the
    process CPU seconds spent storing samples and rolling them up (``rollup``, and per rollup
    table ``rollup:gpu_hourly`` / ``rollup:gpu_pod_steps``). ``parts``: only these of the
    day files (default: all).
    """
    import resource

    def cpu_now() -> float:
        u = resource.getrusage(resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime

    spent = cpu if cpu is not None else {}
    from gpuinsight.warehouse.pending import note_hours
    from gpuinsight.warehouse.rollup import ROLLUPS, rebuild_scopes, rollup_scope
    from gpuinsight.warehouse.samples import store_sample_relation, store_sample_rows

    rows = {"gpu_samples": 0, "gpu_hourly": 0, "gpu_pod_steps": 0}
    for path in files.samples if parts is None else parts:
        c0 = cpu_now()
        with g.wh.transaction() as con:
            if mode == "merge":
                frame = pl.read_parquet(path)
                rows["gpu_samples"] += store_sample_rows(con, frame)
                span = frame.select("cluster", "ts").unique()
                del frame
            else:
                store_sample_relation(con, "SELECT * FROM read_parquet(?)", [str(path)])
                span = con.sql("SELECT cluster, min(ts) AS lo, max(ts) AS hi, count(*) AS n FROM read_parquet(?) "
                               "GROUP BY cluster", params=[str(path)]).pl()
                rows["gpu_samples"] += int(span["n"].sum())
                span = pl.concat([span.select("cluster", ts="lo"), span.select("cluster", ts="hi")])
            c1 = cpu_now()
            if span.height:  # what rebuild_rollups does, each rollup timed
                (ts_from, ts_to), clusters = rollup_scope(span)
                note_hours(con, ts_from, ts_to)
                for cluster in rebuild_scopes(con, clusters):
                    for table, rebuild in ROLLUPS:
                        c = cpu_now()
                        rows[table] += rebuild(con, ts_from, ts_to, cluster)
                        spent[f"rollup:{table}"] = spent.get(f"rollup:{table}", 0.0) + cpu_now() - c
            c2 = cpu_now()
        # storing = inserting + committing (the commit writes the data); the rollup is the rest
        spent["store"] = spent.get("store", 0.0) + (c1 - c0) + (cpu_now() - c2)
        spent["rollup"] = spent.get("rollup", 0.0) + c2 - c1
        if on_batch is not None:
            on_batch(path, rows)
    return rows


def load_fleet(g: GpuInsight, files: FleetFiles, *, mode: str = "append", on_batch=None) -> dict[str, int]:
    """Everything, in the order a real collection runs: inventory, samples, then the kubectl dumps."""
    from gpuinsight.sources.kubernetes import load_dump_dir

    rows = load_inventory(g, files)
    rows.update(load_samples(g, files, mode=mode, on_batch=on_batch))
    if files.kubectl.is_dir():
        report = load_dump_dir(g.wh, g.config, files.kubectl)
        for table, n in report.rows.items():
            rows[f"kubectl:{table}"] = n
    return rows


def copy_warehouse(src: Path, dest: Path) -> Path:
    """A copy of a warehouse file with its write-ahead log, when it has one (the log holds
    committed writes not yet checkpointed into the file)."""
    shutil.copyfile(src, dest)
    wal = src.with_name(src.name + ".wal")
    if wal.exists():
        shutil.copyfile(wal, dest.with_name(dest.name + ".wal"))
    return dest


def open_for(db: Path, files: FleetFiles) -> GpuInsight:
    """Open (creating) a warehouse whose configured cluster is the fleet's (the dumps load into it)."""
    import gpuinsight as gi
    from gpuinsight.config import Config

    return gi.open(db, config=Config.from_env(db, cluster=files.meta["cluster"]))


def build_warehouse(db: Path, files: FleetFiles) -> dict[str, float]:
    """Load ``files`` into a new warehouse at ``db`` and build the models; returns timings."""
    t0 = time.perf_counter()
    with open_for(db, files) as g:
        rows = load_fleet(g, files)
        loaded = time.perf_counter()
        g.refresh()
        refreshed = time.perf_counter()
    return {"rows": float(rows["gpu_samples"]), "load_s": loaded - t0, "refresh_s": refreshed - loaded}


if __name__ == "__main__":  # pragma: no cover
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for the fleet's files")
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--interval", type=int, default=300)
    a = ap.parse_args()
    f = write_fleet_files(a.out, a.gpus, a.days, a.interval, log=True)
    print(json.dumps(f.meta))

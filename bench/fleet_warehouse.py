"""Build a warehouse straight from a generated fleet (no text parsing): for benchmarks.

Samples come from ``gpu_sample_frames`` in the ``gpu_samples`` shape; nodes and pods are
mapped from the fleet's own tables the way the collectors would store them.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

import gpuinsight as gi
from gpuinsight.gpumodels import canonical_gpu_model
from gpuinsight.sample import FleetSpec, build_fleet, gpu_sample_frames
from gpuinsight.sample.fleet import Fleet
from gpuinsight.sample.spec import INSTANCE_TYPES, SPOT_PRICE_FRACTION


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


def build_warehouse(db: Path, gpus: int, days: float, interval_s: int, *, seed: int = 7,
                    parquet_dir: Path | None = None) -> dict[str, float]:
    """Fill ``db`` with a fleet of about ``gpus`` GPUs; optionally also write the samples as Parquet."""
    t0 = time.perf_counter()
    spec = FleetSpec.for_gpus(gpus, days=days, interval_s=interval_s, seed=seed)
    fleet = build_fleet(spec)
    cluster = spec.cluster
    rows = 0
    with gi.open(db) as g:
        with g.wh.transaction() as con:
            g.wh.merge("nodes", node_rows(fleet, cluster), ["cluster", "node"], con=con)
            g.wh.merge("pods", pod_rows(fleet, cluster), ["cluster", "uid"], con=con)
            g.wh.merge("prices", price_rows(), ["catalog", "instance_type", "gpu_model"], con=con)
        for i, frame in enumerate(gpu_sample_frames(fleet, chunk_hours=24)):
            if parquet_dir is not None:
                parquet_dir.mkdir(parents=True, exist_ok=True)
                frame.write_parquet(parquet_dir / f"samples-{i:04d}.parquet")
            g.wh.con.register("_frame", frame.to_arrow())
            g.wh.con.execute("INSERT INTO gpu_samples SELECT * FROM _frame")
            g.wh.con.unregister("_frame")
            rows += frame.height
        loaded = time.perf_counter()
        from gpuinsight.warehouse.rollup import rebuild_gpu_hourly

        with g.wh.transaction() as con:
            bounds = g.sql("SELECT min(ts) AS lo, max(ts) AS hi FROM gpu_samples")
            rebuild_gpu_hourly(con, bounds.rename({"lo": "ts"}).select("ts").vstack(
                bounds.rename({"hi": "ts"}).select("ts")))
        rolled = time.perf_counter()
        g.refresh()
        refreshed = time.perf_counter()
    return {"gpus": float(fleet.nodes["gpu_count"].sum()), "rows": float(rows), "load_s": loaded - t0,
            "rollup_s": rolled - loaded, "refresh_s": refreshed - rolled}


if __name__ == "__main__":  # pragma: no cover
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--db", type=Path, required=True)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--interval", type=int, default=300)
    a = ap.parse_args()
    print(json.dumps(build_warehouse(a.db, a.gpus, a.days, a.interval)))

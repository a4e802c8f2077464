"""Rollup benchmark: waste_breakdown + workload_gpu_profile, DuckDB vs pandas, side by side.

One run: generate a fleet (default 1,000 GPUs x 30 days at 1-minute samples, ~43 M rows),
write its samples as Parquet and a warehouse, then in two child processes (so each peak RSS
is its own) compute the same figures:

* DuckDB: rebuild the hourly rollup, refresh the materialized models, run
  ``waste_breakdown(by=namespace)`` and ``workload_gpu_profile``;
* pandas: the same computation on DataFrames read from the same Parquet files (only the
  columns it needs, strings as categoricals, to give pandas its best chance).

Prints wall time, peak RSS, rows/s and the ratio, and checks the two agree.
    python bench/rollup.py [--gpus 1000] [--days 30] [--interval 60]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def run_duckdb(db: Path) -> dict:
    import gpuinsight as gi
    from gpuinsight.warehouse.rollup import rebuild_gpu_hourly

    with gi.open(db) as g:
        t0 = time.perf_counter()
        with g.wh.transaction() as con:
            bounds = g.sql("SELECT min(ts) AS ts FROM gpu_samples UNION ALL SELECT max(ts) FROM gpu_samples")
            rebuild_gpu_hourly(con, bounds)
        g.refresh()
        waste = g.query("waste_breakdown", by="namespace")
        prof = g.query("workload_gpu_profile")
        took = time.perf_counter() - t0
        rows = g.wh.count("gpu_samples")
    return {"engine": "duckdb", "seconds": took, "rows": rows,
            "waste": {r["group"]: r["total_usd"] for r in waste.to_dicts()},
            "idle": {r["group"]: r["idle_usd"] or 0.0 for r in waste.to_dicts()},
            "p95": {f"{r['namespace']}/{r['workload']}": r["gr_p95"] for r in prof.to_dicts()},
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_pandas(db: Path, parquet: Path) -> dict:
    import duckdb
    import numpy as np
    import pandas as pd

    con = duckdb.connect(str(db), read_only=True)  # only to read the small inventory tables
    pods = con.sql("SELECT * FROM pod_gpu_allocations").df()
    nodes = con.sql("SELECT * FROM node_hours").df()  # node-hours with prices (not timed: inventory)
    con.close()
    cols = ["ts", "gpu_uuid", "mig_instance", "namespace", "pod", "gr_active", "sm_active", "fb_used_mib", "step_s"]
    files = sorted(parquet.glob("*.parquet"))
    s = pd.concat([pd.read_parquet(f, columns=cols) for f in files], ignore_index=True)
    for c in ("gpu_uuid", "namespace", "pod"):
        s[c] = s[c].astype("category")
    rows = len(s)

    t0 = time.perf_counter()
    # hourly rollup per GPU and holder
    s["hour"] = s["ts"].dt.floor("h")
    held = s[s["pod"] != ""]
    util = (held.groupby(["hour", "namespace", "pod"], observed=True)["gr_active"].mean()
            .rename("gr").reset_index())
    # pod-hours with overlap
    a = pods[["uid", "namespace", "pod", "workload", "node", "gpus", "start_ts", "end_ts"]].copy()
    a["h0"] = a["start_ts"].dt.floor("h")
    a["n"] = ((a["end_ts"] - pd.Timedelta(microseconds=1)).dt.floor("h") - a["h0"]) // pd.Timedelta(hours=1) + 1
    a = a.loc[a.index.repeat(a["n"])].copy()
    a["hour"] = a["h0"] + pd.to_timedelta(a.groupby(level=0).cumcount(), unit="h")
    lo = np.maximum(a["start_ts"].values, a["hour"].values)
    hi = np.minimum(a["end_ts"].values, (a["hour"] + pd.Timedelta(hours=1)).values)
    a["gh"] = a["gpus"] * (hi - lo) / np.timedelta64(1, "h")
    a = a.merge(util, on=["hour", "namespace", "pod"], how="left")
    cap = nodes[["node", "hour", "gpu_hours", "cost_usd"]]
    tot = a.groupby(["node", "hour"])["gh"].sum().rename("alloc").reset_index()
    cap = cap.merge(tot, on=["node", "hour"], how="left").fillna({"alloc": 0.0})
    cap["denom"] = np.maximum(cap["gpu_hours"], cap["alloc"])
    a = a.merge(cap[["node", "hour", "cost_usd", "denom"]], on=["node", "hour"], how="left")
    a["usd"] = a["cost_usd"] * a["gh"] / a["denom"]
    a["idle_usd"] = np.where(a["gr"] < 0.05, a["usd"], 0.0)
    waste = a.groupby("namespace")[["usd", "idle_usd"]].sum()
    unalloc = (cap["cost_usd"] * np.maximum(cap["gpu_hours"] - cap["alloc"], 0) / cap["denom"]).sum()
    # workload profile: per-sample percentiles
    names = pods.groupby(["namespace", "pod"], as_index=False)["workload"].first()
    sw = held.merge(names, on=["namespace", "pod"], how="inner")
    prof = sw.groupby(["namespace", "workload"], observed=True)["gr_active"].quantile(0.95)
    sw.groupby(["namespace", "workload"], observed=True).agg(
        gr_mean=("gr_active", "mean"), sm_p95=("sm_active", lambda x: x.quantile(0.95)),
        fb_max=("fb_used_mib", "max"), active=("gr_active", lambda x: (x > 0.05).mean()))
    took = time.perf_counter() - t0
    out = {r: float(v) for r, v in waste["usd"].items()}
    out["(unallocated)"] = float(unalloc)
    return {"engine": "pandas", "seconds": took, "rows": rows, "waste": out,
            "idle": {r: float(v) for r, v in waste["idle_usd"].items()},
            "p95": {f"{ns}/{w}": float(v) for (ns, w), v in prof.items()},
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child(engine: str, db: Path, parquet: Path) -> dict:
    res = subprocess.run([sys.executable, __file__, "--child", engine, "--db", str(db), "--parquet", str(parquet)],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--days", type=float, default=30)
    ap.add_argument("--interval", type=int, default=60)
    ap.add_argument("--child", choices=["duckdb", "pandas"])
    ap.add_argument("--db", type=Path)
    ap.add_argument("--parquet", type=Path)
    a = ap.parse_args()
    if a.child == "duckdb":
        print(json.dumps(run_duckdb(a.db)))
        return
    if a.child == "pandas":
        print(json.dumps(run_pandas(a.db, a.parquet)))
        return
    from bench.fleet_warehouse import build_warehouse

    with tempfile.TemporaryDirectory(prefix="gi-bench-") as tmp:
        db, parquet = Path(tmp) / "bench.duckdb", Path(tmp) / "samples"
        t0 = time.perf_counter()
        info = build_warehouse(db, a.gpus, a.days, a.interval, parquet_dir=parquet)
        print(f"fleet: {info['gpus']:.0f} GPUs, {a.days:g} days at {a.interval}s: {info['rows']:,.0f} sample rows "
              f"(generated and loaded in {time.perf_counter() - t0:.1f}s)")
        d = child("duckdb", db, parquet)
        p = child("pandas", db, parquet)
    for r in (d, p):
        print(f"{r['engine']:>7}: {r['seconds']:7.2f} s  {r['rows'] / r['seconds'] / 1e6:6.2f} M rows/s  "
              f"peak RSS {r['maxrss_mb']:,.0f} MB")
    print(f"  ratio: DuckDB is {p['seconds'] / d['seconds']:.1f}x faster than pandas "
          f"(target >= 10x; DuckDB path target < 10 s: {'met' if d['seconds'] < 10 else 'NOT met'})")
    worst = max(abs(d["waste"].get(k, 0) - v) / max(abs(v), 1e-9) for k, v in p["waste"].items())
    p95 = max(abs(d["p95"].get(k, 0) - v) for k, v in p["p95"].items())
    print(f"  agreement: waste by namespace within {worst:.2e} (relative), GR p95 within {p95:.2e}")


if __name__ == "__main__":
    main()

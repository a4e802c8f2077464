"""Rollups and models from raw samples, DuckDB (the product) vs pandas, like for like.

Both sides start from the SAME Parquet files (a generated fleet: one file of DCGM samples per
day, plus nodes, the pod history and the price catalog; ``bench/fleet_warehouse.py``) and
produce the SAME three results, which the script checks equal after the run:

1. the hourly rollup per GPU (or MIG instance) and holder pod (``gpu_hourly``);
2. the waste breakdown by namespace: used / idle / underused / unallocated / unmeasured, in
   dollars and GPU-hours (``waste_breakdown(by=namespace)``);
3. the per-workload profile: GPU-hours, cost, samples, GR mean / p50 / p95 / p99 / max, SM
   mean / p95 / p99 / max, framebuffer p95 / p99 / max, GPU memory, active fraction
   (the matching columns of ``workload_gpu_profile``).

Each side's whole work is inside its timing, from reading the files to holding the results:

* DuckDB: create a warehouse, load each day's Parquet file and roll its hours up in the same
  transaction (as a collector does while samples arrive), rebuild the materialized models the
  compared results read (node-hours, pod allocations, allocation-hours, waste-hours, the
  per-workload sample statistics and the kept whole-window ``workload_gpu_profile``; not the
  energy, serving and placement models a refresh builds besides), run the two SQL models. The
  product's models still compute more than is compared (modes, diurnal swing, pod runtimes;
  and the load rolls the samples up per pod and step as well, the ``gpu_pod_steps`` the input
  profile reads, whose CPU is printed apart), so the comparison leans in pandas' favour.
* pandas: read the same files (only the columns it needs, key strings as categoricals straight
  from Parquet's dictionaries, to give it its best chance), then the same chain: hourly rollup,
  analysis window, node-hours with prices, pod allocations, allocation-hours, waste buckets,
  per-workload statistics. Everything it computes is part of a compared result.

Each side runs in its own child process (so each peak RSS is its own), twice: with the default
threads (DuckDB's ``threads`` setting, which defaults to the core count; pandas computes on one
thread, its Parquet reader (pyarrow) uses the core count) and single-threaded (``SET threads=1``
for DuckDB, with polars limited to one thread; pyarrow limited to one thread for pandas).

    python bench/rollup.py [--gpus 1000] [--days 30] [--interval 60] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

PROFILE_COLS = ["gpu_hours", "cost_usd", "samples", "gr_mean", "gr_p50", "gr_p95", "gr_p99", "gr_max", "sm_mean",
                "sm_p95", "sm_p99", "sm_max", "fb_p95_mib", "fb_p99_mib", "fb_max_mib", "gpu_memory_mib",
                "active_fraction"]
HOURLY_KEY = ["cluster", "hour", "gpu_uuid", "mig_instance", "namespace", "pod"]
HOURLY_COLS = ["samples", "covered_s", "gr_active_avg", "gr_active_max", "sm_active_avg", "sm_active_max",
               "gpu_util_avg", "fb_used_avg_mib", "fb_used_max_mib", "fb_free_min_mib", "power_avg_w"]
WASTE_COLS = ["used_usd", "idle_usd", "underused_usd", "unallocated_usd", "unmeasured_usd", "total_usd",
              "used_gpu_hours", "idle_gpu_hours", "underused_gpu_hours", "unallocated_gpu_hours",
              "unmeasured_gpu_hours", "gpu_hours"]


# the models behind the three compared results (gpu_hourly is the load's rollup)
COMPARED_MODELS = ("waste_breakdown", "workload_gpu_profile")


def models_read_by(registry, names: tuple[str, ...]) -> set[str]:
    """The models ``names`` read, directly or through each other (a model's name in its SQL)."""
    import re

    found: set[str] = set()
    todo = list(names)
    while todo:
        text = re.sub(r"--[^\n]*", "", registry.get(todo.pop()).text)
        for other in registry.names():
            if other not in found and re.search(rf"\b{other}\b", text):
                found.add(other)
                todo.append(other)
    return found


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


# ------------------------------------------------------------------------------------ DuckDB
def run_duckdb(files_root: Path, out: Path, threads: int | None) -> dict:
    import gpuinsight as gi
    from bench.fleet_warehouse import FleetFiles, load_inventory, load_samples

    files = FleetFiles(files_root, json.loads((files_root / "manifest.json").read_text()))
    db = out / "bench.duckdb"
    t0, c0 = time.perf_counter(), _cpu_s()
    g = gi.open(db)
    if threads:
        g.wh.con.execute(f"SET threads = {int(threads)}")
    used_threads = g.wh.con.execute("SELECT current_setting('threads')").fetchone()[0]
    load_inventory(g, files)
    phases = {"inventory": time.perf_counter() - t0}
    split: dict[str, float] = {}
    load_samples(g, files, mode="append", cpu=split)
    phases["load+rollup"] = time.perf_counter() - t0 - sum(phases.values())
    c_models = _cpu_s()
    # the materialized models the compared results read, and of the answers refresh keeps only
    # the compared profile's: what pandas computes, no more (the product's refresh also builds
    # energy, serving, placement and the input and idle profiles, which nothing here compares)
    needed = models_read_by(g.registry, COMPARED_MODELS)
    with g.wh.transaction() as con:
        for q in (*[q for q in g.registry.build_order() if q.name in needed], g.registry.get("workload_gpu_profile")):
            g.registry.build(con, q)
    g.wh.schema_changed()
    phases["models"] = time.perf_counter() - t0 - sum(phases.values())
    waste = g.query("waste_breakdown", by="namespace")
    profile = g.query("workload_gpu_profile")
    hourly = g.sql("SELECT * FROM gpu_hourly")
    phases["queries"] = time.perf_counter() - t0 - sum(phases.values())
    took, cpu = time.perf_counter() - t0, _cpu_s() - c0
    # the computation, without storing the samples: rollup + models + queries
    compute_cpu = split.get("rollup", 0.0) + _cpu_s() - c_models
    rows = g.wh.count("gpu_samples")
    g.close()
    # outside the timing: hand the results to the parent for the comparison
    waste.rename({"group": "namespace"}).select("namespace", *WASTE_COLS).write_parquet(out / "waste.parquet")
    profile.select("cluster", "namespace", "workload_kind", "workload", *PROFILE_COLS).write_parquet(
        out / "profile.parquet")
    hourly.select(*HOURLY_KEY, *HOURLY_COLS).write_parquet(out / "hourly.parquet")
    return {"engine": "duckdb", "seconds": took, "cpu_s": cpu, "compute_cpu_s": compute_cpu,
            "store_cpu_s": split.get("store", 0.0), "pod_steps_cpu_s": split.get("rollup:gpu_pod_steps", 0.0),
            "rows": rows, "threads": f"DuckDB threads={used_threads}",
            "phases": phases, "maxrss_mb": _peak_mb()}


# ------------------------------------------------------------------------------------ pandas
def run_pandas(files_root: Path, out: Path, threads: int | None) -> dict:
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.fleet_warehouse import FleetFiles

    if threads:
        pa.set_cpu_count(threads)
        pa.set_io_thread_count(threads)
    files = FleetFiles(files_root, json.loads((files_root / "manifest.json").read_text()))
    t0, c0 = time.perf_counter(), _cpu_s()
    keys = ["cluster", "gpu_uuid", "namespace", "pod", "node", "model_name"]
    cols = [*keys, "ts", "mig_instance", "gr_active", "gr_active_max", "sm_active", "sm_active_max", "gpu_util",
            "fb_used_mib", "fb_used_max_mib", "fb_free_mib", "power_w", "step_s"]
    # read_dictionary: key strings arrive as categoricals without materialising Python strings
    tables = [pq.read_table(str(p), columns=cols, read_dictionary=keys) for p in files.samples]
    s = pa.concat_tables(tables, promote_options="permissive").unify_dictionaries().to_pandas()
    del tables
    inv = {t: pd.read_parquet(files.inventory(t)) for t in ("nodes", "pods", "prices")}
    phases = {"read": time.perf_counter() - t0}
    c_compute = _cpu_s()

    # 1. hourly rollup: step-weighted means (NULL values skip their weights), maxima, covered_s
    s["hour"] = s["ts"].dt.floor("h")
    step = s["step_s"].astype("float64")
    wcols = {"gr_active": "gr_active_avg", "sm_active": "sm_active_avg", "gpu_util": "gpu_util_avg",
             "fb_used_mib": "fb_used_avg_mib", "power_w": "power_avg_w"}
    agg_in = {}
    for c, name in wcols.items():
        v = s[c]
        agg_in[f"{name}__num"] = v * step
        agg_in[f"{name}__den"] = step.where(v.notna())
    work = pd.DataFrame({k: s[k] for k in HOURLY_KEY if k != "hour"} | {"hour": s["hour"]} | agg_in | {
        "step": step, "gr_active_max": s["gr_active_max"], "sm_active_max": s["sm_active_max"],
        "fb_used_max_mib": s["fb_used_max_mib"], "fb_free_min_mib": s["fb_free_mib"]})
    grp = work.groupby(HOURLY_KEY, observed=True, sort=False)
    sums = grp[[*agg_in, "step"]].sum(min_count=1)
    hourly = pd.DataFrame({
        "samples": grp.size(),
        "covered_s": sums["step"].clip(upper=3600.0),
        "gr_active_max": grp["gr_active_max"].max(), "sm_active_max": grp["sm_active_max"].max(),
        "fb_used_max_mib": grp["fb_used_max_mib"].max(), "fb_free_min_mib": grp["fb_free_min_mib"].min(),
    })
    for name in wcols.values():
        hourly[name] = sums[f"{name}__num"] / sums[f"{name}__den"]
    hourly = hourly.reset_index()
    del work, agg_in, sums, grp
    phases["rollup"] = time.perf_counter() - t0 - sum(phases.values())

    # 2. analysis window, node-hours with prices
    w = s.groupby("cluster", observed=True).agg(t0=("ts", "min"), step=("step_s", "max"))
    w["t1"] = (s["ts"] + pd.to_timedelta(s["step_s"], unit="s")).groupby(s["cluster"], observed=True).max()
    w = w.reset_index()
    w["cluster"] = w["cluster"].astype(str)
    prices = inv["prices"].sort_values("loaded_at", ascending=False)
    catalog = prices["catalog"].iloc[0]
    prices = prices[prices["catalog"] == catalog]
    n = inv["nodes"]
    n = n[n["gpu_count"].fillna(0) > 0].merge(w, on="cluster")
    n["a"] = np.maximum(n["first_seen"].fillna(n["t0"]), n["t0"])
    n["b"] = np.minimum((n["last_seen"] + pd.to_timedelta(n["step"], unit="s")).fillna(n["t1"]), n["t1"])
    n = n[n["b"] > n["a"]]
    nh = _explode_hours(n, "a", "b")
    by_type = prices[prices["instance_type"] != ""].set_index("instance_type")
    per_gpu = prices[(prices["instance_type"] == "") & (prices["gpu_count"] > 0)].set_index("gpu_model")
    od = nh["instance_type"].map(by_type["on_demand_usd_per_hour"]).fillna(
        nh["gpu_model"].map(per_gpu["on_demand_usd_per_hour"] / per_gpu["gpu_count"]) * nh["gpu_count"])
    spot = nh["instance_type"].map(by_type["spot_usd_per_hour"]).fillna(
        nh["gpu_model"].map(per_gpu["spot_usd_per_hour"] / per_gpu["gpu_count"]) * nh["gpu_count"])
    nh["usd_per_hour"] = np.where(nh["capacity_type"] == "spot", spot, od)
    nh["cost_usd"] = nh["usd_per_hour"] * nh["covered_s"] / 3600.0
    nh["gpu_hours"] = nh["gpu_count"] * nh["covered_s"] / 3600.0

    # 3. pod allocations, clipped to the window
    p = inv["pods"]
    p = p[p["node"].fillna("").ne("") & (p["gpu_request"].fillna(0) + p["mig_request"].fillna(0) > 0)]
    p = p.merge(w, on="cluster")
    win_end, step_td = p["t1"], pd.to_timedelta(p["step"], unit="s")
    alive = p["last_seen"] >= win_end - 2 * step_td
    t_end = p["finished"].fillna(win_end.where(alive)).fillna(p["last_seen"] + step_td).fillna(win_end)
    t_start = p["started"].fillna(p["scheduled"]).fillna(p["created"])
    slices = pd.to_numeric(p["mig_profile"].str.extract(r"^(\d+)g", expand=False), errors="coerce").fillna(1)
    pa_ = pd.DataFrame({
        "cluster": p["cluster"], "uid": p["uid"], "namespace": p["namespace"], "pod": p["name"],
        "workload_kind": p["workload_kind"].fillna("Pod"), "workload": p["workload"].fillna(p["name"]),
        "node": p["node"],
        "gpus": p["gpu_request"].fillna(0) + p["mig_request"].fillna(0) * slices / 7.0,
        "start_ts": np.maximum(t_start, p["t0"]), "end_ts": np.minimum(t_end, win_end),
    })
    pa_ = pa_[pa_["end_ts"] > pa_["start_ts"]]

    # 4. allocation-hours joined to what DCGM measured on the pod's GPUs that hour
    ah = _explode_hours(pa_, "start_ts", "end_ts")
    ah["gpu_hours"] = ah["gpus"] * ah["covered_s"] / 3600.0
    held = hourly[hourly["pod"] != ""]
    u = pd.DataFrame({"cluster": held["cluster"].astype(str), "hour": held["hour"],
                      "namespace": held["namespace"].astype(str), "pod": held["pod"].astype(str),
                      "num": held["gr_active_avg"] * held["covered_s"], "den": held["covered_s"]})
    u = u.groupby(["cluster", "hour", "namespace", "pod"], sort=False).sum(min_count=1).reset_index()
    u["gr"] = u["num"] / u["den"].where(u["den"] != 0)
    ah = ah.merge(u[["cluster", "hour", "namespace", "pod", "gr"]], on=["cluster", "hour", "namespace", "pod"],
                  how="left")
    ah = ah.merge(nh[["cluster", "node", "hour", "usd_per_hour", "gpu_count", "gpu_hours", "cost_usd"]]
                  .rename(columns={"gpu_hours": "node_gh"}), on=["cluster", "node", "hour"], how="left")
    ah["list_usd"] = ah["gpu_hours"] * ah["usd_per_hour"] / ah["gpu_count"].where(ah["gpu_count"] != 0)

    # 5. waste buckets per node-hour, summed by namespace
    tot = ah.groupby(["cluster", "node", "hour"], sort=False)["gpu_hours"].sum().rename("alloc_gh").reset_index()
    cap = nh.merge(tot, on=["cluster", "node", "hour"], how="left").fillna({"alloc_gh": 0.0})
    cap["denom"] = np.maximum(cap["gpu_hours"], cap["alloc_gh"])
    ah = ah.merge(cap[["cluster", "node", "hour", "denom"]], on=["cluster", "node", "hour"], how="left")
    share = ah["gpu_hours"] / ah["denom"].where(ah["denom"] != 0)
    gh = (ah["node_gh"] * share).fillna(ah["gpu_hours"])
    usd = ah["cost_usd"] * share
    gr = ah["gr"]
    buckets = {"unmeasured": (gr.isna(), 1.0), "idle": (gr < 0.05, 1.0), "used": (gr >= 0.05, gr),
               "underused": (gr >= 0.05, 1 - gr)}
    parts = []
    for name, (mask, factor) in buckets.items():
        f = factor[mask] if isinstance(factor, pd.Series) else factor
        parts.append(pd.DataFrame({"namespace": ah["namespace"][mask], "bucket": name,
                                   "usd": usd[mask] * f, "gh": gh[mask] * f}))
    free = cap[cap["gpu_hours"] - cap["alloc_gh"] > 1e-9]
    parts.append(pd.DataFrame({"namespace": "(unallocated)", "bucket": "unallocated",
                               "usd": free["cost_usd"] * (free["gpu_hours"] - free["alloc_gh"]) / free["denom"],
                               "gh": free["gpu_hours"] - free["alloc_gh"]}))
    wb = pd.concat(parts, ignore_index=True)
    piv = wb.pivot_table(index="namespace", columns="bucket", values=["usd", "gh"], aggfunc="sum")
    waste = pd.DataFrame(index=piv.index)
    for b in ("used", "idle", "underused", "unallocated", "unmeasured"):
        waste[f"{b}_usd"] = piv["usd"].get(b, np.nan)
        waste[f"{b}_gpu_hours"] = piv["gh"].get(b, np.nan)
    waste["total_usd"] = wb.groupby("namespace")["usd"].sum()
    waste["gpu_hours"] = wb.groupby("namespace")["gh"].sum()
    waste = waste.reset_index()
    phases["models"] = time.perf_counter() - t0 - sum(phases.values())

    # 6. per-workload profile: allocation sums + statistics over the samples of its pods
    wk = ["cluster", "namespace", "workload_kind", "workload"]
    alloc = ah.groupby(wk, sort=False).agg(gpu_hours=("gpu_hours", "sum"), cost_usd=("list_usd", "sum"))
    names = pa_.groupby(["cluster", "namespace", "pod"], sort=False)[["workload_kind", "workload"]].first()
    names = names.reset_index()
    for c in ("cluster", "namespace", "pod"):  # join on the samples' categories, not on strings
        names[c] = pd.Categorical(names[c], categories=s[c].cat.categories)
    sw = s.loc[s["pod"] != "", ["cluster", "namespace", "pod", "gr_active", "gr_active_max", "sm_active",
                                "sm_active_max", "fb_used_mib", "fb_used_max_mib", "fb_free_mib"]]
    sw = sw.merge(names, on=["cluster", "namespace", "pod"], how="inner")
    sw["mem"] = sw["fb_used_mib"] + sw["fb_free_mib"]
    sw["active"] = (sw["gr_active"] > 0.05).astype("float64")
    g = sw.groupby(wk, sort=False)
    st = g.agg(samples=("gr_active", "size"), gr_mean=("gr_active", "mean"), gr_max=("gr_active_max", "max"),
               sm_mean=("sm_active", "mean"), sm_max=("sm_active_max", "max"), fb_max_mib=("fb_used_max_mib", "max"),
               gpu_memory_mib=("mem", "max"), active_fraction=("active", "mean"))
    for col, qs, names_ in (("gr_active", [0.5, 0.95, 0.99], ["gr_p50", "gr_p95", "gr_p99"]),
                            ("sm_active", [0.95, 0.99], ["sm_p95", "sm_p99"]),
                            ("fb_used_mib", [0.95, 0.99], ["fb_p95_mib", "fb_p99_mib"])):
        q = g[col].quantile(qs).unstack()
        for qv, name in zip(qs, names_, strict=True):
            st[name] = q[qv]
    profile = alloc.join(st, how="left").reset_index()
    phases["profile"] = time.perf_counter() - t0 - sum(phases.values())
    took, cpu = time.perf_counter() - t0, _cpu_s() - c0
    compute_cpu = _cpu_s() - c_compute
    rows = len(s)
    # outside the timing: hand the results to the parent for the comparison
    waste[["namespace", *WASTE_COLS]].to_parquet(out / "waste.parquet")
    profile[[*wk, *PROFILE_COLS]].to_parquet(out / "profile.parquet")
    for c in ("cluster", "gpu_uuid", "namespace", "pod"):
        hourly[c] = hourly[c].astype(str)
    hourly[HOURLY_KEY + HOURLY_COLS].to_parquet(out / "hourly.parquet")
    thr = f"pandas 1 thread, pyarrow reader {pa.cpu_count()} thread(s)"
    return {"engine": "pandas", "seconds": took, "cpu_s": cpu, "compute_cpu_s": compute_cpu, "rows": rows, "threads": thr, "phases": phases,
            "maxrss_mb": _peak_mb()}


def _explode_hours(df, a: str, b: str):
    """One row per clock hour of [a, b) with covered_s, the seconds of that hour inside it."""
    import numpy as np
    import pandas as pd

    h0 = df[a].dt.floor("h")
    count = ((df[b] - pd.Timedelta(microseconds=1)).dt.floor("h") - h0) // pd.Timedelta(hours=1) + 1
    rep = df.loc[df.index.repeat(count)].reset_index(drop=True)
    offs = np.arange(len(rep)) - np.repeat(np.cumsum(count.to_numpy()) - count.to_numpy(), count.to_numpy())
    rep["hour"] = np.repeat(h0.to_numpy(), count.to_numpy()) + pd.to_timedelta(offs, unit="h")
    lo = np.maximum(rep[a], rep["hour"])
    hi = np.minimum(rep[b], rep["hour"] + pd.Timedelta(hours=1))
    rep["covered_s"] = (hi - lo).dt.total_seconds()
    return rep


# ------------------------------------------------------------------------------------ driver
def child(engine: str, files: Path, out: Path, threads: int | None) -> dict:
    env = dict(os.environ)
    if threads:
        env.update(POLARS_MAX_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    cmd = [sys.executable, __file__, "--child", engine, "--files", str(files), "--out", str(out)]
    if threads:
        cmd += ["--threads", str(threads)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"{engine} child failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def compare(d: Path, p: Path) -> dict[str, str]:
    """Join each result of the two sides on its key; the largest relative difference per result."""
    import polars as pl

    def worst(a: pl.DataFrame, b: pl.DataFrame, key: list[str], cols: list[str]) -> str:
        a = a.with_columns(pl.col(c).cast(pl.String) for c in key if a.schema[c] == pl.Categorical)
        b = b.with_columns(pl.col(c).cast(pl.String) for c in key if b.schema[c] == pl.Categorical)
        j = a.join(b, on=key, how="full", suffix="_p", coalesce=True, nulls_equal=True)
        missing = j.filter(pl.any_horizontal(pl.col(c).is_null() & pl.col(f"{c}_p").is_not_null()
                                             | pl.col(c).is_not_null() & pl.col(f"{c}_p").is_null()
                                             for c in cols))
        rel = 0.0
        for c in cols:
            x, y = j[c].cast(pl.Float64), j[f"{c}_p"].cast(pl.Float64)
            scale = pl.DataFrame({"x": x.abs(), "y": y.abs()}).select(
                pl.max_horizontal("x", "y").clip(lower_bound=1e-9)).to_series()
            diff = (x - y).abs() / scale
            m = diff.drop_nulls().max()
            rel = max(rel, float(m) if m is not None else 0.0)
        ok = "EQUAL" if a.height == b.height == j.height and missing.height == 0 and rel < 1e-9 else "DIFFERENT"
        return f"{ok}: {a.height:,} vs {b.height:,} rows, {missing.height} null mismatches, max relative diff {rel:.1e}"

    out = {}
    hk = HOURLY_KEY
    out["hourly rollup"] = worst(pl.read_parquet(d / "hourly.parquet"), pl.read_parquet(p / "hourly.parquet"),
                                 hk, HOURLY_COLS)
    out["waste by namespace"] = worst(pl.read_parquet(d / "waste.parquet"), pl.read_parquet(p / "waste.parquet"),
                                      ["namespace"], WASTE_COLS)
    out["workload profile"] = worst(pl.read_parquet(d / "profile.parquet"), pl.read_parquet(p / "profile.parquet"),
                                    ["cluster", "namespace", "workload_kind", "workload"], PROFILE_COLS)
    return out


def main() -> None:
    from bench.fleet_warehouse import add_fleet_args

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fleet_args(ap, gpus=1000, days=30, interval=60)
    ap.add_argument("--only", choices=["default", "single"], help="run one thread setting only")
    ap.add_argument("--child", choices=["duckdb", "pandas"])
    ap.add_argument("--files", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--threads", type=int)
    a = ap.parse_args()
    if a.child:
        run = run_duckdb if a.child == "duckdb" else run_pandas
        print(json.dumps(run(a.files, a.out, a.threads)))
        return
    from bench.fleet_warehouse import write_fleet_files

    with tempfile.TemporaryDirectory(prefix="gi-bench-") as tmp:
        root = a.workdir or Path(tmp) / "fleet"
        t0 = time.perf_counter()
        files = write_fleet_files(root, a.gpus, a.days, a.interval, dumps=False)
        print(f"fleet: {files.gpus:,} GPUs, {a.days:g} days at {a.interval} s: {files.sample_rows:,} sample rows in "
              f"{len(files.samples)} Parquet files ({time.perf_counter() - t0:.0f} s to generate or reuse)")
        print(f"machine: {os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} "
              f"GB RAM")
        settings = [("default", None), ("single", 1)]
        for label, threads in settings:
            if a.only and a.only != label:
                continue
            res = {}
            for engine in ("duckdb", "pandas"):
                out = Path(tmp) / f"{engine}-{label}"
                out.mkdir()
                res[engine] = child(engine, root, out, threads)
            d, p = res["duckdb"], res["pandas"]
            print(f"\n[{label} threads]")
            for r in (d, p):
                phases = ", ".join(f"{k} {v:.1f}" for k, v in r["phases"].items())
                print(f"  {r['engine']:>6}: {r['seconds']:7.2f} s ({r['cpu_s']:.1f} s CPU)  "
                      f"{r['rows'] / r['seconds'] / 1e6:6.2f} M rows/s  "
                      f"peak RSS {r['maxrss_mb']:,.0f} MB  ({r['threads']}; {phases})")
            print(f"  ratio: DuckDB is {p['seconds'] / d['seconds']:.1f}x faster than pandas in wall time, "
                  f"{p['cpu_s'] / d['cpu_s']:.1f}x in CPU time (target: >= 2x in CPU time, storing included)")
            print(f"  of which storing the samples in the warehouse (DuckDB only): {d['store_cpu_s']:.1f} s CPU; "
                  f"the computation alone (DuckDB: rollup + models + queries; pandas: all but reading the files): "
                  f"{d['compute_cpu_s']:.1f} vs {p['compute_cpu_s']:.1f} s CPU, "
                  f"{p['compute_cpu_s'] / d['compute_cpu_s']:.1f}x")
            # the pod-step rollup feeds the input-starved rule's profile, which nothing compared uses
            steps = d["pod_steps_cpu_s"]
            print(f"  of DuckDB's CPU, the pod-step rollup (for the input-starved rule; pandas builds nothing like "
                  f"it): {steps:.1f} s; without it DuckDB is {p['cpu_s'] / (d['cpu_s'] - steps):.1f}x in CPU time, "
                  f"the computation alone {p['compute_cpu_s'] / (d['compute_cpu_s'] - steps):.1f}x")
            for what, verdict in compare(Path(tmp) / f"duckdb-{label}", Path(tmp) / f"pandas-{label}").items():
                print(f"  {what}: {verdict}")


if __name__ == "__main__":
    main()

"""The whole pipeline at fleet scale: 10,000 GPUs x 30 days at a 5-minute step (~86 M GPU-steps).

The fleet is the sample generator's realistic mix (``tests.samplegen``: training gangs,
inference with MIG, notebooks, dev services, restarting and nightly Volcano jobs, spot nodes),
replicated to about ``--gpus`` GPUs, with its Volcano Queues, PodGroups and Jobs, Karpenter
NodePools and PDBs as kubectl dumps, so every rule has its inputs. It is generated once into
``--workdir`` (reused when it matches; generation is not a pipeline stage) and then each stage
runs in a fresh child process, so its wall time and peak RSS (``wait4`` of that child) are its own:

1. load: a new warehouse; nodes, pod history and prices merged; each day's samples appended
   (``--load merge``: merged by the collectors' natural key) and its hours rolled up in the same
   transaction (as a collector does: gpu_hourly and gpu_pod_steps); the kubectl dumps loaded by the dump loader;
2. models: every materialized SQL model rebuilt;
3. recommend: ``gpuinsight recommend --format json`` (rules, actions, the plan stored);
4. report: ``gpuinsight report --out report.html``;
5. export: ``gpuinsight export --to DIR`` (hive-partitioned Parquet).

Last line: ``pipeline: 10000 GPUs x 30 d: <total> s, peak <GB> GB`` (total of the five
stages; peak = the largest stage peak RSS).

``--baseline-code DIR`` runs the load stage a second time, right after this code's, with the
bench and package of another source tree (e.g. a worktree of an older commit) on the same
files into a warehouse of its own, and prints the ratio of the two load stages; and the models
stage of that tree on a copy of the loaded warehouse, right before this code's on the warehouse
itself (both rebuild every model from the same file), and the ratio of the two.

    python bench/pipeline.py [--gpus 10000] [--days 30] [--interval 300] [--workdir DIR]
                             [--keep-db FILE] [--baseline-code DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

STAGES = ("load", "models", "recommend", "report", "export")
TARGETS = {"total_s": 150.0, "peak_gb": 6.0, "recommend_s": 20.0, "report_s": 30.0, "report_mb": 3.0,
           "load_speedup": 2.0}


def stage_load(db: Path, files_root: Path, mode: str) -> dict:
    from bench.fleet_warehouse import FleetFiles, load_fleet, open_for

    files = FleetFiles(files_root, json.loads((files_root / "manifest.json").read_text()))
    with open_for(db, files) as g:
        rows = load_fleet(g, files, mode=mode, on_batch=lambda path, rows: print(
            f"  load: {path.name} done, {rows['gpu_samples']:,} rows", file=sys.stderr, flush=True))
    return {"rows": rows["gpu_samples"], "detail": rows}


def stage_models(db: Path) -> dict:
    import gpuinsight as gi

    with gi.open(db) as g:
        # from scratch, whatever the warehouse notes as pending: a models stage run before this
        # one on the same warehouse (--baseline-code) leaves nothing pending
        built = g.refresh(full=True)
        rows = {name: g.wh.count(name) for name in built}
    return {"rows": sum(rows.values()), "detail": rows}


def run_stage(name: str, cmd: list[str], workdir: Path) -> dict:
    """Run one stage as a child process; wall time and its own peak RSS (``os.wait4``)."""
    out_path, err_path = workdir / f"{name}.out", workdir / f"{name}.err"
    t0 = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"stage {name} failed ({proc.returncode}): {err_path.read_text()[-3000:]}")
    return {"seconds": took, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024,
            "stdout": out_path.read_text(), "out": out_path}


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    from bench.fleet_warehouse import add_fleet_args

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fleet_args(ap, gpus=10_000, days=30, interval=300)
    ap.add_argument("--load", choices=["append", "merge"], default="append",
                    help="samples appended from the Parquet files (a bulk import; default) or merged by the "
                         "collectors' natural key (de-duplicating, idempotent)")
    ap.add_argument("--stages", default=",".join(STAGES),
                    help="comma-separated subset of the stages to run (later stages need --db from an earlier run)")
    ap.add_argument("--keep-db", type=Path, help="build (or reuse) the warehouse here instead of a temporary file")
    ap.add_argument("--baseline-code", type=Path,
                    help="also run the load stage of this source tree (its bench/pipeline.py) on the same files")
    ap.add_argument("--stage", choices=["load", "models"], help=argparse.SUPPRESS)
    ap.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--files", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.stage == "load":
        print(json.dumps(stage_load(a.db, a.files, a.load)))
        return
    if a.stage == "models":
        print(json.dumps(stage_models(a.db)))
        return

    from bench.fleet_warehouse import write_fleet_files

    gi_cli = [sys.executable, "-m", "gpuinsight.cli"]
    with tempfile.TemporaryDirectory(prefix="gi-pipeline-") as tmp_s:
        tmp = Path(tmp_s)
        root = a.workdir or tmp / "fleet"
        cached = (root / "manifest.json").is_file()
        files = write_fleet_files(root, a.gpus, a.days, a.interval, log=True)
        m = files.meta
        print(f"fleet: {files.gpus:,} GPUs ({m['nodes']:,} nodes, {m['workloads']:,} workloads, {m['pods']:,} pod "
              f"incarnations), {a.days:g} d at {a.interval} s: {files.sample_rows:,} sample rows "
              f"(DCGM entities incl. MIG instances) in {len(files.samples)} Parquet files; "
              f"{'reused' if cached and files.meta.get('generate_s') else 'generated'} "
              f"(generation took {m['generate_s']:.0f} s, not a stage)")
        print(f"machine: {os.cpu_count()} cores, "
              f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GB RAM; each stage a fresh process")
        stages = [s for s in a.stages.split(",") if s]
        unknown = set(stages) - set(STAGES)
        if unknown:
            raise SystemExit(f"unknown stage(s) {sorted(unknown)}; stages are {', '.join(STAGES)}")
        db = a.keep_db or tmp / "fleet.duckdb"
        if "load" in stages:
            for old in (db, db.with_name(db.name + ".wal")):
                old.unlink(missing_ok=True)
        elif not db.is_file():
            raise SystemExit(f"{db}: no warehouse to start from (run the load stage, or pass --keep-db)")
        me = [sys.executable, __file__, "--db", str(db), "--files", str(root)]
        results: dict[str, dict] = {}
        baseline: dict | None = None
        baseline_models: dict | None = None

        if "load" in stages:
            r = run_stage("load", [*me, "--stage", "load", "--load", a.load], tmp)
            info = json.loads(r["stdout"].strip().splitlines()[-1])
            r["rows"], r["what"] = info["rows"], (
                f"gpu_samples; gpu_hourly {info['detail']['gpu_hourly']:,}, "
                f"gpu_pod_steps {info['detail'].get('gpu_pod_steps', 0):,}, pods {info['detail']['pods']:,}, "
                + ", ".join(f"{k.split(':')[1]} {v:,}" for k, v in info["detail"].items()
                            if k.startswith("kubectl:") and k.split(":")[1] in ("queues", "podgroups", "vcjobs",
                                                                                  "node_pools", "pdbs")))
            results["load"] = r
            if a.baseline_code:
                base_db = tmp / "baseline.duckdb"
                b = run_stage("load-baseline", [sys.executable, str(a.baseline_code / "bench" / "pipeline.py"),
                                                "--db", str(base_db), "--files", str(root), "--stage", "load",
                                                "--load", a.load], tmp)
                b["rows"] = json.loads(b["stdout"].strip().splitlines()[-1])["rows"]
                b["db_gb"] = base_db.stat().st_size / 1e9
                base_db.unlink()
                baseline = b
        if "models" in stages:
            if a.baseline_code:
                # on a copy of the loaded warehouse: each code starts from the same file (a stage
                # run on the warehouse the other code just rebuilt pays to replace its models)
                from bench.fleet_warehouse import copy_warehouse

                base_db = copy_warehouse(db, tmp / "baseline-models.duckdb")
                b = run_stage("models-baseline", [sys.executable, str(a.baseline_code / "bench" / "pipeline.py"),
                                                  "--db", str(base_db), "--files", str(root), "--stage", "models"], tmp)
                b["rows"] = json.loads(b["stdout"].strip().splitlines()[-1])["rows"]
                base_db.unlink()
                baseline_models = b
            r = run_stage("models", [*me, "--stage", "models"], tmp)
            info = json.loads(r["stdout"].strip().splitlines()[-1])
            r["rows"], r["what"] = info["rows"], "model rows: " + ", ".join(
                f"{k} {v:,}" for k, v in info["detail"].items())
            results["models"] = r
        if "recommend" in stages:
            results["recommend"] = stage_recommend(gi_cli, db, tmp)
        if "report" in stages:
            results["report"] = stage_report(gi_cli, db, tmp)
        if "export" in stages:
            results["export"] = stage_export(gi_cli, db, tmp)
    report_results(results, a, files, baseline, baseline_models)


def stage_recommend(gi_cli: list[str], db: Path, tmp: Path) -> dict:
    r = run_stage("recommend", [*gi_cli, "recommend", "--db", str(db), "--format", "json"], tmp)
    plan = json.loads(r["stdout"])
    by_rule: dict[str, int] = {}
    for rec in plan:
        by_rule[rec["rule"]] = by_rule.get(rec["rule"], 0) + 1
    saving = sum(rec["monthly_savings_usd"] for rec in plan)
    r["rows"], r["what"] = len(plan), f"recommendations {dict(sorted(by_rule.items()))}, ${saving:,.0f}/month"
    return r


def stage_report(gi_cli: list[str], db: Path, tmp: Path) -> dict:
    report = tmp / "report.html"
    r = run_stage("report", [*gi_cli, "report", "--db", str(db), "--out", str(report)], tmp)
    size = report.stat().st_size
    r["rows"], r["what"], r["size_mb"] = 1, f"report.html {size / 1e6:.2f} MB", size / 1e6
    return r


def stage_export(gi_cli: list[str], db: Path, tmp: Path) -> dict:
    lake = tmp / "lake"
    r = run_stage("export", [*gi_cli, "export", "--db", str(db), "--to", str(lake)], tmp)
    exported = 0
    for line in r["stdout"].splitlines():
        if " rows -> " in line:
            exported += int(line.split(":", 1)[1].split(" rows", 1)[0].replace(",", ""))
    r["rows"], r["what"] = exported, (f"rows in {sum(1 for _ in lake.rglob('*.parquet')):,} Parquet files, "
                                      f"{_dir_size(lake) / 1e9:.2f} GB (warehouse file {db.stat().st_size / 1e9:.2f} GB)")
    return r


def side_by_side(title: str, base: dict, what: str, stage: str, new: dict) -> str:
    """The baseline's run of a stage, and how much faster this code's is."""
    return (f"{title}: {base['seconds']:.1f} s, {base['cpu_s']:.1f} CPU-s, peak {base['peak_mb'] / 1024:.2f} GB, "
            f"{what}; this code's {stage} is {base['seconds'] / new['seconds']:.2f}x faster in wall time, "
            f"{base['cpu_s'] / new['cpu_s']:.2f}x in CPU time")


def report_results(results: dict[str, dict], a: argparse.Namespace, files: object, baseline: dict | None,
                   baseline_models: dict | None = None) -> None:
    print(f"{'stage':<10} {'seconds':>8} {'CPU s':>7} {'peak RSS':>9} {'rows':>13}  what")
    for name, r in results.items():
        print(f"{name:<10} {r['seconds']:8.1f} {r['cpu_s']:7.1f} {r['peak_mb'] / 1024:6.2f} GB {r['rows']:>13,}  "
              f"{r['what']}")
    total = sum(r["seconds"] for r in results.values())
    peak = max(r["peak_mb"] for r in results.values()) / 1024
    cpu = sum(r["cpu_s"] for r in results.values())
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    print(f"CPU time of all stages: {cpu:.0f} s (user + system; on {os.cpu_count()} cores the wall time cannot be "
          f"below {cpu / (os.cpu_count() or 1):.0f} s); load average at the end {' '.join(load)} "
          f"(other work on the machine slows every stage)")
    checks = []
    if baseline is not None and "load" in results:
        new = results["load"]
        print(side_by_side(f"load stage of {a.baseline_code} on the same files, right after", baseline,
                           f"{baseline['rows']:,} samples, warehouse file {baseline['db_gb']:.2f} GB", "load", new))
        checks += [(f"load >= {TARGETS['load_speedup']:g}x the baseline's",
                    baseline["seconds"] >= TARGETS["load_speedup"] * new["seconds"])]
    if baseline_models is not None and "models" in results:
        new = results["models"]
        print(side_by_side(f"models stage of {a.baseline_code} on a copy of the same warehouse, right before", baseline_models,
                           f"{baseline_models['rows']:,} model rows", "models stage", new))
    if len(results) == len(STAGES):
        checks += [(f"total <= {TARGETS['total_s']:g} s", total <= TARGETS["total_s"])]
    checks += [(f"peak RSS <= {TARGETS['peak_gb']:g} GB", peak <= TARGETS["peak_gb"])]
    if "recommend" in results:
        checks += [("recommend <= 20 s", results["recommend"]["seconds"] <= TARGETS["recommend_s"])]
    if "report" in results:
        checks += [("report <= 30 s", results["report"]["seconds"] <= TARGETS["report_s"]),
                   ("report <= 3 MB", results["report"]["size_mb"] <= TARGETS["report_mb"])]
    print("targets: " + "; ".join(f"{what}: {'met' if ok else 'NOT met'}" for what, ok in checks))
    only = "" if len(results) == len(STAGES) else f" (stages {', '.join(results)} only)"
    print(f"pipeline: {a.gpus} GPUs x {a.days:g} d: {total:.0f} s, peak {peak:.1f} GB{only}")


if __name__ == "__main__":
    main()

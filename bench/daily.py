"""The daily job as a benchmark: day 31 of a 30-day warehouse, beside the full pipeline.

A platform team runs gpuinsight once a day: collect since yesterday, refresh, recommend,
report. This measures that cycle on the fleet of ``bench/pipeline.py`` (the sample generator's
realistic mix, ``--gpus`` GPUs), generated for ``--days`` + 1 days:

* setup (not timed as the cycle): a real Prometheus (``promtool tsdb create-blocks-from
  openmetrics``, served on 127.0.0.1) holding days 30 and 31 of the fleet's dcgm-exporter,
  kube-state-metrics and cAdvisor series; a warehouse holding days 1..29 (their samples with
  their rollups, the pod history and nodes as seen at the end of day 29, the prices, the models
  built), then day 30 collected by the daily job itself (below), so the warehouse is what the job
  left yesterday (pods and nodes as the collectors describe them: the generated inventory files
  carry fewer of their columns, and a first collection changes every live pod once). The
  exposition is written in one pass as gzip chunks of ``--chunk-hours`` (10,000 GPUs: about
  15 GB a day uncompressed), each unpacked and backfilled on its own (several block sets in one
  data directory), so the disk never holds the days uncompressed. With ``--workdir`` the
  Prometheus data and yesterday's warehouse are kept there and reused by the next run of the
  same fleet and code (the warehouse is keyed by a hash of the loaders', models' and schema's
  sources: other code builds it anew);
* the day-31 cycle, each stage a fresh child process (wall time, CPU time and peak RSS from
  ``wait4``): ``collect`` (``GpuInsight.collect_prometheus`` of day 31 from that server and the
  kubectl dumps, as the CronJob in ``deploy/`` collects Prometheus then Kubernetes, in one write
  session whose model refresh rebuilds what the loads changed: ``sql/incremental.py``; the
  generator writes one dump, at the end of day 31, loaded on both days), ``recommend``
  (``gpuinsight recommend --format json``), ``report`` (``gpuinsight report``);
* beside it, in the same run, the full pipeline producing the same day-31 state from scratch
  (``bench/pipeline.py``'s stages load, models, recommend, report over all 31 days): what a daily
  run costs when every refresh recomputes the whole window;
* beside the cycle (not part of it): the Prometheus server alone answering the day's range
  queries as the collector plans them, from as many threads as it keeps in flight: the physical
  limit of the collect stage;
* with ``--workdir`` (yesterday's warehouse kept), what the day's load touched of the per-workload
  statistics every refresh rebuilds whole (``stage_touched``, not timed): the workloads its samples
  or changed allocations reach, the share of the window's samples they hold, and the rows of
  those models that differ from yesterday's;
* a check: the day-31 warehouse's models rebuilt from scratch (``refresh(full=True)``) give the
  same plan, byte for byte (when not, both plans are kept in ``WORKDIR/plans-differ`` and the
  JSON paths that differ printed).

Last line: ``daily: <GPUs> GPUs, day 31: <s> s = <pct> % of the full pipeline (<s> s), peak <GB> GB``
(peak: the largest peak RSS of the cycle's stages).

    python bench/daily.py [--gpus 10000] [--days 30] [--interval 300] [--workdir DIR] [--keep-db FILE]
                          [--chunk-hours 6] [--setup-only]

``--keep-db FILE``: a copy of yesterday's warehouse (day ``--days`` collected, before the
measured day) is left at FILE, to profile the day's stages on it afterwards. ``--setup-only``:
build (or check) the Prometheus data and yesterday's warehouse in ``--workdir`` and stop (a
large fleet's setup in its own run; the measured run reuses them).

Needs promtool and prometheus on PATH (``apt-get install prometheus``). Prints figures; it is
not a test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import polars as pl  # noqa: E402

from bench.pipeline import run_stage, stage_recommend, stage_report  # noqa: E402
from tests.samplegen import FleetSpec, build_fleet  # noqa: E402
from tests.samplegen.openmetrics import write_openmetrics_split  # noqa: E402

DAY_S = 86400


def _day_end(files_meta: dict, days: float) -> datetime:
    """The end of the first ``days`` days of the fleet (naive UTC, as the warehouse stores it)."""
    spec = FleetSpec.for_gpus(files_meta["gpus_asked"], days=files_meta["days"], interval_s=files_meta["interval_s"],
                              seed=files_meta["seed"])
    return datetime.fromtimestamp(spec.start_s + int(days * DAY_S), UTC).replace(tzinfo=None)


def inventory_at(files_root: Path, end: datetime, interval_s: int) -> dict[str, pl.DataFrame]:
    """Nodes and pods as a collection ending at ``end`` saw them: nothing created later, no end
    or phase reached later, last seen at most then."""
    inv = files_root / "inventory"
    nodes = (pl.read_parquet(inv / "nodes.parquet").filter(pl.col("first_seen") < end)
             .with_columns(last_seen=pl.min_horizontal("last_seen", pl.lit(end - timedelta(seconds=interval_s)))))
    pods = pl.read_parquet(inv / "pods.parquet").filter(pl.col("created") < end)
    later = {c: pl.when(pl.col(c) < end).then(pl.col(c)).otherwise(None) for c in ("scheduled", "started", "finished")}
    pods = pods.with_columns(**later, last_seen=pl.min_horizontal("last_seen", pl.lit(end)))
    pods = pods.with_columns(phase=pl.when(pl.col("finished").is_not_null()).then(pl.col("phase"))
                             .when(pl.col("started").is_not_null()).then(pl.lit("Running"))
                             .otherwise(pl.lit("Pending")))
    return {"nodes": nodes, "pods": pods, "prices": pl.read_parquet(inv / "prices.parquet")}


def stage_base(db: Path, files_root: Path, days: float) -> dict:
    """Yesterday's warehouse: days 1..``days`` loaded and the models built."""
    from bench.fleet_warehouse import FleetFiles, load_samples, open_for

    files = FleetFiles(files_root, json.loads((files_root / "manifest.json").read_text()))
    end = _day_end(files.meta, days)
    keys = {"nodes": ["cluster", "node"], "pods": ["cluster", "uid"], "prices": ["catalog", "instance_type", "gpu_model"]}
    with open_for(db, files) as g:
        with g.wh.transaction() as con:
            for table, frame in inventory_at(files_root, end, files.meta["interval_s"]).items():
                g.wh.merge(table, frame, keys[table], con=con)
        # part-NNNN.parquet holds day NNNN + 1
        rows = load_samples(g, files, parts=[p for p in files.samples if int(p.stem.split("-")[1]) < days])
        g.refresh(full=True)
    return {"rows": rows["gpu_samples"], "until": end.isoformat()}


def stage_full_load(db: Path, files_root: Path) -> dict:
    from bench.pipeline import stage_load

    return stage_load(db, files_root, "append")


def stage_collect(db: Path, files_root: Path, url: str, since: str, until: str, interval_s: int) -> dict:
    """Day 31 as the daily job collects it: Prometheus and the kubectl dumps, one write session."""
    import gpuinsight as gi
    from bench.fleet_warehouse import FleetFiles
    from gpuinsight.config import Config, PrometheusConfig

    files = FleetFiles(files_root, json.loads((files_root / "manifest.json").read_text()))
    config = Config.from_env(db, cluster=files.meta["cluster"]).with_(prometheus=PrometheusConfig(url=url))
    with gi.open(db, config=config) as g:
        with g.writing():
            prom = g.collect_prometheus(datetime.fromisoformat(since), datetime.fromisoformat(until), interval_s)
            dumps = g.collect_kubernetes(from_dir=files.kubectl, as_of=datetime.fromisoformat(until))
        refresh = g.models.last
    return {"rows": prom.rows.get("gpu_samples", 0), "prometheus": prom.summary(), "dumps": dumps.summary(),
            "refresh": refresh.summary(), "full": refresh.full}


def stage_server(files_root: Path, url: str, since: str, until: str, interval_s: int) -> dict:
    """The physical limit of the day's collection: the Prometheus server answering the very range
    queries the collector plans for the day (``PrometheusSource.plan``), sent plain from as many
    threads as the collector keeps in flight, the answers' bytes read and dropped."""
    from bench.collect import server_alone
    from bench.fleet_warehouse import FleetFiles
    from gpuinsight.config import Config, PrometheusConfig
    from gpuinsight.sources.prometheus import PrometheusSource

    files = FleetFiles(files_root, json.loads((files_root / "manifest.json").read_text()))
    config = Config(cluster=files.meta["cluster"], prometheus=PrometheusConfig(url=url))
    src = PrometheusSource(config)
    t0, t1 = src.grid(datetime.fromisoformat(since), datetime.fromisoformat(until), interval_s)
    queries = [q for chunk in src.plan(t0, t1, interval_s, raw=False) for q in chunk]
    seconds, nbytes = server_alone(url, queries, config.prometheus.concurrency)
    return {"rows": len(queries), "seconds": seconds, "mb": nbytes / 1e6, "threads": config.prometheus.concurrency}


def stage_models_full(db: Path) -> dict:
    import gpuinsight as gi

    with gi.open(db) as g:
        built = g.refresh(full=True)
    return {"rows": len(built)}


# the models every refresh rebuilds whole, one row per workload (idle_stretches: and Ray group)
WORKLOAD_MODELS = ("workload_sample_stats", "workload_input_profile__default", "idle_stretches__default",
                   "workload_gpu_profile__default")


def stage_touched(db: Path, yesterday: Path, since: str, until: str) -> dict:
    """What the day's load changed of the per-workload whole-window statistics: the workloads
    (cluster, namespace, kind, name; a pod name maps to the workload of its newest pod, as the
    models map it, by today's and by yesterday's allocations) that the day's samples or a changed
    pod_gpu_allocations row touch, the share of the window's attributed samples they hold (what a
    rebuild of only their rows would still read), and each model's rows that differ from yesterday's."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    con.execute(f"ATTACH '{yesterday}' AS y (READ_ONLY)")
    names = """SELECT cluster, namespace, pod, arg_max(workload_kind, (start_ts, uid)) AS workload_kind,
                      arg_max(workload, (start_ts, uid)) AS workload FROM {t} GROUP BY ALL"""
    for table, allocations in (("wl_now", names.format(t="pod_gpu_allocations")),
                               ("wl", f"{names.format(t='pod_gpu_allocations')} UNION "
                                      f"{names.format(t='y.pod_gpu_allocations')}")):
        con.execute(f"CREATE TEMP TABLE {table} AS SELECT DISTINCT k.pod_key, n.* EXCLUDE (pod) FROM pod_keys k "
                    f"JOIN ({allocations}) n USING (cluster, namespace, pod)")
    con.execute("""CREATE TEMP TABLE touched AS
        SELECT cluster, namespace, workload_kind, workload FROM wl
        WHERE pod_key IN (SELECT DISTINCT pod_key FROM gpu_sample_facts WHERE ts >= ?::TIMESTAMP AND ts < ?::TIMESTAMP)
        UNION
        SELECT cluster, namespace, workload_kind, workload
        FROM (SELECT * FROM pod_gpu_allocations EXCEPT SELECT * FROM y.pod_gpu_allocations
              UNION ALL (SELECT * FROM y.pod_gpu_allocations EXCEPT SELECT * FROM pod_gpu_allocations))""",
                [since, until])
    key = "cluster, namespace, workload_kind, workload"
    workloads, touched = con.execute(f"SELECT count(*), count(t.workload) FROM workload_sample_stats s "
                                     f"LEFT JOIN touched t USING ({key})").fetchall()[0]
    samples, of_touched = con.execute(f"""
        SELECT sum(c), sum(c) FILTER (WHERE t.workload IS NOT NULL)
        FROM (SELECT pod_key, count(*) AS c FROM gpu_sample_facts GROUP BY pod_key) f
        JOIN wl_now USING (pod_key) LEFT JOIN touched t USING ({key})""").fetchall()[0]
    rows = {}
    for table in WORKLOAD_MODELS:
        total, same = con.execute(f'SELECT (SELECT count(*) FROM "{table}"), count(*) FROM '
                                  f'(SELECT * FROM "{table}" INTERSECT ALL SELECT * FROM y."{table}")').fetchall()[0]
        rows[table] = [total - same, total]
    return {"workloads": workloads, "touched": touched, "samples": int(samples or 0),
            "samples_touched": int(of_touched or 0), "rows_changed": rows}


def day31_tsdb(workdir: Path, meta: dict, days: float, chunk_hours: int = 6) -> Path:
    """A Prometheus TSDB holding the last two days of the fleet (built once per fleet, reused).

    The exposition is written in one pass as gzip chunks of ``chunk_hours``; each is unpacked,
    backfilled and deleted in turn, and marked done, so an interrupted setup resumes where it
    stopped."""
    from tests.prom_server import backfill

    tsdb = workdir / f"days{int(days)}-{int(days) + 1}-tsdb"
    marker = tsdb / "fleet.json"
    want = {k: meta[k] for k in ("gpus_asked", "days", "interval_s", "seed", "format")}
    if marker.is_file() and json.loads(marker.read_text()) == want:
        return tsdb
    spec = FleetSpec.for_gpus(meta["gpus_asked"], days=meta["days"], interval_s=meta["interval_s"], seed=meta["seed"])
    first = int((days - 1) * DAY_S) // spec.interval_s
    per_chunk = max(1, chunk_hours * 3600 // spec.interval_s)
    bounds = [*range(first, spec.steps, per_chunk), spec.steps]
    chunks = workdir / f"{tsdb.name}-chunks"
    plan = {**want, "bounds": bounds}
    plan_file = chunks / "plan.json"
    t0 = time.perf_counter()
    if not (plan_file.is_file() and json.loads(plan_file.read_text()) == plan):
        shutil.rmtree(tsdb, ignore_errors=True)
        shutil.rmtree(chunks, ignore_errors=True)
        chunks.mkdir(parents=True)
        write_openmetrics_split(build_fleet(spec), [chunks / f"chunk-{j:03d}.om.gz" for j in range(len(bounds) - 1)],
                                bounds)
        plan_file.write_text(json.dumps(plan))
        print(f"  days {int(days)}-{int(days) + 1}: OpenMetrics written in {len(bounds) - 1} gzip chunks in "
              f"{time.perf_counter() - t0:.0f} s ({sum(p.stat().st_size for p in chunks.glob('*.gz')) / 2**30:.1f} GB)",
              flush=True)
    for j in range(len(bounds) - 1):
        gz_path, done = chunks / f"chunk-{j:03d}.om.gz", chunks / f"chunk-{j:03d}.done"
        if done.is_file():
            continue
        t1 = time.perf_counter()
        om = chunks / f"chunk-{j:03d}.om"
        with open(om, "wb") as out:
            subprocess.run(["gzip", "-dc", str(gz_path)], stdout=out, check=True)
        size = om.stat().st_size
        backfill(om, tsdb, timeout_s=6 * 3600, max_block_duration="24h")
        om.unlink()
        gz_path.unlink()
        done.touch()
        print(f"  chunk {j + 1}/{len(bounds) - 1} backfilled ({size / 2**30:.1f} GB) in {time.perf_counter() - t1:.0f} s",
              flush=True)
    marker.write_text(json.dumps(want))
    shutil.rmtree(chunks)
    print(f"  days {int(days)}-{int(days) + 1} in Prometheus in {time.perf_counter() - t0:.0f} s (setup, not timed)",
          flush=True)
    return tsdb


# sources that only read a warehouse, or rebuild its models the way a full rebuild would
# (sql/incremental.py: tests/test_incremental.py holds it to that)
_READERS = ("gpuinsight/rules/", "gpuinsight/reports/", "gpuinsight/plan/", "gpuinsight/actions/",
            "gpuinsight/simulate/", "gpuinsight/cli.py", "gpuinsight/demo.py", "gpuinsight/sql/incremental.py")


def code_hash() -> str:
    """A hash of the sources that decide what a warehouse holds: the loaders, models and schema."""
    root = HERE.parent
    digest = hashlib.sha256()
    files = sorted([*root.glob("queries/**/*.sql"), *root.glob("gpuinsight/**/*.py")])
    for path in files:
        rel = path.relative_to(root).as_posix()
        if rel.startswith(_READERS):
            continue
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def main() -> None:
    from bench.fleet_warehouse import add_fleet_args, write_fleet_files

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fleet_args(ap, gpus=10_000, days=30, interval=300)
    ap.add_argument("--keep-db", type=Path, help="leave a copy of yesterday's warehouse here")
    ap.add_argument("--chunk-hours", type=int, default=6,
                    help="hours of the exposition per promtool backfill (bounds the disk the setup takes)")
    ap.add_argument("--setup-only", action="store_true",
                    help="build or check the Prometheus data and yesterday's warehouse in --workdir, then stop")
    ap.add_argument("--stage", choices=["tsdb", "base", "full-load", "collect", "models-full", "server", "touched"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--files", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--since", help=argparse.SUPPRESS)
    ap.add_argument("--until", help=argparse.SUPPRESS)
    ap.add_argument("--yesterday", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.stage == "tsdb":
        day31_tsdb(a.workdir, json.loads((a.files / "manifest.json").read_text()), a.days, a.chunk_hours)
        return
    if a.stage == "base":
        print(json.dumps(stage_base(a.db, a.files, a.days)))
        return
    if a.stage == "full-load":
        print(json.dumps(stage_full_load(a.db, a.files)))
        return
    if a.stage == "collect":
        print(json.dumps(stage_collect(a.db, a.files, a.url, a.since, a.until, a.interval)))
        return
    if a.stage == "models-full":
        print(json.dumps(stage_models_full(a.db)))
        return
    if a.stage == "server":
        print(json.dumps(stage_server(a.files, a.url, a.since, a.until, a.interval)))
        return
    if a.stage == "touched":
        print(json.dumps(stage_touched(a.db, a.yesterday, a.since, a.until)))
        return

    from tests.prom_server import prometheus_server

    gi_cli = [sys.executable, "-m", "gpuinsight.cli"]
    if a.setup_only and not a.workdir:
        raise SystemExit("--setup-only keeps what it builds in --workdir: name one")
    if a.workdir:
        a.workdir.mkdir(parents=True, exist_ok=True)
    # the scratch warehouses beside the kept data (a 10,000-GPU warehouse is some 5 GB)
    with tempfile.TemporaryDirectory(prefix="gi-daily-", dir=a.workdir) as tmp_s:
        tmp = Path(tmp_s)
        workdir = a.workdir or tmp
        root = workdir / "fleet"
        files = write_fleet_files(root, a.gpus, a.days + 1, a.interval, log=True)
        m = files.meta
        print(f"fleet: {files.gpus:,} GPUs ({m['nodes']:,} nodes, {m['pods']:,} pod incarnations), {a.days + 1:g} d at "
              f"{a.interval} s: {files.sample_rows:,} sample rows (generation took {m['generate_s']:.0f} s, not timed)")
        print(f"machine: {os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} "
              f"GB RAM, load average {os.getloadavg()[0]:.1f} at start; each stage a fresh process")
        yesterday, since, until = _day_end(m, a.days - 1), _day_end(m, a.days), _day_end(m, a.days + 1)
        day = int(a.days) + 1

        daily_db, full_db = tmp / "daily.duckdb", tmp / "full.duckdb"
        me = [sys.executable, __file__, "--files", str(root), "--days", str(a.days - 1), "--interval", str(a.interval)]
        # in a child: the fleet it builds would otherwise stay in this process, and every stage started
        # from it would inherit its peak RSS (the kernel carries the parent's high-water mark into ru_maxrss)
        r = run_stage("tsdb", [sys.executable, __file__, "--files", str(root), "--days", str(a.days),
                               "--interval", str(a.interval), "--workdir", str(workdir), "--stage", "tsdb",
                               "--chunk-hours", str(a.chunk_hours)], tmp)
        print(r["stdout"].rstrip() or "  days in Prometheus: reused", flush=True)
        tsdb = workdir / f"days{int(a.days)}-{int(a.days) + 1}-tsdb"
        # yesterday's warehouse, kept in the workdir for the next run of this fleet and code
        kept_db, kept_marker = workdir / f"day{int(a.days)}.duckdb", workdir / f"day{int(a.days)}.json"
        want = {"fleet": {k: m[k] for k in ("gpus_asked", "days", "interval_s", "seed", "format")},
                "code": code_hash()}
        reuse = a.workdir and kept_db.is_file() and kept_marker.is_file() \
            and json.loads(kept_marker.read_text()) == want

        cycle: dict[str, dict] = {}
        with prometheus_server(tsdb, timeout_s=300) as url:
            if reuse:
                shutil.copy(kept_db, daily_db)
                print(f"setup: day {int(a.days)}'s warehouse reused ({kept_db.name}: the same fleet and code)", flush=True)
            else:
                kept_db.unlink(missing_ok=True)
                kept_marker.unlink(missing_ok=True)
                base = run_stage("base", [*me, "--db", str(daily_db), "--stage", "base"], tmp)
                print(f"setup: days 1-{int(a.days) - 1} loaded and modelled in {base['seconds']:.0f} s "
                      f"(peak {base['peak_mb'] / 1024:.1f} GB), not timed", flush=True)
                r = run_stage("collect", [*me, "--db", str(daily_db), "--stage", "collect", "--url", url,
                                          "--since", yesterday.isoformat(), "--until", since.isoformat()], tmp)
                info = json.loads(r["stdout"].strip().splitlines()[-1])
                print(f"setup: day {int(a.days)} collected by the daily job in {r['seconds']:.0f} s (peak "
                      f"{r['peak_mb'] / 1024:.1f} GB), not timed; {info['refresh']}", flush=True)
                if a.workdir:
                    shutil.copy(daily_db, kept_db)
                    kept_marker.write_text(json.dumps(want))
            if a.keep_db:
                shutil.copy(daily_db, a.keep_db)
            if a.setup_only:
                print(f"setup kept in {workdir}")
                return
            r = run_stage("collect", [*me, "--db", str(daily_db), "--stage", "collect", "--url", url,
                                      "--since", since.isoformat(), "--until", until.isoformat()], tmp)
            info = json.loads(r["stdout"].strip().splitlines()[-1])
            r["rows"], r["what"] = info["rows"], f"{info['prometheus']}; {info['dumps']}; {info['refresh']}"
            cycle["collect"] = r
            # beside the cycle, not part of it: what the server alone takes to answer the day's queries
            server = run_stage("server", [*me, "--stage", "server", "--url", url, "--since", since.isoformat(),
                                          "--until", until.isoformat()], tmp)
            server.update(json.loads(server["stdout"].strip().splitlines()[-1]))
        cycle["recommend"] = stage_recommend(gi_cli, daily_db, tmp)
        daily_plan = cycle["recommend"]["out"].read_bytes()
        cycle["report"] = stage_report(gi_cli, daily_db, tmp)
        if kept_db.is_file():  # what the day changed of the per-workload statistics (not timed)
            r = run_stage("touched", [*me, "--db", str(daily_db), "--stage", "touched", "--yesterday", str(kept_db),
                                      "--since", since.isoformat(), "--until", until.isoformat()], tmp)
            t = json.loads(r["stdout"].strip().splitlines()[-1])
            print(f"day {day}'s load touched {t['touched']:,} of {t['workloads']:,} workloads ({t['samples_touched']:,} "
                  f"of the window's {t['samples']:,} attributed samples); rows changed: "
                  + ", ".join(f"{name.removesuffix('__default')} {n:,}/{total:,}"
                              for name, (n, total) in t["rows_changed"].items()), flush=True)

        # the same day-31 warehouse, its models rebuilt from scratch: the same plan?
        # (the day's warehouse itself: its cycle is done; one 10,000-GPU warehouse less on disk)
        check_db = tmp / "check.duckdb"
        daily_db.rename(check_db)
        run_stage("check-models", [*me, "--db", str(check_db), "--stage", "models-full"], tmp)
        check = stage_recommend(gi_cli, check_db, tmp)
        same = check["out"].read_bytes() == daily_plan
        if not same:  # keep both, and name what differs: a figure's last digit or a finding
            kept = workdir / "plans-differ"
            kept.mkdir(exist_ok=True)
            (kept / "incremental.json").write_bytes(daily_plan)
            shutil.copy(check["out"], kept / "full-rebuild.json")
            for line in plan_differences(daily_plan, check["out"].read_bytes()):
                print(f"  differs: {line}")
            print(f"  both plans kept in {kept}")
        check_db.unlink()

        full: dict[str, dict] = {}
        r = run_stage("full-load", [*me, "--db", str(full_db), "--stage", "full-load"], tmp)
        r["rows"], r["what"] = json.loads(r["stdout"].strip().splitlines()[-1])["rows"], "all days, inventory, dumps"
        full["load"] = r
        r = run_stage("models", [*me, "--db", str(full_db), "--stage", "models-full"], tmp)
        r["rows"], r["what"] = json.loads(r["stdout"].strip().splitlines()[-1])["rows"], "models rebuilt"
        full["models"] = r
        full["recommend"] = stage_recommend(gi_cli, full_db, tmp)
        full["report"] = stage_report(gi_cli, full_db, tmp)
        full_db.unlink(missing_ok=True)

        print(f"{'stage':<18} {'seconds':>8} {'CPU s':>7} {'peak RSS':>9} {'rows':>13}  what")
        for title, stages in ((f"day {day}", cycle), ("full pipeline", full)):
            for name, r in stages.items():
                print(f"{title + ' ' + name:<18} {r['seconds']:8.1f} {r['cpu_s']:7.1f} {r['peak_mb'] / 1024:6.2f} GB "
                      f"{r['rows']:>13,}  {r['what']}")
        took = sum(r["seconds"] for r in cycle.values())
        full_s = sum(r["seconds"] for r in full.values())
        print(f"the Prometheus server alone answering day {day}'s {server['rows']:,} range queries "
              f"({server['threads']} in flight, {server['mb']:,.0f} MB of JSON): {server['seconds']:.1f} s = "
              f"{100 * server['seconds'] / full_s:.1f} % of the full pipeline (the day's collect: "
              f"{cycle['collect']['seconds'] / server['seconds']:.2f}x it)")
        peak = max(r["peak_mb"] for r in cycle.values()) / 1024
        print(f"CPU time: day {day} {sum(r['cpu_s'] for r in cycle.values()):.0f} s, full pipeline "
              f"{sum(r['cpu_s'] for r in full.values()):.0f} s; load average at the end {os.getloadavg()[0]:.1f}")
        print(f"plan after the day-{day} refresh vs the same warehouse's models rebuilt from scratch: "
              f"{'the same, byte for byte' if same else 'DIFFERENT'} ({len(daily_plan):,} bytes)")
        print(f"targets: day {day} <= 10 % of the full pipeline: {'met' if took <= 0.1 * full_s else 'NOT met'}; "
              f"same plan: {'met' if same else 'NOT met'}")
        print(f"daily: {files.gpus} GPUs, day {day}: {took:.1f} s = {100 * took / full_s:.1f} % of the full pipeline "
              f"({full_s:.1f} s), peak {peak:.1f} GB")


def plan_differences(a: bytes, b: bytes, limit: int = 20) -> list[str]:
    """Where two plans (``recommend --format json``) differ: JSON paths with both values."""
    out: list[str] = []

    def walk(x: object, y: object, path: str) -> None:
        if len(out) >= limit or x == y:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y), key=str):
                walk(x.get(k), y.get(k), f"{path}.{k}")
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                walk(u, v, f"{path}[{(u or {}).get('id', i) if isinstance(u, dict) else i}]")
        else:
            out.append(f"{path}: {json.dumps(x, default=str)[:120]} vs {json.dumps(y, default=str)[:120]}")

    walk(json.loads(a), json.loads(b), "plan")
    return out


if __name__ == "__main__":
    main()

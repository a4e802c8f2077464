"""Benchmark: pulling DCGM + kube-state-metrics history from a real Prometheus.

One server (backfilled from the sample fleet generator), one window, the very queries
``PrometheusSource`` plans, timed three ways, one after the other, single-threaded:

  (a) prometheus-api-client: ``custom_query_range`` + ``MetricRangeDataFrame`` (pandas)
  (b) gpuinsight: query_range on the same session -> orjson -> series frames -> gpu_samples,
      pods and nodes rows ready to load
  (c) the server alone: the same HTTP requests, reading the response bytes and nothing else

and then a whole ``collect`` (concurrent fetch + load into DuckDB) of a larger fleet in a
subprocess, for wall time and peak RSS.

    python bench/collect.py [--gpus 200] [--days 1] [--big-gpus 1000] [--big-days 7] [--workdir DIR]

Needs promtool and prometheus on PATH (``apt-get install prometheus``). Prints figures; it is
not a test.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402

from gpuinsight.config import Config, PrometheusConfig  # noqa: E402
from gpuinsight.sample import FleetSpec, write_sample  # noqa: E402
from gpuinsight.sources.prom.client import PromClient  # noqa: E402
from gpuinsight.sources.prom.frames import concat_series  # noqa: E402
from gpuinsight.sources.prometheus import PrometheusSource  # noqa: E402
from gpuinsight.sources.series import dcgm_samples, ksm_nodes, ksm_pods  # noqa: E402
from tests.prom_server import backfill, prometheus_server  # noqa: E402

CONCURRENCY = 4  # PrometheusConfig's default


def make_fleet(workdir: Path, gpus: int, days: float) -> tuple[Path, FleetSpec]:
    spec = FleetSpec.for_gpus(gpus, days=days)
    out = workdir / f"fleet-{spec.gpu_count}gpu-{days:g}d"
    if not (out / "tsdb").is_dir():
        t = time.perf_counter()
        write_sample(out, spec, gzip=False)
        # a 1,000-GPU week is ~10 GB of text: promtool needs ~4 min and ~10 GB RSS for it
        backfill(out / "metrics.om", out / "tsdb", timeout_s=3600)
        (out / "metrics.om").unlink(missing_ok=True)  # the TSDB is all the server needs
        print(f"  built {spec.gpu_count} GPUs x {days:g} d fleet in {time.perf_counter() - t:.0f} s", flush=True)
    return out, spec


def window(spec: FleetSpec) -> tuple[object, object]:
    start = spec.start.replace(tzinfo=None)
    return start, start + timedelta(days=spec.days)


def compare(url: str, spec: FleetSpec) -> None:
    from prometheus_api_client import MetricRangeDataFrame

    cfg = Config(cluster=spec.cluster, prometheus=PrometheusConfig(url=url, concurrency=1))
    src = PrometheusSource(cfg)
    since, until = window(spec)
    t0, t1 = src.grid(since, until, spec.interval_s)  # type: ignore[arg-type]
    queries = [q for chunk in src.plan(t0, t1, spec.interval_s, raw=False) for q in chunk]
    client = PromClient(cfg.prometheus, pool_size=CONCURRENCY)
    session = client.session
    print(f"  {len(queries)} queries over {spec.days:g} d at {spec.interval_s} s ({src.last_plan['gpu_series']} "
          "GPU series)", flush=True)

    # (c) the server: bytes only, plain (as gpuinsight asks) and gzip (the library's default)
    server: dict[str, float] = {}
    nbytes = 0
    for encoding in ("identity", "gzip"):
        t = time.perf_counter()
        for q in queries:
            r = session.get(f"{url}/api/v1/query_range", headers={"Accept-Encoding": encoding},
                            params={"query": q.expr, "start": q.start, "end": q.end, "step": q.step})
            nbytes += len(r.content) if encoding == "identity" else 0
        server[encoding] = time.perf_counter() - t
    server_s = server["identity"]

    # (b) gpuinsight: frames -> rows ready to load, fetched with the collector's concurrency
    t = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        frames = list(pool.map(client.query_range, queries))
    series = concat_series(frames)
    rows = dcgm_samples(series, spec.cluster, spec.interval_s)
    pods, nodes = ksm_pods(series, spec.cluster), ksm_nodes(series, spec.cluster)
    ours_s = time.perf_counter() - t
    points = sum(f.height for f in frames)

    # (a) prometheus-api-client's DataFrame path
    from datetime import UTC, datetime

    t = time.perf_counter()
    dfs = []
    for q in queries:
        result = client.prom.custom_query_range(q.expr, datetime.fromtimestamp(q.start, UTC),
                                                datetime.fromtimestamp(q.end, UTC), str(q.step))
        if result:
            dfs.append(MetricRangeDataFrame(result))
    theirs_s = time.perf_counter() - t
    their_points = sum(len(d) for d in dfs)

    print(f"  points: {points:,} (client lib: {their_points:,}); "
          f"-> {rows.height:,} gpu_samples rows, {pods.height:,} pods, {nodes.height:,} nodes")
    for label, secs in (("(a) prometheus-api-client + MetricRangeDataFrame", theirs_s),
                        (f"(b) gpuinsight, {CONCURRENCY} threads (to rows ready to load)", ours_s),
                        ("(c) server alone, 1 thread, plain JSON", server_s),
                        ("(c') server alone, 1 thread, gzip JSON", server["gzip"])):
        print(f"  {label:<52} {secs:8.2f} s  {points / secs:>12,.0f} samples/s")
    print(f"  (b) vs (a): {theirs_s / ours_s:.1f}x faster (target >= 5x); "
          f"(b) vs (c): {ours_s / server_s:.2f}x the server's time (target <= 2x); response "
          f"{nbytes / 1e6:,.1f} MB plain", flush=True)


_CHILD = """
import json, resource, sys, time
from datetime import datetime
from pathlib import Path
from gpuinsight.config import Config, PrometheusConfig
from gpuinsight.sources.prometheus import PrometheusSource
from gpuinsight.warehouse import Warehouse
db, url, since, until, step, cluster = sys.argv[1:7]
cfg = Config(db_path=Path(db), cluster=cluster, prometheus=PrometheusConfig(url=url))
t = time.perf_counter()
with Warehouse(db) as wh:
    r = PrometheusSource(cfg).collect(wh, datetime.fromisoformat(since), datetime.fromisoformat(until), int(step))
    rows = wh.count("gpu_samples")
print(json.dumps({"seconds": time.perf_counter() - t, "rows": rows, "summary": r.summary(), "notes": r.notes,
                  "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def full_collect(url: str, spec: FleetSpec, workdir: Path) -> None:
    since, until = window(spec)
    db = workdir / f"collect-{spec.gpu_count}.duckdb"
    db.unlink(missing_ok=True)
    args = [str(db), url, since.isoformat(), until.isoformat(), str(spec.interval_s), spec.cluster]  # type: ignore[attr-defined]
    out = subprocess.run([sys.executable, "-c", _CHILD, *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode:
        print(out.stderr[-3000:])
        raise SystemExit(1)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"  collect {spec.gpu_count} GPUs x {spec.days:g} d at {spec.interval_s} s: {res['seconds']:.1f} s wall, "
          f"{res['rows']:,} gpu_samples rows ({res['rows'] / res['seconds']:,.0f} rows/s), peak RSS "
          f"{max(res['maxrss_mib'], child):,.0f} MiB\n  {res['summary']}; {'; '.join(res['notes'])}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=200)
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--big-gpus", type=int, default=1000, help="fleet for the whole-collect timing (0 = skip)")
    ap.add_argument("--big-days", type=float, default=7.0)
    ap.add_argument("--workdir", type=Path, default=None, help="keep fleets here between runs")
    a = ap.parse_args()
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="gi-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    pl.Config.set_tbl_hide_dataframe_shape(True)
    print(f"same server, same window, same queries (workdir {workdir}):", flush=True)
    fleet, spec = make_fleet(workdir, a.gpus, a.days)
    with prometheus_server(fleet / "tsdb") as url:
        compare(url, spec)
        full_collect(url, spec, workdir)
    if a.big_gpus:
        print("whole collection of a larger fleet (subprocess, concurrent fetch + DuckDB load):", flush=True)
        fleet, spec = make_fleet(workdir, a.big_gpus, a.big_days)
        with prometheus_server(fleet / "tsdb") as url:
            full_collect(url, spec, workdir)


if __name__ == "__main__":
    main()

"""Benchmark: pulling DCGM + kube-state-metrics history from a real Prometheus, like for like.

One server (backfilled from the sample fleet generator), one window, the very range queries
``PrometheusSource`` plans, every contender at the SAME concurrency (1, then 4 requests in
flight to the server):

  (c) the server alone: the same HTTP requests (same parameters, plain JSON) from N threads,
      reading the response bytes and nothing else: the physical limit
  (b) gpuinsight: the collector's own fetch pipeline (at most N requests in flight; answers
      are decoded while the next ones are on the wire) -> gpu_samples, pods and nodes rows
      ready to load
  (b') gpuinsight's whole ``collect`` into a fresh DuckDB file (planning calls included)
  (a) prometheus-api-client: ``custom_query_range`` + ``MetricRangeDataFrame`` (pandas) per
      query from N threads, its session asking for plain JSON as ours does

The contenders run interleaved, round after round, so they share whatever else loads the
machine; each figure is the median of the rounds, with the CPU seconds this process (the
client) and the server spent, which a busy machine does not change as much as wall time. Then memory: a whole ``collect`` of a
larger fleet in a subprocess, peak RSS per stored ``gpu_samples`` row (``--code DIR`` runs
the same measurement against another source tree, e.g. an older commit, for a baseline).

    python bench/collect.py [--gpus 200] [--days 1] [--rounds 3] [--mem-gpus 1000] [--mem-days 7]
                            [--profile ROUNDS] [--workdir DIR] [--code DIR ...]

Needs promtool and prometheus on PATH (``apt-get install prometheus``). Prints figures; it is
not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from gpuinsight.config import Config, PrometheusConfig  # noqa: E402
from gpuinsight.sources.prom.client import NO_PARTIAL  # noqa: E402
from gpuinsight.sources.prom.promql import Query  # noqa: E402
from gpuinsight.sources.prometheus import PrometheusSource  # noqa: E402
from gpuinsight.warehouse import Warehouse  # noqa: E402
from tests.prom_server import backfill, prometheus_process, prometheus_server  # noqa: E402
from tests.samplegen import FleetSpec, write_sample  # noqa: E402

CONCURRENCY = (1, 4)  # 4 is PrometheusConfig's default


def make_fleet(workdir: Path, gpus: int, days: float) -> tuple[Path, FleetSpec]:
    spec = FleetSpec.for_gpus(gpus, days=days)
    out = workdir / f"fleet-{spec.gpu_count}gpu-{days:g}d"
    if not (out / "tsdb").is_dir():
        t = time.perf_counter()
        write_sample(out, spec, gzip=False)
        # a 1,000-GPU week is ~10 GB of text; promtool reads it once per block window, so
        # 3-day blocks instead of its 2-hour default
        backfill(out / "metrics.om", out / "tsdb", timeout_s=6 * 3600, max_block_duration="72h")
        (out / "metrics.om").unlink(missing_ok=True)  # the TSDB is all the server needs
        print(f"  built {spec.gpu_count} GPUs x {days:g} d fleet in {time.perf_counter() - t:.0f} s", flush=True)
    return out, spec


def window(spec: FleetSpec) -> tuple[datetime, datetime]:
    start = spec.start.replace(tzinfo=None)
    return start, start + timedelta(days=spec.days)


def params(q: Query) -> list[tuple[str, object]]:
    return [("query", q.expr), ("start", q.start), ("end", q.end), ("step", q.step), *NO_PARTIAL]


def server_alone(url: str, queries: list[Query], n: int) -> tuple[float, int]:
    """(c): the same requests, N at a time, bytes only."""
    session = requests.Session()
    session.mount(url, requests.adapters.HTTPAdapter(pool_maxsize=n))
    plain = {"Accept-Encoding": "identity"}

    def one(q: Query) -> int:
        return len(session.get(f"{url}/api/v1/query_range", params=params(q), headers=plain).content)

    t = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        nbytes = sum(pool.map(one, queries))
    return time.perf_counter() - t, nbytes


def gpuinsight_rows(cfg: Config, chunks: list[list[Query]], step: int, planned: PrometheusSource
                    ) -> tuple[float, int]:
    """(b): the collector's fetch pipeline -> rows ready to load (everything but the writes),
    with the plan's refiner (spotting steps with readings that are not measurements)."""
    src = PrometheusSource(cfg)
    src.refiner = planned.refiner
    t = time.perf_counter()
    rows = 0
    for batch in src._batches(chunks, step):
        assert batch.samples is not None and batch.pods is not None and batch.nodes is not None
        rows += batch.samples.height
    return time.perf_counter() - t, rows


def gpuinsight_collect(cfg: Config, spec: FleetSpec, workdir: Path) -> tuple[float, int]:
    """(b'): a whole collection into a fresh warehouse."""
    db = workdir / "bench-collect.duckdb"
    db.unlink(missing_ok=True)
    since, until = window(spec)
    t = time.perf_counter()
    with Warehouse(db) as wh:
        PrometheusSource(cfg.with_(db_path=db)).collect(wh, since, until, spec.interval_s)
        seconds = time.perf_counter() - t
        return seconds, wh.count("gpu_samples")


def client_library(url: str, queries: list[Query], n: int) -> tuple[float, int]:
    """(a): prometheus-api-client's DataFrame path, N queries at a time."""
    from prometheus_api_client import MetricRangeDataFrame, PrometheusConnect

    prom = PrometheusConnect(url=url, headers={"Accept-Encoding": "identity"}, disable_ssl=True)
    prom._session.mount(url, requests.adapters.HTTPAdapter(pool_maxsize=n))

    def one(q: Query) -> int:
        # start/end again as params: the library rounds them to whole seconds, and the very
        # same requests are wanted
        result = prom.custom_query_range(q.expr, datetime.fromtimestamp(q.start, UTC),
                                         datetime.fromtimestamp(q.end, UTC), str(q.step),
                                         params={"start": q.start, "end": q.end, **dict(NO_PARTIAL)})
        return len(MetricRangeDataFrame(result)) if result else 0

    t = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        points = sum(pool.map(one, queries))
    return time.perf_counter() - t, points


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def compare(url: str, server_pid: int, spec: FleetSpec, rounds: int, workdir: Path) -> None:
    base = Config(cluster=spec.cluster, prometheus=PrometheusConfig(url=url))
    plan_src = PrometheusSource(base)
    since, until = window(spec)
    t0, t1 = plan_src.grid(since, until, spec.interval_s)
    chunks = plan_src.plan(t0, t1, spec.interval_s, raw=False)
    queries = [q for chunk in chunks for q in chunk]
    print(f"  {len(queries)} range queries in {len(chunks)} chunks over {spec.days:g} d at {spec.interval_s} s "
          f"({plan_src.last_plan['gpu_series']} GPU series); {rounds} rounds, median shown", flush=True)
    for n in CONCURRENCY:
        cfg = base.with_(prometheus=PrometheusConfig(url=url, concurrency=n))
        contenders: dict[str, Callable[[], tuple[float, int]]] = {
            "c": lambda n=n: server_alone(url, queries, n),
            "b": lambda cfg=cfg: gpuinsight_rows(cfg, chunks, spec.interval_s, plan_src),
            "b'": lambda cfg=cfg: gpuinsight_collect(cfg, spec, workdir),
            "a": lambda n=n: client_library(url, queries, n),
        }
        times: dict[str, list[float]] = {k: [] for k in contenders}
        ours: dict[str, list[float]] = {k: [] for k in contenders}  # CPU of this process
        theirs: dict[str, list[float]] = {k: [] for k in contenders}  # CPU of the server
        sizes: dict[str, int] = {}
        for _ in range(rounds):
            for key, run in contenders.items():
                cpu, server_cpu = time.process_time(), cpu_seconds(server_pid)
                secs, size = run()
                times[key].append(secs)
                ours[key].append(time.process_time() - cpu)
                theirs[key].append(cpu_seconds(server_pid) - server_cpu)
                sizes[key] = size
        med = {k: statistics.median(v) for k, v in times.items()}
        stored, whole = sizes["b'"], med["b'"]
        print(f"  concurrency {n} (requests in flight):")
        labels = {"c": f"(c) server alone, {n} at a time, {sizes['c'] / 1e6:,.1f} MB of JSON",
                  "b": f"(b) gpuinsight -> rows ready to load ({sizes['b']:,} gpu_samples rows)",
                  "b'": f"(b') gpuinsight collect into DuckDB ({stored:,} rows stored)",
                  "a": f"(a) prometheus-api-client + MetricRangeDataFrame ({sizes['a']:,} points)"}
        print(f"    {'':<72} {'wall':>7}    {'rounds':<11} {'CPU: client':>11} {'server':>7}")
        for key in ("c", "b", "b'", "a"):
            spread = f"{min(times[key]):.2f}-{max(times[key]):.2f}"
            print(f"    {labels[key]:<72} {med[key]:7.2f} s  {spread:<11} {statistics.median(ours[key]):9.2f} s "
                  f"{statistics.median(theirs[key]):6.2f} s")
        print(f"    (b) vs (a): {med['a'] / med['b']:.1f}x faster (target >= 3x); (b) vs (c): "
              f"{med['b'] / med['c']:.2f}x the server's time (target <= 1.5x); (b') vs (c): "
              f"{whole / med['c']:.2f}x", flush=True)


def profile_steps(url: str, spec: FleetSpec, rounds: int) -> None:
    """Where the client's CPU goes: the first chunk's answers fetched once, then made into rows
    again and again in this thread, each step timed (CPU seconds of the process, polars' own
    threads included; the median of the rounds)."""
    from concurrent.futures import Future

    import gpuinsight.sources.prometheus as prometheus
    from gpuinsight.sources.prom.columnar import is_dcgm
    from gpuinsight.sources.series import TransformStats, gpu_inventory, with_hami_rows

    cfg = Config(cluster=spec.cluster, prometheus=PrometheusConfig(url=url))
    src = PrometheusSource(cfg)
    since, until = window(spec)
    t0, t1 = src.grid(since, until, spec.interval_s)
    chunk = src.plan(t0, t1, spec.interval_s, raw=False)[0]
    bodies = {id(q): src.client._get("/api/v1/query_range", [*params(q)[:4], *src.client.extra], q.expr)
              for q in chunk}
    spent: dict[str, list[float]] = {}

    def timed(name: str, fn: Callable[..., object]) -> Callable[..., object]:
        def run(*args: object, **kwargs: object) -> object:
            cpu = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent.setdefault(name, [0.0] * rounds)[r] += time.process_time() - cpu
        return run

    decode = timed("decoding the answers", lambda q: src.client.decode_matrix(bodies[id(q)], q.expr, q.keep))
    src.client.query_range = decode  # type: ignore[method-assign]
    steps = {"directory": "the node directory (placements)", "ksm_pods": "ksm_pods", "ksm_nodes": "ksm_nodes",
             "dcgm_rows": "DCGM answers -> label sets and rows", "check_ksm_values": "checking declarations"}
    saved = {name: getattr(prometheus, name) for name in steps if name != "directory"}
    for name, fn in saved.items():
        setattr(prometheus, name, timed(steps[name], fn))
    try:
        for r in range(rounds):
            src.client.label_sets.clear()
            src.stats, src.directory, src.facts = TransformStats(), prometheus.NodeDirectory(), {}
            src.directory.add_series = timed(steps["directory"], src.directory.add_series)  # type: ignore[method-assign]
            cpu = time.process_time()
            made = [(q, src._fetch(q)) for q in chunk]
            spent.setdefault("answers -> frames (decoding, then label frames, spots, series frames)",
                             [0.0] * rounds)[r] += time.process_time() - cpu
            done = []
            for q, m in made:
                f: Future[object] = Future()
                f.set_result(m)
                done.append((q, f))
            cpu = time.process_time()
            rest, pods, nodes = src._ksm([(q, f) for q, f in done if not is_dcgm(q)])
            spent.setdefault("kube-state-metrics: groups, checks, directory, pods, nodes", [0.0] * rounds)[r] += \
                time.process_time() - cpu
            cpu = time.process_time()
            batch = src._batch([(q, *m) for q, m in made], spec.interval_s, since, until)  # type: ignore[misc]
            spent.setdefault("DCGM: the refiner's check, label sets and rows", [0.0] * rounds)[r] += \
                time.process_time() - cpu
            batch.series = rest
            cpu = time.process_time()
            samples = with_hami_rows(batch.samples, batch, cfg.cluster, src.directory)  # type: ignore[arg-type]
            gpu_inventory(samples)
            spent.setdefault("(load) HAMi rows, GPU inventory", [0.0] * rounds)[r] += time.process_time() - cpu
    finally:
        for name, fn in saved.items():
            setattr(prometheus, name, fn)
    med = {name: statistics.median(values) for name, values in spent.items()}
    med["answers -> frames (decoding, then label frames, spots, series frames)"] -= med["decoding the answers"]
    parts = {"decoding the answers": [],
             "answers -> frames (decoding, then label frames, spots, series frames)": [],
             "kube-state-metrics: groups, checks, directory, pods, nodes": [steps[k] for k in ("check_ksm_values", "directory",
                                                                                       "ksm_pods", "ksm_nodes")],
             "DCGM: the refiner's check, label sets and rows": [steps["dcgm_rows"]]}
    print(f"  client CPU per step, first chunk ({len(chunk)} answers, {sum(map(len, bodies.values())) / 1e6:.1f} MB), "
          f"median of {rounds}:")
    for name, inner in parts.items():
        shown = "label frames, spots, series frames" if name.startswith("answers") else name
        print(f"    {shown:<60} {med[name]:6.3f} s")
        for sub in inner:
            print(f"      {sub:<58} {med[sub]:6.3f} s")
    print(f"    {'in all':<60} {sum(med[n] for n in parts):6.3f} s")
    print(f"    {'then, loading: HAMi rows, GPU inventory':<60} {med['(load) HAMi rows, GPU inventory']:6.3f} s",
          flush=True)


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


def full_collect(url: str, spec: FleetSpec, workdir: Path, code: Path) -> None:
    """A whole collection in a fresh process (``code``: the source tree to run), peak RSS per row."""
    since, until = window(spec)
    db = workdir / f"collect-{spec.gpu_count}.duckdb"
    db.unlink(missing_ok=True)
    args = [str(db), url, since.isoformat(), until.isoformat(), str(spec.interval_s), spec.cluster]
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run([sys.executable, "-c", _CHILD, *args], cwd=code, env=env, capture_output=True, text=True,
                         check=False)
    db.unlink(missing_ok=True)
    if out.returncode:
        print(out.stderr[-3000:])
        raise SystemExit(1)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    per_row = res["maxrss_mib"] * 2**20 / max(res["rows"], 1)
    print(f"  [{code}] collect {spec.gpu_count} GPUs x {spec.days:g} d at {spec.interval_s} s: {res['seconds']:.1f} s "
          f"wall, {res['rows']:,} gpu_samples rows, peak RSS {res['maxrss_mib']:,.0f} MiB = {per_row:,.0f} bytes "
          f"per stored row (target <= 300)\n    {res['summary']}; {'; '.join(res['notes'])}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=200)
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mem-gpus", type=int, default=1000, help="fleet for the memory figure (0 = skip)")
    ap.add_argument("--mem-days", type=float, default=7.0)
    ap.add_argument("--workdir", type=Path, default=None, help="keep fleets here between runs")
    ap.add_argument("--profile", type=int, default=0, help="rounds of the per-step CPU profile (0 = skip)")
    ap.add_argument("--code", type=Path, action="append", default=[],
                    help="also measure memory with this source tree (e.g. an older commit's export)")
    a = ap.parse_args()
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="gi-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"{platform.node()}: {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}, "
          f"load average {load[0]:.1f} at start; workdir {workdir}", flush=True)
    if a.rounds:
        print("speed: same server, same window, same range queries, same concurrency:", flush=True)
        fleet, spec = make_fleet(workdir, a.gpus, a.days)
        with prometheus_process(fleet / "tsdb") as (url, proc):
            compare(url, proc.pid, spec, a.rounds, workdir)
    if a.profile:
        print("profile: the client's CPU by step:", flush=True)
        fleet, spec = make_fleet(workdir, a.gpus, a.days)
        with prometheus_process(fleet / "tsdb") as (url, _):
            profile_steps(url, spec, a.profile)
    if a.mem_gpus:
        print("memory: whole collection in a fresh process (concurrent fetch + DuckDB load):", flush=True)
        fleet, spec = make_fleet(workdir, a.mem_gpus, a.mem_days)
        with prometheus_server(fleet / "tsdb") as url:
            for code in [ROOT, *a.code]:
                full_collect(url, spec, workdir, code.resolve())
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)


if __name__ == "__main__":
    main()

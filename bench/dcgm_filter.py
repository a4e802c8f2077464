"""Benchmark: what the server-side filter of DCGM readings would cost on every step.

One server (backfilled from the sample fleet generator), one window at a 300 s step; for every
DCGM field the collector reads, the server time of the plain reduction it issues
(``avg_over_time(M[300s])``) against the filtered one it issues only for steps that show a
reading that is not a measurement (``avg_over_time((last_over_time(M[r-1ms]) <= hi >= lo)[300s:r])``)
and the count of dropped readings, each over the whole window, sequentially, best of three.
The figures are why the collector spots first and filters only those steps (prom/refine.py).

    python bench/dcgm_filter.py [--gpus 100] [--days 1] [--scrape 30] [--workdir DIR]

Needs promtool and prometheus on PATH. Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuinsight.sources.dcgm import FIELDS  # noqa: E402
from gpuinsight.sources.prom import promql  # noqa: E402
from tests.prom_server import backfill, prometheus_server  # noqa: E402
from tests.samplegen import FleetSpec, write_sample  # noqa: E402

STEP = 300


def timed(url: str, expr: str, start: float, end: float, step: int) -> tuple[float, int]:
    query = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    best, size = float("inf"), 0
    for _ in range(3):
        t = time.perf_counter()
        with urllib.request.urlopen(f"{url}/api/v1/query_range?{query}", timeout=600) as r:
            size = len(r.read())
        best = min(best, time.perf_counter() - t)
    return best, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=100)
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--scrape", type=int, default=30, help="scrape interval of the generated fleet (s)")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gi-bench-"))
    spec = FleetSpec.for_gpus(args.gpus, days=args.days, interval_s=args.scrape)
    out = workdir / f"fleet-{spec.gpu_count}gpu-{args.days:g}d-{args.scrape}s"
    if not (out / "tsdb").is_dir():
        write_sample(out, spec, gzip=False)
        backfill(out / "metrics.om", out / "tsdb", timeout_s=3600)
    start = spec.start.timestamp() + STEP
    end = spec.start.timestamp() + args.days * 86400
    res = spec.interval_s
    print(f"{spec.gpu_count} GPUs, {args.days:g} d, scrape {res} s, step {STEP} s; best of 3, sequential")
    with prometheus_server(out / "tsdb") as url:
        totals = [0.0, 0.0, 0.0]
        for f in FIELDS:
            plain = f"avg_over_time({f.name}[{STEP}s])"
            filtered = promql.dcgm_filtered_exprs(f.name, STEP, [], want_max=False, lo=f.lo, hi=f.hi,
                                                  resolution_s=res)[0][0]
            count = promql.dcgm_dropped_expr(f.name, STEP, [], lo=f.lo, hi=f.hi, resolution_s=res)[0]
            (tp, sp), (tf, sf) = timed(url, plain, start, end, STEP), timed(url, filtered, start, end, STEP)
            tc, _ = timed(url, count, start, end, STEP)
            totals = [totals[0] + tp, totals[1] + tf, totals[2] + tc]
            print(f"  {f.name:<32} plain {tp * 1000:7.0f} ms ({sp / 1e6:5.1f} MB)   filtered {tf * 1000:7.0f} ms "
                  f"({sf / 1e6:5.1f} MB)   dropped-count {tc * 1000:6.0f} ms")
        print(f"  all fields: plain {totals[0]:.2f} s, filtered {totals[1]:.2f} s (x{totals[1] / totals[0]:.2f}), "
              f"+ counts {totals[2]:.2f} s: filter + count = x{(totals[1] + totals[2]) / totals[0]:.2f} of plain")


if __name__ == "__main__":
    main()

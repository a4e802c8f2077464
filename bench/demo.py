"""Benchmark: `gpuinsight demo` on the embedded sample fleet, peak memory and wall time.

Each round runs the demo in a fresh process for this source tree and for every ``--code DIR``
(another tree, e.g. an older commit's export, for a baseline), one after the other, so they
share whatever else loads the machine. Measured with ``/usr/bin/time -v`` (peak RSS, wall, user
and system CPU) when it exists, else with the child's ``ru_maxrss``; the stage marks the demo
prints on stderr give where the time goes.

    python bench/demo.py [--rounds 2] [--code DIR ...] [--workdir DIR]

Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIME = "/usr/bin/time"
_FIELDS = {"peak_mib": r"Maximum resident set size \(kbytes\): (\d+)", "user_s": r"User time \(seconds\): ([\d.]+)",
           "sys_s": r"System time \(seconds\): ([\d.]+)"}


def run_demo(code: Path, out: Path) -> dict[str, float]:
    """One demo in a fresh process running ``code``; its figures."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(code)}
    cmd = [sys.executable, "-m", "gpuinsight.cli", "demo", "--out", str(out)]
    timed = Path(TIME).exists()
    started = time.perf_counter()
    res = subprocess.run([TIME, "-v", *cmd] if timed else cmd, cwd=code, env=env, capture_output=True, text=True,
                         check=False)
    wall = time.perf_counter() - started
    if res.returncode:
        print(res.stdout[-2000:], res.stderr[-3000:])
        raise SystemExit(f"demo with {code} failed (exit {res.returncode})")
    if not timed:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {"wall_s": wall, "peak_mib": usage.ru_maxrss / 1024, "user_s": usage.ru_utime, "sys_s": usage.ru_stime}
    got = {k: float(m.group(1)) for k, rx in _FIELDS.items() if (m := re.search(rx, res.stderr))}
    got["peak_mib"] /= 1024
    return {"wall_s": wall, **got}


def _threads() -> str:
    """The thread pools a demo gets here (the children inherit this environment)."""
    import duckdb
    import polars as pl

    duck = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()
    return f"polars {pl.thread_pool_size()} threads, DuckDB {duck[0] if duck else '?'} threads"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--code", type=Path, action="append", default=[], help="also run this source tree")
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="gi-demo-bench-"))
    trees = [ROOT, *(c.resolve() for c in a.code)]
    load = os.getloadavg()
    print(f"{platform.node()}: {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}, "
          f"{_threads()}, load average {load[0]:.1f} at start; "
          f"{'/usr/bin/time -v' if Path(TIME).exists() else 'ru_maxrss'}", flush=True)
    runs: dict[Path, list[dict[str, float]]] = {t: [] for t in trees}
    for r in range(a.rounds):
        for i, tree in enumerate(trees):
            got = run_demo(tree, workdir / f"demo-{i}")
            runs[tree].append(got)
            print(f"  round {r + 1} [{tree}]: peak RSS {got['peak_mib']:,.0f} MiB, wall {got['wall_s']:.1f} s, "
                  f"CPU {got['user_s'] + got['sys_s']:.1f} s (load average {os.getloadavg()[0]:.1f})", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)
    for tree, got in runs.items():
        med = {k: statistics.median(g[k] for g in got) for k in got[0]}
        print(f"demo [{tree}]: peak RSS {med['peak_mib']:,.0f} MiB (target <= 500), wall {med['wall_s']:.1f} s, "
              f"CPU {med['user_s'] + med['sys_s']:.1f} s (median of {len(got)})", flush=True)


if __name__ == "__main__":
    main()

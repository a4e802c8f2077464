"""`recommend` at fleet scale: time the rules engine (frames from the SQL models + rules +
actions) on a synthetic fleet of about 10,000 GPUs.

    python bench/recommend.py [--gpus 10000] [--days 7] [--interval 300] [--db FILE]

With ``--db`` the warehouse is kept in FILE (built there if missing, reused if present), so
repeated runs skip the build. "cold" is the first recommend of a fresh process, "warm" a
second one right after it.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--interval", type=int, default=300)
    ap.add_argument("--db", type=Path, default=None, help="keep (or reuse) the warehouse here")
    a = ap.parse_args()

    import gpuinsight as gi
    from bench.fleet_warehouse import build_warehouse
    from gpuinsight.rules.engine import evaluate_rules, frames_for, needed_frames

    with tempfile.TemporaryDirectory(prefix="gi-bench-") as tmp:
        db = a.db or Path(tmp) / "bench.duckdb"
        if not db.exists():
            info = build_warehouse(db, a.gpus, a.days, a.interval)
            print(f"fleet: {info['gpus']:.0f} GPUs, {a.days:g} days at {a.interval}s, {info['rows']:,.0f} sample rows "
                  f"(load {info['load_s']:.1f}s, hourly rollup {info['rollup_s']:.1f}s, model refresh "
                  f"{info['refresh_s']:.1f}s)")
        with gi.open(db) as g:  # a warehouse built by another version rebuilds its models here
            gpus = g.sql("SELECT sum(gpu_count) FROM nodes").item()
            print(f"warehouse {db.name}: {gpus:,.0f} GPUs")
            for label in ("cold", "warm"):  # cold: the first query of a fresh process
                t0, c0 = time.perf_counter(), time.process_time()
                plan = g.recommend()
                t1, c1 = time.perf_counter(), time.process_time()
                frames = frames_for(g, needed_frames())
                t2 = time.perf_counter()
                recs = evaluate_rules(frames)
                t3 = time.perf_counter()
                # CPU time counts DuckDB's worker threads too: on a busy machine it is the steadier figure
                print(f"recommend {label} (end to end, incl. actions and storing the plan): {t1 - t0:.2f} s wall, "
                      f"{c1 - c0:.2f} s CPU  [measured apart: frames {t2 - t1:.2f} s, rules {t3 - t2:.2f} s]  target < 10 s: "
                      f"{'met' if t1 - t0 < 10 else 'NOT met'}; load average {os.getloadavg()[0]:.1f} on "
                      f"{os.cpu_count()} CPUs")
        counts = Counter(r.rule for r in plan.recommendations)
        print(f"{len(recs)} findings ({dict(sorted(counts.items()))}), "
              f"${plan.total_monthly_savings_usd:,.0f}/month ({plan.savings_by_basis}); peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")


if __name__ == "__main__":
    main()

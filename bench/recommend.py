"""`recommend` at fleet scale: time the rules engine (frames from the SQL models + rules +
actions) on a synthetic fleet of about 10,000 GPUs.

    python bench/recommend.py [--gpus 10000] [--days 7] [--interval 300]
"""

from __future__ import annotations

import argparse
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
    a = ap.parse_args()

    import gpuinsight as gi
    from bench.fleet_warehouse import build_warehouse
    from gpuinsight.rules.engine import evaluate_rules, frames_for, needed_frames

    with tempfile.TemporaryDirectory(prefix="gi-bench-") as tmp:
        db = Path(tmp) / "bench.duckdb"
        info = build_warehouse(db, a.gpus, a.days, a.interval)
        print(f"fleet: {info['gpus']:.0f} GPUs, {a.days:g} days at {a.interval}s, {info['rows']:,.0f} sample rows "
              f"(load {info['load_s']:.1f}s, hourly rollup {info['rollup_s']:.1f}s, model refresh "
              f"{info['refresh_s']:.1f}s)")
        with gi.open(db) as g:
            t0 = time.perf_counter()
            frames = frames_for(g, needed_frames())
            t1 = time.perf_counter()
            recs = evaluate_rules(frames)
            t2 = time.perf_counter()
            plan = g.recommend()
            t3 = time.perf_counter()
        counts = Counter(r.rule for r in plan.recommendations)
        print(f"recommend (end to end, incl. actions and storing the plan): {t3 - t2:.2f} s  "
              f"[frames {t1 - t0:.2f} s, rules {t2 - t1:.2f} s]  target < 10 s: "
              f"{'met' if t3 - t2 < 10 else 'NOT met'}")
        print(f"{len(recs)} findings ({dict(sorted(counts.items()))}), "
              f"${plan.total_monthly_savings_usd:,.0f}/month; peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")


if __name__ == "__main__":
    main()

"""python -m tests.samplegen --out DIR [--gpus N] [--days D] [--interval S] [--seed N] [--no-gzip]"""

from __future__ import annotations

import argparse
import sys
import time

from . import write_sample
from .spec import GPUS_PER_CELL, FleetSpec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.samplegen",
                                 description="Write the deterministic sample GPU fleet (metrics, kubectl dumps, "
                                             "ground truth).")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--gpus", type=int, default=None, help=f"about this many GPUs ({GPUS_PER_CELL} per scenario cell)")
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--interval", type=int, default=300, help="sample interval in seconds")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-gzip", action="store_true", help="write metrics.om instead of metrics.om.gz")
    a = ap.parse_args(argv)
    try:
        if a.gpus is not None:
            spec = FleetSpec.for_gpus(a.gpus, days=a.days, interval_s=a.interval, seed=a.seed)
        else:
            spec = FleetSpec(days=a.days, interval_s=a.interval, seed=a.seed)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    out = write_sample(a.out, spec, gzip=not a.no_gzip)
    print(f"wrote {out} ({spec.gpu_count} GPUs in {spec.cell_count} cell(s), {spec.steps} samples "
          f"every {spec.interval_s}s) in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

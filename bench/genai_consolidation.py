"""The consolidation planner on the real Alibaba GenAI serving trace (GenTD26, 143 pods, ~23 h):
MIG / sharing findings, memory-safety violations (must be 0), GPUs freed against a relaxed
first-fit-decreasing yardstick, and what sizing on the p99 (the old rule) would have done.

    python bench/genai_consolidation.py [--gpus-per-node 1|8] [--step 300] [--not-production]

The trace gives no GPU model, nodes or owners: each pod is taken as a single-replica
production Deployment on one H100-80GB (see tests/genai_trace.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus-per-node", type=int, default=1, choices=(1, 8))
    ap.add_argument("--step", type=int, default=300)
    ap.add_argument("--not-production", action="store_true", help="label the pods non-production")
    a = ap.parse_args()

    import gpuinsight as gi
    from gpuinsight.rules.common import compute_peak
    from gpuinsight.rules.engine import evaluate_plan, frames_for, needed_frames
    from tests.genai_trace import MEMORY_MIB, ffd_gpus, load_trace, memory_violations

    with tempfile.TemporaryDirectory(prefix="gi-genai-") as tmp, gi.open(Path(tmp) / "genai.duckdb") as g:
        t0 = time.perf_counter()
        info = load_trace(g.wh, gpus_per_node=a.gpus_per_node, step_s=a.step, production=not a.not_production)
        g.refresh()
        frames = frames_for(g, needed_frames())
        t1 = time.perf_counter()
        recs, ctx = evaluate_plan(frames)
        t2 = time.perf_counter()
    profile = frames["workload_gpu_profile"]
    print(f"trace: {info['pods']} pods on {info['nodes']} nodes ({a.gpus_per_node} H100-80GB each), "
          f"{info['samples']:,} samples at {a.step} s (max per step kept); load+models {t1 - t0:.1f} s, "
          f"rules {t2 - t1:.2f} s")
    counts = Counter(r.rule for r in recs)
    print(f"findings: {dict(sorted(counts.items()))}; ${sum(r.monthly_savings_usd for r in recs):,.0f}/month")
    sharing = [r for r in recs if r.rule in ("mig", "mps", "timeslice")]
    for kind in ("mig", "mps", "timeslice"):
        mine = [r for r in sharing if r.rule == kind]
        if mine:
            shapes = Counter(r.proposed.get("mig_profile") or f"{r.proposed['replicas']} per GPU" for r in mine)
            print(f"  {kind}: {len(mine)} workloads, {dict(shapes)}, GPUs freed "
                  f"{sum(r.proposed['gpus_freed'] for r in mine):.2f}")
    bad = memory_violations(sharing, profile)
    print(f"memory-safety violations (slice or share below 1.05 x observed max framebuffer): {len(bad)}")
    for line in bad[:10]:
        print("  ", line)
    rows = [r for r in profile.to_dicts() if r.get("samples") and r["hours_held"] >= 12]
    cands = [r for r in rows if compute_peak(r) <= 0.5]
    freed = sum(r.proposed["gpus_freed"] for r in sharing)
    ffd = ffd_gpus([(r["fb_max_mib"] * 1.10, compute_peak(r)) for r in cands], MEMORY_MIB)
    print(f"candidates (>= 12 h, short-window p95 <= 50 %): {len(cands)} of {len(rows)} judged workloads; "
          f"planner frees {freed:.2f} GPUs; first-fit-decreasing on the same peaks with no isolation and no "
          f"MIG granularity needs {ffd} GPUs (frees {len(cands) - ffd})")
    old_unsafe = [r for r in rows if r["fb_p99_mib"] * 1.2 <= 40 * 998 < r["fb_max_mib"]]
    peaks = ", ".join(f"{r['fb_max_mib'] / 1024:.1f}" for r in old_unsafe[:8])
    print(f"sizing on p99 + 20 % (the old rule) fits {len(old_unsafe)} of these workloads into a 40 GB slice "
          f"although they peaked above it ({peaks} GiB ...)")
    bursty = [r for r in rows if max(r["gr_p95"] or 0, r["sm_p95"] or 0) <= 0.5 < compute_peak(r)]
    print(f"workloads whose p95 of {a.step} s means is <= 50 % but whose short-window p95 is above: {len(bursty)}")
    print(f"savings ledger: {ctx.ledger.spend_monthly_usd():,.0f} $/month spend; claims checked")


if __name__ == "__main__":
    main()

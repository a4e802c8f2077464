"""The consolidation planner on the real Alibaba GenAI serving trace (GenTD26, 143 pods, ~23 h), on
both node shapes: one H100 per node, and eight per node with busy and small pods side by side.

Per shape: MIG / sharing findings, memory-safety violations (must be 0), GPUs freed against two
first-fit-decreasing yardsticks over the same demands (the workloads the planner may share:
running at the end, measured 12 h or more, short-window p95 at most half a GPU, not idle):
one with the planner's sizing and isolation rules but no node structure (each GPU its own MIG
layout, MPS or time-slicing: ``isolation_ffd_gpus``), one relaxed (memory and compute summed,
no isolation, no MIG granularity: ``ffd_gpus``); and what sizing on the p99 (the old rule)
would have done.

    python bench/genai_consolidation.py [--gpus-per-node 1 8] [--step 300] [--not-production]

The trace gives no GPU model, nodes or owners: each pod is taken as a single-replica
production Deployment on one H100-80GB (see tests/genai_trace.py). Single-threaded Python
(DuckDB builds the models with its default threads).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(gpus_per_node: int, step: int, production: bool) -> dict[str, Any]:
    import gpuinsight as gi
    from gpuinsight.rules.engine import evaluate_plan
    from tests.genai_trace import (
        MEMORY_MIB,
        compute_peak,
        ffd_gpus,
        isolation_ffd_gpus,
        load_trace,
        memory_violations,
    )

    with tempfile.TemporaryDirectory(prefix="gi-genai-") as tmp, gi.open(Path(tmp) / "genai.duckdb") as g:
        t0 = time.perf_counter()
        info = load_trace(g.wh, gpus_per_node=gpus_per_node, step_s=step, production=production)
        g.refresh()
        frames = g.rule_frames()
        t1 = time.perf_counter()
        recs, ctx = evaluate_plan(frames)
        t2 = time.perf_counter()
    profile = frames["workload_gpu_profile"]
    print(f"\n== {gpus_per_node} H100-80GB per node: {info['pods']} pods on {info['nodes']} nodes, "
          f"{info['samples']:,} samples at {step} s (max per step kept); load+models {t1 - t0:.1f} s, "
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
    hosts = Counter(r.proposed["node"] for r in sharing)
    evicted = {(m["namespace"], p) for r in sharing for m in r.proposed.get("evict") or [] for p in m["pods"]}
    print(f"  shared GPUs on {len(hosts)} node(s); {len(evicted)} whole-GPU pod(s) moved off them first")
    bad = memory_violations(sharing, profile)
    print(f"memory-safety violations (slice or share below 1.05 x observed max framebuffer): {len(bad)}")
    for line in bad[:10]:
        print("  ", line)
    idle = {r.workload for r in recs if r.rule == "idle"}
    running = {p["workload"] for p in frames["placement_current"].to_dicts()}
    rows = [r for r in profile.to_dicts() if r.get("samples") and r["hours_held"] >= 12]
    demands = [r for r in rows if compute_peak(r) <= 0.5 and r["workload"] in running and r["workload"] not in idle
               and r.get("fb_max_mib") is not None]
    freed = sum(r.proposed["gpus_freed"] for r in sharing)
    iso = isolation_ffd_gpus([(r["fb_max_mib"] * 1.10, compute_peak(r), production) for r in demands])
    relaxed = ffd_gpus([(r["fb_max_mib"] * 1.10, compute_peak(r)) for r in demands], MEMORY_MIB)
    iso_free, relaxed_free = len(demands) - iso, len(demands) - relaxed
    print(f"demands (running, >= 12 h, short-window p95 <= 50 %, not idle): {len(demands)}; planner frees "
          f"{freed:.2f} GPUs")
    print(f"  first-fit decreasing with the same sizing and isolation (MIG layouts, MPS 1/R, time-slicing "
          f"non-production; no node structure): {iso} GPUs, frees {iso_free} -> planner at "
          f"{freed / iso_free:.0%}" if iso_free else "  isolation yardstick frees nothing")
    print(f"  first-fit decreasing relaxed (memory and compute summed, no isolation, no MIG granularity): "
          f"{relaxed} GPUs, frees {relaxed_free} -> planner at {freed / max(relaxed_free, 1):.0%}")
    old_unsafe = [r for r in rows if r["fb_p99_mib"] * 1.2 <= 40 * 998 < r["fb_max_mib"]]
    peaks = ", ".join(f"{r['fb_max_mib'] / 1024:.1f}" for r in old_unsafe[:8])
    print(f"sizing on p99 + 20 % (the old rule) fits {len(old_unsafe)} workloads into a 40 GB slice although they "
          f"peaked above it ({peaks} GiB ...)")
    bursty = [r for r in rows if max(r["gr_p95"] or 0, r["sm_p95"] or 0) <= 0.5 < compute_peak(r)]
    print(f"workloads whose p95 of {step} s means is <= 50 % but whose short-window p95 is above: {len(bursty)}")
    print(f"savings ledger: {ctx.ledger.spend_monthly_usd():,.0f} $/month spend; claims checked")
    return {"freed": freed, "iso_free": iso_free, "violations": len(bad)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus-per-node", type=int, nargs="+", default=[1, 8], choices=(1, 8))
    ap.add_argument("--step", type=int, default=300)
    ap.add_argument("--not-production", action="store_true", help="label the pods non-production")
    a = ap.parse_args()
    results = {n: run(n, a.step, not a.not_production) for n in a.gpus_per_node}
    if len(results) > 1:
        print("\n" + "; ".join(f"{n} GPU(s) per node: {r['freed']:.2f} GPUs freed ({r['freed'] / r['iso_free']:.0%} "
                               f"of the isolation yardstick)" for n, r in results.items() if r["iso_free"]))


if __name__ == "__main__":
    main()

"""Compare our simulator with the FGD paper's published results (Weng et al., USENIX ATC'23).

Runs the openb default trace (tune 1.3) for each policy over a few seeds and prints, per policy, the
median over seeds of: unallocated GPU % at 100% arrived load, fragmented GPU % of capacity at 50%
load, next to the medians of the published runs (10 seeds), plus our runtime per run.

    python bench/fgd_compare.py --traces DIR    # 3 seeds, all policies, a few minutes on one core
    python bench/fgd_compare.py --traces DIR --seeds 10 --policies fgd,best-fit

This prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpuinsight.simulate import list_policies, load_nodes, load_pods, simulate  # noqa: E402
from gpuinsight.simulate.cluster import Cluster  # noqa: E402

PUBLISHED_NAMES = {
    "random": "01-Random",
    "dot-product": "02-DotProd",
    "gpu-clustering": "03-GpuClustering",
    "gpu-packing": "04-GpuPacking",
    "best-fit": "05-BestFit",
    "fgd": "06-FGD",
}
DEFAULT_POLICIES = ("random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit", "fgd",
                    "gpuinsight", "first-fit")


def published(results_dir: Path, kind: str, workload: str, column: str,
              seeds: set[int] | None = None) -> dict[str, float]:
    """Median over seeds of one column of analysis_<kind>_discrete.csv, by our policy name."""
    values: dict[str, list[float]] = {}
    with (results_dir / f"analysis_{kind}_discrete.csv").open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row["workload"] != workload or (seeds is not None and int(row["seed"]) not in seeds):
                continue
            if row.get(column):
                values.setdefault(row["sc_policy"], []).append(float(row[column]))
    return {ours: statistics.median(values[pub]) for ours, pub in PUBLISHED_NAMES.items() if pub in values}


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _unalloc(allocated: dict[str, float], policy: str) -> float | None:
    return 100.0 - allocated[policy] if policy in allocated else None


def fmt(x: float | None, width: int = 7) -> str:
    return f"{x:{width}.2f}" if x is not None else f"{'-':>{width}}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, required=True,
                    help="directory holding alibaba-gpu-v2023-openb/ and fgd-atc23-simulator-results/ (the public "
                         "trace and the FGD simulator's cached results; see sample_data/openb/README.md)")
    ap.add_argument("--workload", default="openb_pod_list_default")
    ap.add_argument("--nodes", default="openb_node_list_gpu_node.csv")
    ap.add_argument("--seeds", type=int, default=3, help="number of seeds, starting at --first-seed")
    ap.add_argument("--first-seed", type=int, default=42)
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    ap.add_argument("--tune", type=float, default=1.3)
    args = ap.parse_args(argv)

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = sorted(set(policies) - set(list_policies()))
    if unknown:
        ap.error(f"unknown policies {unknown}; valid: {', '.join(list_policies())}")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    trace_dir = args.traces / "alibaba-gpu-v2023-openb"
    results_dir = args.traces / "fgd-atc23-simulator-results"
    pods = load_pods(trace_dir / f"{args.workload}.csv")
    nodes = load_nodes(trace_dir / args.nodes)

    pub_allo = published(results_dir, "allo", args.workload, "100")
    pub_allo_same = published(results_dir, "allo", args.workload, "100", set(seeds))
    pub_frag = published(results_dir, "frag", args.workload, "50")
    pub_ratio = published(results_dir, "frag_ratio", args.workload, "50")

    print(f"workload={args.workload} nodes={args.nodes} tune={args.tune} seeds={seeds}")
    print("unalloc@100 = unallocated GPU % at 100% arrived GPU request; frag@50 = fragmented GPU % of "
          "capacity at 50%; ratio@50 = fragmented % of idle at 50%. Ours: median over seeds; "
          "published: median over its 10 seeds (and over the same seeds).")
    header = (f"{'policy':<15} {'unalloc@100':>11} {'published':>9} {'pub same':>8} {'frag@50':>8} "
              f"{'published':>9} {'ratio@50':>8} {'published':>9} {'failed':>7} {'s/run':>6}")
    print(header)
    print("-" * len(header))
    for policy in policies:
        unalloc, frag50, ratio50, failed, secs = [], [], [], [], []
        for seed in seeds:
            t0 = time.perf_counter()
            res = simulate(pods, Cluster(nodes), policy, seed=seed, tune=args.tune, report_points=(50, 100))
            secs.append(time.perf_counter() - t0)
            p100, p50 = res.point(100), res.point(50)
            if p100 is not None:
                unalloc.append(p100.unallocated_pct)
            if p50 is not None:
                frag50.append(p50.frag_pct_of_total)
                if p50.frag_pct_of_idle is not None:
                    ratio50.append(p50.frag_pct_of_idle)
            failed.append(res.failed_pods)

        print(f"{policy:<15} {fmt(_median(unalloc), 11)} {fmt(_unalloc(pub_allo, policy), 9)} "
              f"{fmt(_unalloc(pub_allo_same, policy), 8)} {fmt(_median(frag50), 8)} {fmt(pub_frag.get(policy), 9)} "
              f"{fmt(_median(ratio50), 8)} {fmt(pub_ratio.get(policy), 9)} {statistics.median(failed):>7.0f} "
              f"{statistics.mean(secs):>6.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

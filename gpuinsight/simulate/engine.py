"""What-if scheduling simulation: replay a sampled pod stream on a node list under one policy.

Experiment (as in the FGD paper's open-source simulator): the trace's pods are shuffled with the seed
and then "tuned": extra pods are drawn with replacement from the trace until the arrived GPU request
would exceed ``tune`` x cluster GPU capacity (or random pods are dropped if the trace is already
larger). Pods arrive one by one and never leave; a pod no node can take fails and is skipped.
After every arrival the allocated GPU milli and the cluster fragmentation are recorded, and each
report point ``x`` (% arrived GPU request) averages the records whose arrived load rounds to ``x``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpuinsight.simulate.cluster import Cluster, Pod
from gpuinsight.simulate.fragmentation import FragModel, FragTracker, typical_pods
from gpuinsight.simulate.policies import POLICIES, SimContext, make_policy
from gpuinsight.simulate.trace import MILLI, PodTrace, load_nodes, load_pods

DEFAULT_REPORT_POINTS: tuple[int, ...] = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130)


@dataclass(frozen=True)
class LoadPoint:
    """Cluster state when the arrived GPU request is ``arrived_pct`` % of GPU capacity."""

    arrived_pct: int
    allocation_pct: float  # allocated GPU milli / capacity
    unallocated_pct: float
    frag_pct_of_total: float  # fragmented GPU milli / capacity
    frag_pct_of_idle: float | None  # fragmented / idle GPU milli (None when nothing is idle)


@dataclass(frozen=True)
class SimulationResult:
    policy: str
    seed: int
    tune: float
    pods_csv: str
    nodes_csv: str
    total_nodes: int
    total_gpus: int
    typical_pod_types: int
    arrived_pods: int
    placed_pods: int
    failed_pods: int
    failed_gpu_milli: int
    final_arrived_pct: float
    final_allocation_pct: float
    runtime_s: float
    points: tuple[LoadPoint, ...]

    def point(self, arrived_pct: int) -> LoadPoint | None:
        return next((p for p in self.points if p.arrived_pct == arrived_pct), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (plain ints, floats, strings, lists)."""
        return asdict(self) | {"points": [asdict(p) for p in self.points]}

    def format_table(self) -> str:
        return format_table(self.to_dict())


def format_table(result: dict[str, Any] | SimulationResult) -> str:
    """Plain-text table of a result (or of its ``to_dict()``): one header line, one row per point."""
    data = result.to_dict() if isinstance(result, SimulationResult) else result
    head = (f"policy={data['policy']} seed={data['seed']} nodes={data['total_nodes']} "
            f"gpus={data['total_gpus']} placed={data['placed_pods']} failed={data['failed_pods']} "
            f"runtime={data['runtime_s']:.1f}s")
    rows = [f"{'arrived%':>8} {'alloc%':>7} {'unalloc%':>8} {'frag/total%':>11} {'frag/idle%':>10}"]
    for p in data["points"]:
        ratio = "-" if p["frag_pct_of_idle"] is None else f"{p['frag_pct_of_idle']:.2f}"
        rows.append(f"{p['arrived_pct']:>8} {p['allocation_pct']:>7.2f} {p['unallocated_pct']:>8.2f} "
                    f"{p['frag_pct_of_total']:>11.2f} {ratio:>10}")
    return "\n".join([head, *rows])


def arrival_rows(pods: PodTrace, capacity_milli: int, tune: float, rng: np.random.Generator) -> np.ndarray:
    """Trace rows in arrival order: shuffled trace, then tuned up (clones) or down to ``tune`` x capacity."""
    order = rng.permutation(len(pods))
    if tune <= 0:
        return order
    req = pods.total_gpu_milli
    total = int(req.sum())
    target = tune * capacity_milli
    if total > target:  # drop uniformly random pods until the request fits the target
        keep = np.ones(len(order), dtype=bool)
        for pos in rng.permutation(len(order)):
            if total <= target:
                break
            keep[pos] = False
            total -= int(req[order[pos]])
        return order[keep]
    clones: list[int] = []
    while True:
        row = int(rng.integers(len(pods)))
        # the reference stops on the first draw whose *per-GPU* request would overshoot the target
        if total + int(pods.gpu_milli[row]) > target:
            break
        total += int(req[row])
        clones.append(row)
    return np.concatenate([order, np.asarray(clones, dtype=np.int64)])


def _discretize(points: Sequence[int], total_gpus: int, arrived: np.ndarray, used: np.ndarray,
                frag: np.ndarray, idle: np.ndarray) -> tuple[LoadPoint, ...]:
    arrived_pct = np.round(arrived / total_gpus / 10)  # half-to-even, like the reference analysis
    out: list[LoadPoint] = []
    for x in points:
        sel = arrived_pct == x
        if not sel.any():
            sel = (arrived_pct >= x - 1) & (arrived_pct <= x + 1)
            if not sel.any():
                continue
        alloc = float(np.mean(used[sel])) / total_gpus / 10
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(idle[sel] > 0, 100.0 * frag[sel] / idle[sel], np.nan)
        out.append(LoadPoint(
            arrived_pct=int(x),
            allocation_pct=round(alloc, 3),
            unallocated_pct=round(100.0 - alloc, 3),
            frag_pct_of_total=round(float(np.mean(frag[sel])) / total_gpus / 10, 3),
            frag_pct_of_idle=None if np.isnan(ratio).all() else round(float(np.nanmean(ratio)), 3),
        ))
    return tuple(out)


def simulate(pods: PodTrace, nodes_cluster: Cluster, policy: str, *, seed: int = 42, tune: float = 1.3,
             report_points: Sequence[int] = DEFAULT_REPORT_POINTS, nodes_csv: str = "") -> SimulationResult:
    """Run one simulation on already-loaded inputs (``nodes_cluster`` is mutated)."""
    start = time.perf_counter()
    cluster = nodes_cluster
    typical = typical_pods(pods)
    frag = FragTracker(cluster, FragModel(typical, cluster.models))
    rng = np.random.default_rng(seed)
    tie_rank = rng.permutation(cluster.n_nodes)
    ctx = SimContext(cluster, frag, rng, tie_rank)
    chooser = make_policy(policy, ctx)
    rows = arrival_rows(pods, cluster.total_gpus * MILLI, tune, rng)

    n = len(rows)
    arrived = np.zeros(n + 1, dtype=np.int64)
    used = np.zeros(n + 1, dtype=np.int64)
    frag_milli = np.zeros(n + 1)
    idle = np.zeros(n + 1)
    frag_milli[0], idle[0] = frag.total(), float(frag.idle.sum())
    cache: dict[int, Pod] = {}
    placed = failed = failed_milli = 0
    arrived_total = used_total = 0
    for i, row in enumerate(rows.tolist(), start=1):
        pod = cache.get(row)
        if pod is None:
            pod = cache[row] = Pod.from_trace(pods, row)
        arrived_total += pod.total_milli
        candidates = np.flatnonzero(cluster.feasible(pod))
        if len(candidates):
            node, gpus = chooser.choose(pod, candidates)
            cluster.place(node, gpus, pod)
            frag.update(node)
            chooser.placed(node)
            placed += 1
            used_total += pod.total_milli
        else:
            failed += 1
            failed_milli += pod.total_milli
        arrived[i], used[i] = arrived_total, used_total
        frag_milli[i], idle[i] = frag.total(), float(frag.idle.sum())

    total = cluster.total_gpus
    return SimulationResult(
        policy=policy, seed=seed, tune=tune, pods_csv=str(pods.path), nodes_csv=nodes_csv,
        total_nodes=cluster.n_nodes, total_gpus=total, typical_pod_types=len(typical),
        arrived_pods=n, placed_pods=placed, failed_pods=failed, failed_gpu_milli=failed_milli,
        final_arrived_pct=round(arrived_total / total / 10, 3),
        final_allocation_pct=round(used_total / total / 10, 3),
        runtime_s=round(time.perf_counter() - start, 3),
        points=_discretize(report_points, total, arrived, used, frag_milli, idle),
    )


def run_simulation(pods_csv: Path | str, nodes_csv: Path | str, policy: str, *, seed: int = 42,
                   tune: float = 1.3, report_points: Sequence[int] = DEFAULT_REPORT_POINTS) -> SimulationResult:
    """Simulate placing the pods of ``pods_csv`` on the cluster of ``nodes_csv`` with ``policy``.

    ``tune`` is the arrived GPU request to reach, as a multiple of cluster GPU capacity (the paper
    uses 1.3; ``<= 0`` replays the shuffled trace as is). ``report_points`` are arrived-load
    percentages; points the run never reaches are left out of the result.

    Raises ``ValueError`` for an unknown policy (message lists the valid ones) and
    :class:`~gpuinsight.simulate.trace.TraceError` for a malformed CSV (message names file and line).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; valid policies: {', '.join(POLICIES)}")
    pods = load_pods(pods_csv)
    cluster = Cluster(load_nodes(nodes_csv))
    return simulate(pods, cluster, policy, seed=seed, tune=tune, report_points=report_points,
                    nodes_csv=str(nodes_csv))

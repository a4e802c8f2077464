"""One placement problem per node pool, shared by GPU sharing (consolidation) and binpack.

A pool is the nodes of one (cluster, node pool, zone, GPU model) that hold whole-GPU work after
the earlier findings of the plan (idle pods scaled away, small workloads moved onto shared
GPUs). :func:`build_problem` turns it into a :class:`~gpuinsight.rules.pack_bound.PoolProblem`:
each node's capacity is its GPUs less those earlier findings returned to the pool (never less
than what stays on it); each pod a whole-GPU pod that may move, with its gang (strict gangs move
whole), its PodDisruptionBudgets and the elastic part of its gang as budgets, pinned when it may
not move (a MIG pod, production when production may not move, a busy strict gang, a gang
reaching outside the pool, or a pod an earlier finding already moved). The consolidation rule
adds what sharing needs (GPUs to partition, sharing hosts to empty) and solves the pool with
binpack's objective; binpack then solves the same pool again with the shared GPUs in place.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuinsight.keys import BudgetKey, BudgetKind, NodeKey, PodKey, PoolKey, WorkloadKey
from gpuinsight.kubelabels import LabelIndex
from gpuinsight.kubelabels import json_object as as_map
from gpuinsight.rules.common import cluster_of, num
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.disruption import allowed_disruptions
from gpuinsight.rules.effects import PodsMoved
from gpuinsight.rules.pack_bound import (
    PoolNode,
    PoolPlan,
    PoolPod,
    PoolProblem,
    SolveLimits,
    Stop,
    plan_cost,
    solve_exact,
    solve_greedy,
)
from gpuinsight.sql.rows import Row, key_cluster

T = TypeVar("T")


def pool_key(node: Row) -> PoolKey:
    """The pool of a ``nodes_current`` row."""
    return PoolKey(key_cluster(node), node.node_pool, node.zone, node.gpu_model)


def in_pool_order(pools: dict[PoolKey, T]) -> list[tuple[PoolKey, T]]:
    """The pools in the order the planners take them: by their fields' reprs (a field may be None,
    which sorts among the names)."""
    return sorted(pools.items(), key=lambda kv: str(tuple(kv[0])))


def plannable(n: Row, key: NodeKey, ctx: PlanContext) -> bool:
    """Whole-GPU nodes the pool planner may move work between, partition GPUs of or release:
    not running MIG or a sharing config already (a node whose pods hold fractions of shared GPUs
    is shared: its GPUs are not whole-GPU bins), not a sharing host or released by this plan."""
    if num(n.gpu_count) <= 0 or n.is_mig or n.device_plugin_config or ctx.is_sharing_host(key):
        return False
    if num(n.fractional_pods) > 0:
        return False
    if (n.sharing_strategy or "none") not in ("none", ""):
        return False
    return not ctx.ledger.is_released(key) and num(n.gpus_held) <= num(n.gpu_count) + 1e-9


def pdb_key(b: Row) -> BudgetKey:
    """A PDB's budget (a ``disruption_budgets`` row): a PDB covers its own cluster's pods."""
    return BudgetKey(BudgetKind.PDB, cluster_of(b), b.namespace, b.name)


def gang_budget(cluster: str, namespace: str, gang: str) -> BudgetKey:
    """The elastic part of a gang of the cluster: the pods it may lose beyond its minMember."""
    return BudgetKey(BudgetKind.GANG, cluster, namespace, gang)


PodIdentity = tuple[str, str, str, Any]  # cluster, namespace, pod, uid of a placement_current row


def pod_identity(p: Row) -> PodIdentity:
    return (cluster_of(p), p.namespace, p.pod, p.uid)


def pdb_budgets(placement: list[Row], pdbs: list[Row]
                ) -> tuple[dict[BudgetKey, int], dict[PodIdentity, tuple[BudgetKey, ...]]]:
    """PDB -> evictions it allows now, counting the pods it covers (all assumed healthy); and each
    covered pod's PDBs (in the order of ``pdbs``), from the same covered sets."""
    pods = LabelIndex(placement, lambda p: (cluster_of(p), p.namespace), lambda p: as_map(p.labels))
    allowed: dict[BudgetKey, int] = {}
    of_pod: dict[PodIdentity, list[BudgetKey]] = defaultdict(list)
    for b in pdbs:
        covered = pods.covered((cluster_of(b), b.namespace), as_map(b.selector))
        spec = {"min_available": b.min_available, "max_unavailable": b.max_unavailable}
        key = pdb_key(b)
        allowed[key] = allowed_disruptions(spec, len(covered), len(covered))
        for p in covered:
            of_pod[pod_identity(p)].append(key)
    return allowed, {p: tuple(keys) for p, keys in of_pod.items()}


class PoolInputs:
    """What every pool of a plan is built from, computed once per rule run."""

    def __init__(self, frames: dict[str, Any], ctx: PlanContext) -> None:
        self.busy = {r.workload_key: num(r.gr_mean) for r in ctx.rows(frames, "workload_gpu_profile")}
        self.placement = ctx.rows(frames, "placement_current")
        self.budgets, self._budgets_of = pdb_budgets(self.placement, ctx.rows(frames, "disruption_budgets"))

    def pod_budgets(self, p: Row) -> tuple[BudgetKey, ...]:
        """The PDBs whose selector covers ``p`` (a row of :attr:`placement`)."""
        return self._budgets_of.get(pod_identity(p), ())


@dataclass(frozen=True)
class PoolPodRow:
    """A pod of a pool's problem: its ``placement_current`` row and its production verdict."""

    pod: Any
    production: bool
    why: str


def build_problem(key: PoolKey, members: list[Row], pods_on: dict[NodeKey, list[Row]],
                  inputs: PoolInputs, settings: dict[str, Any], ctx: PlanContext,
                  ) -> tuple[PoolProblem, list[PoolPodRow]]:
    """The pool's problem: ``members`` are its nodes (``nodes_current`` rows), ``pods_on`` the
    whole-GPU pods on each (cluster, node) after the earlier findings; ``settings`` binpack's
    (which pods may move). GPUs earlier findings gave to shared work are fixed load."""
    cluster = key[0]
    # what each PodDisruptionBudget allows, less the evictions earlier findings of the plan make
    problem = PoolProblem([], [], {b: n - ctx.evictions_used(b) for b, n in inputs.budgets.items()})
    pod_rows: list[PoolPodRow] = []
    for j, n in enumerate(members):
        node_key = NodeKey(cluster, n.node)
        pods = pods_on.get(node_key, [])
        fixed = ctx.partitioned_gpus(node_key)
        staying = sum(num(p.gpus) for p in pods) + fixed
        free_of_claims = num(n.gpu_count) - ctx.ledger.reserved_gpus(node_key)
        # a node holding more than that (periodic work keeps its place while returning GPU-hours)
        # keeps what it holds and takes nothing new
        problem.nodes.append(PoolNode(n.node, max(free_of_claims, staying), num(n.usd_per_hour),
                                      closed=staying > free_of_claims + 1e-9, fixed=fixed))
        for p in pods:
            gang_size, min_member = int(num(p.gang_pods, 1)), p.gang_min_member
            strict = bool(p.gang) and gang_size > 1 and (min_member is None or int(min_member) >= gang_size)
            elastic = bool(p.gang) and gang_size > 1 and not strict
            gang_id = f"{p.namespace}/{p.gang}" if strict else None
            prod, why = ctx.is_production(p)
            pinned = bool(p.mig_profile) or (prod and not settings["include_production"])
            if strict and inputs.busy.get(WorkloadKey(cluster, p.namespace, p.workload), 0.0) >= settings["busy_gang_activity"]:
                pinned = True
            if ctx.was_moved(PodKey(cluster, p.namespace, p.pod)):
                pinned = True  # moved once by this plan already: it is not moved again
            own = inputs.pod_budgets(p)
            if elastic:
                name = gang_budget(cluster, p.namespace, p.gang)
                problem.budgets[name] = gang_size - int(min_member or 1) - ctx.evictions_used(name)
                own = (*own, name)
            problem.pods.append(PoolPod(f"{p.namespace}/{p.pod}", j, num(p.gpus), gang_id, pinned, own))
            pod_rows.append(PoolPodRow(p, prod, why))
    # a strict gang with pods outside this pool cannot be re-placed here: keep it where it is
    seen: dict[str, int] = defaultdict(int)
    for pp in problem.pods:
        if pp.gang:
            seen[pp.gang] += 1
    for pp, row in zip(problem.pods, pod_rows, strict=True):
        if pp.gang and seen[pp.gang] < int(num(row.pod.gang_pods, 1)):
            pp.pinned = True
    return problem, pod_rows


def solve_limits(settings: dict[str, Any]) -> SolveLimits:
    """What one exact solve may spend, from binpack's settings."""
    return SolveLimits(int(settings["ilp_max_nodes"]), float(settings["ilp_time_limit_s"]))


def solve(problem: PoolProblem, settings: dict[str, Any], ctx: PlanContext, key: PoolKey) -> PoolPlan:
    """The exact plan where the pool is small enough and HiGHS proves it within the work bound
    (``settings``: binpack's), else greedy. A solve the wall-clock safety stopped is named in the
    plan's notes: that pool's plan depends on the machine's load, not only on the data."""
    exact = solve_exact(problem, limits=solve_limits(settings), max_variables=int(settings["ilp_max_variables"]))
    plan = exact.plan
    if plan is None:  # the greedy plan, or the ILP's best plan so far where it is better
        plan = solve_greedy(problem)
        if exact.incumbent is not None and plan_cost(problem, exact.incumbent) < plan_cost(problem, plan):
            plan = exact.incumbent
    plan.search = exact.search
    if exact.search.stop is Stop.TIME_LIMIT:
        ctx.note(f"pool {pool_name(key)}: an exact solve stopped at the wall-clock safety limit "
                 f"(binpack.ilp_time_limit_s = {settings['ilp_time_limit_s']:g} s) after {exact.search.nodes:,} "
                 f"branch-and-bound nodes; its plan ({method(plan, settings)}) depends on the machine's load, not "
                 "only on the data and settings: run again on a less loaded machine, or raise the limit")
    return plan


def pool_name(key: PoolKey) -> str:
    return f"{key.node_pool} ({key.zone}, {key.gpu_model})" + (f" of cluster {key.cluster}" if key.cluster else "")


def method(plan: PoolPlan, settings: dict[str, Any]) -> str:
    """How a pool's plan was found, and why not exactly when it was not (the findings' evidence)."""
    stop = plan.search.stop
    limit = ("wall-clock safety limit (binpack.ilp_time_limit_s): load-dependent" if stop is Stop.TIME_LIMIT else
             f"work limit of {int(settings['ilp_max_nodes']):,} branch-and-bound nodes (binpack.ilp_max_nodes)")
    if plan.method == "ilp" and not plan.optimal:
        return f"ILP (HiGHS): the best plan found within the {limit}, not proven optimal (better than greedy)"
    if plan.method == "ilp":
        if stop in (Stop.WORK_LIMIT, Stop.TIME_LIMIT):
            return f"exact ILP (HiGHS); the moved gangs' landing is the best found within the {limit}"
        return "exact ILP (HiGHS)"
    why = {Stop.TOO_LARGE: "pool too large for the ILP", Stop.NO_PLAN: "the ILP found no plan",
           Stop.WORK_LIMIT: f"no optimum proven within the {limit}", Stop.TIME_LIMIT: f"the ILP stopped at the {limit}"}
    return f"greedy ({why[stop]})" if stop is not None else "greedy"


def pods_after(placement: list[Row], ctx: PlanContext) -> dict[NodeKey, list[Row]]:
    """The whole-GPU pods (``placement_current`` rows) on each node after the earlier findings:
    pods they take away are gone, pods they moved are on their new node."""
    out: dict[NodeKey, list[Row]] = defaultdict(list)
    for p in placement:
        pod = p.pod_key
        if ctx.is_gone(pod, p.workload_key):
            continue
        out[NodeKey(pod.cluster, ctx.node_after_moves(pod, p.node))].append(p)
    return out


def move_list(problem: PoolProblem, plan: PoolPlan, pod_rows: list[PoolPodRow],
              only: set[int] | None = None) -> list[dict[str, Any]]:
    """The evictions (``only``: of these pods), grouped per (gang or pod, from, to), largest first."""
    grouped: dict[tuple[Any, ...], dict[str, Any]] = {}
    for i in plan.evicted(problem):
        if only is not None and i not in only:
            continue
        p, row = problem.pods[i], pod_rows[i]
        pod = row.pod
        src, dst = problem.nodes[p.node].name, problem.nodes[plan.assign[i]].name
        key = (pod.namespace, p.gang or pod.pod, src, dst)
        m = grouped.setdefault(key, {"namespace": pod.namespace, "workload": pod.workload,
                                     "gang": pod.gang if p.gang else None, "pods": [], "from": src,
                                     "to": dst, "gpus": 0.0, "production": row.production,
                                     "production_reason": row.why, "_index": []})
        m["pods"].append(pod.pod)
        m["_index"].append(i)
        m["gpus"] = round(m["gpus"] + p.gpus, 3)
    return sorted(grouped.values(), key=lambda m: (-m["gpus"], m["namespace"], m["pods"][0]))


def record_moves(ctx: PlanContext, finding: str, cluster: str, moves: list[dict[str, Any]],
                 problem: PoolProblem) -> None:
    """Record the moves (``move_list`` entries) ``finding`` makes: where the pods go and which
    budgets their evictions use (:class:`gpuinsight.rules.effects.PodsMoved`)."""
    ctx.record(finding, *(
        PodsMoved(WorkloadKey(cluster, m["namespace"], str(m["workload"])),
                  tuple(PodKey(cluster, m["namespace"], pod) for pod in m["pods"]), m["from"], m["to"],
                  tuple(b for i in m["_index"] for b in problem.pods[i].budgets))
        for m in moves))

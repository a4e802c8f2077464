"""Plan a node pool's packing: the exact ILP (HiGHS) where the pool is small enough, a greedy
fallback otherwise, and the plain fewest-nodes bound used as a yardstick.

A pool problem is nodes (capacity in GPUs, cost, network domains) and pods (GPUs, current
node). A pod may be pinned to its node; pods of a strict gang restart together (if one moves,
all are evicted and rescheduled, each to any node with room); budgets cap how many of a set of
pods may be evicted (PodDisruptionBudgets, the elastic part of a gang). The ILP minimises, in
this order: the cost of the nodes kept; how widely each moved gang lands (the domains it spans,
tightest level first: nodes, then racks/blocks, so one fewer rack outweighs any number of nodes);
the GPUs moved. The first term alone decides the nodes kept, so the topology preference never
costs a node: it only chooses among plans of the same cost.

The same problem carries what GPU sharing needs of the pool (the consolidation rule plans it
with binpack, :mod:`gpuinsight.rules.pool_plan`): ``shared_gpus`` GPUs to be partitioned with
MIG for small workloads, placed on nodes that allow it (``PoolNode.mig_slots``), each on a GPU
that is free before the node is repartitioned (``PoolNode.early_free`` GPUs, plus those of whole
pods the plan moves off the node); sharing hosts (``PoolNode.evacuate``) that every whole pod
leaves and none enters; and GPUs already given to shared work (``PoolNode.fixed``).

Every exact solve is bounded by the solver's work, not by the clock (:class:`SolveLimits`):
HiGHS explores at most ``max_nodes`` branch-and-bound nodes, on one search thread with a fixed
random seed, so the same pool and settings give the same plan on any machine under any load. A
wall-clock limit far above normal solve times stays as a last resort; a plan it cut short says
so (:attr:`Search.stop`), because that plan depends on the machine's load.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

MAX_VARIABLES = 6000
# Branch-and-bound nodes one exact solve may explore (binpack.ilp_max_nodes; docs/rules.md says
# why this many), and the wall-clock safety far above what such a solve takes (binpack.ilp_time_limit_s)
MAX_NODES = 500
SAFETY_TIME_LIMIT_S = 300.0
# A small workload stopped before its GPU is repartitioned, against a GPU of whole pods moved (1)
STOP_WEIGHT = 0.1


@dataclass(frozen=True)
class SolveLimits:
    """What one exact solve may spend: ``max_nodes`` branch-and-bound nodes (the work bound,
    reached the same way on any machine under any load) and, as a last resort, ``time_limit_s``
    seconds of wall clock."""
    max_nodes: int = MAX_NODES
    time_limit_s: float = SAFETY_TIME_LIMIT_S


class Stop(Enum):
    """Why an exact solve ended without its proven optimum."""
    TOO_LARGE = "too large"             # the pool has more variables than the ILP may have
    NO_PLAN = "no plan"                 # proven infeasible (or a constraint that folded to false)
    WORK_LIMIT = "work limit"           # max_nodes reached: the same on every run
    TIME_LIMIT = "time limit"           # the wall-clock safety: depends on the machine's load


@dataclass
class Search:
    """What a pool's exact solves did: branch-and-bound nodes over all passes, and the limit that
    stopped one (None: every pass ended with its proven optimum). On an exact plan a stop is the
    spread pass's: the nodes released stay optimal, the gangs' landing is the best found."""
    nodes: int = 0
    stop: Stop | None = None
    seconds: float = 0.0          # wall time, for benchmarks: never part of a plan


@dataclass(frozen=True)
class Unit:
    gpus: float
    pinned_to: int | None = None  # node index it must stay on


@dataclass
class PoolNode:
    name: str
    capacity: float               # GPUs it may hold: never less than what stays on it; GPUs that
                                  # earlier findings returned to the pool are not offered
    cost: float                   # what keeping it costs per hour
    domains: tuple[str, ...] = () # network domains above the node (NVLink domain, rack, block), tightest first
    closed: bool = False          # takes no arrivals: what it holds already exceeds what it may hold
                                  # (GPUs returned in time by work that keeps its place)
    fixed: float = 0.0            # GPUs given to shared work (MIG-partitioned, planned earlier): stay
    mig_slots: int = 0            # GPUs of it that may be MIG-partitioned for the pool's shared GPUs
    early_free: float = 0.0       # GPUs free before a repartition without moving a whole pod of the
                                  # problem (free now, or held by small workloads stopped first)
    free_now: float = 0.0         # of those, free now: no workload is stopped for them
    production_stops: float = 0.0  # of those, held by production workloads (stopped last)
    evacuate: bool = False        # becomes a sharing host: every whole pod leaves, none arrives


@dataclass
class PoolPod:
    name: str
    node: int                     # current node index
    gpus: float
    gang: str | None = None       # strict gang: restarts together
    pinned: bool = False
    budgets: tuple[Hashable, ...] = ()  # budgets the pod counts against when evicted (rules: BudgetKey)


@dataclass
class PoolProblem:
    nodes: list[PoolNode]
    pods: list[PoolPod]
    budgets: dict[Hashable, int] = field(default_factory=dict)  # budget -> most pods evicted
    shared_gpus: int = 0          # MIG-partitioned GPUs to place (interchangeable, one GPU each)
    release: bool = True          # False: release no node, only move what the shared GPUs need

    def gangs(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(self.pods):
            if p.gang:
                out[p.gang].append(i)
        return dict(out)

    def pinned_gangs(self) -> set[str]:
        return {p.gang for p in self.pods if p.gang and p.pinned}

    def domain_levels(self) -> int:
        return max((len(n.domains) for n in self.nodes), default=0)

    def distance(self, a: int, b: int) -> int:
        """0 on one node, k + 1 when the tightest domain the nodes share is level k, else levels + 1."""
        if a == b:
            return 0
        da, db = self.nodes[a].domains, self.nodes[b].domains
        for k, (x, y) in enumerate(zip(da, db, strict=False)):
            if x == y:
                return k + 1
        return self.domain_levels() + 1

    def span(self, nodes: set[int]) -> int:
        """How widely a set of nodes spreads: 0 one node, k + 1 within one level-k domain."""
        if len(nodes) <= 1:
            return 0
        first = min(nodes)
        return max(self.distance(first, j) for j in nodes)


@dataclass
class PoolPlan:
    assign: list[int]             # node index per pod
    moved_gangs: set[str]         # strict gangs evicted (all their pods restart)
    method: str                   # ilp | greedy
    optimal: bool                 # proven optimal for the problem
    shared: dict[int, int] = field(default_factory=dict)  # node index -> shared GPUs placed on it
    feasible: bool = True         # every shared GPU placed and every sharing host emptied
    search: Search = field(default_factory=Search)  # what the exact solve did (also for a greedy plan)

    def evicted(self, problem: PoolProblem) -> list[int]:
        return [i for i, p in enumerate(problem.pods)
                if self.assign[i] != p.node or (p.gang is not None and p.gang in self.moved_gangs)]


def check_plan(problem: PoolProblem, plan: PoolPlan) -> list[str]:
    """What a plan breaks (empty when valid): capacity, pins, gangs, budgets."""
    errors = []
    load: dict[int, float] = defaultdict(float)
    for i, p in enumerate(problem.pods):
        load[plan.assign[i]] += p.gpus
        if p.pinned and plan.assign[i] != p.node:
            errors.append(f"pinned pod {p.name} moved")
        if p.gang and p.gang not in plan.moved_gangs and plan.assign[i] != p.node:
            errors.append(f"pod {p.name} of gang {p.gang} moved without its gang")
    for i, p in enumerate(problem.pods):
        if plan.assign[i] != p.node and problem.nodes[plan.assign[i]].closed:
            errors.append(f"pod {p.name} moved onto {problem.nodes[plan.assign[i]].name}, which takes no arrivals")
        if problem.nodes[plan.assign[i]].evacuate:
            errors.append(f"pod {p.name} stays on or moves onto {problem.nodes[plan.assign[i]].name}, a sharing host")
    if sum(plan.shared.values()) != problem.shared_gpus:
        errors.append(f"{sum(plan.shared.values())} of {problem.shared_gpus} shared GPUs placed")
    for j, nd in enumerate(problem.nodes):
        load[j] += nd.fixed + plan.shared.get(j, 0)
        count = plan.shared.get(j, 0)
        if not count:
            continue
        moved_off = sum(p.gpus for i, p in enumerate(problem.pods) if p.node == j and plan.assign[i] != j)
        if count > nd.mig_slots or nd.evacuate or count > nd.early_free + moved_off + 1e-9:
            errors.append(f"node {nd.name}: {count} shared GPUs, {nd.mig_slots} may be partitioned, "
                          f"{nd.early_free + moved_off:g} free before the repartition")
    for j, total in load.items():
        if total > problem.nodes[j].capacity + 1e-9:
            errors.append(f"node {problem.nodes[j].name}: {total:g} GPUs over its capacity {problem.nodes[j].capacity:g}")
    used: dict[Hashable, int] = defaultdict(int)
    for i in plan.evicted(problem):
        for b in problem.pods[i].budgets:
            used[b] += 1
    for b, n in used.items():
        if n > problem.budgets.get(b, 0):
            errors.append(f"budget {b}: {n} evictions, {problem.budgets.get(b, 0)} allowed")
    return errors


def _highs(limits: SolveLimits) -> Any:
    """A HiGHS instance whose result depends on the model and ``limits`` only: one search thread
    (with ``parallel`` left to choose, HiGHS 1.16 searches the tree with more workers when its
    scheduler has more threads, so the nodes explored, and which of equal optima or which best
    plan so far is returned, follow the machine's cores: a pool of the tests takes 106, 28 and
    207 nodes with 1, 2 and 4 threads), a fixed random seed, the work bound and the wall-clock
    safety."""
    import highspy

    # HiGHS prints a banner on stdout from C the first time; keep it off our output
    # (which may be JSON) by pointing file descriptor 1 at /dev/null for the construction.
    sys.stdout.flush()
    try:
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    except OSError:  # no usable stdout descriptor: nothing to protect
        h = highspy.Highs()
    else:
        try:
            os.dup2(devnull, 1)
            h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
    h.setOptionValue("output_flag", False)
    h.setOptionValue("parallel", "off")
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("mip_max_nodes", int(limits.max_nodes))
    h.setOptionValue("time_limit", float(limits.time_limit_s))
    return h


def solve_ilp(problem: PoolProblem, *, limits: SolveLimits = SolveLimits(), max_variables: int = MAX_VARIABLES
              ) -> PoolPlan | None:
    """The exact plan, or None when there is none: see :func:`solve_exact`."""
    return solve_exact(problem, limits=limits, max_variables=max_variables).plan


@dataclass
class Exact:
    plan: PoolPlan | None         # the proven optimum (None: see search.stop)
    search: Search
    # without a proven optimum: the best plan HiGHS found before a limit stopped it (not proven
    # optimal; the pool planner keeps it where it beats the greedy plan)
    incumbent: PoolPlan | None = None


@dataclass
class _Solved:
    """One HiGHS solve: its plan and node-cost term (None: no plan), nodes and stop."""
    plan: PoolPlan | None
    cost: float
    nodes: int
    stop: Stop | None


def solve_exact(problem: PoolProblem, *, limits: SolveLimits = SolveLimits(), max_variables: int = MAX_VARIABLES
                ) -> Exact:
    """The exact plan, or none when the pool is too big, has no plan (a shared GPU with no room,
    a sharing host that cannot be emptied) or HiGHS proved no optimum within ``limits``.

    Solved in two passes: node cost then GPUs moved; and only when that plan lands a moved gang
    on more than one node, again with the gangs' spread in between, the node cost capped at the
    first optimum. The result is the same lexicographic optimum, without paying for the spread
    terms on every pool; a spread pass stopped by a limit keeps its best plan so far (the nodes
    released stay optimal, the landing may not be the tightest)."""
    t0 = time.perf_counter()
    n_nodes = len(problem.nodes)
    free = [i for i, p in enumerate(problem.pods) if not p.pinned and p.gang not in problem.pinned_gangs()]
    if len(free) * n_nodes + (n_nodes if problem.shared_gpus else 0) > max_variables:
        return Exact(None, Search(stop=Stop.TOO_LARGE))
    if any(problem.nodes[p.node].evacuate for i, p in enumerate(problem.pods) if i not in set(free)):
        return Exact(None, Search(stop=Stop.NO_PLAN))  # a pod that may not move sits on a node that must be emptied
    if not problem.pods and not problem.shared_gpus:
        return Exact(PoolPlan([], set(), "ilp", True), Search())
    first = _solve_ilp(problem, free, limits, spread=False)
    search = Search(first.nodes, first.stop)
    if first.stop is not None:  # no proven optimum: at most a best plan so far, without the spread pass
        search.seconds = time.perf_counter() - t0
        incumbent = first.plan if first.plan is not None and not check_plan(problem, first.plan) else None
        if incumbent is not None:
            incumbent.search = search
        return Exact(None, search, incumbent)
    plan = first.plan
    assert plan is not None
    gangs = problem.gangs()
    if any(len({plan.assign[i] for i in gangs[g]}) > 1 for g in plan.moved_gangs):
        second = _solve_ilp(problem, free, limits, spread=True, cost_cap=first.cost)
        search = Search(first.nodes + second.nodes, second.stop)
        if second.plan is not None and not check_plan(problem, second.plan):
            plan = second.plan
    search.seconds = time.perf_counter() - t0
    plan.search = search
    return Exact(plan, search)


def plan_cost(problem: PoolProblem, plan: PoolPlan) -> tuple[bool, float, float]:
    """What the ILP minimises first, to compare plans found otherwise: a plan that does not place
    every shared GPU or empty every sharing host last, then the cost of the nodes kept (when the
    pool releases nodes), then the GPUs moved."""
    kept = set(plan.assign) | set(plan.shared) | {j for j, nd in enumerate(problem.nodes) if nd.fixed > 0 or nd.evacuate}
    weights = _node_weights(problem)
    cost = sum(weights[j] for j in kept) if problem.release else 0.0
    moved = sum(problem.pods[i].gpus for i in plan.evicted(problem))
    return not plan.feasible, round(cost, 9), round(moved, 9)


def _node_weights(problem: PoolProblem) -> list[float]:
    """Each node's cost in the objective, relative to the cheapest priced node (unpriced: as it)."""
    cheapest = min((nd.cost for nd in problem.nodes if nd.cost > 0), default=1.0)
    return [max(nd.cost, cheapest) / cheapest for nd in problem.nodes]


def _constraint(h: Any, expr: Any) -> bool:
    """Add a constraint; one that folded to a constant is checked instead (False: infeasible)."""
    if isinstance(expr, bool):
        return expr
    h.addConstr(expr)
    return True


def _stay(x: dict[tuple[int, int], Any], i: int, node: int) -> Any:
    """The variable "pod i stays on its node", or 0 where it may not (a sharing host)."""
    return x.get((i, node), 0)


def _solve_ilp(problem: PoolProblem, free: list[int], limits: SolveLimits, *, spread: bool,
               cost_cap: float | None = None) -> _Solved:
    """One HiGHS solve: the proven optimum, or the best plan found when a limit stopped it
    (``optimal`` only for the spread pass, whose node cost is capped at the proven one)."""
    n_nodes = len(problem.nodes)
    h = _highs(limits)
    h.setOptionValue("mip_rel_gap", 0.0)
    no_plan = _Solved(None, 0.0, 0, Stop.NO_PLAN)
    y = [h.addBinary() for _ in range(n_nodes)]
    x: dict[tuple[int, int], Any] = {}
    load: dict[int, list[Any]] = defaultdict(list)
    fixed: dict[int, float] = defaultdict(float)
    free_set = set(free)
    for j, nd in enumerate(problem.nodes):
        fixed[j] += nd.fixed
    for i, p in enumerate(problem.pods):
        if i not in free_set:
            fixed[p.node] += p.gpus
            continue
        for j in range(n_nodes):
            if (problem.nodes[j].closed and j != p.node) or problem.nodes[j].evacuate:
                continue
            x[i, j] = h.addBinary()
            load[j].append(p.gpus * x[i, j])
        if not _constraint(h, sum(x[i, j] for j in range(n_nodes) if (i, j) in x) == 1):
            return no_plan
    shared: dict[int, Any] = {}
    stop_terms: list[Any] = []
    if problem.shared_gpus:
        for j, nd in enumerate(problem.nodes):
            room = min(nd.mig_slots, math.floor(nd.capacity - nd.fixed + 1e-9))
            if room <= 0 or nd.closed or nd.evacuate:
                continue
            c = shared[j] = h.addIntegral(lb=0, ub=room)
            load[j].append(c)
            # each shared GPU goes on a GPU that is free before the node is repartitioned
            moved_off = [problem.pods[i].gpus * (1 - x[i, j]) for i in free if problem.pods[i].node == j]
            _constraint(h, c <= nd.early_free + sum(moved_off))
            # small workloads stopped first for it (after free GPUs and those of pods moved away),
            # production ones last: a stop costs less than a move, and counts only between plans
            # that keep and move the same
            stops = h.addVariable(lb=0)
            _constraint(h, stops >= c - nd.free_now - sum(moved_off))
            production = h.addVariable(lb=0)
            _constraint(h, production >= stops - (nd.early_free - nd.free_now - nd.production_stops))
            stop_terms += [STOP_WEIGHT * stops, STOP_WEIGHT * production]
        if not _constraint(h, sum(shared.values()) == problem.shared_gpus):
            return no_plan
    for j, nd in enumerate(problem.nodes):
        if fixed[j] > 0 or nd.evacuate:
            h.addConstr(y[j] == 1)
        if load[j]:
            room = nd.capacity - fixed[j]
            h.addConstr(sum(load[j]) <= (room if room > 1e-9 else 0.0) * y[j])  # no tiny coefficient
    # implied by the capacity rows, but they make the relaxation tight: without them HiGHS proves
    # the optimum of an 18-node pool in hundreds of branch-and-bound nodes, with them at the root
    for (i, j), v in x.items():
        if problem.pods[i].gpus > 0:
            h.addConstr(v <= y[j])
    gang_var: dict[str, Any] = {}
    for gang, members in problem.gangs().items():
        if gang in problem.pinned_gangs():
            continue
        m = gang_var[gang] = h.addBinary()
        for i in members:
            if not _constraint(h, _stay(x, i, problem.pods[i].node) + m >= 1):
                return no_plan
    evict: dict[Hashable, list[Any]] = defaultdict(list)
    for i in free:
        p = problem.pods[i]
        for b in p.budgets:
            evict[b].append(i)
    for b, members in evict.items():
        allowed = problem.budgets.get(b, 0)
        terms = []
        for i in members:
            p = problem.pods[i]
            terms.append(gang_var[p.gang] if p.gang in gang_var else 1 - _stay(x, i, p.node))
        if not _constraint(h, sum(terms) <= allowed):
            return no_plan
    total_gpus = sum(p.gpus for p in problem.pods) + 2 * STOP_WEIGHT * problem.shared_gpus + 1.0
    terms, spread_max = _spread_terms(h, problem, x, gang_var) if spread else ([], 0.0)
    weights = _node_weights(problem)
    if cost_cap is not None:  # the first pass's optimum, plus a hair for the solver's tolerances
        h.addConstr(sum(w * y[j] for j, w in enumerate(weights)) <= cost_cap + 1e-6)
    # lexicographic: node cost, then the moved gangs' spread, then the GPUs moved (a shared GPU is
    # not a move: it is placed once, wherever the plan needs it)
    objective = [w * total_gpus * (spread_max + 1) * y[j] for j, w in enumerate(weights) if problem.release]
    objective += [total_gpus * term for term in terms]
    for i in free:
        p = problem.pods[i]
        if p.gang in gang_var or (i, p.node) not in x:
            continue
        objective.append(p.gpus * (1 - x[i, p.node]))
    for gang, m in gang_var.items():
        objective.append(sum(problem.pods[i].gpus for i in problem.gangs()[gang]) * m)
    h.minimize(sum(objective + stop_terms))
    nodes, stop = _outcome(h)
    # a limit may leave a best plan so far (a feasible primal solution)
    found = stop in (Stop.WORK_LIMIT, Stop.TIME_LIMIT) and h.getInfo().primal_solution_status == 2
    if stop is not None and not found:
        return _Solved(None, 0.0, nodes, stop)
    sol = h.getSolution().col_value

    def val(v: Any) -> float:
        return float(sol[v.index])

    assign = []
    for i, p in enumerate(problem.pods):
        if i not in free_set:
            assign.append(p.node)
        else:
            assign.append(max((j for j in range(n_nodes) if (i, j) in x), key=lambda j, i=i: val(x[i, j])))
    moved = {g for g, m in gang_var.items() if val(m) > 0.5}
    cost = sum(w for j, w in enumerate(weights) if val(y[j]) > 0.5)
    placed = {j: round(val(c)) for j, c in shared.items() if round(val(c)) > 0}
    proven = stop is None or cost_cap is not None  # the spread pass keeps the proven node cost
    return _Solved(PoolPlan(assign, moved, "ilp", proven, placed), cost, nodes, stop)


def _outcome(h: Any) -> tuple[int, Stop | None]:
    """Branch-and-bound nodes of a finished solve, and what stopped it short of its optimum."""
    import highspy

    status = h.getModelStatus()
    nodes = max(int(h.getInfo().mip_node_count), 0)
    if status == highspy.HighsModelStatus.kOptimal:
        return nodes, None
    if status == highspy.HighsModelStatus.kSolutionLimit:  # mip_max_nodes (the only count limit set)
        return nodes, Stop.WORK_LIMIT
    if status == highspy.HighsModelStatus.kTimeLimit:
        return nodes, Stop.TIME_LIMIT
    return nodes, Stop.NO_PLAN


def _spread_terms(h: Any, problem: PoolProblem, x: dict[tuple[int, int], Any],
                  gang_var: dict[str, Any]) -> tuple[list[Any], float]:
    """Objective terms counting, for every gang the plan moves, the domains it lands in beyond the
    first at each level (nodes first, then each domain level), weighted so that one fewer domain
    at a level outweighs any change at the tighter ones; and the largest value they can sum to."""
    gangs = problem.gangs()
    movable = {g: gangs[g] for g in gang_var}
    if not movable:
        return [], 0.0
    size = max(len(m) for m in movable.values())
    levels = problem.domain_levels()
    groups: list[dict[str, list[int]]] = [{str(j): [j] for j in range(len(problem.nodes))}]
    for k in range(levels):
        by: dict[str, list[int]] = defaultdict(list)
        for j, nd in enumerate(problem.nodes):
            by[nd.domains[k] if k < len(nd.domains) else f"~{j}"].append(j)
        groups.append(by)
    terms: list[Any] = []
    bound = 0.0
    for gang, members in movable.items():
        m = gang_var[gang]
        for level, by in enumerate(groups):
            weight = float((size + 1) ** level)
            for nodes in by.values():
                used = h.addBinary()
                for i in members:
                    # the pod is on one node: the sum is 1 when it lands in the domain (one row per
                    # pod and domain, tighter than one per node)
                    here = [x[i, j] for j in nodes if (i, j) in x]
                    if here:
                        h.addConstr(used >= sum(here) + m - 1)  # counts only when the gang moves
                terms.append(weight * used)
            # a moved gang lands in at least one domain per level: only the ones beyond it count, so
            # moving a gang compactly costs no more than moving single pods
            terms.append(-weight * m)
            bound += weight * (len(members) - 1)
    return terms, bound


def solve_greedy(problem: PoolProblem) -> PoolPlan:
    """Empty the sharing hosts (every pod finds room elsewhere, best fit, largest first), place
    the shared GPUs on the fullest nodes that allow them, then empty the least-loaded nodes
    first, each only if all it holds (whole strict gangs) finds room elsewhere within the
    budgets. ``feasible`` is False when a host could not be emptied or a shared GPU found no room."""
    state = _Greedy(problem)
    feasible = True
    for j in sorted((j for j, nd in enumerate(problem.nodes) if nd.evacuate), key=lambda j: problem.nodes[j].name):
        feasible &= state.move_off(j, evacuating=True)
    shared: dict[int, int] = {}
    remaining = problem.shared_gpus
    eligible = [j for j, nd in enumerate(problem.nodes) if nd.mig_slots > 0 and not nd.closed and not nd.evacuate]
    for j in sorted(eligible, key=lambda j: (-min(problem.nodes[j].free_now, remaining), -state.load[j],
                                             problem.nodes[j].name)):
        nd = problem.nodes[j]
        moved_off = sum(problem.pods[i].gpus for i in state.on[j] if state.assign[i] != j)
        room = min(nd.mig_slots, math.floor(nd.capacity - state.load[j] + 1e-9),
                   math.floor(nd.early_free + moved_off + 1e-9), remaining)
        if room > 0:
            shared[j] = room
            state.load[j] += room
            remaining -= room
    feasible &= remaining == 0
    for j in sorted(range(len(problem.nodes)), key=lambda j: (state.load[j], problem.nodes[j].name)):
        if not problem.release:
            break
        nd = problem.nodes[j]
        if nd.evacuate or nd.fixed > 0 or shared.get(j) or not state.on[j]:
            continue
        state.move_off(j, evacuating=False)
    return PoolPlan(state.assign, state.moved_gangs, "greedy", False, shared, feasible)


class _Greedy:
    """The greedy plan as it is built: where each pod is, node loads, budgets used."""

    def __init__(self, problem: PoolProblem) -> None:
        self.problem = problem
        self.assign = [p.node for p in problem.pods]
        self.moved_gangs: set[str] = set()
        self.used_budget: dict[Hashable, int] = defaultdict(int)
        self.load = [nd.fixed for nd in problem.nodes]
        self.on: dict[int, list[int]] = defaultdict(list)
        for i, p in enumerate(problem.pods):
            self.load[p.node] += p.gpus
            self.on[p.node].append(i)
        self.gangs = problem.gangs()
        self.pinned_gangs = problem.pinned_gangs()
        self.released: set[int] = set()

    def move_off(self, j: int, *, evacuating: bool) -> bool:
        """Move every pod still on node ``j`` elsewhere (whole gangs), or nothing."""
        problem = self.problem
        if any(problem.pods[i].pinned or problem.pods[i].gang in self.pinned_gangs for i in self.on[j]
               if self.assign[i] == j):
            return False
        moving = {i for i in self.on[j] if self.assign[i] == j}
        restart = set()
        for i in list(moving):
            gang = problem.pods[i].gang
            if gang:
                restart |= set(self.gangs[gang])
        extra: dict[Hashable, int] = defaultdict(int)
        for i in moving | restart:
            if problem.pods[i].gang in self.moved_gangs:
                continue  # restarted already: its budgets are counted
            for b in problem.pods[i].budgets:
                extra[b] += 1
        if any(self.used_budget[b] + n > problem.budgets.get(b, 0) for b, n in extra.items()):
            return False
        trial = list(self.load)
        placement: dict[int, int] = {}
        landed: dict[str, list[int]] = defaultdict(list)  # where each moved gang's pods went so far
        for i in sorted(moving, key=lambda i: (-problem.pods[i].gpus, problem.pods[i].name)):
            g = problem.pods[i].gpus
            gang = problem.pods[i].gang
            # release moves go to nodes in use; a sharing host's pods may go to any node with room
            targets = [k for k in range(len(problem.nodes)) if k != j and k not in self.released
                       and (trial[k] > 1e-9 or evacuating) and not problem.nodes[k].closed and not problem.nodes[k].evacuate
                       and trial[k] + g <= problem.nodes[k].capacity + 1e-9]
            if not targets:
                return False
            # a gang's pod lands as close as it can to the rest of its gang (node > NVLink > rack >
            # block), then best fit
            near = [self.assign[o] for o in self.gangs.get(gang or "", []) if o not in moving] + landed.get(gang or "", [])
            best = min(targets, key=lambda k: (max((problem.distance(o, k) for o in near), default=0),
                                               problem.nodes[k].capacity - trial[k] - g, problem.nodes[k].name))
            if gang:
                landed[gang].append(best)
            trial[best] += g
            trial[j] -= g
            placement[i] = best
        self.load = trial
        for i, k in placement.items():
            self.assign[i] = k
        for b, n in extra.items():
            self.used_budget[b] += n
        self.moved_gangs |= {problem.pods[i].gang for i in restart if problem.pods[i].gang}  # type: ignore[misc]
        if not evacuating:
            self.released.add(j)
        return True


def optimal_nodes(units: list[Unit], capacities: list[float], *, limits: SolveLimits = SolveLimits()) -> int | None:
    """Minimum number of nodes that can hold every unit, or None if too big or not solved
    (no move limits: the yardstick a plan's node count is compared with)."""
    return yardstick(units, capacities, limits=limits)[0]


def yardstick(units: list[Unit], capacities: list[float], *, limits: SolveLimits = SolveLimits()
              ) -> tuple[int | None, Search]:
    """:func:`optimal_nodes` and what its solve did (a stop: not known within ``limits``)."""
    if not capacities:
        return 0, Search()
    if len(units) * len(capacities) > MAX_VARIABLES:
        return None, Search(stop=Stop.TOO_LARGE)
    t0 = time.perf_counter()
    h = _highs(limits)
    nodes = range(len(capacities))
    y = [h.addBinary() for _ in nodes]
    x: dict[tuple[int, int], Any] = {}
    for u, unit in enumerate(units):
        allowed = [unit.pinned_to] if unit.pinned_to is not None else list(nodes)
        for n in allowed:
            x[u, n] = h.addBinary()
        h.addConstr(sum(x[u, n] for n in allowed) == 1)
    for n in nodes:
        load = [units[u].gpus * var for (u, m), var in x.items() if m == n]
        if load:
            h.addConstr(sum(load) <= capacities[n] * y[n])
    for (u, n), var in x.items():  # tightens the relaxation, as in the pool ILP
        if units[u].gpus > 0:
            h.addConstr(var <= y[n])
    h.minimize(sum(y))
    count, stop = _outcome(h)
    search = Search(count, stop, time.perf_counter() - t0)
    return (round(h.getObjectiveValue()) if stop is None else None), search

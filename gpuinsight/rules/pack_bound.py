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
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

MAX_VARIABLES = 6000
# The spread pass only orders plans that release the same nodes: past this it keeps its best plan
SPREAD_TIME_LIMIT_S = 0.25


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


@dataclass
class PoolPod:
    name: str
    node: int                     # current node index
    gpus: float
    gang: str | None = None       # strict gang: restarts together
    pinned: bool = False
    budgets: tuple[str, ...] = () # budgets the pod counts against when evicted


@dataclass
class PoolProblem:
    nodes: list[PoolNode]
    pods: list[PoolPod]
    budgets: dict[str, int] = field(default_factory=dict)  # budget -> most pods evicted

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
    for j, total in load.items():
        if total > problem.nodes[j].capacity + 1e-9:
            errors.append(f"node {problem.nodes[j].name}: {total:g} GPUs over its capacity {problem.nodes[j].capacity:g}")
    used: dict[str, int] = defaultdict(int)
    for i in plan.evicted(problem):
        for b in problem.pods[i].budgets:
            used[b] += 1
    for b, n in used.items():
        if n > problem.budgets.get(b, 0):
            errors.append(f"budget {b}: {n} evictions, {problem.budgets.get(b, 0)} allowed")
    return errors


def _highs() -> Any:
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
    return h


def solve_ilp(problem: PoolProblem, *, time_limit_s: float = 2.0, max_variables: int = MAX_VARIABLES
              ) -> PoolPlan | None:
    """The exact plan, or None when the pool is too big or HiGHS found no proven optimum in time.

    Solved in two passes: node cost then GPUs moved; and only when that plan lands a moved gang
    on more than one node, again with the gangs' spread in between, the node cost capped at the
    first optimum. The result is the same lexicographic optimum, without paying for the spread
    terms on every pool; a spread pass that needs more than :data:`SPREAD_TIME_LIMIT_S` keeps its
    best plan so far (the nodes released stay optimal, the landing may not be the tightest)."""
    n_nodes = len(problem.nodes)
    free = [i for i, p in enumerate(problem.pods) if not p.pinned and p.gang not in problem.pinned_gangs()]
    if len(free) * n_nodes > max_variables:
        return None
    if not problem.pods:
        return PoolPlan([], set(), "ilp", True)
    first = _solve_ilp(problem, free, time_limit_s, spread=False)
    if first is None:
        return None
    plan, cost = first
    gangs = problem.gangs()
    if not any(len({plan.assign[i] for i in gangs[g]}) > 1 for g in plan.moved_gangs):
        return plan
    second = _solve_ilp(problem, free, min(time_limit_s, SPREAD_TIME_LIMIT_S), spread=True, cost_cap=cost)
    return second[0] if second is not None else plan


def _solve_ilp(problem: PoolProblem, free: list[int], time_limit_s: float, *, spread: bool,
               cost_cap: float | None = None) -> tuple[PoolPlan, float] | None:
    """One HiGHS solve: the plan and its node-cost term."""
    import highspy

    n_nodes = len(problem.nodes)
    h = _highs()
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 0.0)
    y = [h.addBinary() for _ in range(n_nodes)]
    x: dict[tuple[int, int], Any] = {}
    load: dict[int, list[Any]] = defaultdict(list)
    fixed: dict[int, float] = defaultdict(float)
    free_set = set(free)
    for i, p in enumerate(problem.pods):
        if i not in free_set:
            fixed[p.node] += p.gpus
            continue
        for j in range(n_nodes):
            if problem.nodes[j].closed and j != p.node:
                continue
            x[i, j] = h.addBinary()
            load[j].append(p.gpus * x[i, j])
        h.addConstr(sum(x[i, j] for j in range(n_nodes) if (i, j) in x) == 1)
    for j, nd in enumerate(problem.nodes):
        if fixed[j] > 0:
            h.addConstr(y[j] == 1)
        if load[j]:
            h.addConstr(sum(load[j]) <= max(nd.capacity - fixed[j], 0.0) * y[j])
    gang_var: dict[str, Any] = {}
    for gang, members in problem.gangs().items():
        if gang in problem.pinned_gangs():
            continue
        m = gang_var[gang] = h.addBinary()
        for i in members:
            h.addConstr(x[i, problem.pods[i].node] + m >= 1)
    evict: dict[str, list[Any]] = defaultdict(list)
    for i in free:
        p = problem.pods[i]
        for b in p.budgets:
            evict[b].append(i)
    for b, members in evict.items():
        allowed = problem.budgets.get(b, 0)
        terms = []
        for i in members:
            p = problem.pods[i]
            terms.append(gang_var[p.gang] if p.gang in gang_var else 1 - x[i, p.node])
        h.addConstr(sum(terms) <= allowed)
    total_gpus = sum(p.gpus for p in problem.pods) + 1.0
    terms, spread_max = _spread_terms(h, problem, x, gang_var) if spread else ([], 0.0)
    cheapest = min((nd.cost for nd in problem.nodes if nd.cost > 0), default=1.0)
    weights = [max(nd.cost, cheapest) / cheapest for nd in problem.nodes]
    if cost_cap is not None:  # the first pass's optimum, plus a hair for the solver's tolerances
        h.addConstr(sum(w * y[j] for j, w in enumerate(weights)) <= cost_cap + 1e-6)
    # lexicographic: node cost, then the moved gangs' spread, then the GPUs moved
    objective = [w * total_gpus * (spread_max + 1) * y[j] for j, w in enumerate(weights)]
    objective += [total_gpus * term for term in terms]
    for i in free:
        p = problem.pods[i]
        if p.gang in gang_var:
            continue
        objective.append(p.gpus * (1 - x[i, p.node]))
    for gang, m in gang_var.items():
        objective.append(sum(problem.pods[i].gpus for i in problem.gangs()[gang]) * m)
    h.minimize(sum(objective))
    status = h.getModelStatus()
    # the spread pass may stop at its time limit: its best plan keeps the optimal node cost (capped)
    incumbent = cost_cap is not None and status == highspy.HighsModelStatus.kTimeLimit and \
        h.getInfo().primal_solution_status == 2
    if status != highspy.HighsModelStatus.kOptimal and not incumbent:
        return None
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
    return PoolPlan(assign, moved, "ilp", True), cost


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
                    for j in nodes:
                        if (i, j) in x:
                            h.addConstr(used >= x[i, j] + m - 1)  # counts only when the gang moves
                terms.append(weight * used)
            # a moved gang lands in at least one domain per level: only the ones beyond it count, so
            # moving a gang compactly costs no more than moving single pods
            terms.append(-weight * m)
            bound += weight * (len(members) - 1)
    return terms, bound


def solve_greedy(problem: PoolProblem) -> PoolPlan:
    """Empty the least-loaded nodes first, each only if all it holds (whole strict gangs) finds
    room elsewhere (best fit, largest first) within the budgets."""
    assign = [p.node for p in problem.pods]
    moved_gangs: set[str] = set()
    used_budget: dict[str, int] = defaultdict(int)
    load = [0.0] * len(problem.nodes)
    on: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(problem.pods):
        load[p.node] += p.gpus
        on[p.node].append(i)
    gangs = problem.gangs()
    pinned_gangs = problem.pinned_gangs()
    released: set[int] = set()
    for j in sorted(range(len(problem.nodes)), key=lambda j: (load[j], problem.nodes[j].name)):
        if not on[j] or any(problem.pods[i].pinned or problem.pods[i].gang in pinned_gangs for i in on[j]):
            continue
        moving = {i for i in on[j] if assign[i] == j}
        restart = set()
        for i in list(moving):
            gang = problem.pods[i].gang
            if gang:
                restart |= set(gangs[gang])
        evicted = moving | restart
        extra: dict[str, int] = defaultdict(int)
        for i in evicted:
            for b in problem.pods[i].budgets:
                extra[b] += 1
        if any(used_budget[b] + n > problem.budgets.get(b, 0) for b, n in extra.items()):
            continue
        trial = list(load)
        placement: dict[int, int] = {}
        landed: dict[str, list[int]] = defaultdict(list)  # where each moved gang's pods went so far
        ok = True
        for i in sorted(moving, key=lambda i: (-problem.pods[i].gpus, problem.pods[i].name)):
            g = problem.pods[i].gpus
            gang = problem.pods[i].gang
            targets = [k for k in range(len(problem.nodes)) if k != j and k not in released and on[k]
                       and not problem.nodes[k].closed
                       and trial[k] + g <= problem.nodes[k].capacity + 1e-9]
            if not targets:
                ok = False
                break
            # a gang's pod lands as close as it can to the rest of its gang (node > NVLink > rack >
            # block), then best fit
            near = [assign[o] for o in gangs.get(gang or "", []) if o not in moving] + landed.get(gang or "", [])
            best = min(targets, key=lambda k: (max((problem.distance(o, k) for o in near), default=0),
                                               problem.nodes[k].capacity - trial[k] - g, problem.nodes[k].name))
            if gang:
                landed[gang].append(best)
            trial[best] += g
            trial[j] -= g
            placement[i] = best
        if not ok:
            continue
        load = trial
        for i, k in placement.items():
            assign[i] = k
        for b, n in extra.items():
            used_budget[b] += n
        moved_gangs |= {problem.pods[i].gang for i in restart if problem.pods[i].gang}  # type: ignore[misc]
        released.add(j)
    return PoolPlan(assign, moved_gangs, "greedy", False)


def optimal_nodes(units: list[Unit], capacities: list[float], *, time_limit_s: float = 2.0) -> int | None:
    """Minimum number of nodes that can hold every unit, or None if too big or not solved
    (no move limits: the yardstick a plan's node count is compared with)."""
    if not capacities:
        return 0
    if len(units) * len(capacities) > MAX_VARIABLES:
        return None
    import highspy

    h = _highs()
    h.setOptionValue("time_limit", float(time_limit_s))
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
    h.minimize(sum(y))
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return round(h.getObjectiveValue())

"""Plan a node pool's packing: the exact ILP (HiGHS) where the pool is small enough, a greedy
fallback otherwise, and the plain fewest-nodes bound used as a yardstick.

A pool problem is nodes (capacity in GPUs, cost) and pods (GPUs, current node). A pod may be
pinned to its node; pods of a strict gang restart together (if one moves, all are evicted and
rescheduled, each to any node with room); budgets cap how many of a set of pods may be evicted
(PodDisruptionBudgets, the elastic part of a gang). The ILP minimises the cost of the nodes
kept, then the GPUs moved.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

MAX_VARIABLES = 6000


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
    """The exact plan, or None when the pool is too big or HiGHS found no proven optimum in time."""
    n_nodes = len(problem.nodes)
    free = [i for i, p in enumerate(problem.pods) if not p.pinned and p.gang not in problem.pinned_gangs()]
    if len(free) * n_nodes > max_variables:
        return None
    if not problem.pods:
        return PoolPlan([], set(), "ilp", True)
    import highspy

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
            x[i, j] = h.addBinary()
            load[j].append(p.gpus * x[i, j])
        h.addConstr(sum(x[i, j] for j in range(n_nodes)) == 1)
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
    cheapest = min((nd.cost for nd in problem.nodes if nd.cost > 0), default=1.0)
    objective = [max(nd.cost, cheapest) / cheapest * total_gpus * y[j] for j, nd in enumerate(problem.nodes)]
    for i in free:
        p = problem.pods[i]
        if p.gang in gang_var:
            continue
        objective.append(p.gpus * (1 - x[i, p.node]))
    for gang, m in gang_var.items():
        objective.append(sum(problem.pods[i].gpus for i in problem.gangs()[gang]) * m)
    h.minimize(sum(objective))
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    sol = h.getSolution().col_value

    def val(v: Any) -> float:
        return float(sol[v.index])

    assign = []
    for i, p in enumerate(problem.pods):
        if i not in free_set:
            assign.append(p.node)
        else:
            assign.append(max(range(n_nodes), key=lambda j, i=i: val(x[i, j])))
    moved = {g for g, m in gang_var.items() if val(m) > 0.5}
    return PoolPlan(assign, moved, "ilp", True)


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
        ok = True
        for i in sorted(moving, key=lambda i: (-problem.pods[i].gpus, problem.pods[i].name)):
            g = problem.pods[i].gpus
            targets = [k for k in range(len(problem.nodes)) if k != j and k not in released and on[k]
                       and trial[k] + g <= problem.nodes[k].capacity + 1e-9]
            if not targets:
                ok = False
                break
            best = min(targets, key=lambda k: (problem.nodes[k].capacity - trial[k] - g, problem.nodes[k].name))
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

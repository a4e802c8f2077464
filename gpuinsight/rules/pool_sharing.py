"""Plan GPU sharing in one node pool together with where the whole-GPU pods go (pure).

The small workloads of a pool (:class:`~gpuinsight.rules.consolidation_plan.Demand`) are packed
onto shared GPUs:

1. **MIG per GPU** on nodes that allow it (a MIG-capable model, the device plugin's mixed
   strategy, and DCGM saying which GPU each pod holds, so that the GPU to partition is known to
   be free): first-fit decreasing onto GPUs of any valid layout; a GPU shared by fewer than two
   workloads frees nothing and is not made.
2. **Sharing hosts** for what is left: a node given one configuration for all its GPUs (MPS for
   production, time-slicing for other work, or a named MIG layout where the single strategy
   runs), the node holding most of these workloads first, each with the configuration that
   frees most GPUs. Every whole-GPU pod on a host must move away.

Then one placement problem (:mod:`gpuinsight.rules.pool_plan`) decides, with binpack's
objective (cost of the nodes kept, then the GPUs moved), where the MIG-partitioned GPUs go and
where every whole-GPU pod ends up: a partitioned GPU must be free before its node is
repartitioned (free now, or held by a small workload stopped first, or by a whole pod the plan
moves away), hosts are emptied, gangs move whole or not at all, PodDisruptionBudgets hold. What
cannot be placed is dropped (hosts first, then the partitioned GPUs that free least) until the
problem has a plan. The GPU indices come last: free GPUs first, then those of pods moved away,
then those of small workloads stopped first.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpuinsight.gpumodels import MEMORY_MIB, is_mig_capable
from gpuinsight.keys import NodeKey, PoolKey
from gpuinsight.kubelabels import label_map
from gpuinsight.rules.common import Targets, num
from gpuinsight.rules.consolidation_plan import (
    Demand,
    HostChoice,
    HostNode,
    MigGpu,
    best_host_choice,
    mig_configs,
    pack_mig_gpus,
)
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.mig_packing import MigProfile
from gpuinsight.rules.pack_bound import PoolPlan, PoolProblem, check_plan
from gpuinsight.rules.pool_plan import PoolInputs, PoolPodRow, build_problem, move_list, solve
from gpuinsight.sql.rows import Row

STRATEGY_LABEL = "nvidia.com/mig.strategy"
# sharing hosts are chosen among this many candidate nodes at a time (those holding most small
# workloads): enough to find one whose own workloads fit, bounded for pools of thousands of nodes
HOST_CANDIDATES = 16


@dataclass
class Repartition:
    """A node that partitions some of its GPUs with MIG and keeps the others whole."""

    node: str
    gpu_count: int
    gpus: dict[int, MigGpu] = field(default_factory=dict)   # GPU index -> its partition
    evict: list[dict[str, Any]] = field(default_factory=list)  # whole pods moved off first (moves)
    stop_first: list[Demand] = field(default_factory=list)  # small workloads whose GPU is partitioned

    def layout(self) -> list[dict[str, Any]]:
        """The node's mig-parted config entries: whole GPUs ``mig-enabled: false``, then each
        partitioned GPU (GPUs with the same instances in one entry)."""
        whole = [i for i in range(self.gpu_count) if i not in self.gpus]
        out: list[dict[str, Any]] = [{"devices": whole, "mig-enabled": False}] if whole else []
        by_devices: dict[tuple[tuple[str, int], ...], list[int]] = defaultdict(list)
        for index, gpu in sorted(self.gpus.items()):
            by_devices[tuple(gpu.devices().items())].append(index)
        for devices, indices in sorted(by_devices.items(), key=lambda kv: kv[1]):
            out.append({"devices": indices, "mig-enabled": True, "mig-devices": dict(devices)})
        return out


@dataclass
class Host:
    """A node whose every GPU gets one sharing configuration."""

    node: str
    choice: HostChoice
    evict: list[dict[str, Any]] = field(default_factory=list)
    stop_first: list[Demand] = field(default_factory=list)  # its own workloads, before a MIG repartition


@dataclass
class PoolSharing:
    key: PoolKey
    repartitions: dict[str, Repartition]
    hosts: list[Host]
    problem: PoolProblem
    plan: PoolPlan
    free_after: dict[str, float]  # node -> GPUs free after the plan (for where the claims go)
    # moves the plan makes elsewhere so that those off the hosts and repartitioned GPUs have room
    room: list[dict[str, Any]] = field(default_factory=list)


def node_strategy(n: Row, setting: str) -> str:
    """The device plugin's MIG strategy on a node: the setting, else the node's label (GPU feature
    discovery writes it), else ``mixed`` (what per-GPU partitioning needs; a prerequisite)."""
    if setting in ("mixed", "single"):
        return setting
    return str(label_map(n.labels).get(STRATEGY_LABEL) or "mixed")


def plan_pool(key: PoolKey, members: list[Row], demands: list[Demand],
              pods_on: dict[NodeKey, list[Row]], placed_now: dict[str, list[Row]],
              inputs: PoolInputs, profiles: list[MigProfile], layouts: list[Any], t: Targets,
              settings: dict[str, Any], ctx: PlanContext) -> PoolSharing | None:
    """Shared GPUs and the placement of a pool. ``pods_on``: whole-GPU pods per (cluster, node)
    after the earlier findings (the demands among them); ``placed_now``: every pod holding GPUs
    on each node now (what says which GPUs are free)."""
    cluster, model = key.cluster, key.gpu_model
    binpack = ctx.rule_settings("binpack")
    by_name = {n.node: n for n in members}
    mig_nodes = {n.node for n in members if _mig_ok(n, placed_now.get(n.node, []), model, settings)}
    gpus = [g for g in pack_mig_gpus(demands, profiles, layouts, t) if g.gain >= 1] if mig_nodes else []
    taken = {id(d) for g in gpus for d, _ in g.members}
    hosts = _choose_hosts([d for d in demands if id(d) not in taken], members, pods_on, placed_now, profiles,
                          layouts, t, settings, cluster)
    while gpus or hosts:
        leaving = {(d.key[1], d.pod) for g in gpus for d, _ in g.members}
        leaving |= {(d.key[1], d.pod) for h in hosts for d in h.choice.members}
        mine = {NodeKey(cluster, n.node): [p for p in pods_on.get(NodeKey(cluster, n.node), [])
                                       if (p.namespace, p.pod) not in leaving] for n in members}
        problem, rows = build_problem(key, members, mine, inputs, binpack, ctx)
        for nd in problem.nodes:
            if nd.name in mig_nodes:
                free, stoppable = _free_indices(by_name[nd.name], placed_now.get(nd.name, []), gpus)
                nd.mig_slots = int(num(by_name[nd.name].gpu_count))
                nd.early_free = len(free) + len(stoppable)
                nd.free_now = len(free)
                nd.production_stops = sum(d.production for _, d in stoppable)
            if any(h.node == nd.name for h in hosts):
                nd.evacuate = True
        problem.shared_gpus = len(gpus)
        plan = solve(problem, binpack, ctx, key)
        if plan.feasible and not check_plan(problem, plan):
            break
        if hosts:
            hosts.pop()
        else:  # keep as many GPUs as the plan could place, those that free most first
            gpus.sort(key=lambda g: -g.gain)
            del gpus[max(0, min(sum(plan.shared.values()), len(gpus) - 1)):]
    else:
        return None
    shared = {id(d) for h in hosts for d in h.choice.members}
    for h in hosts:  # a named layout repartitions every GPU: its workloads that move anywhere stop first
        if h.choice.mode == "mig":
            h.stop_first = [d for d in demands if d.node == h.node and id(d) in shared]
    # what is done now: only the moves the shared GPUs and hosts need, onto nodes the plan keeps
    # (the rest of the plan is binpack's, solved again once these are in place)
    now, plan_now = _needed_moves(problem, plan, binpack, ctx, key)
    sharing = PoolSharing(key, {}, hosts, now, plan_now, {})
    _assign_gpus(sharing, gpus, rows, by_name, placed_now)
    for h in hosts:
        j = next(j for j, nd in enumerate(now.nodes) if nd.name == h.node)
        on_host = {i for i, p in enumerate(now.pods) if p.node == j}
        h.evict = move_list(now, plan_now, rows, _with_gangs(now, plan_now, on_host))
    done = {(m["namespace"], pod) for part in [*sharing.repartitions.values(), *hosts] for m in part.evict
            for pod in m["pods"]}
    rest = {i for i in plan_now.evicted(now) if (rows[i].pod.namespace, rows[i].pod.pod) not in done}
    sharing.room = move_list(now, plan_now, rows, rest) if rest else []
    # claims go on GPUs free both once these moves are made and in the whole plan (so binpack can
    # still carry it out); on a node the whole plan releases, on what is free now
    after, soon = _free(problem, plan, hosts), _free(now, plan_now, hosts)
    kept = _kept(problem, plan)
    for j, nd in enumerate(problem.nodes):
        sharing.free_after[nd.name] = min(after[j], soon[j]) if j in kept else soon[j]
    return sharing


def _kept(problem: PoolProblem, plan: PoolPlan) -> set[int]:
    return set(plan.assign) | set(plan.shared) | {j for j, nd in enumerate(problem.nodes) if nd.fixed > 0 or nd.evacuate}


def _free(problem: PoolProblem, plan: PoolPlan, hosts: list[Host]) -> list[float]:
    """GPUs of each node free under a plan (its capacity less what it holds then)."""
    load = [nd.fixed + plan.shared.get(j, 0) for j, nd in enumerate(problem.nodes)]
    for i, p in enumerate(problem.pods):
        load[plan.assign[i]] += p.gpus
    for h in hosts:
        j = next(j for j, nd in enumerate(problem.nodes) if nd.name == h.node)
        load[j] += h.choice.gpus_used
    return [max(0.0, nd.capacity - load[j]) for j, nd in enumerate(problem.nodes)]


def _needed_moves(problem: PoolProblem, plan: PoolPlan, settings: dict[str, Any], ctx: PlanContext,
                  key: PoolKey) -> tuple[PoolProblem, PoolPlan]:
    """The same shared GPUs per node and hosts, with as few moves as possible, none onto a node
    the whole plan releases. Such a plan exists (the whole plan's moves off the nodes it keeps)."""
    now = copy.deepcopy(problem)
    now.release = False
    kept = _kept(problem, plan)
    for j, nd in enumerate(now.nodes):
        nd.mig_slots = plan.shared.get(j, 0)
        nd.closed = nd.closed or j not in kept
    moved = solve(now, settings, ctx, key)
    if moved.feasible and not check_plan(now, moved):
        return now, moved
    gangs = {g for g in plan.moved_gangs if all(problem.pods[i].node in kept for i in problem.gangs()[g])}
    assign = [plan.assign[i] if p.node in kept and (not p.gang or p.gang in gangs) else p.node
              for i, p in enumerate(problem.pods)]
    return now, PoolPlan(assign, gangs, plan.method, plan.optimal, dict(plan.shared), True)


def _mig_ok(n: Row, pods: list[Row], model: Any, settings: dict[str, Any]) -> bool:
    """A node that may partition some GPUs: MIG-capable, mixed strategy, and every pod on it
    located on its GPUs (else the GPU to partition could be one a staying pod holds)."""
    if not is_mig_capable(model) or node_strategy(n, settings["mig_strategy"]) != "mixed":
        return False
    return all(p.gpu_indices for p in pods if num(p.gpu_request) > 0)


def _free_indices(n: Row, pods: list[Row], gpus: list[MigGpu]
                  ) -> tuple[list[int], list[tuple[int, Demand]]]:
    """GPUs of a node free now, and (GPU, small workload) of those held by a workload of
    ``gpus`` that may be stopped first (no PodDisruptionBudget, not a gang)."""
    held: set[int] = set()
    for p in pods:
        held |= set(p.gpu_indices or [])
    free = [i for i in range(int(num(n.gpu_count))) if i not in held]
    stoppable = [(d.gpu_indices[0], d) for g in gpus for d, _ in g.members
                 if d.node == n.node and d.evictable and d.gpu_indices and len(d.gpu_indices) == 1]
    return free, sorted(stoppable, key=lambda x: (x[1].production, x[0], x[1].pod))  # production last


def _with_gangs(problem: PoolProblem, plan: PoolPlan, pods: set[int]) -> set[int]:
    """The pods, with every other pod of a strict gang one of them belongs to (it restarts whole)."""
    gangs = problem.gangs()
    out = set(pods)
    for i in pods:
        g = problem.pods[i].gang
        if g and g in plan.moved_gangs:
            out |= set(gangs[g])
    return out


def _assign_gpus(sharing: PoolSharing, gpus: list[MigGpu], rows: list[PoolPodRow],
                 by_name: dict[str, Row], placed_now: dict[str, list[Row]]) -> None:
    """Put each partitioned GPU on a node the plan gave room to, and choose its GPU index: a
    free GPU, else one a pod the plan moves away holds, else one of a small workload stopped first."""
    problem, plan = sharing.problem, sharing.plan
    todo = sorted(gpus, key=lambda g: -g.gain)
    for j in sorted(plan.shared, key=lambda j: problem.nodes[j].name):
        nd = problem.nodes[j]
        n = by_name[nd.name]
        count = plan.shared[j]
        # the partitions whose workloads run on this node go here first
        todo.sort(key=lambda g: -sum(d.node == nd.name for d, _ in g.members))
        mine, todo = todo[:count], todo[count:]
        free, stoppable = _free_indices(n, placed_now.get(nd.name, []), gpus)
        moved_off = sorted((i for i, p in enumerate(problem.pods) if p.node == j and plan.assign[i] != j),
                           key=lambda i: (-problem.pods[i].gpus, problem.pods[i].name))
        rp = Repartition(nd.name, int(num(n.gpu_count)))
        chosen: list[int] = []
        evicted: set[int] = set()
        for index in free:
            if len(chosen) < count:
                chosen.append(index)
        for i in moved_off:
            if len(chosen) >= count:
                break
            evicted.add(i)
            chosen += [x for x in rows[i].pod.gpu_indices or [] if x not in chosen][: count - len(chosen)]
        for index, d in stoppable:
            if len(chosen) >= count:
                break
            if index not in chosen:
                chosen.append(index)
                rp.stop_first.append(d)
        for index, gpu in zip(sorted(chosen), mine, strict=False):
            rp.gpus[index] = gpu
        rp.evict = move_list(problem, plan, rows, _with_gangs(problem, plan, evicted)) if evicted else []
        sharing.repartitions[nd.name] = rp


def _choose_hosts(demands: list[Demand], members: list[Row],
                  pods_on: dict[NodeKey, list[Row]], placed_now: dict[str, list[Row]],
                  profiles: list[MigProfile], layouts: list[Any], t: Targets, settings: dict[str, Any],
                  cluster: str) -> list[Host]:
    """Nodes given one sharing configuration for all their GPUs, the node holding most of the
    demands first, each with the configuration that frees most GPUs (none that frees nothing):
    its own demands first, then the others. What else runs on a host (whole-GPU pods, its own
    demands the configuration cannot hold) must move away; a node running a MIG pod cannot host."""
    hosts: list[Host] = []
    placed: set[int] = set()
    ascending = sorted(demands, key=lambda d: (d.size, d.key))
    on_node: dict[str, list[Demand]] = defaultdict(list)
    for d in demands:
        on_node[d.node].append(d)
    small = {(d.key[1], d.pod) for d in demands}

    def others(n: Row) -> float:
        return sum(num(p.gpus) for p in pods_on.get(NodeKey(cluster, n.node), [])
                   if (p.namespace, p.pod) not in small)

    def choose(n: Row) -> tuple[HostChoice, float] | None:
        own = [d for d in on_node[n.node] if id(d) not in placed]
        if not own or any(p.mig_profile for p in pods_on.get(NodeKey(cluster, n.node), [])):
            return None
        gpu_count = int(num(n.gpu_count))
        mine = {id(d) for d in own}
        rest = [d for d in ascending if id(d) not in placed and id(d) not in mine]
        limit = 2 * gpu_count * max(t.max_clients, 7)  # enough to fill the host twice over
        own_first = sorted(own, key=lambda d: (d.size, d.key))
        orders = [own_first + rest[:limit], own_first + rest[::-1][:limit]]
        memory = MEMORY_MIB.get(n.gpu_model or "", 0) or max(num(d.row.gpu_memory_mib) for d in own)
        single = is_mig_capable(n.gpu_model) and node_strategy(n, settings["mig_strategy"]) == "single"
        # a named layout repartitions every GPU of the node: each must be free first, so its own
        # workloads must be stoppable and nothing may still be leaving by another finding's change
        staying = {(p.namespace, p.pod) for p in pods_on.get(NodeKey(cluster, n.node), [])}
        free_first = all(d.evictable for d in own) and all(
            (p.namespace, p.pod) in staying for p in placed_now.get(n.node, []))
        configs = mig_configs(profiles, layouts) if single and free_first else []
        choice = best_host_choice(HostNode(n.node, gpu_count, memory, []), orders, configs, t)
        if choice is None:
            return None
        members = {id(d) for d in choice.members}
        return choice, others(n) + sum(1 for d in own if id(d) not in members)

    candidates = sorted(members, key=lambda n: (-len(on_node[n.node]), others(n), num(n.gpu_count),
                                                n.node))
    while candidates:
        # of the nodes holding most demands, the one that frees most GPUs, then moves least away
        window = [(n, c) for n in candidates[:HOST_CANDIDATES] if (c := choose(n)) is not None]
        if not window:
            candidates = candidates[HOST_CANDIDATES:]
            continue
        n, (choice, evacuated) = min(window, key=lambda nc: (-nc[1][0].gain, nc[1][1], nc[0].node))
        placed |= {id(d) for d in choice.members}
        hosts.append(Host(n.node, choice))
        candidates = [c for c in candidates if c is not n]
    return hosts

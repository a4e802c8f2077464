"""BinpackRule: plan each node pool so that whole nodes can be released.

A pool is the nodes of one (cluster, node pool, zone, GPU model) that hold whole-GPU work
after the earlier findings of the plan (idle pods scaled away, workloads consolidated onto MIG
or shared-GPU hosts; sharing hosts, MIG nodes and shared-GPU nodes are not planned; nodes where
consolidation partitioned some GPUs are, those GPUs fixed, the pods it moved pinned where they
went). It is the problem the consolidation rule planned with the shared GPUs
(:mod:`gpuinsight.rules.pool_plan`), solved again: by the exact ILP (HiGHS) where the pool is
small enough, else greedily.

* A strict gang (Volcano PodGroup / Job whose minMember covers all its pods) moves whole: if
  one pod moves, all restart together, each landing on any node with room. A gang whose
  minMember is below its pod count is a gang only up to minMember: its pods move one by one,
  at most (pods - minMember) of them.
* PodDisruptionBudgets cap the pods of their selector that may be evicted.
* Busy multi-pod gangs (mean GR activity at least ``busy_gang_activity``) are never touched;
  production pods only move if ``include_production``.
* GPUs that earlier findings returned to the pool are not filled with moved work.
* Topology: among plans releasing the same nodes, a moved gang lands within the tightest
  network domain it can (one node, then one NVLink domain, rack, block: Volcano HyperNodes or
  node labels, :mod:`gpuinsight.rules.topology_domains`); the evidence gives each moved gang's
  span before and after.

The saving is what each released node costs, less what earlier findings already claimed of
it; the finding belongs to the pool (its nodes), not to a workload.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import polars as pl

from gpuinsight.keys import NodeKey, PoolKey
from gpuinsight.plan import Recommendation, finding_id
from gpuinsight.plan.kinds.binpack import BINPACK, BinpackProposed, NodeSetTarget
from gpuinsight.rules.base import Rule
from gpuinsight.rules.common import cluster_of, monthly, num
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.pack_bound import (
    MAX_NODES,
    MAX_VARIABLES,
    SAFETY_TIME_LIMIT_S,
    PoolPlan,
    PoolProblem,
    Stop,
    Unit,
    yardstick,
)
from gpuinsight.rules.pool_plan import (
    PoolInputs,
    PoolPodRow,
    build_problem,
    in_pool_order,
    method,
    move_list,
    plannable,
    pods_after,
    pool_key,
    pool_name,
    record_moves,
    solve,
    solve_limits,
)
from gpuinsight.rules.settings import FRACTION, Setting
from gpuinsight.sql.rows import Row


class BinpackRule(Rule):
    name = "binpack"
    summary = "Plan each node pool so whole nodes can be released (gang-safe, PDB-aware, ILP where small)."
    needs = ("placement_current", "nodes_current", "workload_gpu_profile", "disruption_budgets")
    settings = (
        Setting("include_production", True, "Allow moving production pods (they restart once)."),
        Setting("busy_gang_activity", 0.5, "Multi-pod gangs at least this busy (mean GR activity) are never moved.",
                bounds=FRACTION),
        Setting("ilp_max_variables", MAX_VARIABLES, "Pools up to this many (pods x nodes) are solved exactly.",
                (0, 1_000_000)),
        Setting("ilp_max_nodes", MAX_NODES, "Branch-and-bound nodes one exact solve may explore (its work bound: "
                "the same on any machine); a pool not proven optimal within them keeps the best plan found where it "
                "beats the greedy plan, else the greedy plan.",
                (1, 10_000_000)),
        Setting("ilp_time_limit_s", SAFETY_TIME_LIMIT_S, "Last-resort wall-clock limit of one exact solve, far "
                "above normal solve times; a solve it stops makes that pool's plan load-dependent, and the "
                "plan's notes say so.", (0.001, 86_400.0)),
        Setting("confidence", 0.7, "Confidence of a plan (placement is observed, savings need the node released).",
                bounds=FRACTION),
    )
    kinds = (BINPACK,)

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        inputs = PoolInputs(frames, ctx)
        pods_on = pods_after(inputs.placement, ctx)
        leaving: dict[NodeKey, list[dict[str, Any]]] = defaultdict(list)
        for p in inputs.placement:
            by = ctx.leaves_by(p.pod_key, p.workload_key)
            if by:
                leaving[p.node_key].append({"namespace": p.namespace, "pod": p.pod, "finding": by})
        pools: dict[PoolKey, list[Row]] = defaultdict(list)
        for n in ctx.rows(frames, "nodes_current"):
            key = n.node_key
            if not plannable(n, key, ctx) or not (pods_on.get(key) or ctx.partitioned_gpus(key)):
                continue
            pools[pool_key(n)].append(n)
        out = []
        topo = ctx.topology(frames)
        for pool, members in in_pool_order(pools):
            problem, pod_rows = build_problem(pool, members, pods_on, inputs, settings, ctx)
            for nd in problem.nodes:  # the pool is one zone: the domains between node and zone count
                nd.domains = tuple(d for lvl, d, _ in topo.of(pool.cluster, nd.name).path[1:] if lvl != "zone")
            rec = self._plan_pool(pool, members, problem, pod_rows, leaving, settings, ctx)
            if rec is not None:
                out.append(rec)
        return out

    def _plan_pool(self, pool_key: tuple[Any, ...], members: list[Row], problem: PoolProblem,
                   pod_rows: list[PoolPodRow], leaving: dict[NodeKey, list[dict[str, Any]]],
                   settings: dict[str, Any], ctx: PlanContext) -> Recommendation | None:
        cluster, pool, zone, model = pool_key
        plan = solve(problem, settings, ctx, pool_key)
        used = set(plan.assign) | {j for j, nd in enumerate(problem.nodes) if nd.fixed > 0}
        freed = [j for j in range(len(problem.nodes)) if j not in used]
        if not freed:
            return None
        names = [problem.nodes[j].name for j in freed]
        rid = finding_id(BINPACK.name, cluster_of(members[0]), None, None, "/".join(str(x) for x in pool_key[1:]), None)
        released, saving = [], 0.0
        for j in freed:
            n = members[j]
            ctx.ledger.account(NodeKey(cluster, n.node), num(n.usd_per_hour), num(n.gpu_count), price_known=True)
            granted = ctx.ledger.release(rid, NodeKey(cluster, n.node))
            saving += granted
            released.append({"node": n.node, "node_usd_per_hour": round(num(n.usd_per_hour), 4),
                             "saving_usd_per_hour": round(granted, 4), "gpus": num(n.gpu_count)})
        moves = move_list(problem, plan, pod_rows)
        record_moves(ctx, rid, cluster, moves, problem)
        moved_prod = sorted({f"{m['namespace']}/{m['workload']}: {m['production_reason']}" for m in moves
                             if m["production"]})
        for m in moves:
            del m["production"], m["production_reason"], m["_index"]
        held = sum(p.gpus for p in problem.pods) + sum(nd.fixed for nd in problem.nodes)
        lower = math.ceil(held / max(max(nd.capacity for nd in problem.nodes), 1) - 1e-9)
        unconstrained, search = yardstick(
            [Unit(p.gpus, p.node if p.pinned or p.gang in problem.pinned_gangs() else None) for p in problem.pods]
            + [Unit(nd.fixed, j) for j, nd in enumerate(problem.nodes) if nd.fixed > 0],
            [nd.capacity for nd in problem.nodes], limits=solve_limits(settings))
        if search.stop is Stop.TIME_LIMIT:
            ctx.note(f"pool {pool_name(pool_key)}: the unconstrained optimum (the binpack finding's yardstick) "
                     f"stopped at the wall-clock safety limit (binpack.ilp_time_limit_s = "
                     f"{settings['ilp_time_limit_s']:g} s): it is left unknown, which depends on the machine's load")
        kept = len(problem.nodes) - len(freed)
        gangs = sorted(plan.moved_gangs)
        spans = gang_spans(problem, plan)
        return Recommendation(
            rule=BINPACK.name, id=rid, cluster=cluster_of(members[0]), node=names[0] if len(names) == 1 else None,
            title=(f"Pool {pool} ({zone}, {model}): move {len(moves)} gang(s)/pod(s) and release "
                   f"{len(names)} of {len(problem.nodes)} node(s): {', '.join(names[:5])}"
                   + (" ..." if len(names) > 5 else "")),
            current={"nodes": len(problem.nodes), "gpus_held": round(held, 3)},
            proposed=BinpackProposed(moves, names, pool,
                                     [p for n in names for p in leaving.get(NodeKey(cluster, n), [])]).to_dict(),
            monthly_savings_usd=monthly(saving),
            confidence=settings["confidence"] if saving else 0.3,
            evidence={
                "pool": pool, "zone": zone, "gpu_model": model, "pool_nodes": len(problem.nodes),
                "nodes_after": kept, "nodes_released": released,
                "method": method(plan, settings),
                "plan_is_optimal": plan.optimal,
                "ilp_search_nodes": plan.search.nodes,
                "pool_optimal_nodes": kept if plan.optimal else None,
                "unconstrained_optimal_nodes": unconstrained,
                "pool_lower_bound_nodes": lower,
                "gap_to_lower_bound_nodes": kept - lower,
                "gpus_moved": round(sum(m["gpus"] for m in moves), 3),
                "gangs_restarted": gangs,
                "gang_spans": spans,
                "production_moved": moved_prod,
            },
            target=NodeSetTarget(names, "NodeSet", pool).to_dict(),
        )


def gang_spans(problem: PoolProblem, plan: PoolPlan) -> dict[str, dict[str, str]]:
    """Each moved gang's spread before and after the plan (one node, one level-k domain, the pool)."""
    out = {}
    for gang, members in sorted(problem.gangs().items()):
        if gang not in plan.moved_gangs:
            continue
        before = problem.span({problem.pods[i].node for i in members})
        after = problem.span({plan.assign[i] for i in members})
        out[gang] = {"before": span_name(problem, before), "after": span_name(problem, after)}
    return out


def span_name(problem: PoolProblem, span: int) -> str:
    if span == 0:
        return "one node"
    if span > problem.domain_levels():
        return "the pool (several domains)"
    return f"one level-{span} domain"

"""What the CLI's ``recommend --apply`` and ``rollback PLAN_ID`` call (one string back to print).

``context`` is what ``--context`` gave: one kubeconfig context for a plan (or the part of it
chosen with ``--only``) whose changes are all in one cluster, or {cluster: context}
(``--context CLUSTER=CTX``, repeated); see :mod:`gpuinsight.actions.clusters`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING

from gpuinsight.actions import audit, model
from gpuinsight.actions.apply import apply_plan, rollback
from gpuinsight.actions.audit import ApplyResult
from gpuinsight.actions.builders import ordered_actions
from gpuinsight.actions.clusters import action_cluster, per_cluster, require
from gpuinsight.actions.diff import diff_plan
from gpuinsight.actions.eks import Eks
from gpuinsight.actions.kube import Kube
from gpuinsight.actions.plan import warehouse_states
from gpuinsight.actions.state import ClusterState
from gpuinsight.errors import GpuInsightError

if TYPE_CHECKING:
    from gpuinsight.api import GpuInsight
    from gpuinsight.rules.base import Plan
    from gpuinsight.warehouse import Warehouse

Contexts = str | dict[str, str] | None


def eks_region(wh: Warehouse, cluster: str | None = None) -> str | None:
    """The AWS region of the EKS node groups the warehouse knows of ``cluster`` (any cluster when
    None), from their ARNs, if any."""
    sql = "SELECT spec FROM node_pools WHERE kind = 'eks-nodegroup'"
    rows = wh.sql(sql + " AND cluster = ?", [cluster]).rows() if cluster else wh.sql(sql).rows()
    for (spec,) in rows:
        arn = str(spec or "")
        marker = "arn:aws:eks:"
        if marker in arn:
            return arn.split(marker, 1)[1].split(":", 1)[0] or None
    return None


def kubes_for(contexts: Contexts, clusters: Iterable[str], *, required: Iterable[str] = ()) -> dict[str, Kube]:
    """A Kubernetes client per cluster that has a context (one context: the one cluster there
    is); every cluster in ``required`` must have one (checked before any client is made)."""
    named = per_cluster(contexts, clusters, what="kube context", flag="--context")
    for cluster in sorted(set(required)):
        require(named, cluster, what="kube context", flag="--context")
    made: dict[str, Kube] = {}
    for ctx in sorted(set(named.values())):
        made[ctx] = Kube.from_kubeconfig(ctx)
    return {cluster: made[ctx] for cluster, ctx in named.items()}


def eks_for(wh: Warehouse, actions: list[dict[str, object]]) -> dict[str, Eks] | None:
    """An EKS client per cluster whose actions call EKS, in the region of its node groups."""
    clusters = sorted({action_cluster(a) for a in actions if a.get("type") == "aws-eks"})
    if not clusters:
        return None
    regions = {c: eks_region(wh, c or None) or eks_region(wh) for c in clusters}
    made = {r: Eks.from_region(r) for r in set(regions.values())}
    return {c: made[r] for c, r in regions.items()}


def _clusters(plan: Plan, only: list[str] | None = None) -> list[str]:
    return sorted({r.cluster for r in plan.recommendations if not only or r.id in only})


def kubes_to_apply(plan: Plan, context: Contexts, only: list[str] | None = None) -> dict[str, Kube]:
    """A client for every cluster the (chosen) findings change through Kubernetes, checked
    before anything is read: one context stands for the one such cluster; a cluster with none
    named is refused (BadInput), never given the current context."""
    need = sorted({action_cluster(a) for a in ordered_actions(plan, set(only) if only else None)
                   if a["type"] not in model.INERT_TYPES and a["type"] != "aws-eks"})
    return kubes_for(context, need, required=need)


def diff_from_cli(gi: GpuInsight, plan: Plan, *, context: Contexts = None, dump_dir: Contexts = None) -> str:
    """``recommend``'s diff: against the live clusters (``context``), kubectl dumps (``dump_dir``,
    one folder or {cluster: folder}), or what the warehouse recorded. The plan's actions are
    rebuilt from that state."""
    from gpuinsight.actions import prepare_plan

    states = prepare_plan(plan, gi.wh, kube=kubes_for(context, _clusters(plan)) if context else None,
                          dump_dir=dump_dir)
    return diff_plan(plan, states)


def reviewed_state(plan: Plan, wh: Warehouse | None, *, kube: Kube | dict[str, Kube] | None = None
                   ) -> dict[str, ClusterState]:
    """The state a reviewed plan's actions are shown against, WITHOUT rebuilding them, per
    cluster: the objects they touch, live where a client is given, else as the warehouse
    recorded them."""
    clusters = _clusters(plan)
    states = warehouse_states(wh, clusters) if wh is not None else {c: ClusterState(cluster=c) for c in clusters}
    kubes = per_cluster(kube, clusters, what="kube context", flag="--context")
    for cluster, client in kubes.items():
        if cluster not in states:
            continue
        refs = [r for a in ordered_actions(plan) if a["type"] not in ("note", "refused")
                and action_cluster(a) == cluster and (r := model.action_ref(a)) is not None]
        states[cluster].refresh(client, refs, overwrite=True)
    return states


def _recorded(wh: Warehouse, run: Callable[[], ApplyResult]) -> ApplyResult:
    """Run an apply or a rollback, then write its audit rows (each committed as the change it
    records happened) into the file before the result is reported. After a failure the rows are
    committed all the same; the checkpoint is tried, and its own failure never hides the first."""
    try:
        result = run()
    except BaseException:
        with contextlib.suppress(GpuInsightError):
            wh.checkpoint()
        raise
    wh.checkpoint()
    return result


def _result_text(plan: Plan, diff: str, result: ApplyResult) -> str:
    lines = [diff, ""] + [f"{s.seq:>3} {s.status:<12} {s.operation:<10} {s.target}" for s in result.steps]
    lines.append(result.summary() + (f"; undo with: gpuinsight rollback {plan.plan_id}" if result.steps else ""))
    return "\n".join(lines)


def apply_from_cli(gi: GpuInsight, plan: Plan, *, context: Contexts = None,
                   max_age: timedelta = timedelta(hours=24), only: list[str] | None = None) -> str:
    """A fresh plan: build its actions from live objects, show the diff, then apply (dry run
    first). Each cluster the applied findings are in needs its context."""
    from gpuinsight.actions import prepare_plan

    kubes = kubes_to_apply(plan, context, only)  # the plan's actions as built from the warehouse
    states = prepare_plan(plan, gi.wh, kube=kubes)
    text = diff_plan(plan, states)
    actions = ordered_actions(plan, set(only) if only else None)
    result = _recorded(gi.wh, lambda: apply_plan(plan, kubes, gi.wh, eks=eks_for(gi.wh, actions), max_age=max_age,
                                                 only=only or None))
    return _result_text(plan, text, result)


def apply_reviewed_from_cli(gi: GpuInsight, plan: Plan, *, context: Contexts = None,
                            max_age: timedelta = timedelta(hours=24), only: list[str] | None = None) -> str:
    """A reviewed plan (``--plan FILE``, its signature already checked): apply exactly its
    actions, nothing rebuilt; the drift check compares what it observed with the live objects."""
    kubes = kubes_to_apply(plan, context, only)
    text = diff_plan(plan, reviewed_state(plan, gi.wh, kube=kubes))
    actions = ordered_actions(plan, set(only) if only else None)
    result = _recorded(gi.wh, lambda: apply_plan(plan, kubes, gi.wh, eks=eks_for(gi.wh, actions), max_age=max_age,
                                                 only=only or None))
    return _result_text(plan, text, result)


def rollback_from_cli(gi: GpuInsight, plan_id: str, *, context: Contexts = None, force: bool = False) -> str:
    """Roll back what was applied of ``plan_id``, each change through its own cluster's context."""
    rows = audit.rows(gi.wh, plan_id, ("applied",))
    actions = [r["applied"].get("action") or {} for r in rows]
    kube_clusters = {action_cluster(a) for a in actions if a.get("type") != "aws-eks"}
    kubes = kubes_for(context, kube_clusters, required=kube_clusters) if kube_clusters and context else None
    result = _recorded(gi.wh, lambda: rollback(plan_id, kubes, gi.wh, eks=eks_for(gi.wh, actions), force=force))
    lines = [f"{s.seq:>3} {s.status:<12} {s.operation:<10} {s.target}: {s.message}" for s in result.steps]
    return "\n".join([*lines, result.summary()])


__all__ = ["apply_from_cli", "apply_reviewed_from_cli", "diff_from_cli", "eks_for", "eks_region", "kubes_for",
           "kubes_to_apply", "reviewed_state", "rollback_from_cli"]

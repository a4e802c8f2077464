"""The clients a plan's changes go through: a Kubernetes client per cluster (its kube context) and
an EKS client per cluster whose node groups the plan changes (in their region). ``contexts`` is
what ``--context`` gave: one kubeconfig context for a plan (or the part of it chosen with
``--only``) whose changes are all in one cluster, or {cluster: context} (see
:mod:`gpuinsight.actions.clusters`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpuinsight.actions.builders import ordered_actions
from gpuinsight.actions.clusters import action_cluster, per_cluster, require
from gpuinsight.actions.eks import Eks
from gpuinsight.actions.kube import Kube
from gpuinsight.plan.vocabulary import INERT_TYPES

if TYPE_CHECKING:
    from gpuinsight.plan import Plan
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
                   if a["type"] not in INERT_TYPES and a["type"] != "aws-eks"})
    return kubes_for(context, need, required=need)

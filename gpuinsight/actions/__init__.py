"""Actions: turn recommendations into Kubernetes objects/patches and AWS calls; show them as a
diff, write them as files, apply them safely (dry run, drift check, audit) and roll them back.

The CLI's faces (see docs/actions.md)::

    states = prepare_plan(plan, wh, kube=kube)     # fills rec.actions, per cluster
    print(diff_plan(plan, states))                 # recommend
    emit(plan, out_dir, contexts=contexts)         # recommend --emit DIR
    apply_plan(plan, kube, wh, eks=eks)            # recommend --apply
    rollback(plan_id, kube, wh, eks=eks)           # rollback PLAN_ID

A plan may hold findings of several clusters; each finding's actions are built from its own
cluster's state and applied through its own cluster's context: ``kube`` (and ``dump_dir``,
``eks``) is one value for a plan of one cluster, or a {cluster: value} mapping
(:mod:`gpuinsight.actions.clusters`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from gpuinsight.actions.apply import ApplyFailed, apply_plan, rollback
from gpuinsight.actions.audit import ApplyResult
from gpuinsight.actions.builders import attach_actions, build_actions, ordered_actions, required_refs
from gpuinsight.actions.clusters import parse_cluster_option, per_cluster
from gpuinsight.actions.diff import diff_plan
from gpuinsight.actions.eks import Eks
from gpuinsight.actions.emit import emit
from gpuinsight.actions.kube import Kube
from gpuinsight.actions.model import ActionError
from gpuinsight.actions.planio import load_plan, plan_to_json, validate_plan
from gpuinsight.actions.state import ClusterState

if TYPE_CHECKING:
    from gpuinsight.rules.base import Plan
    from gpuinsight.warehouse import Warehouse


def needs_eks(plan: Plan) -> bool:
    return any(a.get("type") == "aws-eks" for r in plan.recommendations for a in r.actions)


def prepare_plan(plan: Plan, wh: Warehouse, *, kube: Kube | Mapping[str, Kube] | None = None,
                 dump_dir: str | Path | Mapping[str, str | Path] | None = None) -> dict[str, ClusterState]:
    """Build every recommendation's actions and return, per cluster, the state to diff them against.

    Each cluster's actions are built from what the warehouse recorded of it (what the rules
    saw), completed with its kubectl dumps (``dump_dir``) or live objects (``kube``) for what
    the warehouse does not keep (workload specs, ConfigMaps); the state returned for a cluster is
    its live (or dumped) view. ``kube`` and ``dump_dir`` are one value for a plan of one
    cluster, or {cluster: value}; a cluster with none is built from the warehouse alone.
    """
    clusters = sorted({r.cluster for r in plan.recommendations})
    kubes = per_cluster(kube, clusters, what="kube context", flag="--context")
    dumps = per_cluster(dump_dir, clusters, what="kubectl dump folder", flag="--from-dir")
    states: dict[str, ClusterState] = {}
    views: dict[str, ClusterState] = {}
    for cluster in clusters:
        state = ClusterState.from_warehouse(wh, cluster)
        if cluster in dumps:
            view = ClusterState.from_dump_dir(Path(dumps[cluster]), cluster)
            for key, obj in view.objects.items():
                if key not in state.objects or state.known.get(key) == ():  # () : the warehouse kept no field
                    state.put(obj, view.sources[key])
            state.pods = state.pods or view.pods
            state.pdbs = state.pdbs or view.pdbs
            state.nodes = {**view.nodes, **state.nodes}
            state.node_pools = {**view.node_pools, **state.node_pools}
            views[cluster] = view
        if cluster in kubes:
            state.refresh(kubes[cluster], required_refs(plan, state), overwrite=False)
        states[cluster] = state
    attach_actions(plan, states)
    for cluster, kube_of in kubes.items():
        if cluster in states:
            view = states[cluster].copy()
            view.refresh(kube_of, required_refs(plan, states[cluster]), overwrite=True)
            views[cluster] = view
    return {c: views.get(c, states[c]) for c in clusters}


__all__ = [
    "ActionError", "ApplyFailed", "ApplyResult", "ClusterState", "Eks", "Kube", "apply_plan",
    "attach_actions", "build_actions", "diff_plan", "emit", "load_plan", "needs_eks", "ordered_actions",
    "parse_cluster_option", "plan_to_json", "prepare_plan", "required_refs", "rollback", "validate_plan",
]

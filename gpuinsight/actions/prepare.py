"""Build a plan's actions against the best state there is of each of its clusters: what the
warehouse recorded (no cluster contacted: :func:`actions_from_warehouse`, what a fresh plan
carries), completed with kubectl dumps or live objects (workload specs, ConfigMaps:
:func:`prepare_plan`, what ``recommend --apply`` rebuilds them from). A reviewed plan's actions
are never rebuilt: :func:`reviewed_state` is what they are shown against.

Workload specs are not in the warehouse, so workload edits that need container names fall back
to guarded patches until live objects or dumps are given."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from gpuinsight.actions import model
from gpuinsight.actions.builders import attach_actions, ordered_actions, required_refs
from gpuinsight.actions.clusters import action_cluster, per_cluster
from gpuinsight.actions.kube import Kube
from gpuinsight.actions.state import ClusterState

if TYPE_CHECKING:
    from gpuinsight.plan import Plan
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


def warehouse_states(wh: Warehouse, clusters: list[str]) -> dict[str, ClusterState]:
    """What the warehouse recorded of each of ``clusters``."""
    return {c: ClusterState.from_warehouse(wh, c) for c in sorted(set(clusters))}


def actions_from_warehouse(wh: Warehouse, plan: Plan) -> dict[str, ClusterState]:
    """Attach every finding's actions from its own cluster's rows in the warehouse (no cluster is
    contacted); returns the states they were built from."""
    states = warehouse_states(wh, [r.cluster for r in plan.recommendations])
    attach_actions(plan, states)
    return states


def reviewed_state(plan: Plan, wh: Warehouse | None, *, kube: Kube | Mapping[str, Kube] | None = None
                   ) -> dict[str, ClusterState]:
    """The state a reviewed plan's actions are shown against, WITHOUT rebuilding them, per
    cluster: the objects they touch, live where a client is given, else as the warehouse
    recorded them."""
    clusters = sorted({r.cluster for r in plan.recommendations})
    states = warehouse_states(wh, clusters) if wh is not None else {c: ClusterState(cluster=c) for c in clusters}
    kubes = per_cluster(kube, clusters, what="kube context", flag="--context")
    for cluster, client in kubes.items():
        if cluster not in states:
            continue
        refs = [r for a in ordered_actions(plan) if a["type"] not in ("note", "refused")
                and action_cluster(a) == cluster and (r := model.action_ref(a)) is not None]
        states[cluster].refresh(client, refs, overwrite=True)
    return states

"""Actions: turn recommendations into Kubernetes objects/patches and AWS calls; show them as a
diff, write them as files, apply them safely (dry run, drift check, audit) and roll them back.

The CLI's faces (see docs/actions.md)::

    state = prepare_plan(plan, wh, cluster=cfg.cluster, kube=kube)   # fills rec.actions
    print(diff_plan(plan, state))                                    # recommend
    emit(plan, out_dir)                                              # recommend --emit DIR
    apply_plan(plan, kube, wh, eks=eks)                              # recommend --apply
    rollback(plan_id, kube, wh, eks=eks)                             # rollback PLAN_ID
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpuinsight.actions.apply import ApplyFailed, apply_plan, rollback
from gpuinsight.actions.audit import ApplyResult
from gpuinsight.actions.builders import attach_actions, build_actions, ordered_actions, required_refs
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


def prepare_plan(plan: Plan, wh: Warehouse, *, cluster: str = "default", kube: Kube | None = None,
                 dump_dir: str | Path | None = None) -> ClusterState:
    """Build every recommendation's actions and return the state to diff them against.

    The actions are built from what the warehouse recorded (what the rules saw), completed
    with kubectl dumps (``dump_dir``) or live objects (``kube``) for what the warehouse does not
    keep (workload specs, ConfigMaps); the returned state is the live (or dumped) view.
    """
    state = ClusterState.from_warehouse(wh, cluster)
    view: ClusterState | None = None
    if dump_dir is not None:
        view = ClusterState.from_dump_dir(Path(dump_dir), cluster)
        for key, obj in view.objects.items():
            if key not in state.objects or state.known.get(key) == ():  # () : the warehouse kept no field
                state.put(obj, view.sources[key])
        state.pods = state.pods or view.pods
        state.pdbs = state.pdbs or view.pdbs
        state.nodes = {**view.nodes, **state.nodes}
        state.node_pools = {**view.node_pools, **state.node_pools}
    if kube is not None:
        state.refresh(kube, required_refs(plan, state), overwrite=False)
    attach_actions(plan, state)
    if kube is not None:
        view = state.copy()
        view.refresh(kube, required_refs(plan, state), overwrite=True)
    return view or state


__all__ = [
    "ActionError", "ApplyFailed", "ApplyResult", "ClusterState", "Eks", "Kube", "apply_plan",
    "attach_actions", "build_actions", "diff_plan", "emit", "load_plan", "needs_eks", "ordered_actions",
    "plan_to_json", "prepare_plan", "required_refs", "rollback", "validate_plan",
]

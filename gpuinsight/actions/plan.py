"""The rules engine's hook: attach actions to a fresh plan from what the warehouse knows.

No cluster is contacted. Workload specs are not in the warehouse, so workload edits that need
container names fall back to guarded patches; ``recommend --apply`` rebuilds every action from
live objects first (:func:`gpuinsight.actions.prepare_plan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuinsight.actions.builders import attach_actions
from gpuinsight.actions.state import ClusterState

if TYPE_CHECKING:
    from gpuinsight.rules.base import Plan
    from gpuinsight.warehouse import Warehouse


def warehouse_cluster(wh: Warehouse, cluster: str | None = None) -> str:
    """The cluster to read: the one given, else the only one the warehouse has, else ``default``."""
    if cluster:
        return cluster
    names = sorted(r[0] for r in wh.sql("SELECT DISTINCT cluster FROM nodes").rows())
    if len(names) == 1:
        return str(names[0])
    return "default" if "default" in names or not names else str(names[0])


def actions_for_plan(wh: Warehouse, plan: Plan, cluster: str | None = None) -> ClusterState:
    state = ClusterState.from_warehouse(wh, warehouse_cluster(wh, cluster))
    attach_actions(plan, state)
    return state

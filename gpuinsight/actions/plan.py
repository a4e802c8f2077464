"""The rules engine's hook: attach actions to a fresh plan from what the warehouse knows.

No cluster is contacted. Each finding's actions are built from its own cluster's rows. Workload
specs are not in the warehouse, so workload edits that need container names fall back to
guarded patches; ``recommend --apply`` rebuilds every action from live objects first
(:func:`gpuinsight.actions.prepare_plan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuinsight.actions.builders import attach_actions
from gpuinsight.actions.state import ClusterState

if TYPE_CHECKING:
    from gpuinsight.rules.base import Plan
    from gpuinsight.warehouse import Warehouse


def warehouse_states(wh: Warehouse, clusters: list[str]) -> dict[str, ClusterState]:
    """What the warehouse recorded of each of ``clusters``."""
    return {c: ClusterState.from_warehouse(wh, c) for c in sorted(set(clusters))}


def actions_for_plan(wh: Warehouse, plan: Plan) -> dict[str, ClusterState]:
    states = warehouse_states(wh, [r.cluster for r in plan.recommendations])
    attach_actions(plan, states)
    return states

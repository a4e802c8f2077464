"""What the CLI's ``recommend --apply`` and ``rollback PLAN_ID`` call (one string back to print)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from gpuinsight.actions import audit, model
from gpuinsight.actions.apply import apply_plan, rollback
from gpuinsight.actions.audit import ApplyResult
from gpuinsight.actions.builders import ordered_actions
from gpuinsight.actions.diff import diff_plan
from gpuinsight.actions.eks import Eks
from gpuinsight.actions.kube import Kube
from gpuinsight.actions.plan import warehouse_cluster
from gpuinsight.actions.state import ClusterState
from gpuinsight.errors import GpuInsightError

if TYPE_CHECKING:
    from gpuinsight.api import GpuInsight
    from gpuinsight.rules.base import Plan
    from gpuinsight.warehouse import Warehouse


def eks_region(wh: Warehouse) -> str | None:
    """The AWS region of the EKS node groups the warehouse knows (from their ARNs), if any."""
    rows = wh.sql("SELECT spec FROM node_pools WHERE kind = 'eks-nodegroup'").rows()
    for (spec,) in rows:
        arn = str(spec or "")
        marker = "arn:aws:eks:"
        if marker in arn:
            return arn.split(marker, 1)[1].split(":", 1)[0] or None
    return None


def diff_from_cli(gi: GpuInsight, plan: Plan, *, context: str | None = None, live: bool = False,
                  dump_dir: Path | None = None) -> str:
    """``recommend``'s diff: against the live cluster (``live`` or a ``context``), kubectl dumps, or
    what the warehouse recorded. The plan's actions are rebuilt from that state."""
    from gpuinsight.actions import prepare_plan

    kube = Kube.from_kubeconfig(context) if (live or context) else None
    state = prepare_plan(plan, gi.wh, cluster=warehouse_cluster(gi.wh, gi.config.cluster), kube=kube,
                         dump_dir=dump_dir)
    return diff_plan(plan, state)


def reviewed_state(plan: Plan, wh: Warehouse | None, *, cluster: str | None = None,
                   kube: Kube | None = None) -> ClusterState:
    """The state a reviewed plan's actions are shown against, WITHOUT rebuilding them: the
    objects they touch, live when ``kube`` is given, else as the warehouse recorded them."""
    state = ClusterState.from_warehouse(wh, warehouse_cluster(wh, cluster)) if wh is not None else ClusterState()
    if kube is not None:
        refs = [r for a in ordered_actions(plan) if a["type"] not in ("note", "refused")
                and (r := model.action_ref(a)) is not None]
        state.refresh(kube, refs, overwrite=True)
    return state


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


def apply_from_cli(gi: GpuInsight, plan: Plan, *, context: str | None = None,
                   max_age: timedelta = timedelta(hours=24), only: list[str] | None = None) -> str:
    """A fresh plan: build its actions from live objects, show the diff, then apply (dry run first)."""
    from gpuinsight.actions import needs_eks, prepare_plan

    kube = Kube.from_kubeconfig(context)
    state = prepare_plan(plan, gi.wh, cluster=warehouse_cluster(gi.wh, gi.config.cluster), kube=kube)
    eks = Eks.from_region(eks_region(gi.wh)) if needs_eks(plan) else None
    text = diff_plan(plan, state)
    result = _recorded(gi.wh, lambda: apply_plan(plan, kube, gi.wh, eks=eks, max_age=max_age, only=only or None))
    return _result_text(plan, text, result)


def apply_reviewed_from_cli(gi: GpuInsight, plan: Plan, *, context: str | None = None,
                            max_age: timedelta = timedelta(hours=24), only: list[str] | None = None) -> str:
    """A reviewed plan (``--plan FILE``, its signature already checked): apply exactly its
    actions, nothing rebuilt; the drift check compares what it observed with the live objects."""
    from gpuinsight.actions import needs_eks

    kube = Kube.from_kubeconfig(context)
    eks = Eks.from_region(eks_region(gi.wh)) if needs_eks(plan) else None
    text = diff_plan(plan, reviewed_state(plan, gi.wh, cluster=gi.config.cluster, kube=kube))
    result = _recorded(gi.wh, lambda: apply_plan(plan, kube, gi.wh, eks=eks, max_age=max_age, only=only or None))
    return _result_text(plan, text, result)


def rollback_from_cli(gi: GpuInsight, plan_id: str, *, context: str | None = None, force: bool = False) -> str:
    rows = audit.rows(gi.wh, plan_id, ("applied",))
    ops = {r["operation"] for r in rows}
    kube = Kube.from_kubeconfig(context) if any(not o.startswith("eks:") for o in ops) else None
    eks = Eks.from_region(eks_region(gi.wh)) if any(o.startswith("eks:") for o in ops) else None
    result = _recorded(gi.wh, lambda: rollback(plan_id, kube, gi.wh, eks=eks, force=force))
    lines = [f"{s.seq:>3} {s.status:<12} {s.operation:<10} {s.target}: {s.message}" for s in result.steps]
    return "\n".join([*lines, result.summary()])


__all__ = ["apply_from_cli", "apply_reviewed_from_cli", "diff_from_cli", "eks_region", "reviewed_state",
           "rollback_from_cli"]

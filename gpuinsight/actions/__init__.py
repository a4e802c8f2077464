"""Actions: turn recommendations into Kubernetes objects/patches and AWS calls; show them as a
diff, write them as files, apply them safely (dry run, drift check, audit) and roll them back.

:class:`gpuinsight.api.GpuInsight` runs them (``prepare``, ``diff``, ``emit``, ``apply``,
``rollback``); the pieces, for a notebook or a test (docs/actions.md)::

    states = prepare_plan(plan, wh, kube=kube)     # fills rec.actions, per cluster
    print(diff_plan(plan, states))                 # recommend
    emit(plan, out_dir, contexts=contexts)         # recommend --emit DIR
    apply_plan(plan, kube, wh, eks=eks)            # recommend --apply
    rollback(plan_id, kube, wh, eks=eks)           # rollback PLAN_ID

A plan may hold findings of several clusters; each finding's actions are built from its own
cluster's state and applied through its own cluster's context: ``kube`` (and ``dump_dir``,
``eks``) is one value for a plan of one cluster, or a {cluster: value} mapping
(:mod:`gpuinsight.actions.clusters`).

The names below are loaded when first used: importing one module of the package (say
``gpuinsight.actions.model``, which the plan files' checks read) does not import all of them.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it
_EXPORTS = {
    "ActionError": "gpuinsight.actions.model",
    "ApplyFailed": "gpuinsight.actions.apply",
    "ApplyResult": "gpuinsight.actions.audit",
    "ClusterState": "gpuinsight.actions.state",
    "Eks": "gpuinsight.actions.eks",
    "Kube": "gpuinsight.actions.kube",
    "apply_plan": "gpuinsight.actions.apply",
    "attach_actions": "gpuinsight.actions.builders",
    "build_actions": "gpuinsight.actions.builders",
    "diff_plan": "gpuinsight.actions.diff",
    "emit": "gpuinsight.actions.emit",
    "load_plan": "gpuinsight.plan.io",
    "needs_eks": "gpuinsight.actions.prepare",
    "ordered_actions": "gpuinsight.actions.builders",
    "parse_cluster_option": "gpuinsight.actions.clusters",
    "per_cluster": "gpuinsight.actions.clusters",
    "plan_to_json": "gpuinsight.plan.io",
    "prepare_plan": "gpuinsight.actions.prepare",
    "required_refs": "gpuinsight.actions.builders",
    "rollback": "gpuinsight.actions.apply",
    "validate_plan": "gpuinsight.plan.io",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


__all__ = sorted(_EXPORTS)

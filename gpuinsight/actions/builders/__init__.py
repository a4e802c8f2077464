"""Turn recommendations into actions: one builder module per finding kind.

Each builder module has ``refs(rec, state)`` (the objects it needs to see, so a live state can
be fetched first), ``build(rec, state)`` (the actions) and ``BUILDS``, the finding kinds
(:mod:`gpuinsight.plan.kinds`) it builds. Builders never talk to a cluster. :data:`MODULES` lists
them; every kind has exactly one builder (checked on import).
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.builders import (
    binpack,
    cpu_pods,
    idle,
    input_starved,
    mig,
    queue,
    ray,
    scale_to_zero,
    sharing,
    spot,
    topology,
)
from gpuinsight.actions.clusters import States, action_cluster, state_for
from gpuinsight.actions.model import ActionError
from gpuinsight.actions.patching import get, leaf_pointers, norm
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.plan import Plan, Recommendation
from gpuinsight.plan.kinds import KINDS

MODULES: tuple[ModuleType, ...] = (binpack, cpu_pods, idle, input_starved, mig, queue, ray, scale_to_zero, sharing,
                                   spot, topology)
# finding kind -> the module that builds its actions
BUILDERS: dict[str, ModuleType] = {kind.name: module for module in MODULES for kind in module.BUILDS}


def _check_builders() -> None:
    built = [kind.name for module in MODULES for kind in module.BUILDS]
    twice = sorted({n for n in built if built.count(n) > 1})
    missing = [k.name for k in KINDS if k.name not in BUILDERS]
    if twice or missing:
        raise RuntimeError(f"action builders and finding kinds disagree: built twice {twice}, built by none {missing}")


_check_builders()


def _builder(rec: Recommendation) -> ModuleType:
    try:
        return BUILDERS[rec.rule]
    except KeyError:
        raise ActionError(f"recommendation {rec.id}: rule: unknown rule {rec.rule!r}") from None


def build_actions(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    """The actions that carry ``rec`` out, given what ``state`` knows; also stored in ``rec.actions``."""
    if state.cluster != rec.cluster:
        raise ActionError(f"recommendation {rec.id}: its cluster is {rec.cluster}, the state given is of "
                          f"{state.cluster}")
    actions = _builder(rec).build(rec, state)
    for action in actions:
        action["recommendation"] = rec.id
        action["cluster"] = rec.cluster  # apply picks the cluster's context by it
    rec.actions = actions
    return actions


def prepare(recs: list[Recommendation], state: States) -> None:
    """Let each builder see the whole plan of a cluster first (``prepare(recs, state)``, where it
    has one), with that cluster's state: e.g. one mig-parted config holding every node config the
    plan gives the cluster, written once."""
    for cluster in sorted({r.cluster for r in recs}):
        own = state_for(state, cluster)
        if own is None:
            continue  # refused when its findings are built
        mine = [r for r in recs if r.cluster == cluster]
        for module in {id(m): m for m in BUILDERS.values()}.values():
            hook = getattr(module, "prepare", None)
            if hook is not None:
                hook([r for r in mine if BUILDERS.get(r.rule) is module], own)


def required_refs(plan: Plan | list[Recommendation], state: ClusterState) -> list[Ref]:
    """Objects the builders read in ``state``'s cluster, to be fetched live before building (order
    kept, no duplicates); the plan's findings in other clusters are not asked about."""
    recs = plan.recommendations if isinstance(plan, Plan) else plan
    found: dict[str, Ref] = {}
    for rec in recs:
        if rec.cluster != state.cluster:
            continue
        try:
            for ref in _builder(rec).refs(rec, state):
                found.setdefault(ref.key, ref)
        except ActionError:
            continue  # reported when the actions are built
    return list(found.values())


def attach_actions(plan: Plan, state: States, *, strict: bool = False) -> Plan:
    """Fill every recommendation's ``actions``, each from the state of its own cluster (a single
    :class:`ClusterState` stands for its own cluster; give a {cluster: state} mapping for more).

    A recommendation the builders refuse (a gang split, a PDB violation, a missing node pool, no
    state of its cluster) gets one ``refused`` action naming the reason, unless ``strict``, which
    raises it. Conflicting changes to the same field from two recommendations raise
    :class:`ActionError`.
    """
    prepare(plan.recommendations, state)
    for rec in plan.recommendations:
        try:
            own = state_for(state, rec.cluster)
            if own is None:
                raise ActionError(f"recommendation {rec.id} ({rec.rule}): cluster {rec.cluster}: nothing is known "
                                  f"about this cluster to build its actions from")
            build_actions(rec, own)
        except Exception as exc:  # one bad recommendation must not sink the plan
            if strict:
                raise
            message = str(exc) if isinstance(exc, ActionError) else (
                f"recommendation {rec.id} ({rec.rule}): cannot build actions: {type(exc).__name__}: {exc}")
            rec.actions = [{"type": "refused", "phase": "note", "target": rec.id, "recommendation": rec.id,
                            "cluster": rec.cluster, "description": message, "message": message}]
    try:
        ordered_actions(plan)
    except ActionError as exc:
        if strict:
            raise
        plan.notes.append(str(exc))
    return plan


def ordered_actions(plan: Plan | list[Recommendation], only: set[str] | None = None) -> list[dict[str, Any]]:
    """All actions in apply order (config, node pools, labels, workloads, scale-down, cordon,
    drain); identical duplicates dropped; two different values for one field of one object
    refused (an object is one cluster's: the same name in two clusters is two objects)."""
    recs = plan.recommendations if isinstance(plan, Plan) else plan
    chosen = [(i, a) for i, rec in enumerate(recs) if only is None or rec.id in only for a in rec.actions]
    chosen.sort(key=lambda ia: (model.phase_index(ia[1]), ia[0]))
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    owner: dict[tuple[str, str, str], tuple[Any, str]] = {}
    for _, action in chosen:
        key = _identity(action)
        if key in seen:
            continue
        seen.add(key)
        cfg = model.apply_config(action)
        if cfg is not None:
            ref = model.action_ref(action)
            for ptr in leaf_pointers(cfg):
                value = norm(get(cfg, ptr))
                if action["type"] == "uncordon" and ptr == "/spec/unschedulable":
                    continue  # undoes the cordon of the same node: the two are steps of one change
                field_key = (action_cluster(action), ref.key if ref else "", ptr)
                if field_key in owner and owner[field_key][0] != value:
                    raise ActionError(f"recommendations {owner[field_key][1]} and {action.get('recommendation')} set "
                                      f"{field_key[1]} {ptr} to different values")
                owner[field_key] = (value, str(action.get("recommendation")))
        out.append(action)
    return out


def _identity(action: dict[str, Any]) -> str:
    """What makes two actions the same change (one key per action: deduplication stays linear);
    the cluster is part of it: the same change in two clusters is two changes."""
    ignore = ("recommendation", "description", "observed")
    return json.dumps({k: v for k, v in action.items() if k not in ignore}, sort_keys=True, default=str)


__all__ = ["BUILDERS", "MODULES", "attach_actions", "build_actions", "ordered_actions", "prepare", "required_refs"]

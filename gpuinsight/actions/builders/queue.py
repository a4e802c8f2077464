"""queue: re-weight a Volcano Queue (server-side apply of the fields to change), or resize a Kueue
ClusterQueue's nominalQuota (server-side apply of its whole ``spec.resourceGroups``: the CRD
declares that list atomic, so an apply configuration must carry all of it, with every quantity
kept but the ones the finding changes)."""

from __future__ import annotations

import copy
from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.builders.common import fail, quantity
from gpuinsight.actions.patching import get, leaf_pointers, norm
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds import QUEUE

# the finding kinds this module builds the actions of
BUILDS = (QUEUE,)

RESOURCE_LISTS = ("capability", "deserved", "guarantee")


def queue_ref(rec: Recommendation) -> Ref:
    name = rec.target.get("name") or rec.queue
    if not isinstance(name, str) or not name:
        raise fail(rec, "target.name", "the Queue to change is missing")
    kind = rec.target.get("kind") or "Queue"
    if kind not in ("Queue", "ClusterQueue"):
        raise fail(rec, "target.kind", f"{kind!r} is not Queue or ClusterQueue")
    return Ref(kind, None, name)


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    return [queue_ref(rec)]


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    ref = queue_ref(rec)
    if ref.kind == "ClusterQueue":
        return build_cluster_queue(rec, state, ref)
    spec: dict[str, Any] = {}
    if "weight" in rec.proposed:
        spec["weight"] = int(rec.proposed["weight"])
    for key in RESOURCE_LISTS:
        value = rec.proposed.get(key)
        if not value:
            continue
        if key == "guarantee" and isinstance(value.get("resource"), dict):
            value = value["resource"]
        try:
            resources = {str(k): quantity(v) for k, v in value.items()}
        except ValueError as exc:
            raise fail(rec, f"proposed.{key}", str(exc)) from exc
        spec[key] = {"resource": resources} if key == "guarantee" else resources
    if not spec:
        raise fail(rec, "proposed", "no Queue field to change (weight, capability, deserved, guarantee)")
    cfg = ref.skeleton() | {"spec": spec}
    paths = leaf_pointers(cfg)
    observed = state.observe(ref, paths)
    current = state.get(ref)
    if current is not None and all(state.is_known(ref, p) for p in paths) and all(
            norm(observed["fields"].get(p)) == norm(get(cfg, p)) for p in paths):
        return [model.note(f"Queue {ref.name} already has {spec}", ref.key)]
    changes = ", ".join(f"{p.removeprefix('/spec/').replace('~1', '/')} {observed['fields'].get(p)!s} -> "
                        f"{get(cfg, p)}" for p in paths)
    return [model.k8s_apply(cfg, "config", f"Queue {ref.name}: {changes}", observed)]



def build_cluster_queue(rec: Recommendation, state: ClusterState, ref: Ref) -> list[dict[str, Any]]:
    quotas = rec.proposed.get("quotas")
    if not isinstance(quotas, list) or not quotas:
        raise fail(rec, "proposed.quotas", "no ClusterQueue quota to change")
    current = state.get(ref)
    groups = get(current, "/spec/resourceGroups") if current is not None else None
    if not isinstance(groups, list) or not state.is_known(ref, "/spec/resourceGroups"):
        raise fail(rec, "target", f"ClusterQueue {ref.name}: its resourceGroups are not known (collect it first)")
    groups = copy.deepcopy(groups)
    changes = []
    for i, q in enumerate(quotas):
        where = f"proposed.quotas[{i}]"
        if not isinstance(q, dict):
            raise fail(rec, where, "not an object")
        slot = next((res for g in groups for fl in g.get("flavors") or [] if fl.get("name") == q.get("flavor")
                     for res in fl.get("resources") or [] if res.get("name") == q.get("resource")), None)
        if slot is None:
            raise fail(rec, where, f"ClusterQueue {ref.name} has no quota for {q.get('resource')} in flavor "
                                   f"{q.get('flavor')}")
        for key, field in (("nominal_quota", "nominalQuota"), ("lending_limit", "lendingLimit")):
            if q.get(key) is None:
                continue
            try:
                value = quantity(q[key])
            except ValueError as exc:
                raise fail(rec, f"{where}.{key}", str(exc)) from exc
            if norm(slot.get(field)) != norm(value):
                changes.append(f"{q['resource']} ({q['flavor']}) {field} {slot.get(field)} -> {value}")
                slot[field] = value
    if not changes:
        return [model.note(f"ClusterQueue {ref.name} already has these quotas", ref.key)]
    cfg = ref.skeleton() | {"spec": {"resourceGroups": groups}}
    observed = state.observe(ref, ["/spec/resourceGroups"])
    return [model.k8s_apply(cfg, "config", f"ClusterQueue {ref.name}: " + ", ".join(changes), observed)]

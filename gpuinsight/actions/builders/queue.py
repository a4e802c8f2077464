"""queue: re-weight a Volcano Queue (server-side apply of the fields to change)."""

from __future__ import annotations

from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.builders.common import fail, quantity
from gpuinsight.actions.patching import get, leaf_pointers, norm
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.rules.base import Recommendation

RESOURCE_LISTS = ("capability", "deserved", "guarantee")


def queue_ref(rec: Recommendation) -> Ref:
    name = rec.target.get("name") or rec.queue
    if not isinstance(name, str) or not name:
        raise fail(rec, "target.name", "the Queue to change is missing")
    return Ref("Queue", None, name)


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    return [queue_ref(rec)]


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    ref = queue_ref(rec)
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


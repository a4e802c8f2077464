"""Helpers the per-rule builders share: workload references, pinning patches, quantities."""

from __future__ import annotations

import math
from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.model import ActionError
from gpuinsight.actions.patching import escape, get, pointer, tokens
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.rules.base import Recommendation

# Where each patchable workload kind keeps its pod spec (server-side apply kinds).
TEMPLATES = {
    "Deployment": "/spec/template/spec",
    "StatefulSet": "/spec/template/spec",
    "CronJob": "/spec/jobTemplate/spec/template/spec",
}
PATCHABLE = (*TEMPLATES, "VolcanoJob")


def fail(rec: Recommendation, field: str, message: str) -> ActionError:
    return ActionError(f"recommendation {rec.id} ({rec.rule}): {field}: {message}")


def workload_ref(rec: Recommendation, target: Any, field: str = "target") -> Ref:
    """The workload a recommendation changes (any kind; see :func:`patchable`)."""
    if not isinstance(target, dict):
        raise fail(rec, field, "missing")
    kind, name = target.get("kind"), target.get("name")
    if not isinstance(kind, str) or not kind:
        raise fail(rec, f"{field}.kind", "missing")
    if not isinstance(name, str) or not name:
        raise fail(rec, f"{field}.name", "missing")
    namespace = target.get("namespace") or rec.namespace
    if not namespace:
        raise fail(rec, f"{field}.namespace", "missing")
    return Ref(kind, namespace, name)


def patchable(ref: Ref) -> bool:
    return ref.kind in PATCHABLE


def readable(refs: list[Ref]) -> list[Ref]:
    """The refs a live refresh can GET (kinds gpuinsight knows)."""
    return [r for r in refs if r.kind in PATCHABLE or r.kind in (
        "Node", "ConfigMap", "Queue", "NodePool", "Pod", "RayCluster", "RayJob", "RayService", "ScaledObject")]


def quantity(value: Any) -> int | str:
    """ResourceList value: integers stay integers, anything else is a quantity string."""
    if isinstance(value, bool):
        raise ValueError("not a quantity")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else str(value)
    return str(value)


def nest(ptr: str, value: Any) -> dict[str, Any]:
    """``/a/b`` and v -> ``{"a": {"b": v}}``."""
    out: Any = value
    for tok in reversed(tokens(ptr)):
        out = {tok: out}
    return out


def pod_specs(state: ClusterState, ref: Ref) -> list[tuple[str, str | None]]:
    """(pod-spec pointer, Volcano task name) of a workload: one per task for a Volcano Job."""
    if ref.kind != "VolcanoJob":
        return [(TEMPLATES[ref.kind], None)]
    obj = state.get(ref)
    tasks = get(obj, "/spec/tasks") if obj else None
    if not tasks:
        return [("/spec/tasks/0/template/spec", None)]
    return [(f"/spec/tasks/{i}/template/spec", t.get("name")) for i, t in enumerate(tasks)]


def task_guard(ref: Ref, spec_ptr: str, task: str | None) -> list[dict[str, Any]]:
    if ref.kind == "VolcanoJob" and task is not None:
        return [{"op": "test", "path": spec_ptr.removesuffix("/template/spec") + "/name", "value": task}]
    return []


VOLCANO_NOTE = ("; Volcano's admission webhook refuses template changes on an existing Job: if the dry run "
                "says so, apply the change to the job manifest and resubmit")


def unpatchable(ref: Ref, what: str) -> dict[str, Any]:
    if ref.kind == "Pod":
        return model.note(f"{ref.key} is a bare Pod (spec immutable): recreate it {what}", ref.key)
    return model.note(f"{ref.key}: gpuinsight does not patch a {ref.kind}; change its pod template {what}", ref.key)


def pin_workload(state: ClusterState, ref: Ref, node_selector: dict[str, str],
                 tolerations: list[dict[str, Any]] | None, why: str) -> dict[str, Any]:
    """One action adding ``node_selector`` (and ``tolerations``) to a workload's pod template."""
    tolerations = tolerations or []
    if not patchable(ref):
        return unpatchable(ref, f"with nodeSelector {node_selector} to {why}")
    obj = state.get(ref)
    if ref.kind in TEMPLATES:
        tmpl = TEMPLATES[ref.kind]
        spec: dict[str, Any] = {"nodeSelector": dict(node_selector)}
        paths = [tmpl + pointer("nodeSelector", k) for k in node_selector]
        if tolerations:
            known = get(obj, tmpl + "/tolerations") if obj and state.is_known(ref, tmpl) else None
            merged = list(known or [])
            spec["tolerations"] = merged + [t for t in tolerations if t not in merged]
            paths.append(tmpl + "/tolerations")
        cfg = ref.skeleton() | nest(tmpl, spec)
        return model.k8s_apply(cfg, "workload", f"{ref.key}: {why} (nodeSelector {node_selector})",
                               state.observe(ref, paths))
    ops: list[dict[str, Any]] = []
    live = obj is not None and state.is_known(ref, "/spec/tasks")
    for spec_ptr, task in pod_specs(state, ref):
        ops += task_guard(ref, spec_ptr, task)
        current_sel = get(obj, spec_ptr + "/nodeSelector") if live else None
        if current_sel:
            ops += [{"op": "add", "path": f"{spec_ptr}/nodeSelector/{escape(k)}", "value": v}
                    for k, v in node_selector.items()]
        else:
            ops.append({"op": "add", "path": spec_ptr + "/nodeSelector", "value": dict(node_selector)})
        if tolerations:
            current_tol = get(obj, spec_ptr + "/tolerations") if live else None
            if current_tol:
                ops += [{"op": "add", "path": spec_ptr + "/tolerations/-", "value": t}
                        for t in tolerations if t not in current_tol]
            else:
                ops.append({"op": "add", "path": spec_ptr + "/tolerations", "value": list(tolerations)})
    text = f"{ref.key}: {why} (nodeSelector {node_selector} on every task template)"
    if not live:
        text += "; job spec not observed, so the patch sets the whole nodeSelector/tolerations"
    return model.k8s_patch(ref, ops, "workload", text + VOLCANO_NOTE, state.observe(ref, ["/spec/tasks"]))


def gpus_of(state: ClusterState, ref: Ref) -> float:
    return sum(float(p.get("gpu_request") or 0) for p in state.workload_pods(ref.namespace or "", ref.kind, ref.name))


def ceil_div(a: float, b: float) -> int:
    return int(math.ceil(a / b)) if b > 0 else int(math.ceil(a))

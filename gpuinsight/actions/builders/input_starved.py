"""input_starved: feed the GPUs; never fewer GPUs, a slice or scale-to-zero.

The fixes are in the input pipeline, mostly in code and data layout (more data-loader workers,
prefetching, a cache tier), which no Kubernetes object carries: those are notes. One change is
an object: when the loader is CPU-bound, the pod's CPU request grows to what keeps up with the
GPUs (``proposed.cpu_request``, cores per pod, spread over the containers that ask for GPUs in
proportion to their present requests). A Deployment, StatefulSet or CronJob gets it by
server-side apply; a Volcano Job's spec cannot change once submitted, so it is a
``manifest-patch`` for the manifest it is resubmitted from. Without the observed templates no
patch is built (a note says what to set).
"""

from __future__ import annotations

from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.builders.common import (
    TEMPLATES,
    container_asks_gpu,
    manifest_patch,
    nest,
    readable,
    templates_observed,
    volcano_tasks,
    workload_ref,
)
from gpuinsight.actions.patching import get
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds import INPUT_STARVED
from gpuinsight.sources.k8s.common import parse_quantity

# the finding kinds this module builds the actions of
BUILDS = (INPUT_STARVED,)


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    return readable([workload_ref(rec, rec.target)])


def _cores(value: Any) -> float:
    try:
        return parse_quantity(value, "cpu") if value is not None else 0.0
    except Exception:  # noqa: BLE001 - an unreadable quantity counts as unset
        return 0.0


def _millis(cores: float) -> str:
    millis = int(round(cores * 1000))
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    ref = workload_ref(rec, rec.target)
    fixes = "; ".join(rec.proposed.get("fixes") or [])
    notes = [model.note(f"{ref.key} waits for its input ({rec.evidence.get('cause_basis')}): {fixes}. Not changed "
                        "automatically; keep its GPUs (no scale-to-zero, no slice: it is busy when fed)", ref.key)]
    target = rec.proposed.get("cpu_request")
    if rec.proposed.get("cause") != "cpu" or not target:
        return notes
    obj = state.get(ref)
    if not templates_observed(state, ref):
        return [*notes, model.note(f"{ref.key}: raise the CPU request of its GPU containers to {target:g} cores per "
                                   "pod in total; its pod templates were not observed, so no patch is built", ref.key)]
    changes: list[str] = []
    # a Volcano Job's tasks may share container names: its changes name the task too
    task_names = {f"/spec/tasks/{i}/template/spec": str(t.get("name"))
                  for i, t in enumerate(volcano_tasks(state, ref) or [])} if ref.kind == "VolcanoJob" else {}

    def cpu_ops(spec_ptr: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
        containers = spec.get("containers") or []
        gpu = [i for i, c in enumerate(containers) if container_asks_gpu(c)]
        now = {i: _cores(get(containers[i], "/resources/requests/cpu")) for i in gpu}
        total = sum(now.values())
        ops: list[dict[str, Any]] = []
        for i in gpu:
            share = now[i] / total if total > 0 else 1.0 / len(gpu)
            want = max(now[i], target * share)
            if want <= now[i] + 1e-9:
                continue
            base = f"{spec_ptr}/containers/{i}/resources"
            ops.append({"op": "test", "path": f"{spec_ptr}/containers/{i}/name", "value": containers[i].get("name")})
            if get(containers[i], "/resources/requests") is not None:
                ops.append({"op": "add", "path": f"{base}/requests/cpu", "value": _millis(want)})
            else:
                ops.append({"op": "add", "path": f"{base}/requests", "value": {"cpu": _millis(want)}})
            limit = get(containers[i], "/resources/limits/cpu")
            if limit is not None and _cores(limit) < want:
                ops.append({"op": "replace", "path": f"{base}/limits/cpu", "value": _millis(want)})
            task = task_names.get(spec_ptr)
            changes.append(f"{task + '/' if task else ''}{containers[i].get('name')}: cpu {now[i]:g} -> {want:g} cores")
        return ops

    def why() -> str:
        return f"CPU request to keep up with the GPUs ({', '.join(changes)})"

    if ref.kind == "VolcanoJob":
        action = manifest_patch(state, ref, why, cpu_ops, ("containers",))
        return [*notes, action] if changes else notes
    tmpl = TEMPLATES[ref.kind]
    ops = cpu_ops(tmpl, get(obj, tmpl))
    if not ops:
        return notes
    after = model.expected_after({"type": "k8s-patch", "patch": ops}, obj)
    containers = [{"name": c.get("name"), "resources": c.get("resources")}
                  for c in get(after, tmpl + "/containers") or [] if container_asks_gpu(c)]
    cfg = ref.skeleton() | nest(tmpl, {"containers": containers})
    return [*notes, model.k8s_apply(cfg, "workload", f"{ref.key}: {why()}",
                                    state.observe(ref, [f"{tmpl}/containers"]))]

"""Helpers the per-rule builders share: workload references, pinning, Volcano Job manifest
patches, quantities.

A change to a workload's pod templates is built in one of two ways. A Deployment, StatefulSet
or CronJob is changed in place (server-side apply, or a guarded JSON patch where a field must
go). A submitted Volcano Job cannot be changed (Volcano's admission webhook refuses every spec
change but ``minAvailable`` and task ``replicas``), so its change is a ``manifest-patch``
(:func:`manifest_patch`): the exact JSON patch for the manifest it is next submitted from.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.model import ActionError
from gpuinsight.actions.patching import escape, get, pointer, tokens
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.kubelabels import LabelIndex, tolerates
from gpuinsight.plan import Recommendation
from gpuinsight.rules.disruption import allowed_disruptions

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
    if target.get("cluster") not in (None, rec.cluster):
        raise fail(rec, f"{field}.cluster", f"{target['cluster']!r} is not the finding's cluster {rec.cluster!r}")
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


def unpatchable(ref: Ref, what: str) -> dict[str, Any]:
    if ref.kind == "Pod":
        return model.note(f"{ref.key} is a bare Pod (spec immutable): recreate it {what}", ref.key)
    return model.note(f"{ref.key}: gpuinsight does not patch a {ref.kind}; change its pod template {what}", ref.key)


def unobserved(ref: Ref, change: str) -> dict[str, Any]:
    """The step for a change that must merge with pod-template fields nobody has seen: a note,
    never a patch that would replace them (what the warehouse keeps holds no pod templates)."""
    return model.note(f"{ref.key}: {change}; its spec was not observed, so no patch is built (it would replace "
                      f"what the pod templates hold): run recommend with --context (live cluster) or --from-dir "
                      f"(kubectl dumps)", ref.key)


# -- Volcano Jobs: changes for the manifest ---------------------------------------------------
MANIFEST_NOTE = ("A submitted Volcano Job's spec cannot change (its admission webhook refuses everything but "
                 "minAvailable and task replicas): apply this patch to the job's manifest (kubectl patch --local "
                 "-f JOB.yaml --type=json) and resubmit it; nothing is changed in the cluster")
SpecOps = Callable[[str, dict[str, Any]], list[dict[str, Any]]]  # (pod-spec pointer, pod spec) -> JSON patch ops


def container_asks_gpu(container: dict[str, Any]) -> bool:
    """Whether a container asks for an NVIDIA resource (whole GPUs, slices, replicas)."""
    res = container.get("resources") or {}
    return any(str(name).startswith("nvidia.com/") for section in ("limits", "requests")
               for name in (res.get(section) or {}))


def asks_gpu(spec: dict[str, Any]) -> bool:
    """Whether a pod spec's containers ask for an NVIDIA resource."""
    return any(container_asks_gpu(c) for c in spec.get("containers") or [])


def volcano_tasks(state: ClusterState, ref: Ref) -> list[dict[str, Any]] | None:
    """A Volcano Job's tasks when every task's pod template was observed (live or dumped)."""
    obj = state.get(ref)
    tasks = get(obj, "/spec/tasks") if obj else None
    if not tasks or not all(isinstance(t, dict) and isinstance(t.get("template"), dict) for t in tasks):
        return None
    return tasks


def templates_observed(state: ClusterState, ref: Ref) -> bool:
    """Whether a workload's pod templates were observed (live or dumped): a patch built without
    them would replace what they have."""
    if ref.kind in TEMPLATES:
        obj = state.get(ref)
        return obj is not None and state.is_known(ref, TEMPLATES[ref.kind]) and isinstance(
            get(obj, TEMPLATES[ref.kind]), dict)
    return ref.kind == "VolcanoJob" and volcano_tasks(state, ref) is not None


def manifest_patch(state: ClusterState, ref: Ref, change: str | Callable[[], str], spec_ops: SpecOps,
                   fields: tuple[str, ...]) -> dict[str, Any]:
    """A Volcano Job's workload change as a ``manifest-patch`` (inert: apply skips it, emit writes
    it for the manifest): ``spec_ops`` on the pod template of every task asking for GPUs (all
    tasks if none does; a CPU-only task such as a parameter server stays where it runs), each
    guarded by a ``test`` of the task's name. Without observed templates, a note. ``change`` may
    be a callable, asked after ``spec_ops`` ran, when the text names what they changed."""
    tasks = volcano_tasks(state, ref)
    if tasks is None:
        return unobserved(ref, change() if callable(change) else change)
    spec_of = [(t["template"].get("spec") or {}) for t in tasks]
    moved = [i for i, spec in enumerate(spec_of) if asks_gpu(spec)] or list(range(len(tasks)))
    ops: list[dict[str, Any]] = []
    for i in moved:
        ops.append({"op": "test", "path": f"/spec/tasks/{i}/name", "value": tasks[i].get("name")})
        ops += spec_ops(f"/spec/tasks/{i}/template/spec", spec_of[i])
    names = ", ".join(str(tasks[i].get("name")) for i in moved)
    text = f"{ref.key}: {change() if callable(change) else change}, on the template of every task asking for GPUs: {names}. {MANIFEST_NOTE}"
    seen = [f"/spec/tasks/{i}/template/spec/{f}" for i in moved for f in fields]
    return model.k8s_patch(ref, ops, "workload", text, state.observe(ref, seen), kind="manifest-patch")


# -- pinning a workload ---------------------------------------------------------------------
def merged_tolerations(current: Any, wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A pod template's tolerations with ``wanted`` added (nothing dropped or reordered)."""
    kept = [copy.deepcopy(t) for t in current or [] if isinstance(t, dict)]
    return kept + [dict(t) for t in wanted if not tolerates(kept, t)]


def selector_ops(spec_ptr: str, spec: dict[str, Any], selector: dict[str, str]) -> list[dict[str, Any]]:
    """JSON patch ops adding ``selector`` to a pod spec's nodeSelector (its other entries kept)."""
    if spec.get("nodeSelector"):
        return [{"op": "add", "path": f"{spec_ptr}/nodeSelector/{escape(k)}", "value": v} for k, v in selector.items()]
    return [{"op": "add", "path": spec_ptr + "/nodeSelector", "value": dict(selector)}]


def toleration_ops(spec_ptr: str, spec: dict[str, Any], wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """JSON patch ops setting the merged tolerations, guarded by a ``test`` of the current list."""
    if not wanted:
        return []
    guard = ([{"op": "test", "path": spec_ptr + "/tolerations", "value": copy.deepcopy(spec["tolerations"])}]
             if "tolerations" in spec else [])
    return [*guard, {"op": "add", "path": spec_ptr + "/tolerations",
                     "value": merged_tolerations(spec.get("tolerations"), wanted)}]


def pin_workload(state: ClusterState, ref: Ref, node_selector: dict[str, str],
                 tolerations: list[dict[str, Any]] | None, why: str) -> dict[str, Any]:
    """The step adding ``node_selector`` (and ``tolerations``, merged with the template's own) to
    a workload's pod templates: a server-side apply for a Deployment, StatefulSet or CronJob,
    a ``manifest-patch`` for a Volcano Job. Server-side apply treats ``tolerations`` as one
    atomic list, so tolerations are only sent with the template's own, never in their place:
    when the template was not observed the step is a note."""
    tolerations = list(tolerations or [])
    keys = ", ".join(str(t.get("key")) for t in tolerations)
    change = " and ".join(
        ([f"nodeSelector {node_selector}"] if node_selector else [])
        + ([f"toleration {keys} added to its own"] if tolerations else []))
    if not patchable(ref):
        return unpatchable(ref, f"with {change} to {why}")
    fields = (("nodeSelector",) if node_selector else ()) + (("tolerations",) if tolerations else ())
    if ref.kind == "VolcanoJob":
        return manifest_patch(state, ref, f"{why} ({change})", lambda ptr, spec: [
            *(selector_ops(ptr, spec, node_selector) if node_selector else []),
            *toleration_ops(ptr, spec, tolerations)], fields)
    tmpl = TEMPLATES[ref.kind]
    obj = state.get(ref)
    spec: dict[str, Any] = {"nodeSelector": dict(node_selector)} if node_selector else {}
    paths = [tmpl + pointer("nodeSelector", k) for k in node_selector]
    if tolerations:
        if obj is None or not state.is_known(ref, tmpl):
            return unobserved(ref, f"to {why} its pod template needs {change}")
        spec["tolerations"] = merged_tolerations(get(obj, tmpl + "/tolerations"), tolerations)
        paths.append(tmpl + "/tolerations")
    cfg = ref.skeleton() | nest(tmpl, spec)
    return model.k8s_apply(cfg, "workload", f"{ref.key}: {why} ({change})", state.observe(ref, paths))


def gpus_of(state: ClusterState, ref: Ref) -> float:
    return sum(float(p.get("gpu_request") or 0) for p in state.workload_pods(ref.namespace or "", ref.kind, ref.name))


def ceil_div(a: float, b: float) -> int:
    return int(math.ceil(a / b)) if b > 0 else int(math.ceil(a))


# -- a node that gets GPUs shared ------------------------------------------------------------
def host_steps(rec: Recommendation, state: ClusterState, node: str, why: str) -> tuple[
        list[dict[str, Any]], list[dict[str, str]], bool]:
    """What comes before a node's GPUs are repartitioned or shared: the node cordoned (nothing new
    lands on a GPU about to change), the whole-GPU pods the plan moves away evicted (a strict gang
    together, PodDisruptionBudgets checked), the small workloads stopped first (``stop_first``).
    Returns those actions, the pods evicted from this node (the relabel waits until they are
    gone), and whether the node is to be uncordoned afterwards (not when it was cordoned before)."""
    moves = [m for m in rec.proposed.get("evict") or [] if isinstance(m, dict)]
    stopped = [s for s in rec.proposed.get("stop_first") or [] if isinstance(s, dict)]
    batches = eviction_batches(rec, state, moves)
    stops = [(None, [node], [{"namespace": str(s["namespace"]), "name": str(s["pod"])}], node) for s in stopped]
    check_pdbs(rec, state, batches + stops)
    node_ref = Ref("Node", None, node)
    observed = state.observe(node_ref, ["/spec/unschedulable"])
    cordoned = observed["fields"].get("/spec/unschedulable") is True
    actions: list[dict[str, Any]] = []
    if not cordoned:
        actions.append(model.cordon(node, observed, phase="host-cordon", why=f"nothing new lands on it before {why}"))
    for gang, nodes, pods, dest in batches:
        what = f"gang {gang} ({len(pods)} pods together)" if gang else f"pod {pods[0]['namespace']}/{pods[0]['name']}"
        actions.append(model.drain(nodes, pods, gang, f"evict {what} from {', '.join(nodes)} to make room for {why}; "
                                                      f"planned to land on {dest}", phase="host-drain"))
    for s in stopped:
        actions.append(model.drain([node], [{"namespace": str(s["namespace"]), "name": str(s["pod"])}], None,
                                   f"stop {s['namespace']}/{s['pod']} ({s.get('workload')}) before its GPU on {node} "
                                   f"is repartitioned; it restarts on its slice", phase="host-drain"))
    gone = [p for _, nodes, pods, _ in batches + stops if node in nodes for p in pods]
    return actions, gone, not cordoned


# -- evictions (binpack's moves, a host's evictions) -------------------------------------------
def _min_member(state: ClusterState, namespace: str, gang: str) -> int | None:
    obj = state.get(Ref("PodGroup", namespace, gang))
    value = ((obj or {}).get("spec") or {}).get("minMember")
    return int(value) if isinstance(value, int | float) else None


def eviction_batches(rec: Recommendation, state: ClusterState, moves: list[dict[str, Any]]
                     ) -> list[tuple[str | None, list[str], list[dict[str, str]], str]]:
    """Group moved pods into eviction batches: a whole strict gang, or one pod. Refuses gang
    splits (and moving more of an elastic gang than its minMember leaves room for)."""
    gangs: dict[str, tuple[list[str], list[dict[str, str]], list[str]]] = {}
    singles: list[tuple[str | None, list[str], list[dict[str, str]], str]] = []
    seen: set[tuple[str, str]] = set()
    pods_by_name = {(p["namespace"], p["name"]): p for p in state.pods}  # one pass, not one per pod
    for i, move in enumerate(moves):
        ns, src, dest = move.get("namespace") or rec.namespace, move.get("from"), str(move.get("to"))
        for pod in move.get("pods") or []:
            row = pods_by_name.get((str(ns), str(pod)))
            if row is not None and src and row.get("node") and row["node"] != src:
                raise fail(rec, f"proposed.moves[{i}].pods", f"pod {ns}/{pod} runs on {row['node']}, not {src}")
            gang = (row or {}).get("podgroup") or move.get("gang")
            key = (str(ns), str(pod))
            if key in seen:
                continue
            seen.add(key)
            entry = {"namespace": str(ns), "name": str(pod)}
            if gang:
                nodes, pods, dests = gangs.setdefault(f"{ns}/{gang}", ([], [], []))
                pods.append(entry)
                if src and src not in nodes:
                    nodes.append(str(src))
                if dest not in dests:
                    dests.append(dest)
            else:
                singles.append((None, [str(src)], [entry], dest))
    batches: list[tuple[str | None, list[str], list[dict[str, str]], str]] = []
    for gang_key, (nodes, pods, dests) in gangs.items():
        ns, _, gang = gang_key.partition("/")
        members = {p["name"] for p in state.gang_pods(ns, gang)}
        left = sorted(members - {p["name"] for p in pods})
        least = _min_member(state, ns, gang)
        if left and least is not None and least < len(members):
            if len(members) - len(pods) < least:
                raise fail(rec, "proposed.moves", f"would leave {len(members) - len(pods)} of gang {gang_key} "
                                                  f"running, below its minMember {least}")
            # elastic: each pod on its own, one at a time, the rest keep the gang's minimum running
            pod_nodes = {p["name"]: (pods_by_name.get((ns, p["name"])) or {}).get("node") for p in pods}
            singles += [(None, [str(pod_nodes[p["name"]] or nodes[0])], [p], ", ".join(dests)) for p in pods]
            continue
        if left:
            raise fail(rec, "proposed.moves", f"would split gang {gang_key}: {len(pods)} of {len(members)} pods "
                                              f"move, {', '.join(left)} stay")
        batches.append((gang_key, nodes, pods, ", ".join(dests)))
    return batches + singles


def _pdb_coverage(state: ClusterState) -> list[tuple[dict[str, Any], set[tuple[str, str]], int]]:
    """Each PDB with the pods it covers and the disruptions it allows, computed once per plan:
    every binpack recommendation checks the same PDBs against the same pods (at fleet scale,
    recomputing it per recommendation was PDBs x pods x recommendations selector matches)."""
    key = (id(state.pods), len(state.pods), id(state.pdbs), len(state.pdbs))
    cached = state.planned.get("binpack.pdb_coverage")
    if cached is not None and cached[0] == key:
        return cached[1]
    pods = LabelIndex(state.pods, lambda p: p["namespace"], lambda p: p.get("labels") or {})
    out = []
    for pdb in state.pdbs:
        covered = pods.covered(pdb["namespace"], pdb.get("selector") or {})
        healthy = sum(1 for p in covered if p.get("phase") in (None, "Running"))
        out.append((pdb, {(p["namespace"], p["name"]) for p in covered},
                    allowed_disruptions(pdb, len(covered), healthy)))
    state.planned["binpack.pdb_coverage"] = (key, out)
    return out


def check_pdbs(rec: Recommendation, state: ClusterState, batches: list[Any]) -> None:
    moved = {(p["namespace"], p["name"]) for _, _, pods, _ in batches for p in pods}
    for pdb, covered, allowed in _pdb_coverage(state):
        evicted = covered & moved
        if len(evicted) > allowed:
            raise fail(rec, "proposed.moves", f"would evict {len(evicted)} pods covered by PodDisruptionBudget "
                                              f"{pdb['namespace']}/{pdb['name']}, which allows {allowed}")

"""mig: repartition a node with MIG (node label) and move the workload onto a MIG slice.

The node gets ``nvidia.com/mig.config=<layout>`` (the GPU Operator's mig-manager applies it),
unless it already runs a MIG layout (then it is left alone and the workload is pinned to that
layout's free slices). In every container that asks for ``nvidia.com/gpu``, the whole GPU
becomes one slice (``nvidia.com/mig-1g.10gb``, mixed strategy) in both ``requests`` and
``limits`` (the API server refuses an extended-resource request that differs from its limit),
and ``nvidia.com/gpu`` is removed from both; the workload gets a ``nvidia.com/mig.config``
nodeSelector. Removing a resource needs a JSON patch; ``test`` operations on the container name
and the current values make a drifted workload fail the patch (and the dry run). A Volcano Job
gets the same operations as a ``manifest-patch`` for its manifest (its spec cannot change once
submitted; ``common.manifest_patch``).
"""

from __future__ import annotations

from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.builders.common import (
    TEMPLATES,
    fail,
    manifest_patch,
    patchable,
    readable,
    selector_ops,
    unpatchable,
    workload_ref,
)
from gpuinsight.actions.patching import escape, get
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.rules.base import Recommendation

GPU = "nvidia.com/gpu"
MIG_LABEL = "nvidia.com/mig.config"
NOT_MIG = (None, "", "all-disabled")


def _node(rec: Recommendation) -> str | None:
    node = rec.proposed.get("node")
    return node if isinstance(node, str) and node else None


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    node = _node(rec)
    return readable([workload_ref(rec, rec.target)]) + ([Ref("Node", None, node)] if node else [])


def _node_label(state: ClusterState, node: str) -> Any:
    return get(state.get(Ref("Node", None, node)), model.label_pointer(MIG_LABEL))


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    ref = workload_ref(rec, rec.target)
    node, layout = _node(rec), rec.proposed.get("node_mig_config")
    profile = rec.proposed.get("mig_profile")
    resource = rec.proposed.get("resource") or f"nvidia.com/mig-{profile}"
    if not isinstance(layout, str) or not layout:
        raise fail(rec, "proposed.node_mig_config", "missing (a mig-parted config name such as all-1g.10gb)")
    actions: list[dict[str, Any]] = []
    selector_value = layout
    if node is None:
        hosts = sorted(n for n, row in state.nodes.items() if (row.get("labels") or {}).get(MIG_LABEL) == layout)
        if not hosts:
            raise fail(rec, "proposed.node", f"no node chosen to repartition and no node has {MIG_LABEL}={layout}; "
                                             f"the workload would stay Pending")
        actions.append(model.note(f"{ref.key} goes to nodes already labelled {MIG_LABEL}={layout} "
                                  f"({', '.join(hosts[:5])})", ref.key))
    else:
        node_ref = Ref("Node", None, node)
        observed = state.observe(node_ref, [model.label_pointer(MIG_LABEL)])
        current = observed["fields"].get(model.label_pointer(MIG_LABEL), _node_label(state, node))
        if current not in NOT_MIG and current != layout:
            selector_value = str(current)
            actions.append(model.note(f"node {node} already runs MIG layout {current} with free {profile} slices: "
                                      f"not repartitioned; {ref.key} is pinned to that layout", f"Node/{node}"))
        elif current != layout:
            actions.append(model.label(node, {MIG_LABEL: layout},
                                       f"node {node}: {MIG_LABEL} {current or '(unset)'} -> {layout}; mig-manager "
                                       f"repartitions every GPU on the node and restarts GPU clients there",
                                       observed))
    labels = get(state.get(Ref("Node", None, node)), "/metadata/labels") if node else None
    single = (labels or {}).get("nvidia.com/mig.strategy") == "single"
    if not patchable(ref):
        actions.append(unpatchable(ref, f"asking for {resource} with nodeSelector {MIG_LABEL}={selector_value}"))
        return actions
    actions.append(_workload_patch(rec, state, ref, None if single else resource, selector_value))
    return actions


def _workload_patch(rec: Recommendation, state: ClusterState, ref: Ref, resource: str | None,
                    layout: str) -> dict[str, Any]:
    what = (f"each {GPU} -> one {resource} (requests and limits)" if resource
            else f"keeps {GPU} (mig.strategy single)")
    change = f"{what}, nodeSelector {MIG_LABEL}={layout}"

    def spec_ops(spec_ptr: str, spec: dict[str, Any] | None) -> list[dict[str, Any]]:
        ops: list[dict[str, Any]] = []
        if resource is not None:
            if spec is None:
                ops += _swap(spec_ptr + "/containers/0", None, {"limits": 1, "requests": 1}, resource, None)
            for j, c in enumerate((spec or {}).get("containers") or []):
                res = c.get("resources") or {}
                sections = {s: res[s][GPU] for s in ("limits", "requests") if GPU in (res.get(s) or {})}
                if sections:
                    ops += _swap(f"{spec_ptr}/containers/{j}", c.get("name"), sections, resource, res)
        return ops + selector_ops(spec_ptr, spec or {}, {MIG_LABEL: layout})

    if ref.kind == "VolcanoJob":
        action = manifest_patch(state, ref, change, spec_ops, ("containers", "nodeSelector"))
        ops = action.get("patch") or []
    else:
        tmpl = TEMPLATES[ref.kind]
        obj = state.get(ref)
        live = obj is not None and state.is_known(ref, "/spec")
        ops = spec_ops(tmpl, get(obj, tmpl) if live else None)
        text = f"{ref.key}: {change}"
        if not live:
            text += "; workload spec not observed: the patch edits container 0 and fails if it asks for no GPU"
        action = model.k8s_patch(ref, ops, "workload", text, state.observe(ref, [tmpl + "/containers",
                                                                                 tmpl + "/nodeSelector"]))
    if action["type"] != "note" and resource is not None and not any(op["op"] == "remove" for op in ops):
        raise fail(rec, "target", f"{ref.key}: no container asks for {GPU}; nothing to move to {resource}")
    return action


def _swap(cptr: str, name: str | None, sections: dict[str, Any], resource: str,
          resources: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Remove ``nvidia.com/gpu`` where the container has it and ask for the same count of
    ``resource`` in both limits and requests (a section the container lacks is created)."""
    ops: list[dict[str, Any]] = []
    if name is not None:
        ops.append({"op": "test", "path": cptr + "/name", "value": name})
    count = sections.get("limits", sections.get("requests"))
    for section, value in sections.items():
        base = f"{cptr}/resources/{section}"
        if name is not None:
            ops.append({"op": "test", "path": f"{base}/{escape(GPU)}", "value": value})
        ops.append({"op": "remove", "path": f"{base}/{escape(GPU)}"})
    for section in ("limits", "requests"):
        base = f"{cptr}/resources/{section}"
        if section in sections or (resources is not None and section in resources):
            ops.append({"op": "add", "path": f"{base}/{escape(resource)}", "value": count})
        else:  # the container has no such section yet: create it
            ops.append({"op": "add", "path": base, "value": {resource: count}})
    return ops

"""mig: move a workload onto a MIG slice; repartition a node's GPUs for it when the plan says so.

Three cases. A node that already runs a MIG layout with free instances is left alone and the
workload is pinned to that layout. A node the plan repartitions one GPU at a time (the device
plugin's mixed strategy, ``proposed.node_layout``) gets its own mig-parted config: an entry in the
GPU Operator's custom mig-manager ConfigMap (``gpu-operator/custom-mig-config``, key
``config.yaml``: the default configs plus every node config of the plan, see :func:`prepare`),
validated against mig-parted's format (:mod:`gpuinsight.migparted`). A node under the single
strategy gets a named layout (``all-<profile>``) on every GPU. A repartitioned node goes
through ordered steps: cordoned, the whole-GPU pods the plan moves away evicted and the small
workloads whose GPU is repartitioned stopped, relabelled ``nvidia.com/mig.config`` once they are
gone (mig-manager repartitions), uncordoned once ``nvidia.com/mig.config.state`` is ``success``;
then the workload moves in.

In every container that asks for ``nvidia.com/gpu``, the whole GPU becomes one slice
(``nvidia.com/mig-1g.10gb``, mixed strategy) in both ``requests`` and ``limits`` (the API server
refuses an extended-resource request that differs from its limit), and ``nvidia.com/gpu`` is
removed from both; the workload gets a ``nvidia.com/mig.config`` nodeSelector (the node's own
config under mixed, so it lands where its slice was made). Under the single strategy the
resource stays ``nvidia.com/gpu``. Removing a resource needs a JSON patch; ``test`` operations on
the container name and the current values make a drifted workload fail the patch (and the dry
run). A Volcano Job gets the same operations as a ``manifest-patch`` for its manifest (its spec
cannot change once submitted; ``common.manifest_patch``).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpuinsight.actions import model
from gpuinsight.actions.builders import server_memory
from gpuinsight.actions.builders.common import (
    TEMPLATES,
    fail,
    host_steps,
    manifest_patch,
    patchable,
    readable,
    selector_ops,
    unobserved,
    unpatchable,
    workload_ref,
)
from gpuinsight.actions.patching import escape, get, pointer
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.migparted import spec_errors
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds import MIG

# the finding kinds this module builds the actions of
BUILDS = (MIG,)

GPU = "nvidia.com/gpu"
MIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
NOT_MIG = (None, "", "all-disabled")
# the custom config mig-manager reads once ClusterPolicy spec.migManager.config.name names it
CONFIG = Ref("ConfigMap", "gpu-operator", "custom-mig-config")
CONFIG_KEY = "config.yaml"
PLANNED = "mig.node-configs"  # state.planned: config name -> entries, every node config of the plan
CONFIG_TEXT = "mig.config-text"  # state.planned: the whole config's errors and text, for the planned configs


@cache
def default_config() -> str:
    """mig-manager's default config (package data, cited in gpuinsight/data/README.md)."""
    return resources.files("gpuinsight").joinpath("data", "mig-parted-config-default.yaml").read_text(encoding="utf-8")


def prepare(recs: list[Recommendation], state: ClusterState) -> None:
    """Every node config of the plan, so that each finding writes the same whole config."""
    planned = state.planned.setdefault(PLANNED, {})
    for rec in recs:
        name, layout = rec.proposed.get("node_mig_config"), rec.proposed.get("node_layout")
        if isinstance(name, str) and isinstance(layout, list) and layout:
            planned[name] = layout


def _node(rec: Recommendation) -> str | None:
    node = rec.proposed.get("node")
    return node if isinstance(node, str) and node else None


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    node = _node(rec)
    out = readable([workload_ref(rec, rec.target)]) + ([Ref("Node", None, node)] if node else [])
    if rec.proposed.get("node_layout"):
        out.append(CONFIG)
    return out


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
    elif rec.proposed.get("repartition") is True:
        actions += _repartition(rec, state, node, layout)
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
    single = rec.proposed.get("strategy") == "single" or (labels or {}).get("nvidia.com/mig.strategy") == "single"
    if not patchable(ref):
        actions.append(unpatchable(ref, f"asking for {resource} with nodeSelector {MIG_LABEL}={selector_value}"))
        return actions
    actions.append(_workload_patch(rec, state, ref, None if single else resource, selector_value))
    return actions


def _repartition(rec: Recommendation, state: ClusterState, node: str, name: str) -> list[dict[str, Any]]:
    """The ordered steps of a node the plan repartitions (see the module docstring)."""
    node_ref = Ref("Node", None, node)
    observed = state.observe(node_ref, [model.label_pointer(MIG_LABEL)])
    current = observed["fields"].get(model.label_pointer(MIG_LABEL), _node_label(state, node))
    if current == name:  # done already (an earlier apply): nothing to repartition
        return []
    if current not in NOT_MIG:
        raise fail(rec, "proposed.node", f"node {node} runs MIG layout {current} now, not the whole GPUs the plan saw; "
                                         f"run recommend again")
    index = rec.proposed.get("gpu_index")
    why = f"GPU {index} of {node} repartitioned" if index is not None else f"{node} repartitioned {name}"
    actions = _config_step(rec, state, name) if rec.proposed.get("node_layout") else []
    pre, gone, uncordon = host_steps(rec, state, node, why)
    actions += pre
    actions.append(model.label(node, {MIG_LABEL: name},
                               f"node {node}: {MIG_LABEL} {current or '(unset)'} -> {name} once the pods that must "
                               f"leave are gone; mig-manager repartitions " + (
                                   f"GPU {index} (the others stay as they are)" if index is not None else "every GPU")
                               + " and restarts the GPU Operator's pods there", observed, wait_for_pods_gone=gone))
    if uncordon:
        actions.append(model.uncordon(node, state.observe(node_ref, ["/spec/unschedulable"]),
                                      f"uncordon {node} once mig-manager reports {STATE_LABEL}=success",
                                      wait_for_label={STATE_LABEL: "success"}))
    return actions


def _config_step(rec: Recommendation, state: ClusterState, name: str) -> list[dict[str, Any]]:
    """The custom mig-manager config with every node config of the plan (the live one's entries
    kept; mig-manager's defaults when it does not exist yet), if that changes it."""
    planned = state.planned.setdefault(PLANNED, {})
    planned.setdefault(name, rec.proposed["node_layout"])  # built alone: its own entry at least
    ptr = pointer("data", CONFIG_KEY)
    observed = state.observe(CONFIG, [ptr])
    live = observed["fields"].get(ptr)
    if observed.get("exists") is None and live is None:
        observed = {**observed, "exists": False}  # not seen: planned as absent, apply refuses if it exists
    errors, text = _config_text(state, live if isinstance(live, str) else None, planned)
    if errors:
        raise fail(rec, "proposed.node_layout", f"not a valid mig-parted config: {errors[0]}")
    if text is None:  # the live config is that already
        return []
    cfg = CONFIG.skeleton() | {"data": {CONFIG_KEY: text}}
    return [model.k8s_apply(cfg, "config", f"ConfigMap {CONFIG.namespace}/{CONFIG.name}: mig-parted configs "
                                           f"{', '.join(sorted(planned))} (per-GPU layouts; "
                                           + ("the live configs kept)" if live else "mig-manager's defaults kept)"),
                            observed)]


def _config_text(state: ClusterState, live: str | None, planned: dict[str, Any]) -> tuple[list[str], str | None]:
    """The whole config with every planned node config (the live entries kept, else mig-manager's
    defaults): its format errors, and its YAML text (None when the live config is that already).
    Computed once per plan and live config: every repartitioning finding writes the same whole
    config, and parsing and writing its YAML in pure Python was most of ``recommend``'s time."""
    key = (live, repr(sorted(planned.items())))
    cached = state.planned.get(CONFIG_TEXT)
    if cached is not None and cached[0] == key:
        return cached[1]
    base = yaml.safe_load(live if live is not None else default_config()) or {}
    doc = {"version": base.get("version", "v1"), "mig-configs": dict(base.get("mig-configs") or {})}
    doc["mig-configs"].update({k: planned[k] for k in sorted(planned)})
    errors = spec_errors(doc)
    text = None if errors or (live is not None and yaml.safe_load(live) == doc) else yaml.safe_dump(doc, sort_keys=False)
    state.planned[CONFIG_TEXT] = (key, (errors, text))
    return errors, text


def _workload_patch(rec: Recommendation, state: ClusterState, ref: Ref, resource: str | None,
                    layout: str) -> dict[str, Any]:
    what = (f"each {GPU} -> one {resource} (requests and limits)" if resource
            else f"keeps {GPU} (mig.strategy single)")
    change = f"{what}, nodeSelector {MIG_LABEL}={layout}"
    setting = server_memory.setting_of(rec)
    settings_done: list[str] = []

    def spec_ops(spec_ptr: str, spec: dict[str, Any] | None) -> list[dict[str, Any]]:
        ops: list[dict[str, Any]] = []
        if setting is not None and spec is not None:  # the server's memory setting moves with it
            ops, done = server_memory.spec_ops(rec, spec_ptr, spec)
            settings_done.extend(done)
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
        action = manifest_patch(state, ref, lambda: change + _settings_text(settings_done), spec_ops,
                                ("containers", "nodeSelector"))
        ops = action.get("patch") or []
    else:
        tmpl = TEMPLATES[ref.kind]
        obj = state.get(ref)
        live = obj is not None and state.is_known(ref, "/spec")
        if setting is not None and not live:
            # the resource and the server's memory setting change together or not at all
            return unobserved(ref, f"{change}, and its server's {server_memory.describe(setting)}")
        ops = spec_ops(tmpl, get(obj, tmpl) if live else None)
        text = f"{ref.key}: {change}{_settings_text(settings_done)}"
        if not live:
            text += "; workload spec not observed: the patch edits container 0 and fails if it asks for no GPU"
        action = model.k8s_patch(ref, ops, "workload", text, state.observe(ref, [tmpl + "/containers",
                                                                                 tmpl + "/nodeSelector"]))
    if action["type"] != "note" and resource is not None and not any(op["op"] == "remove" for op in ops):
        raise fail(rec, "target", f"{ref.key}: no container asks for {GPU}; nothing to move to {resource}")
    return action


def _settings_text(done: list[str]) -> str:
    return f"; server memory setting {', '.join(done)}" if done else ""


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

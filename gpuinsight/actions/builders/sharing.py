"""mps / timeslice: share one node's GPUs between several small workloads.

Three steps: a device-plugin config entry (ConfigMap ``gpu-operator/device-plugin-config``,
one key per config name), the node label ``nvidia.com/device-plugin.config=<name>`` that makes
the device plugin on that node use it, and a nodeSelector on that same label for each workload:
the workload follows the sharing configuration, not a host name (a replaced node that gets the
label takes the workload back; ``kubernetes.io/hostname`` would pin it to one machine).
The GPU Operator must point its device plugin at that ConfigMap (ClusterPolicy
``devicePlugin.config.name``). The rules emit one recommendation per group member (``target.member``);
each pins its member, and the shared config and label are deduplicated across them.
When the plan names no node, the node running most of the group is chosen (not a MIG node,
not one already using another device-plugin config or claimed by another group in this plan).
A host from which the plan moves whole-GPU pods away (``proposed.evict``: a device-plugin config
shares every GPU of the node, so nothing that needs a GPU of its own may stay) is cordoned, those
pods evicted (gangs together, PodDisruptionBudgets checked), relabelled once they are gone, and
uncordoned before the members move in.
"""

from __future__ import annotations

import functools
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
    pin_workload,
    readable,
    unobserved,
    unpatchable,
    workload_ref,
)
from gpuinsight.actions.patching import get, pointer
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.rules.base import Recommendation

CONFIG_NAMESPACE = "gpu-operator"
CONFIG_NAME = "device-plugin-config"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
SHARING_KEYS = {"mps": "mps", "time-slicing": "timeSlicing"}
RULE_SHARING = {"mps": "mps", "timeslice": "time-slicing"}


@functools.cache
def config_document(sharing: str, replicas: int) -> str:
    doc = {"version": "v1", "sharing": {SHARING_KEYS[sharing]: {
        "renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": int(replicas)}]}}}
    return yaml.safe_dump(doc, sort_keys=False)


def _group(rec: Recommendation) -> tuple[str, str, int, list[Ref], list[Ref]]:
    sharing = rec.proposed.get("sharing")
    if sharing != RULE_SHARING[rec.rule]:
        raise fail(rec, "proposed.sharing", f"{sharing!r} does not match rule {rec.rule} "
                                            f"(expected {RULE_SHARING[rec.rule]!r})")
    name = rec.proposed.get("config_name")
    if not isinstance(name, str) or not name:
        raise fail(rec, "proposed.config_name", "missing")
    workloads = rec.target.get("workloads") or []
    if not workloads:
        raise fail(rec, "target.workloads", "no workloads to share the GPU")
    group = [workload_ref(rec, w, f"target.workloads[{i}]") for i, w in enumerate(workloads)]
    pinned = [workload_ref(rec, rec.target["member"], "target.member")] if rec.target.get("member") else group
    return sharing, name, int(rec.proposed.get("replicas", 0)), group, pinned


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    _, _, _, group, pinned = _group(rec)
    node = rec.proposed.get("node")
    nodes = [Ref("Node", None, node)] if isinstance(node, str) and node else []
    return [Ref("ConfigMap", CONFIG_NAMESPACE, CONFIG_NAME), *nodes, *readable(pinned)]


def choose_node(rec: Recommendation, state: ClusterState, name: str, group: list[Ref]) -> str:
    node = rec.proposed.get("node")
    if isinstance(node, str) and node:
        return node
    claimed = state.planned.setdefault("sharing-nodes", {})
    for chosen, config in claimed.items():
        if config == name:
            return chosen
    counts: dict[str, int] = {}
    for ref in group:
        for pod in state.workload_pods(ref.namespace or "", ref.kind, ref.name):
            if pod.get("node"):
                counts[pod["node"]] = counts.get(pod["node"], 0) + 1
    for candidate in sorted(counts, key=lambda n: (-counts[n], n)):
        labels = (state.nodes.get(candidate) or {}).get("labels") or {}
        if labels.get("nvidia.com/mig.config") not in (None, "", "all-disabled"):
            continue
        if labels.get(CONFIG_LABEL) not in (None, "", name) or candidate in claimed:
            continue
        claimed[candidate] = name
        return candidate
    raise fail(rec, "proposed.node", "no node to host the group (none of its nodes is free of MIG and of "
                                     "another device-plugin config)")


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    sharing, name, replicas, group, pinned = _group(rec)
    node = choose_node(rec, state, name, group)
    actions: list[dict[str, Any]] = []
    cm = Ref("ConfigMap", CONFIG_NAMESPACE, CONFIG_NAME)
    doc = config_document(sharing, replicas)
    key_ptr = pointer("data", name)
    observed = state.observe(cm, [key_ptr])
    if observed["fields"].get(key_ptr) != doc:
        cfg = cm.skeleton() | {"data": {name: doc}}
        actions.append(model.k8s_apply(cfg, "config", f"ConfigMap {CONFIG_NAMESPACE}/{CONFIG_NAME}: entry {name} = "
                                                      f"{sharing} with {replicas} replicas per GPU", observed))
    node_ref = Ref("Node", None, node)
    observed = state.observe(node_ref, [model.label_pointer(CONFIG_LABEL)])
    current = observed["fields"].get(model.label_pointer(CONFIG_LABEL))
    pre, gone, uncordon = host_steps(rec, state, node, f"its GPUs shared ({sharing})") \
        if rec.proposed.get("evict") and current != name else ([], [], False)
    actions += pre
    if current != name:
        actions.append(model.label(node, {CONFIG_LABEL: name}, f"node {node}: {CONFIG_LABEL} "
                                   f"{current or '(unset)'} -> {name} (device plugin restarts on the node)", observed,
                                   wait_for_pods_gone=gone))
    if uncordon:
        actions.append(model.uncordon(node, state.observe(node_ref, ["/spec/unschedulable"]),
                                      f"uncordon {node}: its GPUs are shared ({sharing}), the members move in"))
    for ref in pinned:
        actions.append(pin_workload(state, ref, {CONFIG_LABEL: name}, None,
                                    f"share the GPUs of the node labelled {CONFIG_LABEL}={name} ({node}; "
                                    f"{sharing}, group of {len(group)})"))
        if rec.target.get("member") and server_memory.setting_of(rec) is not None:
            actions.append(_server_setting(rec, state, ref))
    return actions


def _server_setting(rec: Recommendation, state: ClusterState, ref: Ref) -> dict[str, Any]:
    """The member's inference-server memory setting (it reserves less of the shared GPU)."""
    setting = server_memory.setting_of(rec)
    assert setting is not None
    change = f"its server's {server_memory.describe(setting)} (the share of the shared GPU it reserves)"
    if not patchable(ref):
        return unpatchable(ref, change)
    if ref.kind == "VolcanoJob":
        return manifest_patch(state, ref, change, lambda ptr, spec: server_memory.spec_ops(rec, ptr, spec)[0],
                              ("containers",))
    tmpl = TEMPLATES[ref.kind]
    obj = state.get(ref)
    if obj is None or not state.is_known(ref, "/spec"):
        return unobserved(ref, change)
    ops, done = server_memory.spec_ops(rec, tmpl, get(obj, tmpl) or {})
    if not ops:
        return model.note(f"{ref.key}: {change}: nothing to change", ref.key)
    return model.k8s_patch(ref, ops, "workload", f"{ref.key}: server memory setting {', '.join(done)}",
                           state.observe(ref, [tmpl + "/containers"]))

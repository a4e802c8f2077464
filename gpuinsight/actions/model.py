"""The action format: what a recommendation's ``actions`` array holds (docs/actions.md).

Every action is a plain JSON-able dict with ``type``, ``phase`` (apply order), ``target`` (a
one-line name for people and the audit table) and ``description``. Kubernetes actions also have
``ref`` (apiVersion/kind/namespace/name) and ``observed`` (what the plan saw: existence,
resourceVersion, generation and the values of the fields the action touches).

=============  ==========================================================================
type           meaning
=============  ==========================================================================
k8s-apply      server-side apply of ``object`` (fieldManager gpuinsight, force=false)
k8s-label      set ``labels`` on ``node`` (server-side apply of the Node's labels)
k8s-patch      RFC 6902 JSON patch ``patch`` on ``ref``, guarded by ``test`` operations
               (used where a field must be removed or a list edited by position)
manifest-patch a JSON patch for the workload's manifest, NOT applied to the cluster: the live
               object refuses the change (a Volcano Job's spec is immutable), so it goes into
               the manifest the workload is next submitted from
cordon         mark ``node`` unschedulable (server-side apply of spec.unschedulable)
uncordon       mark ``node`` schedulable again, once its ``wait_for_label`` labels have their values
               (a node repartitioned by mig-manager: ``nvidia.com/mig.config.state=success``)
drain          evict ``pods`` ([{namespace, name}]) together; ``gang`` names their PodGroup
aws-eks        boto3 EKS ``call`` with ``args`` (create_nodegroup, update_nodegroup_config)
note           nothing is applied; ``message`` says what a person should do
refused        the builder refused the recommendation (``message`` names the field)
=============  ==========================================================================

A ``k8s-label`` may carry ``wait_for_pods_gone`` ([{namespace, name}]): it is applied only once
those pods no longer run on the node (the pods a repartition needs gone, evicted just before).
A node that gets GPUs shared goes through the phases ``host-cordon``, ``host-drain``, ``label``,
``uncordon`` before the workloads move in (``workload``); binpack's ``cordon`` and ``drain`` come
after the workload changes.
"""

from __future__ import annotations

from typing import Any

from gpuinsight.actions.patching import (
    apply_merge,
    json_patch,
    leaf_pointers,
    pointer,
    tokens,
    truncate_at_list,
)
from gpuinsight.actions.refs import Ref
from gpuinsight.errors import BadInput
from gpuinsight.plan.vocabulary import PHASES

FIELD_MANAGER = "gpuinsight"


class ActionError(BadInput):
    """A recommendation cannot be turned into safe actions (names the offending field)."""


def phase_index(action: dict[str, Any]) -> int:
    phase = action.get("phase", "note")
    return PHASES.index(phase) if phase in PHASES else len(PHASES)


def action_ref(action: dict[str, Any]) -> Ref | None:
    if action.get("type") in ("k8s-label", "cordon", "uncordon"):
        return Ref("Node", None, str(action["node"]))
    if action.get("type") in ("k8s-apply", "k8s-patch", "manifest-patch"):
        return Ref.from_dict(action["ref"])
    return None


def apply_config(action: dict[str, Any]) -> dict[str, Any] | None:
    """The server-side apply configuration an SSA-type action sends."""
    kind = action.get("type")
    if kind == "k8s-apply":
        return action["object"]
    if kind == "k8s-label":
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": action["node"], "labels": dict(action["labels"])}}
    if kind in ("cordon", "uncordon"):
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": action["node"]},
                "spec": {"unschedulable": kind == "cordon"}}
    return None


def touched_paths(action: dict[str, Any]) -> list[str]:
    """JSON pointers of the fields an action changes: the leaves an apply configuration sets
    (lists count whole), the exact paths a JSON patch writes (a list it inserts into or removes
    from counts whole; a path through a list element, ``containers/1/resources``, stays exact so
    that the rest of the element, e.g. its ``env``, is neither recorded nor shown)."""
    cfg = apply_config(action)
    if cfg is not None:
        return sorted({truncate_at_list(p) for p in leaf_pointers(cfg)})
    if action.get("type") in ("k8s-patch", "manifest-patch"):
        return patch_paths(action["patch"])
    return []


def patch_paths(ops: list[dict[str, Any]]) -> list[str]:
    found: set[str] = set()
    for op in ops:
        if op.get("op") == "test":
            continue
        toks = tokens(op["path"])
        if toks and (toks[-1] == "-" or (toks[-1].isdigit() and op.get("op") in ("add", "remove"))):
            toks = toks[:-1]
        found.add(pointer(*toks))
    return sorted(p for p in found if not any(p.startswith(q + "/") for q in found))


def expected_after(action: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    """The object as it should look once the action is applied to ``before``."""
    cfg = apply_config(action)
    if cfg is not None:
        return apply_merge(before or {}, cfg)
    if action.get("type") in ("k8s-patch", "manifest-patch"):
        return json_patch(before or {}, action["patch"])
    return before or {}


def k8s_apply(obj: dict[str, Any], phase: str, description: str, observed: dict[str, Any]) -> dict[str, Any]:
    ref = Ref.of(obj)
    return {"type": "k8s-apply", "phase": phase, "target": ref.key, "ref": ref.to_dict(),
            "description": description, "object": obj, "observed": observed}


def k8s_patch(ref: Ref, ops: list[dict[str, Any]], phase: str, description: str,
              observed: dict[str, Any], *, kind: str = "k8s-patch") -> dict[str, Any]:
    return {"type": kind, "phase": phase, "target": ref.key, "ref": ref.to_dict(),
            "description": description, "patch_type": "json", "patch": ops, "observed": observed}


def label(node: str, labels: dict[str, str], description: str, observed: dict[str, Any], *,
          wait_for_pods_gone: list[dict[str, str]] | None = None) -> dict[str, Any]:
    action = {"type": "k8s-label", "phase": "label", "target": f"Node/{node}", "node": node,
              "labels": labels, "description": description, "observed": observed}
    if wait_for_pods_gone:
        action["wait_for_pods_gone"] = wait_for_pods_gone
    return action


def cordon(node: str, observed: dict[str, Any], *, phase: str = "cordon", why: str = "no new pods") -> dict[str, Any]:
    return {"type": "cordon", "phase": phase, "target": f"Node/{node}", "node": node,
            "description": f"cordon {node} ({why})", "observed": observed}


def uncordon(node: str, observed: dict[str, Any], description: str, *,
             wait_for_label: dict[str, str] | None = None) -> dict[str, Any]:
    action = {"type": "uncordon", "phase": "uncordon", "target": f"Node/{node}", "node": node,
              "description": description, "observed": observed}
    if wait_for_label:
        action["wait_for_label"] = wait_for_label
    return action


def drain(nodes: list[str], pods: list[dict[str, str]], gang: str | None, description: str, *,
          phase: str = "drain") -> dict[str, Any]:
    return {"type": "drain", "phase": phase, "target": "Node/" + ",".join(nodes), "node": nodes[0],
            "nodes": nodes, "pods": pods, "gang": gang, "description": description}


def eks(call: str, args: dict[str, Any], phase: str, description: str, *,
        copy_from: str | None = None, observed: dict[str, Any] | None = None) -> dict[str, Any]:
    target = f"aws:eks/{args.get('clusterName')}/{args.get('nodegroupName')}"
    action = {"type": "aws-eks", "phase": phase, "target": target, "call": call, "args": args,
              "description": description, "observed": observed or {}}
    if copy_from:
        action["copy_from"] = copy_from
    return action


def note(message: str, target: str = "") -> dict[str, Any]:
    return {"type": "note", "phase": "note", "target": target, "description": message, "message": message}


def label_pointer(key: str) -> str:
    return pointer("metadata", "labels", key)

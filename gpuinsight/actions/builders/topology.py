"""topology: ask the scheduler to keep a gang within the tighter domain on its next start.

Nothing moves now: a running gang is restarted by nobody here (that would lose its progress).
The change takes effect when the gang next starts (a retry, a resubmission):

* **Volcano Job, HyperNodes in the cluster**: ``spec.networkTopology`` with ``mode`` (soft by
  default: Volcano prefers the domain and still starts the job when the domain is full) and
  ``highestTierAllowed`` = the HyperNode tier found. A submitted Job's spec cannot change (its
  admission webhook refuses it): a ``manifest-patch`` for the manifest it is resubmitted from.
* **Otherwise** (domains from node labels): a pod affinity among the gang's pods on the domain's
  label key (``preferredDuringSchedulingIgnoredDuringExecution``, weight 100; required only with
  mode hard), added to the pod templates' own affinity terms. Without the observed templates no
  patch is built (it would replace what they have): a note says what to add.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.builders.common import (
    MANIFEST_NOTE,
    TEMPLATES,
    fail,
    manifest_patch,
    nest,
    readable,
    templates_observed,
    unpatchable,
    workload_ref,
)
from gpuinsight.actions.patching import get
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds import TOPOLOGY

# the finding kinds this module builds the actions of
BUILDS = (TOPOLOGY,)

AFFINITY_WEIGHT = 100  # the strongest preference the API allows (1..100)


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    return readable([workload_ref(rec, rec.target)])


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    ref = workload_ref(rec, rec.target)
    mode = rec.proposed.get("mode") or "soft"
    if mode not in ("soft", "hard"):
        raise fail(rec, "proposed.mode", f"{mode!r} is not soft or hard")
    where = f"{rec.proposed.get('level')} {rec.proposed.get('domain')}"
    tier = rec.proposed.get("volcano_tier")
    if tier is not None:
        if ref.kind != "VolcanoJob":
            return [model.note(f"{ref.key}: set spec.networkTopology {{mode: {mode}, highestTierAllowed: {tier}}} on "
                               f"its PodGroup so Volcano keeps the gang within {where}", ref.key)]
        value = {"mode": mode, "highestTierAllowed": int(tier)}
        text = (f"{ref.key}: keep the gang within HyperNode tier {tier} ({where}) on its next start "
                f"(networkTopology mode {mode}). {MANIFEST_NOTE}")
        return [model.k8s_patch(ref, [{"op": "add", "path": "/spec/networkTopology", "value": value}], "workload",
                                text, state.observe(ref, ["/spec/networkTopology"]), kind="manifest-patch")]
    key, selector = rec.proposed.get("topology_key"), rec.proposed.get("gang_label")
    if not isinstance(key, str) or not key or not isinstance(selector, dict) or not selector:
        raise fail(rec, "proposed.topology_key", "neither a Volcano tier nor a label key to keep the gang together")
    term = {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": key}
    entry: dict[str, Any] = term if mode == "hard" else {"weight": AFFINITY_WEIGHT, "podAffinityTerm": term}
    field = ("requiredDuringSchedulingIgnoredDuringExecution" if mode == "hard"
             else "preferredDuringSchedulingIgnoredDuringExecution")
    why = f"keep the gang's pods within one {key} ({where}) on their next start"
    if ref.kind not in (*TEMPLATES, "VolcanoJob"):
        return [unpatchable(ref, f"with a pod affinity on {key} among {selector} to {why}")]
    obj = state.get(ref)
    if not templates_observed(state, ref):
        return [model.note(f"{ref.key}: to {why}, add to its pod templates' affinity.podAffinity.{field} "
                           f"the term {entry}; their spec was not observed, so no patch is built (it would replace "
                           "the affinity they have): run recommend with --context or --from-dir", ref.key)]
    if ref.kind in TEMPLATES:
        tmpl = TEMPLATES[ref.kind]
        current = get(obj, f"{tmpl}/affinity/podAffinity/{field}") or []
        merged = copy.deepcopy(current) + ([] if entry in current else [entry])
        cfg = ref.skeleton() | nest(tmpl, {"affinity": {"podAffinity": {field: merged}}})
        return [model.k8s_apply(cfg, "workload", f"{ref.key}: {why} (pod affinity added to the template's own)",
                                state.observe(ref, [f"{tmpl}/affinity/podAffinity/{field}"]))]

    def affinity_ops(spec_ptr: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
        affinity = copy.deepcopy(spec.get("affinity") or {})
        terms = affinity.setdefault("podAffinity", {}).setdefault(field, [])
        if entry not in terms:
            terms.append(entry)
        ops = []
        if "affinity" in spec:  # the patch replaces it: only over what was seen
            ops.append({"op": "test", "path": spec_ptr + "/affinity", "value": copy.deepcopy(spec["affinity"])})
        return [*ops, {"op": "add", "path": spec_ptr + "/affinity", "value": affinity}]

    return [manifest_patch(state, ref, f"{why} (pod affinity)", affinity_ops, ("affinity",))]

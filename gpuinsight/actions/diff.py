"""``recommend``'s default output: the plan's actions as a diff against live or dumped state.

Only the fields an action touches are shown (a unified diff of their YAML), so a Queue re-weight
reads as two lines, not as the whole object with its status; a JSON patch into one container
shows that container's resources, never its ``env``. What is shown is redacted all the same.
"""

from __future__ import annotations

import copy
import difflib
import json
from typing import Any

import yaml

from gpuinsight.actions import model
from gpuinsight.actions.clusters import States, state_for, state_map
from gpuinsight.actions.patching import PatchError, get, has, tokens
from gpuinsight.actions.redact import one_line, redact
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.plan import Plan


def project(obj: dict[str, Any] | None, paths: list[str]) -> dict[str, Any]:
    """The part of ``obj`` at ``paths`` (nested as in the object)."""
    out: dict[str, Any] = {}
    if obj is None:
        return out
    for ptr in paths:
        if not has(obj, ptr):
            continue
        toks = tokens(ptr)
        cur = out
        for tok in toks[:-1]:
            cur = cur.setdefault(tok, {})
        cur[toks[-1]] = copy.deepcopy(get(obj, ptr))
    return out


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a scheduler conf, a device-plugin config) as ``|`` blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def _yaml(doc: dict[str, Any]) -> list[str]:
    if not doc:
        return []
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100).splitlines()


def _source(state: ClusterState, ref: Ref) -> str:
    if ref.key in state.missing:
        return "absent"
    return state.sources.get(ref.key, "not observed")


def diff_action(action: dict[str, Any], state: ClusterState) -> list[str]:
    kind = action.get("type")
    if kind == "note":
        return [f"  note: {one_line(action.get('message'))}"]
    if kind == "refused":
        return [f"  REFUSED: {one_line(action.get('message'))}"]
    prefix = []
    if kind == "manifest-patch":
        prefix = ["  (not applied to the cluster: a patch for the workload's manifest, applied at its next "
                  "submission)"]
    if kind == "drain":
        pods = ", ".join(f"{p['namespace']}/{p['name']}" for p in action.get("pods") or [])
        gang = f" (gang {action['gang']}, together)" if action.get("gang") else ""
        return [f"  drain {', '.join(action.get('nodes') or [action.get('node')])}: evict {pods}{gang}"]
    if kind == "aws-eks":
        args = {k: v for k, v in (action.get("args") or {}).items() if k not in ("clusterName", "nodegroupName")}
        lines = [f"  aws eks {action.get('call')} {action['args'].get('clusterName')}/"
                 f"{action['args'].get('nodegroupName')}"]
        seen = (action.get("observed") or {}).get("scalingConfig")
        if seen:
            lines.append(f"    - scalingConfig: {json.dumps(seen, sort_keys=True)}")
        lines += [f"    + {k}: {json.dumps(v, sort_keys=True)}" for k, v in args.items()]
        return lines
    ref = model.action_ref(action)
    assert ref is not None
    live = state.get(ref)
    paths = model.touched_paths(action)
    try:
        after = redact(project(model.expected_after(action, live), paths))
    except PatchError as exc:
        return [*prefix, f"  {ref.key}: the patch does not fit the {_source(state, ref)} object: {exc}"]
    before = redact(project(live, paths))
    if before == after:
        return [*prefix, f"  {ref.key}: no change ({_source(state, ref)} state already matches)"]
    lines = difflib.unified_diff(_yaml(before), _yaml(after), f"{ref.key} ({_source(state, ref)})",
                                 f"{ref.key} (planned)", lineterm="", n=2)
    return [*prefix, *("  " + line for line in lines)]


def diff_plan(plan: Plan, state: States) -> str:
    """Every recommendation with its actions, each as a diff against its cluster's state (a single
    :class:`ClusterState` for a plan of one cluster, else {cluster: state}); with several
    clusters each recommendation names its own."""
    several = len({r.cluster for r in plan.recommendations}) > 1
    out = [f"plan {plan.plan_id}: {len(plan.recommendations)} recommendation(s), "
           f"${plan.total_monthly_savings_usd:,.2f}/month"]
    if several:
        out[0] += " (" + ", ".join(f"{one_line(c)} ${v:,.2f}" for c, v in plan.savings_by_cluster().items()) + ")"
    for rec in plan.recommendations:
        own = state_for(state, rec.cluster) or ClusterState(cluster=rec.cluster)
        out.append("")
        where = f" cluster {one_line(rec.cluster)}:" if several else ""
        out.append(f"# {rec.id} [{rec.rule}]{where} {one_line(rec.title)} (${rec.monthly_savings_usd:,.2f}/month)")
        if not rec.actions:
            out.append("  (no actions built)")
        for action in rec.actions:
            if action.get("type") in ("note", "refused"):
                out.extend(line.replace("  ", "- ", 1) for line in diff_action(action, own))
                continue
            out.append(f"- {action.get('phase', '')}: {one_line(action.get('description', action.get('type')))}")
            out.extend(diff_action(action, own))
    notes = [n for st in state_map(state).values() for n in st.notes]
    if notes:
        out.append("")
        out += [f"note: {one_line(n)}" for n in notes]
    return "\n".join(out)

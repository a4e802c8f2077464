"""``recommend --emit DIR``: the whole plan as files, in order, for kubectl, kustomize or GitOps.

A plan is a sequence of steps per cluster; each cluster's changes are in a folder of their own
(the cluster's name, made safe for a file name), each step a numbered directory in it, and the
cluster's ``steps.sh`` carries out all of them in order through that cluster's kube context::

    DIR/README.md                the clusters, the context each needs, how to run them
    DIR/steps.sh                 every cluster's steps.sh in turn
    DIR/plan.json                the plan (`gpuinsight recommend --plan DIR/plan.json` reads it back)
    DIR/east/README.md           what each step does, what the script does not do, the prerequisites
    DIR/east/steps.sh            every step in order (DRY_RUN=1: server-side dry runs; `sh steps.sh N`
                                 starts at step N)
    DIR/east/01-config/          server-side apply configurations + kustomization.yaml
    DIR/east/02-host-cordon-evict/ a node getting shared GPUs: cordoned, the pods that must leave it
                                 evicted (before it is relabelled; uncordoned in its own step after)
    DIR/east/04-workload-patch/  JSON patches (`kubectl patch --type=json`, kustomize cannot target them)
    DIR/east/06-cordon-evict/    node cordons and pod evictions: one step, never a kustomization, so a
                                 node is never cordoned without being emptied
    DIR/east/07-eks/             `aws eks ... --cli-input-json` inputs
    DIR/east/08-manifest/        patches for a workload's manifest (not applied to the cluster)

Every kubectl command names the context (``kubectl --context "$CONTEXT"``): the one named for the
cluster at emit time (``--context CLUSTER=CTX``), else ``KUBE_CONTEXT``; with neither the
cluster's script stops before its first step (a plan is never run against whatever context
happens to be current). Each step's heading names its cluster and context. The top-level script
refuses ``KUBE_CONTEXT`` for a plan of several clusters (one context cannot be all of them).

There is no top-level ``kustomization.yaml``: ``kubectl apply -k DIR`` fails instead of
performing half the plan. Only the server-side-apply steps are kustomizations. Whatever
``steps.sh`` cannot do (an EKS node group that needs values copied from another) stops it with
the step to do by hand and the command to resume.

Everything is written into a temporary directory next to ``DIR`` and renamed onto it at the end:
a failure leaves no partial output. An existing ``DIR`` is replaced only if an earlier emit wrote
it. Free text from the plan goes only into comments and Markdown, flattened to one line, and
every value on a command line is shell-quoted. Nothing here touches a cluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuinsight.actions import model
from gpuinsight.actions.apply import LABEL_WAIT_S, POD_WAIT_S
from gpuinsight.actions.builders import ordered_actions
from gpuinsight.actions.clusters import action_cluster, per_cluster
from gpuinsight.actions.patching import apply_merge
from gpuinsight.actions.prereqs import markdown, prerequisites_for
from gpuinsight.actions.redact import one_line
from gpuinsight.actions.refs import Ref
from gpuinsight.errors import BadInput
from gpuinsight.plan import Plan
from gpuinsight.plan.io import plan_text

MARKER = ".gpuinsight-plan"
KUBECTL = '"$KUBECTL" --context "$CONTEXT"'
SSA = f'{KUBECTL} apply --server-side --field-manager=gpuinsight $DRY'
TOP_FILES = ("README.md", "steps.sh", "plan.json", MARKER)
KUBECTL_STEPS = ("apply", "patch", "cordon-evict", "uncordon")  # the steps kubectl carries out (in a context)
MAX_NAME = 120  # file name stem; object names go up to 253 characters, file names to 255 bytes


@dataclass
class Step:
    kind: str          # apply | patch | cordon-evict | uncordon | eks | manifest
    phase: str
    actions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return {"apply": self.phase, "patch": f"{self.phase}-patch",
                "cordon-evict": "cordon-evict" if self.phase == "drain" else "host-cordon-evict",
                "uncordon": "uncordon", "eks": "eks" if self.phase == "node-pool" else f"eks-{self.phase}",
                "manifest": "manifest"}[self.kind]


def _step_kind(action: dict[str, Any]) -> str | None:
    kind = action["type"]
    if kind in ("cordon", "drain"):
        return "cordon-evict"
    if kind == "uncordon":
        return "uncordon"
    if kind in ("k8s-apply", "k8s-label"):
        return "apply"
    return {"k8s-patch": "patch", "aws-eks": "eks", "manifest-patch": "manifest"}.get(kind)


def steps_of(actions: list[dict[str, Any]]) -> list[Step]:
    """The steps, in apply order: the actions of one phase and one kind form a step (actions
    within a phase are independent of each other, so a phase's applies are grouped before its
    patches); cordons and evictions form one step."""
    steps: list[Step] = []
    by_key: dict[tuple[str, str], Step] = {}
    for action in actions:
        kind = _step_kind(action)
        if kind is None:
            continue
        phase = str(action.get("phase"))
        if kind == "cordon-evict":  # a host's cordon and evictions, or binpack's
            phase = "host-drain" if phase in ("host-cordon", "host-drain") else "drain"
        if (phase, kind) not in by_key:
            by_key[(phase, kind)] = Step(kind, phase)
            steps.append(by_key[(phase, kind)])
        by_key[(phase, kind)].actions.append(action)
    order = ("apply", "patch", "cordon-evict", "uncordon", "eks", "manifest")
    return sorted(steps, key=lambda s: (model.phase_index({"phase": s.phase}), order.index(s.kind)))


def _slug(*parts: str | None) -> str:
    slug = re.sub(r"[^a-z0-9.-]+", "-", "-".join(p for p in parts if p).lower()).strip("-.") or "x"
    if len(slug) > MAX_NAME:
        digest = hashlib.sha256(slug.encode()).hexdigest()[:10]
        slug = f"{slug[:MAX_NAME - 11]}-{digest}"
    return slug


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)


def _q(value: Any) -> str:
    return shlex.quote(str(value))


class _Files:
    """The files of one emission (relative path -> text); a path used twice is an error.
    ``prefix``: a view that writes under a folder and answers paths relative to it."""

    def __init__(self, files: dict[str, str] | None = None, prefix: str = "") -> None:
        self.files: dict[str, str] = {} if files is None else files
        self.prefix = prefix

    def add(self, rel: str, text: str) -> str:
        full = f"{self.prefix}/{rel}" if self.prefix else rel
        if full in self.files or any(full.startswith(f + "/") or f.startswith(full + "/") for f in self.files):
            raise BadInput(f"emit: two parts of the plan would be written to {full}")
        self.files[full] = text
        return rel

    def under(self, folder: str) -> _Files:
        return _Files(self.files, f"{self.prefix}/{folder}" if self.prefix else folder)


def cluster_folder(cluster: str) -> str:
    """A cluster's folder: its name when that is a safe file name, else a slug of it with a
    digest of the name (two names never share a folder; no folder is a top-level file's name)."""
    slug = _slug(cluster)
    if slug == cluster and slug not in TOP_FILES and not slug.startswith("."):
        return slug
    return f"{slug[:MAX_NAME - 9]}-{hashlib.sha256(cluster.encode()).hexdigest()[:8]}"


def render(plan: Plan, actions: list[dict[str, Any]],
           contexts: str | dict[str, str] | None = None) -> dict[str, str]:
    """Every file of the emitted plan (relative path -> text), without touching the disk.

    ``contexts``: the kube context of each cluster ({cluster: context}, or one context for a plan
    of one cluster); a cluster without one takes ``KUBE_CONTEXT`` when its script runs."""
    files = _Files()
    pid = plan.plan_id  # validated (planio.check_plan_id): letters, digits and hyphens, safe anywhere
    clusters = sorted({r.cluster for r in plan.recommendations} | {action_cluster(a) for a in actions})
    named = per_cluster(contexts, clusters, what="kube context", flag="--context")
    folders = {c: cluster_folder(c) for c in clusters}
    for cluster in clusters:
        mine = [a for a in actions if action_cluster(a) == cluster]
        recs = [r for r in plan.recommendations if r.cluster == cluster]
        own = files.under(folders[cluster])
        table, manual_steps = _cluster_files(own, pid, cluster, named.get(cluster), mine)
        own.add("README.md", _readme(plan, cluster, recs, named.get(cluster), mine, table, manual_steps))
    files.add("steps.sh", _top_script(pid, folders))
    files.add("README.md", _top_readme(plan, folders, named))
    files.add("plan.json", plan_text(plan))
    files.add(MARKER, f"{pid}\n")
    return files.files


def _cluster_files(files: _Files, pid: str, cluster: str, context: str | None,
                   actions: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """One cluster's steps and its steps.sh; returns (README step table rows, manual steps)."""
    steps = steps_of(actions)
    script = [
        "#!/bin/sh",
        f"# gpuinsight plan {pid}, cluster {one_line(cluster, 200)}: every step of the plan in this cluster, "
        "in order. Read README.md first.",
        "#   sh steps.sh              carry the plan out",
        "#   DRY_RUN=1 sh steps.sh    server-side dry run of every Kubernetes step (AWS steps are skipped)",
        "#   sh steps.sh N            start at step N (after a step done by hand)",
        "# Every kubectl command runs in the context "
        + (f"named for this cluster ({one_line(context, 200)}); KUBE_CONTEXT overrides it."
           if context else "given as KUBE_CONTEXT: none was named for this cluster."),
        "set -eu",
        'cd "$(dirname "$0")"',
        'FROM="${1:-1}"',
        'KUBECTL="${KUBECTL:-kubectl}"',
        'AWS="${AWS:-aws}"',
        'DRY="${DRY_RUN:+--dry-run=server}"',
        f"CLUSTER={_q(cluster)}",
        f'CONTEXT="${{KUBE_CONTEXT:-{_sh_default(context)}}}"',
        *([] if not any(s.kind in KUBECTL_STEPS for s in steps) else [
            'if [ -z "$CONTEXT" ]; then',
            f"  echo {_q('cluster ' + one_line(cluster, 200) + ': no kube context named for it; run KUBE_CONTEXT=CONTEXT sh steps.sh (or emit with --context CLUSTER=CONTEXT)')} >&2",
            "  exit 2",
            "fi"]),
        'step() { [ "$1" -ge "$FROM" ] || return 1; printf \'== step %s (cluster %s, context %s): %s\\n\' "$1" "$CLUSTER" "$CONTEXT" "$2" >&2; }',
        'manual() {',
        '  printf \'step %s is not done by this script: %s\\n\' "$1" "$2" >&2',
        '  if [ -n "${DRY_RUN:-}" ]; then return 0; fi',
        '  printf \'Do it by hand, then run: sh steps.sh %s\\n\' "$(($1 + 1))" >&2',
        '  exit 3',
        '}',
    ]
    refused = [a for a in actions if a["type"] == "refused"]
    if refused:
        script += [f"echo {_q('plan ' + pid + ': ' + str(len(refused)) + ' recommendation(s) were refused (see README.md); emit the others with --only')} >&2",
                   "exit 1"]
    table: list[str] = []
    manual_steps: list[str] = []
    for number, step in enumerate(steps, 1):
        folder = f"{number:02d}-{step.name}"
        what, how, lines = _step(files, folder, step)
        script += ["", f"# {one_line(what)}", f"if step {number} {_q(one_line(what, 200))}; then", *lines, "fi"]
        table.append(f"| {number} | `{folder}/` | {_md(what)} | {how} |")
        if step.kind == "manifest" or (step.kind == "eks" and _needs_copy(step)):
            manual_steps.append(f"* step {number} (`{folder}/`): {_md(how)}")
    files.add("steps.sh", "\n".join(script) + "\n")
    return table, manual_steps


def _sh_default(value: str | None) -> str:
    """A value inside ``"${VAR:-...}"``: only characters that stay literal there."""
    if not value:
        return ""
    if not re.fullmatch(r"[A-Za-z0-9_.:@/+=,-]+", value):
        raise BadInput(f"--context {value!r}: a kube context name of letters, digits and _.:@/+=,- only "
                       "(give others as KUBE_CONTEXT when running the steps)")
    return value


def _top_script(pid: str, folders: dict[str, str]) -> str:
    lines = [
        "#!/bin/sh",
        f"# gpuinsight plan {pid}: every cluster's steps in turn (each cluster's own steps.sh, in its folder).",
        "#   sh steps.sh              carry the plan out, cluster after cluster",
        "#   DRY_RUN=1 sh steps.sh    server-side dry run of every Kubernetes step",
        "set -eu",
        'cd "$(dirname "$0")"',
    ]
    if len(folders) == 1:
        folder = next(iter(folders.values()))
        lines += ["# one cluster: its script, with the arguments given (sh steps.sh N starts at step N)",
                  f'sh {_q(folder + "/steps.sh")} "$@"']
        return "\n".join(lines) + "\n"
    if folders:
        lines += [
            'if [ -n "${KUBE_CONTEXT:-}" ]; then',
            f"  echo {_q(f'plan {pid} changes {len(folders)} clusters: KUBE_CONTEXT names one context; emit with --context CLUSTER=CONTEXT for each, or run each cluster' + chr(39) + 's steps.sh with its own KUBE_CONTEXT')} >&2",
            "  exit 2",
            "fi",
            'if [ "$#" -gt 0 ]; then',
            f"  echo {_q('several clusters: to start at a step, run that cluster' + chr(39) + 's steps.sh N')} >&2",
            "  exit 2",
            "fi",
        ]
    for cluster, folder in folders.items():
        lines += [f"# cluster {one_line(cluster, 200)}", f"sh {_q(folder + '/steps.sh')}"]
    return "\n".join(lines) + "\n"


def _top_readme(plan: Plan, folders: dict[str, str], contexts: dict[str, str]) -> str:
    savings = plan.savings_by_cluster()
    lines = [
        f"# gpuinsight plan {plan.plan_id}",
        "",
        f"Created {plan.created_at.isoformat(timespec='seconds')}; {len(plan.recommendations)} recommendation(s), "
        f"${plan.total_monthly_savings_usd:,.2f}/month; prices from {_md(plan.catalog or 'no catalog')}.",
        "",
        "Each cluster's changes are in its own folder, carried out by its own `steps.sh` through the kube context "
        "named for that cluster (`KUBE_CONTEXT`, when none was named at emit time: the script stops without "
        "one). `sh steps.sh` runs every cluster's in turn. `gpuinsight recommend --plan plan.json --apply "
        "--context CLUSTER=CONTEXT ...` does the same with a drift check, an audit trail and `gpuinsight rollback`.",
        "",
        "| cluster | folder | recommendations | saving/month | kube context |",
        "|---|---|---|---|---|",
    ]
    counts = {c: sum(1 for r in plan.recommendations if r.cluster == c) for c in folders}
    for cluster, folder in folders.items():
        ctx = f"`{_md(contexts[cluster])}`" if cluster in contexts else "`KUBE_CONTEXT` (none named)"
        lines.append(f"| {_md(cluster)} | `{folder}/` | {counts[cluster]} | ${savings.get(cluster, 0.0):,.2f} | {ctx} |")
    if not folders:
        lines.append("| (none) | | 0 | $0.00 | |")
    return "\n".join(lines).rstrip() + "\n"


def _needs_copy(step: Step) -> bool:
    return any(a.get("copy_from") for a in step.actions)


def _step(files: _Files, folder: str, step: Step) -> tuple[str, str, list[str]]:
    """(what the step does, how it is carried out, its lines in steps.sh)."""
    descriptions = "; ".join(one_line(a.get("description", ""), 300) for a in step.actions)
    if step.kind == "apply":
        objects: dict[str, dict[str, Any]] = {}
        for action in step.actions:
            cfg = model.apply_config(action)
            assert cfg is not None
            ref = Ref.of(cfg)
            objects[ref.key] = apply_merge(objects.get(ref.key, {}), cfg)
        names = []
        for i, obj in enumerate(objects.values(), 1):
            ref = Ref.of(obj)
            names.append(files.add(f"{folder}/{i:02d}-{_slug(ref.info.kind, ref.namespace, ref.name)}.yaml",
                                   _dump(obj)).split("/", 1)[1])
        files.add(f"{folder}/kustomization.yaml", _dump({"apiVersion": "kustomize.config.k8s.io/v1beta1",
                                                         "kind": "Kustomization", "resources": names}))
        waits = [f'  [ -n "${{DRY_RUN:-}}" ] || {KUBECTL} wait --for=delete -n {_q(pod["namespace"])} '
                 f'{_q("pod/" + pod["name"])} --timeout={int(POD_WAIT_S)}s'
                 for action in step.actions for pod in action.get("wait_for_pods_gone") or []]
        how = f"`kubectl apply --server-side -k {folder}` (steps.sh)"
        if waits:
            how = "once the pods evicted before have terminated (steps.sh waits), " + how
        return f"{step.phase}: {descriptions}", how, [*waits, f"  {SSA} -k {folder}"]
    if step.kind == "patch":
        lines = []
        for i, action in enumerate(step.actions, 1):
            ref = Ref.from_dict(action["ref"])
            rel = files.add(f"{folder}/{i:02d}-{_slug(ref.info.kind, ref.namespace, ref.name)}.json",
                            json.dumps(action["patch"], indent=2) + "\n")
            ns = f"-n {_q(ref.namespace)} " if ref.namespace else ""
            resource = f"{ref.info.plural}.{ref.info.group}" if ref.info.group else ref.info.plural
            lines.append(f'  {KUBECTL} patch {ns}{resource} {_q(ref.name)} --type=json --patch-file={_q(rel)} $DRY')
        return f"{step.phase}: {descriptions}", "`kubectl patch --type=json` (steps.sh)", lines
    if step.kind == "cordon-evict":
        lines, n = [], 0
        for action in step.actions:
            if action["type"] == "cordon":
                n += 1
                cfg = model.apply_config(action)
                rel = files.add(f"{folder}/{n:02d}-cordon-{_slug(action['node'])}.yaml", _dump(cfg))
                lines.append(f"  {SSA} -f {_q(rel)}")
                continue
            for pod in action["pods"]:
                n += 1
                body = {"apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": pod["name"], "namespace": pod["namespace"]}}
                rel = files.add(f"{folder}/{n:02d}-evict-{_slug(pod['namespace'], pod['name'])}.json",
                                json.dumps(body, indent=2) + "\n")
                path = f"/api/v1/namespaces/{pod['namespace']}/pods/{pod['name']}/eviction"
                lines.append(f'  {KUBECTL} create --raw {_q(path)}"${{DRY_RUN:+?dryRun=All}}" -f {_q(rel)}')
        return (f"cordon and evict: {descriptions}",
                "steps.sh only (cordon, then evictions through the Eviction API, PDB-aware): not a kustomization, "
                "so a node is never cordoned and left full", lines)
    if step.kind == "uncordon":
        lines = []
        for i, action in enumerate(step.actions, 1):
            for key, value in (action.get("wait_for_label") or {}).items():
                path = "{.metadata.labels." + key.replace(".", "\\.") + "}"
                lines.append(f'  [ -n "${{DRY_RUN:-}}" ] || {KUBECTL} wait {_q("node/" + action["node"])} '
                             f'--for={_q("jsonpath=" + path + "=" + value)} --timeout={int(LABEL_WAIT_S)}s')
            rel = files.add(f"{folder}/{i:02d}-uncordon-{_slug(action['node'])}.yaml",
                            _dump(model.apply_config(action)))
            lines.append(f"  {SSA} -f {_q(rel)}")
        return (f"uncordon: {descriptions}", "steps.sh only (waits for the node's reconfiguration, then "
                                             "server-side apply of spec.unschedulable: false)", lines)
    if step.kind == "eks":
        lines = []
        for i, action in enumerate(step.actions, 1):
            call = action["call"].replace("_", "-")
            rel = files.add(f"{folder}/{i:02d}-{call}-{_slug(action['args']['nodegroupName'])}.json",
                            json.dumps(action["args"], indent=2) + "\n")
            if action.get("copy_from"):
                why = (f"{rel} lacks subnets and nodeRole: copy them from node group {action['copy_from']} "
                       f"(aws eks describe-nodegroup), then aws eks {call} --cli-input-json file://{rel}")
                lines.append(f"  manual {step_number(folder)} {_q(why)}")
            else:
                lines.append(f'  if [ -n "${{DRY_RUN:-}}" ]; then echo {_q("dry run: skipped aws eks " + call)} >&2; '
                             f'else "$AWS" eks {call} --cli-input-json {_q("file://" + rel)}; fi')
        how = ("by hand (the new node group copies subnets and node role from another group); steps.sh stops "
               "there" if _needs_copy(step) else "`aws eks ... --cli-input-json` (steps.sh; skipped under DRY_RUN)")
        return f"{step.phase}: {descriptions}", how, lines
    lines = []
    for i, action in enumerate(step.actions, 1):
        ref = Ref.from_dict(action["ref"])
        rel = files.add(f"{folder}/{i:02d}-{_slug(ref.info.kind, ref.namespace, ref.name)}.json",
                        json.dumps(action["patch"], indent=2) + "\n")
        lines.append(f"  echo {_q('not applied: ' + rel + ' is a patch for the manifest of ' + ref.key + ' (see README.md)')} >&2")
    return (f"manifest: {descriptions}", "not applied to the cluster: apply the patch to the workload's manifest "
            "(kubectl patch --local -f MANIFEST --type=json --patch-file=...) before it is next submitted", lines)


def step_number(folder: str) -> int:
    return int(folder.split("-", 1)[0])


def _md(text: str) -> str:
    return one_line(text, 600).replace("|", "\\|").replace("<", "&lt;")


def _readme(plan: Plan, cluster: str, recs: list[Any], context: str | None, actions: list[dict[str, Any]],
            table: list[str], manual_steps: list[str]) -> str:
    notes = [a for a in actions if a["type"] in ("note", "refused")]
    saving = round(sum(r.monthly_savings_usd for r in recs), 2)
    lines = [
        f"# gpuinsight plan {plan.plan_id}: cluster {_md(cluster)}",
        "",
        f"Created {plan.created_at.isoformat(timespec='seconds')}; {len(recs)} recommendation(s) in this cluster, "
        f"${saving:,.2f}/month; prices from {_md(plan.catalog or 'no catalog')}.",
        "",
        "Kube context: " + (f"`{_md(context)}` (named at emit time; `KUBE_CONTEXT` overrides it)." if context else
                            "none was named for this cluster: run the steps with `KUBE_CONTEXT=CONTEXT sh steps.sh` "
                            "(the script stops without it)."),
        "",
        "Carry it out with `sh steps.sh` after a server-side dry run (`DRY_RUN=1 sh steps.sh`). The steps run in "
        "order; do not apply one step directory alone or out of order, and do not `kubectl apply -k` this "
        "directory (it has no kustomization on purpose: the cordons and evictions, the JSON patches and the "
        "AWS calls are not kustomizations). `gpuinsight recommend --plan plan.json --apply` does the same with a "
        "drift check, an audit trail and `gpuinsight rollback` (`--context CLUSTER=CONTEXT` for each cluster).",
        "",
        "## Steps",
        "",
        "| step | directory | what | carried out by |",
        "|---|---|---|---|",
        *table,
        "",
        "## Not done by steps.sh",
        "",
        *(manual_steps or ["Nothing: steps.sh performs every step above" + (" (the notes below are not steps)."
                                                                              if notes else ".")]),
        "",
    ]
    if notes:
        lines += ["## Notes (nothing is applied for these)", ""]
        lines += [f"* {'REFUSED: ' if a['type'] == 'refused' else ''}{_md(a.get('message', ''))}" for a in notes]
        lines.append("")
    prereqs = prerequisites_for(actions)
    if prereqs:
        lines += ["## Prerequisites", "", markdown(prereqs)]
    return "\n".join(lines).rstrip() + "\n"


def emit(plan: Plan, out_dir: str | Path, *, only: set[str] | None = None,
         contexts: str | dict[str, str] | None = None) -> list[Path]:
    """Write the plan (or the recommendations in ``only``) under ``out_dir``, a folder per
    cluster; returns the files. ``contexts``: each cluster's kube context (see :func:`render`).

    All or nothing: the files are written to a temporary directory next to ``out_dir`` and
    renamed onto it at the end. BadInput (exit 2) when ``out_dir`` cannot be written or is a
    directory with other content.
    """
    if only is not None:
        plan = Plan(plan.plan_id, plan.created_at, plan.catalog, plan.window,
                    [r for r in plan.recommendations if r.id in only], list(plan.notes), plan.spend_monthly_usd,
                    list(plan.clusters))
    files = render(plan, ordered_actions(plan), contexts)
    out = Path(out_dir)
    _check_target(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name[:100]}.", dir=out.parent))
    except OSError as exc:
        raise BadInput(f"{out}: cannot create the directory: {exc.strerror}") from None
    try:
        for rel, text in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        for rel in files:
            if rel == "steps.sh" or rel.endswith("/steps.sh"):
                (tmp / rel).chmod(0o755)
        _swap(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BadInput(f"{out}: cannot write the plan: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [out / rel for rel in files]


def _check_target(out: Path) -> None:
    for parent in [out, *out.parents]:
        if parent.exists() and not parent.is_dir():
            raise BadInput(f"{out}: {parent} is a file, not a directory")
        if parent.exists():
            break
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise BadInput(f"{out}: the directory is not empty and was not written by gpuinsight; choose another")


def _swap(tmp: Path, out: Path) -> None:
    if not out.exists():
        os.rename(tmp, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name[:100]}.old.", dir=out.parent))
    os.rename(out, old / "plan")
    try:
        os.rename(tmp, out)
    except OSError:
        os.rename(old / "plan", out)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)

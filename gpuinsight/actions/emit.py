"""``recommend --emit DIR``: the plan as files for kubectl, kustomize or a GitOps repository.

* one YAML per object changed by server-side apply (several actions on one object are merged),
  listed in ``kustomization.yaml`` (``kubectl apply --server-side --field-manager=gpuinsight -k DIR``);
* ``patches/*.json``: JSON patches (``kubectl patch --type=json``), which kustomize cannot
  target without the workload's own manifest;
* ``eks/*.json``: ``aws eks ... --cli-input-json`` inputs;
* ``steps.sh``: every step in apply order, including cordon and evictions (PDB-aware);
* ``plan.json``: the plan itself (``gpuinsight`` can apply it later).
Nothing here touches a cluster.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from gpuinsight.actions import model
from gpuinsight.actions.builders import ordered_actions
from gpuinsight.actions.patching import apply_merge
from gpuinsight.actions.planio import plan_to_json
from gpuinsight.actions.refs import Ref
from gpuinsight.rules.base import Plan

SSA = "kubectl apply --server-side --field-manager=gpuinsight ${DRY_RUN:+--dry-run=server}"


def _slug(*parts: str | None) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", "-".join(p for p in parts if p).lower()).strip("-")


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)


def emit(plan: Plan, out_dir: str | Path, *, only: set[str] | None = None) -> list[Path]:
    """Write the plan's actions under ``out_dir``; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    actions = ordered_actions(plan, only)
    written: list[Path] = []
    objects: dict[str, dict[str, Any]] = {}
    files: dict[str, str] = {}
    steps = ["#!/bin/sh", f"# gpuinsight plan {plan.plan_id}: every step in apply order. Review first.",
             "# DRY_RUN=1 sh steps.sh runs the Kubernetes steps as server-side dry runs.", "set -eu",
             'cd "$(dirname "$0")"', ""]
    counter = 0
    for action in actions:
        kind = action["type"]
        steps.append(f"# [{action.get('phase')}] {action.get('description', '')}".replace("\n", " "))
        cfg = model.apply_config(action)
        if cfg is not None:
            ref = Ref.of(cfg)
            if ref.key not in objects:
                counter += 1
                files[ref.key] = f"{counter:02d}-{_slug(ref.info.kind, ref.namespace, ref.name)}.yaml"
                objects[ref.key] = {}
                steps.append(f"{SSA} -f {files[ref.key]}")
            else:
                steps.append(f"# (merged into {files[ref.key]})")
            objects[ref.key] = apply_merge(objects[ref.key], cfg)
        elif kind == "k8s-patch":
            ref = Ref.from_dict(action["ref"])
            counter += 1
            name = f"patches/{counter:02d}-{_slug(ref.info.kind, ref.namespace, ref.name)}.json"
            written.append(_write(out / name, json.dumps(action["patch"], indent=2) + "\n"))
            ns = f"-n {shlex.quote(ref.namespace)} " if ref.namespace else ""
            resource = f"{ref.info.plural}.{ref.info.group}" if ref.info.group else ref.info.plural
            steps.append(f"kubectl patch {ns}{resource} {shlex.quote(ref.name)} --type=json "
                         f"--patch-file={name} ${{DRY_RUN:+--dry-run=server}}")
        elif kind == "drain":
            for pod in action["pods"]:
                ev = {"apiVersion": "policy/v1", "kind": "Eviction",
                      "metadata": {"name": pod["name"], "namespace": pod["namespace"]}}
                path = f"/api/v1/namespaces/{pod['namespace']}/pods/{pod['name']}/eviction"
                steps.append(f"echo {shlex.quote(json.dumps(ev))} | kubectl create --raw "
                             f"{shlex.quote(path)}${{DRY_RUN:+?dryRun=All}} -f -")
        elif kind == "aws-eks":
            counter += 1
            name = f"eks/{counter:02d}-{action['call'].replace('_', '-')}-{_slug(action['args']['nodegroupName'])}.json"
            written.append(_write(out / name, json.dumps(action["args"], indent=2) + "\n"))
            steps.append(f"[ -n \"${{DRY_RUN:-}}\" ] || aws eks {action['call'].replace('_', '-')} "
                         f"--cli-input-json file://{name}")
            if action.get("copy_from"):
                steps.append(f"# fill subnets/nodeRole from: aws eks describe-nodegroup --cluster-name "
                             f"{action['args']['clusterName']} --nodegroup-name {action['copy_from']}")
        elif kind in ("note", "refused"):
            steps.append(f"# {kind.upper()}: {action.get('message')}".replace("\n", " "))
    for key, obj in objects.items():
        written.append(_write(out / files[key], f"# gpuinsight plan {plan.plan_id}\n" + _dump(obj)))
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": [files[k] for k in objects]}
    header = (f"# gpuinsight plan {plan.plan_id}: server-side apply configurations.\n"
              f"# kubectl apply --server-side --field-manager=gpuinsight -k .   (steps.sh has the other steps)\n")
    written.append(_write(out / "kustomization.yaml", header + _dump(kustomization)))
    written.append(_write(out / "steps.sh", "\n".join(steps) + "\n"))
    written.append(_write(out / "plan.json", json.dumps(plan_to_json(plan), indent=2, default=str) + "\n"))
    return written


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path

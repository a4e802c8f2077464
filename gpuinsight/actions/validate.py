"""Validate emitted objects against the real CRD ``openAPIV3Schema`` (jsonschema), and core
objects (ConfigMap, Node, Deployment/StatefulSet) structurally.

The CRD directory is an argument: the package ships no CRDs and reads none at import time.
Patches are validated as the object they produce (``base`` merged with the patch), since a
server-side apply configuration is partial by design. CEL rules (``x-kubernetes-validations``)
are not evaluated, except Karpenter's requirement-key restrictions, re-implemented here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gpuinsight.actions import model
from gpuinsight.actions.patching import get
from gpuinsight.actions.planio import LABEL_VALUE, QUANTITY

LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
TOLERATION_OPS = ("Exists", "Equal")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _nullable(schema: Any) -> Any:
    """OpenAPI ``nullable: true`` as JSON Schema (``type: [t, "null"]``)."""
    if isinstance(schema, dict):
        out = {k: _nullable(v) for k, v in schema.items()}
        if out.pop("nullable", False) and isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(schema, list):
        return [_nullable(v) for v in schema]
    return schema


class CrdSchemas:
    """The served versions' schemas of every CRD YAML under ``crd_dir`` (recursively)."""

    def __init__(self, crd_dir: str | Path) -> None:
        from jsonschema import Draft7Validator  # imported on use: it is slow to import

        self.validators: dict[tuple[str, str], Any] = {}
        for path in sorted(Path(crd_dir).rglob("*.yaml")):
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the Job CRD is 228 KB
            for doc in yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader):  # noqa: S506
                if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                for version in spec.get("versions") or []:
                    schema = (version.get("schema") or {}).get("openAPIV3Schema")
                    if version.get("served") and schema:
                        key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                        self.validators[key] = Draft7Validator(_nullable(schema))

    def kinds(self) -> list[tuple[str, str]]:
        return sorted(self.validators)

    def validate(self, obj: dict[str, Any]) -> list[str]:
        """Schema errors of a whole custom object (``[]`` when valid); unknown kinds raise KeyError."""
        validator = self.validators[(str(obj.get("apiVersion")), str(obj.get("kind")))]
        errors = [f"{obj.get('kind')} {get(obj, '/metadata/name')}: /{'/'.join(map(str, e.absolute_path))}: "
                  f"{e.message}" for e in validator.iter_errors(obj)]
        if obj.get("kind") == "NodePool":
            errors += karpenter_rules(obj)
        return sorted(errors)


def karpenter_rules(obj: dict[str, Any]) -> list[str]:
    """The NodePool CEL rules on requirement keys and values that jsonschema cannot check."""
    errors = []
    for req in get(obj, "/spec/template/spec/requirements") or []:
        key = str(req.get("key"))
        domain = key.split("/")[0] if "/" in key else ""
        if domain.endswith("karpenter.sh") and key not in ("karpenter.sh/capacity-type",):
            errors.append(f"NodePool requirement {key}: label domain karpenter.sh is restricted")
        if key == "kubernetes.io/hostname":
            errors.append("NodePool requirement kubernetes.io/hostname is restricted")
        if req.get("operator") == "In" and not req.get("values"):
            errors.append(f"NodePool requirement {key}: operator In needs values")
    return errors


def _labels(labels: Any, where: str) -> list[str]:
    if not isinstance(labels, dict):
        return [f"{where}: not a map"]
    errors = []
    for key, value in labels.items():
        if not LABEL_KEY.match(str(key)):
            errors.append(f"{where}: bad key {key!r}")
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            errors.append(f"{where}.{key}: bad value {value!r}")
    return errors


def _pod_spec(spec: Any, where: str) -> list[str]:
    errors: list[str] = []
    if not isinstance(spec, dict):
        return [f"{where}: not an object"]
    if "nodeSelector" in spec:
        errors += _labels(spec["nodeSelector"], f"{where}.nodeSelector")
    for i, tol in enumerate(spec.get("tolerations") or []):
        if tol.get("operator", "Equal") not in TOLERATION_OPS or tol.get("effect", "NoSchedule") not in EFFECTS:
            errors.append(f"{where}.tolerations[{i}]: bad operator/effect {tol}")
    for i, c in enumerate(spec.get("containers") or []):
        for section in ("limits", "requests"):
            for name, qty in ((c.get("resources") or {}).get(section) or {}).items():
                if isinstance(qty, bool) or not QUANTITY.match(str(qty)):
                    errors.append(f"{where}.containers[{i}].resources.{section}.{name}: bad quantity {qty!r}")
        res = c.get("resources") or {}
        for name, qty in (res.get("limits") or {}).items():
            if name.startswith("nvidia.com/") and name in (res.get("requests") or {}) \
                    and str(res["requests"][name]) != str(qty):
                errors.append(f"{where}.containers[{i}]: {name} requests must equal limits")
    return errors


def check_core(obj: dict[str, Any]) -> list[str]:
    """Structural checks of the core objects gpuinsight writes (what kube-apiserver would reject)."""
    kind, errors = obj.get("kind"), []
    meta = obj.get("metadata") or {}
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        errors.append(f"{kind}: metadata.name missing")
    if "labels" in meta:
        errors += _labels(meta["labels"], f"{kind}.metadata.labels")
    if kind == "ConfigMap":
        for key, value in (obj.get("data") or {}).items():
            if not isinstance(value, str):
                errors.append(f"ConfigMap data.{key}: not a string")
            elif not re.match(r"^[-._a-zA-Z0-9]+$", key):
                errors.append(f"ConfigMap data key {key!r} is not valid")
    elif kind == "Node":
        unsched = get(obj, "/spec/unschedulable")
        if unsched is not None and not isinstance(unsched, bool):
            errors.append("Node spec.unschedulable: not a boolean")
    elif kind in ("Deployment", "StatefulSet"):
        replicas = get(obj, "/spec/replicas")
        if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0):
            errors.append(f"{kind} spec.replicas: {replicas!r} is not a non-negative integer")
        if get(obj, "/spec/template/spec") is not None:
            errors += _pod_spec(get(obj, "/spec/template/spec"), f"{kind}.spec.template.spec")
    elif kind == "Job":
        for i, task in enumerate(get(obj, "/spec/tasks") or []):
            errors += _pod_spec(get(task, "/template/spec") or {}, f"Job.spec.tasks[{i}].template.spec")
    return errors


def validate_action(action: dict[str, Any], schemas: CrdSchemas, base: dict[str, Any] | None = None) -> list[str]:
    """Errors of the object an action produces from ``base`` (the current object, if any)."""
    if model.action_ref(action) is None:
        return []
    result = model.expected_after(action, base)
    errors = check_core(result)
    if (result.get("apiVersion"), result.get("kind")) in schemas.validators:
        errors += schemas.validate(result)
    return errors

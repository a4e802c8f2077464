"""Validate emitted objects against the real schemas: CRDs against their ``openAPIV3Schema``
(jsonschema), core objects (Pod, Deployment, StatefulSet, CronJob, Node, ConfigMap, and every
pod template, including a Volcano Job's) against the Kubernetes OpenAPI schemas that the
``kubernetes-validate`` package ships (offline, strict: unknown fields are errors; the
``validate`` extra, in the test extras too), plus the
rules kube-apiserver enforces in code (:func:`check_core`: extended resources, label syntax).

The CRD directory is an argument: the package ships no CRDs and reads none at import time.
Patches are validated as the object they produce (``base`` merged with the patch), since a
server-side apply configuration is partial by design. CEL rules (``x-kubernetes-validations``)
are not evaluated, except Karpenter's requirement-key restrictions, re-implemented here, with the
ScaledObject's replica-count rule and what the KubeRay controller and KEDA's and Kueue's admission
webhooks refuse in the fields gpuinsight writes (:data:`OPERATOR_RULES`).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import yaml

from gpuinsight.actions import model
from gpuinsight.actions.patching import get
from gpuinsight.errors import RuntimeFailure
from gpuinsight.plan.schema import LABEL_KEY, LABEL_VALUE, QUANTITY
from gpuinsight.sources.k8s.common import MapError, parse_quantity

# The Kubernetes API version whose schemas validate core objects: the one the pinned
# ``kubernetes`` client (<36, i.e. 35.x) speaks, Kubernetes 1.35.
KUBERNETES_VERSION = "1.35"
# Resource names kube-apiserver lets requests overcommit; every other name with a domain
# (nvidia.com/gpu, nvidia.com/mig-1g.10gb) is an extended resource: integer, requests == limits.
NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "storage")
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
    """The served versions' schemas of every CRD YAML (``.yaml``, or gzip-compressed ``.yaml.gz``)
    under ``crd_dir`` and any ``more`` directories (recursively)."""

    def __init__(self, crd_dir: str | Path, *more: str | Path) -> None:
        from jsonschema import Draft7Validator  # imported on use: it is slow to import

        self.validators: dict[tuple[str, str], Any] = {}
        paths = sorted(p for folder in (crd_dir, *more) for p in Path(folder).rglob("*")
                       if p.name.endswith((".yaml", ".yaml.gz")))
        for path in paths:
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the RayJob CRD is 1.4 MB
            data = path.read_bytes()
            text = (gzip.decompress(data) if path.name.endswith(".gz") else data).decode("utf-8")
            for doc in yaml.load_all(text, Loader=loader):  # noqa: S506
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
        errors += OPERATOR_RULES.get(str(obj.get("kind")), lambda _: [])(obj)
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


def _ray_cluster_spec(spec: Any, where: str) -> list[str]:
    """What KubeRay's controller refuses in a RayCluster spec (``ValidateRayClusterSpec``) among
    the fields gpuinsight changes: it marks such a cluster invalid and stops reconciling it."""
    if not isinstance(spec, dict):
        return []
    errors = []
    autoscaling = spec.get("enableInTreeAutoscaling") is True
    options = spec.get("autoscalerOptions") or {}
    head_env = get(spec, "/headGroupSpec/template/spec/containers/0/env") or []
    v2 = options.get("version") == "v2" or any(
        e.get("name") == "RAY_enable_autoscaler_v2" and e.get("value") in ("1", "true") for e in head_env)
    if isinstance(options.get("idleTimeoutSeconds"), int) and options["idleTimeoutSeconds"] < 0:
        errors.append(f"{where}.autoscalerOptions.idleTimeoutSeconds must be non-negative")
    for i, group in enumerate(spec.get("workerGroupSpecs") or []):
        name = group.get("groupName", i)
        low, high = group.get("minReplicas"), group.get("maxReplicas")
        if not autoscaling and (low is None or high is None):
            errors.append(f"{where}: worker group {name} must set both minReplicas and maxReplicas when "
                          "autoscaling is disabled")
        if isinstance(low, int) and isinstance(high, int) and low > high:
            errors.append(f"{where}: worker group {name} has minReplicas {low} greater than maxReplicas {high}")
        if group.get("idleTimeoutSeconds") is not None and not v2:
            errors.append(f"{where}: worker group {name}: idleTimeoutSeconds is set, but autoscaler v2 is not enabled")
        if group.get("suspend") is True and autoscaling:
            errors.append(f"{where}: worker group {name} cannot be suspended with Autoscaler enabled")
    return errors


def _ray_rules(obj: dict[str, Any]) -> list[str]:
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    where = f"{kind} {get(obj, '/metadata/name')}"
    if kind == "RayCluster":
        return _ray_cluster_spec(spec, f"{where} spec")
    if kind == "RayService":
        return _ray_cluster_spec(spec.get("rayClusterConfig"), f"{where} spec.rayClusterConfig")
    errors = _ray_cluster_spec(spec.get("rayClusterSpec"), f"{where} spec.rayClusterSpec")
    ttl = spec.get("ttlSecondsAfterFinished") or 0
    if not spec.get("shutdownAfterJobFinishes") and ttl > 0:  # ValidateRayJobSpec
        errors.append(f"{where}: a RayJob with shutdownAfterJobFinishes set to false cannot have "
                      "TTLSecondsAfterFinished")
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        errors.append(f"{where}: a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended")
    return errors


def _keda_rules(obj: dict[str, Any]) -> list[str]:
    """The ScaledObject CRD's CEL rule and KEDA's admission webhook on replica counts."""
    spec = obj.get("spec") or {}
    low, high, idle = spec.get("minReplicaCount"), spec.get("maxReplicaCount", 100), spec.get("idleReplicaCount")
    where = f"ScaledObject {get(obj, '/metadata/name')}"
    errors = []
    if isinstance(low, int) and isinstance(high, int) and low > high:
        errors.append(f"{where}: minReplicaCount must be less than or equal to maxReplicaCount")
    if isinstance(idle, int) and idle >= (low if isinstance(low, int) else 0):
        errors.append(f"{where}: IdleReplicaCount={idle} must be less than MinReplicaCount={low or 0}")
    for i, trig in enumerate(spec.get("triggers") or []):
        if trig.get("type") == "cron" and not all((trig.get("metadata") or {}).get(k) for k in
                                                  ("timezone", "start", "end", "desiredReplicas")):
            errors.append(f"{where}: triggers[{i}]: cron needs timezone, start, end and desiredReplicas")
    return errors


def _kueue_rules(obj: dict[str, Any]) -> list[str]:
    """What Kueue's ClusterQueue webhook refuses (pkg/webhooks/clusterqueue_webhook.go,
    validateResourceGroups): each flavor lists the covered resources in their order, no resource
    or flavor twice, no negative quantity, borrowing and lending limits only in a cohort, and a
    lendingLimit never above its nominalQuota."""
    spec = obj.get("spec") or {}
    in_cohort = bool(spec.get("cohort") or spec.get("cohortName"))
    errors, seen_res, seen_flavors = [], set(), set()
    for i, group in enumerate(spec.get("resourceGroups") or []):
        covered = list(group.get("coveredResources") or [])
        for name in covered:
            if name in seen_res:
                errors.append(f"spec.resourceGroups[{i}].coveredResources: {name} is covered twice")
            seen_res.add(name)
        for j, fl in enumerate(group.get("flavors") or []):
            where = f"spec.resourceGroups[{i}].flavors[{j}]"
            if fl.get("name") in seen_flavors:
                errors.append(f"{where}.name: flavor {fl.get('name')} appears twice")
            seen_flavors.add(fl.get("name"))
            for k, res in enumerate(fl.get("resources") or []):
                rwhere = f"{where}.resources[{k}]"
                if k < len(covered) and res.get("name") != covered[k]:
                    errors.append(f"{rwhere}.name: must match the name in coveredResources ({covered[k]})")
                values = {}
                for field in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if res.get(field) is None:
                        continue
                    try:
                        values[field] = parse_quantity(res[field], f"{rwhere}.{field}")
                    except MapError as exc:
                        errors.append(str(exc))
                    if field != "nominalQuota" and not in_cohort:
                        errors.append(f"{rwhere}.{field}: must be nil when cohort is empty")
                if values.get("lendingLimit", 0) > values.get("nominalQuota", float("inf")):
                    errors.append(f"{rwhere}.lendingLimit: must be less than or equal to the nominalQuota")
    return errors


# Operators' own validation of what gpuinsight writes, beyond the schema (by kind)
OPERATOR_RULES = {"RayCluster": _ray_rules, "RayJob": _ray_rules, "RayService": _ray_rules,
                  "ScaledObject": _keda_rules, "ClusterQueue": _kueue_rules}


class CoreSchemas:
    """The Kubernetes OpenAPI schemas (``kubernetes-validate``'s copy, strict) of the core kinds."""

    def __init__(self, version: str = KUBERNETES_VERSION, *, strict: bool = True) -> None:
        import importlib.resources

        from referencing import Registry, Resource

        folder = f"v{version}.0-local" + ("-strict" if strict else "")
        try:
            self.root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / folder
        except ModuleNotFoundError:
            raise RuntimeFailure("validating core objects needs the kubernetes-validate package: "
                                 "pip install 'gpuinsight[validate]'") from None
        if not self.root.is_dir():
            raise RuntimeFailure(f"kubernetes-validate has no schemas for Kubernetes {version}")
        self.version = version
        defs = json.loads(self.root.joinpath("_definitions.json").read_text(encoding="utf-8"))
        self.registry = Resource.from_contents(defs) @ Registry()
        self._validators: dict[str, Any] = {}

    def _validator(self, filename: str) -> Any:
        if filename not in self._validators:
            from jsonschema import Draft202012Validator
            from referencing import Resource

            schema = json.loads(self.root.joinpath(filename).read_text(encoding="utf-8"))
            self._validators[filename] = Draft202012Validator(
                schema, registry=Resource.from_contents(schema) @ self.registry)
        return self._validators[filename]

    @staticmethod
    def filename(api_version: str, kind: str) -> str:
        group, _, version = api_version.rpartition("/")
        group = group.split(".")[0]
        return f"{kind.lower()}-{group + '-' if group else ''}{version}.json"

    def knows(self, obj: dict[str, Any]) -> bool:
        name = self.filename(str(obj.get("apiVersion")), str(obj.get("kind")))
        return "/" not in name and self.root.joinpath(name).is_file() and "." not in str(
            obj.get("apiVersion")).rpartition("/")[0]

    def _errors(self, filename: str, doc: Any, where: str) -> list[str]:
        return sorted(f"{where}: /{'/'.join(map(str, e.absolute_path))}: {e.message}"
                      for e in self._validator(filename).iter_errors(doc))

    def validate(self, obj: dict[str, Any]) -> list[str]:
        """Schema errors of a whole core object, ``[]`` when valid."""
        where = f"{obj.get('kind')} {get(obj, '/metadata/name')}"
        return self._errors(self.filename(str(obj.get("apiVersion")), str(obj.get("kind"))), obj, where)

    def validate_pod_template(self, template: Any, where: str) -> list[str]:
        return self._errors("podtemplatespec-v1.json", template, where)


_CORE: list[CoreSchemas] = []


def core_schemas() -> CoreSchemas:
    """The core schemas, loaded once per process (about 0.2 s)."""
    if not _CORE:
        _CORE.append(CoreSchemas())
    return _CORE[0]


def pod_templates(obj: dict[str, Any]) -> list[tuple[str, Any]]:
    """(where, pod template) of every pod template an object carries."""
    kind = obj.get("kind")
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
        return [(f"{kind}.spec.template", get(obj, "/spec/template"))]
    if kind == "CronJob":
        return [("CronJob.spec.jobTemplate.spec.template", get(obj, "/spec/jobTemplate/spec/template"))]
    if kind == "Job" and str(obj.get("apiVersion", "")).startswith("batch.volcano.sh/"):
        return [(f"Job.spec.tasks[{i}].template", t.get("template") or {})
                for i, t in enumerate(get(obj, "/spec/tasks") or []) if isinstance(t, dict)]
    return []


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
        if (tol.get("operator") or "Equal") not in TOLERATION_OPS or (tol.get("effect") or "") not in (*EFFECTS, ""):
            errors.append(f"{where}.tolerations[{i}]: bad operator/effect {tol}")
    for section in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(section) or []):
            errors += _resources(c.get("resources") or {}, f"{where}.{section}[{i}].resources")
    return errors


def extended(name: str) -> bool:
    """An extended resource: a domain-qualified name outside kubernetes.io (nvidia.com/gpu)."""
    if name in NATIVE_RESOURCES or name.startswith(("hugepages-", "requests.", "limits.")):
        return False
    domain = name.split("/")[0] if "/" in name else ""
    return bool(domain) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _resources(res: Any, where: str) -> list[str]:
    """kube-apiserver's ValidateResourceRequirements for what gpuinsight edits."""
    errors: list[str] = []
    if not isinstance(res, dict):
        return [f"{where}: not an object"]
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    for section, values in (("limits", limits), ("requests", requests)):
        for name, qty in values.items():
            if isinstance(qty, bool) or not QUANTITY.match(str(qty)):
                errors.append(f"{where}.{section}.{name}: bad quantity {qty!r}")
            elif extended(name) and not re.fullmatch(r"\+?[0-9]+", str(qty)):
                errors.append(f"{where}.{section}.{name}: must be an integer (extended resource)")
    for name, qty in requests.items():
        if not extended(name):
            continue
        if name not in limits:
            errors.append(f"{where}.limits.{name}: Required value: Limit must be set for non overcommitable "
                          f"resources")
        elif str(qty).lstrip("+") != str(limits[name]).lstrip("+"):
            errors.append(f"{where}.requests.{name}: Invalid value: {qty!r}: must be equal to {name} limit of "
                          f"{limits[name]!r}")
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
    elif kind == "Pod":
        errors += _pod_spec(obj.get("spec") or {}, "Pod.spec")
    for where, template in pod_templates(obj):
        errors += _pod_spec((template or {}).get("spec") or {}, f"{where}.spec")
    return errors


def validate_object(obj: dict[str, Any], schemas: CrdSchemas | None = None) -> list[str]:
    """Every check of a whole object: code-level rules, its CRD or OpenAPI schema, its pod templates."""
    errors = check_core(obj)
    key = (obj.get("apiVersion"), obj.get("kind"))
    core = core_schemas()
    if schemas is not None and key in schemas.validators:
        errors += schemas.validate(obj)
    elif core.knows(obj):
        errors += core.validate(obj)
    if not core.knows(obj):  # a custom resource's pod templates (Volcano Job tasks)
        for where, template in pod_templates(obj):
            errors += core.validate_pod_template(template, where)
    return errors


def validate_action(action: dict[str, Any], schemas: CrdSchemas | None = None,
                    base: dict[str, Any] | None = None) -> list[str]:
    """Errors of the object an action produces from ``base`` (the current object, if any)."""
    if model.action_ref(action) is None:
        return []
    return validate_object(model.expected_after(action, base), schemas)

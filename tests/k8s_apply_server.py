"""The loopback fake Kubernetes API server, write side: what ``gpuinsight.actions`` talks to.

Builds on :class:`tests.k8s_server.FakeKubeAPI` (GET, lists, discovery, request log) and adds:

* ``PATCH`` with ``application/apply-patch+yaml`` (server-side apply: field ownership per
  manager, 409 on a conflict unless ``force=true``, create when absent),
  ``application/merge-patch+json`` and ``application/json-patch+json``;
* ``dryRun=All`` on every write (validated, nothing stored);
* ``DELETE``, and ``POST .../pods/{name}/eviction`` (listed in discovery as ``pods/eviction``);
* resourceVersion / generation bookkeeping, and optimistic concurrency: a write carrying a
  ``metadata.resourceVersion`` that is not the current one is a 409 conflict;
* what kube-apiserver and the admission webhooks installed with the charts refuse, for the
  objects gpuinsight writes (422, or 403 for a webhook denial): every core object against the
  Kubernetes OpenAPI schema (strict) and every custom one against its CRD schema when given CRDs;
  extended resources (requests equal limits, a limit present, integers); immutable fields
  (Deployment/StatefulSet selectors, StatefulSet spec fields other than the template and
  friends, a Pod's spec but image and added tolerations, an immutable ConfigMap's data); the
  Volcano Job webhook (no spec change but ``minAvailable`` and task ``replicas``); KEDA's
  webhook (one ScaledObject per workload); what the KubeRay controller and KEDA refuse in a spec
  (``gpuinsight.actions.validate.OPERATOR_RULES``, through ``validate_object``);
* a scheduling model (:func:`unschedulable`): would a pod template fit a node (its labels,
  taints, extended resources, the MIG slices its ``nvidia.com/mig.config`` layout makes),
  counting the nodes a Karpenter NodePool would launch;
* mig-manager, as far as a plan sees it (:meth:`ApplyKubeAPI.mig_manager`): a node relabelled
  ``nvidia.com/mig.config=<name>`` gets ``nvidia.com/mig.config.state=success`` when the
  config it reads (the custom ConfigMap ``gpu-operator/custom-mig-config`` when present, else
  mig-manager's default config) has that name and no pod runs on the node's GPUs it changes,
  ``failed`` otherwise;
* fault injection: ``api.fault("PATCH", "/queues/", 403)`` (optionally only for real or only
  for dry-run requests, and only N times).

    api = ApplyKubeAPI(crd_dir=...)
    api.add("queues", {...}); api.own("queues", None, "team-a", {"/spec/weight": "helm"})
    with api:
        kube = Kube(api.client())
"""

from __future__ import annotations

import copy
import itertools
import re
import threading
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from gpuinsight.actions.patching import (
    PatchError,
    apply_merge,
    get,
    json_patch,
    leaf_pointers,
    merge_patch,
    norm,
    truncate_at_list,
)
from gpuinsight.actions.validate import CrdSchemas, validate_object
from tests.k8s_server import FakeKubeAPI, Reply, Resource, _Handler, status_body

EXTRA = {
    "configmaps": Resource("", "v1", "configmaps", "ConfigMap", True),
    "deployments": Resource("apps", "v1", "deployments", "Deployment", True),
    "statefulsets": Resource("apps", "v1", "statefulsets", "StatefulSet", True),
    "cronjobs": Resource("batch", "v1", "cronjobs", "CronJob", True),
}
NO_GENERATION = ("Node", "ConfigMap", "Pod")


_SCHEMAS: dict[str, CrdSchemas] = {}


def schemas_for(crd_dir: str | Path | tuple[str | Path, ...]) -> CrdSchemas:
    """CRD schemas of one directory, or of several together; each directory is parsed once per
    test session (the KubeRay CRDs take seconds)."""
    parts = []
    for d in crd_dir if isinstance(crd_dir, tuple) else (crd_dir,):
        key = str(Path(d).resolve())
        if key not in _SCHEMAS:
            _SCHEMAS[key] = CrdSchemas(d)
        parts.append(_SCHEMAS[key])
    if len(parts) == 1:
        return parts[0]
    merged = copy.copy(parts[0])
    merged.validators = {k: v for p in parts for k, v in p.validators.items()}
    return merged


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    reason: str
    message: str
    dry_run: bool | None = None     # None: both; True: only dry runs; False: only real writes
    times: int | None = None        # None: always


class ApplyKubeAPI(FakeKubeAPI):
    def __init__(self, *, crd_dir: str | Path | tuple[str | Path, ...] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.resources.update(EXTRA)
        self.schemas = schemas_for(crd_dir) if crd_dir else None
        self.owners: dict[tuple[str, str, str | None, str], dict[str, str]] = {}
        self.faults: list[Fault] = []
        self._rv = itertools.count(100)

    # -- setup -----------------------------------------------------------------------------
    def add(self, name: str, *objs: dict[str, Any]) -> None:
        prepared = []
        for obj in objs:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            meta.setdefault("resourceVersion", str(next(self._rv)))
            meta.setdefault("uid", f"uid-{meta.get('name')}")
            if self._res(name).kind not in NO_GENERATION:
                meta.setdefault("generation", 1)
            prepared.append(obj)
        super().add(name, *prepared)

    def own(self, name: str, namespace: str | None, obj_name: str, fields: dict[str, str]) -> None:
        """Record that ``fields`` (JSON pointers) are owned by other field managers."""
        res = self._res(name)
        self.owners.setdefault((res.group, res.plural, namespace, obj_name), {}).update(fields)

    def fault(self, method: str, path_regex: str, status: int, reason: str = "", message: str = "",
              *, dry_run: bool | None = None, times: int | None = None) -> None:
        reason = reason or {403: "Forbidden", 404: "NotFound", 409: "Conflict", 422: "Invalid",
                            429: "TooManyRequests"}.get(status, "InternalError")
        self.faults.append(Fault(method, re.compile(path_regex), status, reason,
                                 message or f"injected {status} {reason}", dry_run, times))

    def remove_api(self, name: str) -> None:
        """Stop serving a resource (as if its CRD were not installed)."""
        self.resources.pop(name)

    def get_obj(self, name: str, namespace: str | None, obj_name: str) -> dict[str, Any] | None:
        res = self._res(name)
        for obj in self._items(res, namespace):
            if obj["metadata"]["name"] == obj_name:
                return copy.deepcopy(obj)
        return None

    def client(self) -> Any:
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        if self.token:
            cfg.api_key = {"authorization": self.token}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(cfg)

    def writes(self) -> list[tuple[str, str, bool]]:
        """(method, path, dry_run) of every non-GET request, in order."""
        return [(r.method, r.path, (r.query.get("dryRun") or [""])[0] == "All") for r in self.requests
                if r.method != "GET"]

    # -- serving ---------------------------------------------------------------------------
    def start(self) -> ApplyKubeAPI:
        # As FakeKubeAPI.start, with TCP_NODELAY: headers and body go out in two writes, and
        # Nagle + delayed ACK would add ~20 ms to every request of a keep-alive connection.
        handler = type("Handler", (_Handler,), {"api": self, "disable_nagle_algorithm": True})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-kube-apply-api", daemon=True)
        self._thread.start()
        return self

    def _resource_list(self, group: str, version: str) -> Reply:
        reply = super()._resource_list(group, version)
        if reply.status == 200 and (group, version) == ("", "v1") and "pods" in self.resources:
            reply.body["resources"].append({"name": "pods/eviction", "namespaced": True, "kind": "Eviction",
                                            "verbs": ["create"]})
        return reply

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any,
               headers: dict[str, str]) -> Reply:
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            return Reply(401, status_body(401, "Unauthorized", "Unauthorized"))
        dry = (query.get("dryRun") or [""])[0] == "All" or (
            isinstance(body, dict) and (body.get("deleteOptions") or {}).get("dryRun") == ["All"])
        for f in self.faults:
            if f.method == method and f.path.search(path) and f.dry_run in (None, dry) and f.times != 0:
                if f.times is not None:
                    f.times -= 1
                return Reply(f.status, status_body(f.status, f.reason, f.message))
        if method == "GET":
            return super().handle(method, path, query, body, headers)
        parts = [p for p in path.split("/") if p]
        if method == "POST" and len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] \
                and parts[4] == "pods" and parts[6] == "eviction":
            return self._evict(parts[3], parts[5], dry)
        target = self.match(parts)
        if target is None or target[2] is None:
            return Reply(404, status_body(404, "NotFound", "the server could not find the requested resource"))
        res, namespace, name = target
        with self.lock:
            if method == "PATCH":
                return self._patch(res, namespace, name, query, body, headers.get("content-type", ""), dry)
            if method == "DELETE":
                return self._delete(res, namespace, name, dry)
        return Reply(405, status_body(405, "MethodNotAllowed", f"{method} {path}"))

    def _bucket(self, res: Resource) -> list[dict[str, Any]]:
        return self.objects.setdefault((res.group, res.version, res.plural), [])

    def _find(self, res: Resource, namespace: str | None, name: str) -> int | None:
        for i, obj in enumerate(self._bucket(res)):
            meta = obj.get("metadata") or {}
            if meta.get("name") == name and (not res.namespaced or meta.get("namespace") == namespace):
                return i
        return None

    def _not_found(self, res: Resource, name: str) -> Reply:
        body = status_body(404, "NotFound", f'{res.plural} "{name}" not found')
        body["details"] = {"name": name, "kind": res.plural}
        return Reply(404, body)

    def _patch(self, res: Resource, namespace: str | None, name: str, query: dict[str, list[str]], body: Any,
               content_type: str, dry: bool) -> Reply:
        index = self._find(res, namespace, name)
        current = copy.deepcopy(self._bucket(res)[index]) if index is not None else None
        manager = (query.get("fieldManager") or ["unknown"])[0]
        key = (res.group, res.plural, namespace, name)
        owners = self.owners.setdefault(key, {}) if not dry else dict(self.owners.get(key, {}))
        if content_type.startswith("application/apply-patch+yaml"):
            cfg = yaml.safe_load(body) if isinstance(body, str) else body
            if "fieldManager" not in query:
                return Reply(400, status_body(400, "BadRequest", "fieldManager is required for apply patch"))
            force = (query.get("force") or ["false"])[0] == "true"
            leaves = [truncate_at_list(p) for p in leaf_pointers(cfg) if p != "/metadata/resourceVersion"]
            clashes = [p for p in leaves if owners.get(p, manager) != manager
                       and norm(get(current, p)) != norm(get(cfg, p))]
            if clashes and not force:
                who = owners[clashes[0]]
                fields = ", ".join("." + p[1:].replace("/", ".") for p in clashes)
                return Reply(409, status_body(409, "Conflict", f"Apply failed with {len(clashes)} conflict(s): "
                                                               f'conflict with "{who}": {fields}'))
            result = apply_merge(current or {}, cfg)
            touched = leaves
        elif current is None:
            return self._not_found(res, name)
        elif content_type.startswith("application/merge-patch+json"):
            result = merge_patch(current, body)
            touched = [truncate_at_list(p) for p in leaf_pointers(body) if p != "/metadata/resourceVersion"]
        elif content_type.startswith("application/json-patch+json"):
            try:
                result = json_patch(current, body)
            except PatchError as exc:
                return Reply(422, status_body(422, "Invalid", f"the server rejected our request: {exc}"))
            touched = [truncate_at_list(op["path"]) for op in body if op.get("op") != "test"]
        else:
            return Reply(415, status_body(415, "UnsupportedMediaType", f"{content_type} is not supported"))
        result.setdefault("apiVersion", res.api_version)
        result.setdefault("kind", res.kind)
        meta = result.setdefault("metadata", {})
        meta["name"] = name
        if res.namespaced:
            meta["namespace"] = namespace
        asked = meta.get("resourceVersion")
        if current is not None and asked is not None and asked != current["metadata"].get("resourceVersion"):
            return Reply(409, status_body(409, "Conflict", f'Operation cannot be fulfilled on {res.plural} "{name}": '
                                                           f"the object has been modified; please apply your "
                                                           f"changes to the latest version and try again"))
        if current is None and asked is not None:
            return self._not_found(res, name)
        denied = webhook_denial(res.kind, current, result) or self.keda_denial(res, namespace, result)
        if denied:
            return Reply(403, status_body(403, "Forbidden", denied))
        errors = immutable_errors(res.kind, current, result)
        errors += validate_object(result, self.schemas)
        if errors:
            return Reply(422, status_body(422, "Invalid", "; ".join(errors)))
        if dry:
            return Reply(200, result)
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("uid", f"uid-{name}")
        if res.kind not in NO_GENERATION:
            changed = current is None or result.get("spec") != current.get("spec")
            meta["generation"] = int((current or {}).get("metadata", {}).get("generation", 0)) + (1 if changed else 0)
        for ptr in touched:
            if get(result, ptr) is None:
                owners.pop(ptr, None)
            else:
                owners[ptr] = manager
        if index is None:
            self._bucket(res).append(result)
        else:
            self._bucket(res)[index] = result
        if res.kind == "Node":
            self.mig_manager(current, result)
        return Reply(201 if index is None else 200, result)

    def mig_manager(self, before: dict[str, Any] | None, node: dict[str, Any]) -> None:
        """What mig-manager does with a new ``nvidia.com/mig.config`` label (see the module doc)."""
        labels = node["metadata"].setdefault("labels", {})
        name = labels.get("nvidia.com/mig.config")
        if not name or name == ((before or {}).get("metadata", {}).get("labels") or {}).get("nvidia.com/mig.config"):
            return
        entries = mig_configs(self).get(name)
        gpus = int(((node.get("status") or {}).get("capacity") or {}).get("nvidia.com/gpu", 0))
        changed = set(range(gpus)) if entries is None else {
            d for e in entries if e.get("mig-enabled") for d in (range(gpus) if e["devices"] == "all" else e["devices"])}
        busy = [p for p in self._bucket(self._res("pods")) if (p.get("spec") or {}).get("nodeName") ==
                node["metadata"]["name"] and set(gpu_indices(p)) & changed]
        labels["nvidia.com/mig.config.state"] = "success" if entries is not None and not busy else "failed"

    def keda_denial(self, res: Resource, namespace: str | None, result: dict[str, Any]) -> str | None:
        """KEDA's admission webhook: one ScaledObject per workload (a second would fight the first
        over the HPA)."""
        if res.kind != "ScaledObject":
            return None
        target = get(result, "/spec/scaleTargetRef") or {}
        kind = target.get("kind") or "Deployment"
        for other in self._items(res, namespace):
            theirs = get(other, "/spec/scaleTargetRef") or {}
            if other["metadata"]["name"] != result["metadata"]["name"] and theirs.get("name") == target.get(
                    "name") and (theirs.get("kind") or "Deployment") == kind:
                return (f'admission webhook "vscaledobject.kb.io" denied the request: the workload '
                        f"'{target.get('name')}' of type '{kind}' is already managed by the ScaledObject "
                        f"'{other['metadata']['name']}'")
        return None

    def _delete(self, res: Resource, namespace: str | None, name: str, dry: bool) -> Reply:
        index = self._find(res, namespace, name)
        if index is None:
            return self._not_found(res, name)
        if not dry:
            self._bucket(res).pop(index)
            self.owners.pop((res.group, res.plural, namespace, name), None)
        return Reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    def _evict(self, namespace: str, name: str, dry: bool) -> Reply:
        res = self._res("pods")
        with self.lock:
            index = self._find(res, namespace, name)
            if index is None:
                return self._not_found(res, name)
            if not dry:
                self._bucket(res).pop(index)
        return Reply(201, {"kind": "Status", "apiVersion": "v1", "status": "Success"})


# -- what the real API server and the charts' webhooks refuse ----------------------------------
STATEFULSET_MUTABLE = ("replicas", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy",
                       "minReadySeconds", "ordinals", "revisionHistoryLimit")
VOLCANO_JOB_MUTABLE = ("minAvailable", "priorityClassName")
VOLCANO_TASK_MUTABLE = ("replicas", "minAvailable")


def _without(doc: Any, keys: tuple[str, ...]) -> Any:
    return {k: v for k, v in (doc or {}).items() if k not in keys}


def immutable_errors(kind: str, current: dict[str, Any] | None, result: dict[str, Any]) -> list[str]:
    """kube-apiserver's update validation of the fields gpuinsight could touch."""
    if current is None:
        return []
    old, new = current.get("spec") or {}, result.get("spec") or {}
    errors = []
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet") and old.get("selector") != new.get("selector"):
        errors.append(f"spec.selector: Invalid value: {new.get('selector')}: field is immutable")
    if kind == "StatefulSet" and _without(old, STATEFULSET_MUTABLE) != _without(new, STATEFULSET_MUTABLE):
        errors.append("spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', "
                      "'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' "
                      "and 'minReadySeconds' are forbidden")
    if kind == "Pod":
        def strip(spec: dict[str, Any]) -> dict[str, Any]:
            out = copy.deepcopy(_without(spec, ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")))
            for section in ("containers", "initContainers"):
                for c in out.get(section) or []:
                    c.pop("image", None)
            return out

        old_tol, new_tol = old.get("tolerations") or [], new.get("tolerations") or []
        if strip(old) != strip(new) or any(t not in new_tol for t in old_tol):
            errors.append("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                          "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only "
                          "additions to existing tolerations) or `spec.terminationGracePeriodSeconds`")
    if kind == "ConfigMap" and current.get("immutable") and (
            current.get("data") != result.get("data") or result.get("immutable") is not True):
        errors.append("data: Forbidden: field is immutable when `immutable` is set")
    if kind == "Node":
        for key in ("podCIDR", "providerID"):
            if old.get(key) and old.get(key) != new.get(key):
                errors.append(f"spec.{key}: Forbidden: {key} may not be changed once set")
    return errors


def webhook_denial(kind: str, current: dict[str, Any] | None, result: dict[str, Any]) -> str | None:
    """Volcano's validating webhook on Job updates (volcano-admission, installed by the chart)."""
    if kind != "Job" or current is None or not str(result.get("apiVersion", "")).startswith("batch.volcano.sh/"):
        return None
    old, new = current.get("spec") or {}, result.get("spec") or {}
    old_tasks, new_tasks = old.get("tasks") or [], new.get("tasks") or []
    prefix = 'admission webhook "validatejob.volcano.sh" denied the request: '
    if len(old_tasks) != len(new_tasks):
        return prefix + "job updates may not add or remove tasks"
    same = _without(old, (*VOLCANO_JOB_MUTABLE, "tasks")) == _without(new, (*VOLCANO_JOB_MUTABLE, "tasks")) and all(
        _without(a, VOLCANO_TASK_MUTABLE) == _without(b, VOLCANO_TASK_MUTABLE) for a, b in zip(old_tasks, new_tasks,
                                                                                                strict=True))
    if not same:
        return prefix + "job updates may not change fields other than `minAvailable`, `tasks[*].replicas under spec`"
    return None


# -- the scheduling model ------------------------------------------------------------------------
def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """The scheduler's ToleratesTaint."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if (toleration.get("operator") or "Equal") == "Exists":
        return True
    return bool(toleration.get("key")) and toleration.get("value", "") == taint.get("value", "")


MIG_INDEX_ANNOTATION = "test.gpuinsight.io/gpu-indices"  # the GPUs a pod holds, as DCGM would say


def gpu_indices(pod: dict[str, Any]) -> list[int]:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(MIG_INDEX_ANNOTATION)
    return [int(x) for x in value.split(",")] if value else []


def mig_configs(api: ApplyKubeAPI) -> dict[str, list[dict[str, Any]]]:
    """The mig-parted configs mig-manager reads: the custom ConfigMap's, else the default ones."""
    from gpuinsight.actions.builders.mig import default_config

    custom = next((c for c in api.objects.get(("", "v1", "configmaps"), [])
                   if c["metadata"].get("namespace") == "gpu-operator" and c["metadata"]["name"] == "custom-mig-config"),
                  None)
    text = (custom.get("data") or {}).get("config.yaml") if custom else None
    return (yaml.safe_load(text or default_config()) or {}).get("mig-configs") or {}


def _mig_resources(api: ApplyKubeAPI, labels: dict[str, str]) -> set[str]:
    """What mig-manager exposes for a node's ``nvidia.com/mig.config`` layout once it succeeded:
    the profiles of a named layout (``all-1g.10gb``) or of the node's own config."""
    layout = labels.get("nvidia.com/mig.config") or ""
    if labels.get("nvidia.com/mig.config.state", "success") != "success":
        return set()
    entries = mig_configs(api).get(layout) or []
    named = {f"nvidia.com/mig-{p}" for e in entries for p in (e.get("mig-devices") or {})}
    return named or {f"nvidia.com/mig-{m}" for m in re.findall(r"[1-7]g\.[0-9]+gb", layout)}


def candidate_nodes(api: ApplyKubeAPI) -> list[tuple[str, dict[str, str], list[dict[str, Any]], set[str]]]:
    """(name, labels, taints, extended resources) of every node a pod could land on: the Nodes,
    and for each Karpenter NodePool the node it would launch (labels from its template and its
    single-valued requirements; GPU resources of its kind)."""
    out = []
    with api.lock:
        nodes = copy.deepcopy(api.objects.get(("", "v1", "nodes"), []))
        pools = copy.deepcopy(api.objects.get(("karpenter.sh", "v1", "nodepools"), []))
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        capacity = set((node.get("status") or {}).get("capacity") or {}) | _mig_resources(api, labels)
        if node["spec"].get("unschedulable"):
            continue
        out.append((node["metadata"]["name"], labels, node["spec"].get("taints") or [], capacity))
    for pool in pools:
        tmpl = get(pool, "/spec/template") or {}
        labels = {**((tmpl.get("metadata") or {}).get("labels") or {}), "karpenter.sh/nodepool": pool["metadata"]["name"]}
        for req in get(tmpl, "/spec/requirements") or []:
            if req.get("operator") == "In" and len(req.get("values") or []) == 1:
                labels[req["key"]] = req["values"][0]
        out.append((f"(new node of NodePool {pool['metadata']['name']})", labels, get(tmpl, "/spec/taints") or [],
                    {"nvidia.com/gpu"}))
    return out


def unschedulable(api: ApplyKubeAPI, pod_spec: dict[str, Any]) -> str | None:
    """None when some node fits the pod spec (node selector, taints with effect NoSchedule or
    NoExecute, extended resources), else why none does (the scheduler's FailedScheduling)."""
    selector = pod_spec.get("nodeSelector") or {}
    tolerations = pod_spec.get("tolerations") or []
    wanted = {name for c in pod_spec.get("containers") or []
              for section in ("limits", "requests") for name in ((c.get("resources") or {}).get(section) or {})
              if "/" in name}
    reasons = []
    for name, labels, taints, capacity in candidate_nodes(api):
        if any(labels.get(k) != v for k, v in selector.items()):
            reasons.append(f"{name}: node selector")
            continue
        bad = [t for t in taints if t.get("effect") in ("NoSchedule", "NoExecute")
               and not any(tolerates(tol, t) for tol in tolerations)]
        if bad:
            reasons.append(f"{name}: untolerated taint {bad[0].get('key')}")
            continue
        if wanted - capacity:
            reasons.append(f"{name}: no {sorted(wanted - capacity)[0]}")
            continue
        return None
    return "0 nodes are available: " + "; ".join(reasons)


# -- the small GPU cluster the action tests use ---------------------------------------------------
CHART_CONF = """actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def _node(name: str, pool: str, gpus: int, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool, "kubernetes.io/hostname": name,
                                                  "nvidia.com/mig.strategy": "mixed", **labels}},
            "spec": {}, "status": {"capacity": {"nvidia.com/gpu": str(gpus)}}}


def _deployment(ns: str, name: str, gpus: int = 1, replicas: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                         {"name": "sidecar", "image": "envoy"},
                         {"name": "server", "image": f"{name}:1",
                          "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "4"},
                                        "requests": {"nvidia.com/gpu": str(gpus), "cpu": "2"}}}]}}}}


def _pod(ns: str, name: str, node: str, gpus: int, *, gang: str | None = None, job: str | None = None,
         deployment: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": dict(labels), "annotations": {}}
    if gang:
        meta["annotations"]["scheduling.k8s.io/group-name"] = gang
    if job:
        meta["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job,
                                    "controller": True, "uid": f"uid-{job}"}]
    if deployment:
        meta["labels"]["pod-template-hash"] = "7d9f8"
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{deployment}-7d9f8",
                                    "controller": True, "uid": f"uid-{deployment}"}]
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [
        {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": "Running"}}


def cluster_objects() -> dict[str, list[dict[str, Any]]]:
    """Resource name -> objects: H100 Karpenter pool, an L4 node, Volcano queues/jobs, workloads."""
    pool_spec = {
        "template": {"metadata": {"labels": {"gpu": "h100"}}, "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                             {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["h100"]}],
            "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}},
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"},
        "limits": {"nvidia.com/gpu": "64"}, "weight": 10}
    worker = {"containers": [{"name": "trainer", "image": "llm:3", "resources": {"limits": {"nvidia.com/gpu": 4}}}],
              "restartPolicy": "OnFailure"}
    return {
        "nodes": [_node("h100-1", "gpu-h100-od", 8, **{"nvidia.com/mig.config": "all-disabled"}),
                  _node("h100-2", "gpu-h100-od", 8), _node("h100-3", "gpu-h100-od", 8),
                  _node("l4-1", "gpu-l4-od", 4)],
        "queues": [{"metadata": {"name": "research"},
                    "spec": {"weight": 4, "capability": {"nvidia.com/gpu": 32}, "deserved": {"nvidia.com/gpu": 24},
                             "reclaimable": True}, "status": {"state": "Open"}},
                   {"metadata": {"name": "prod"}, "spec": {"weight": 8}}],
        "nodepools": [{"metadata": {"name": "gpu-h100-od"}, "spec": pool_spec}],
        "configmaps": [
            {"metadata": {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"},
             "data": {"volcano-scheduler.conf": CHART_CONF}},
            {"metadata": {"name": "device-plugin-config", "namespace": "gpu-operator"},
             "data": {"default": "version: v1\n"}}],
        "deployments": [_deployment("prod-inference", "recsys-ranker"), _deployment("prod-search", "query-encoder"),
                        _deployment("prod-search", "embedder"), _deployment("research", "notebook")],
        "vcjobs": [{"metadata": {"name": "llm-train", "namespace": "training"},
                    "spec": {"minAvailable": 2, "schedulerName": "volcano", "queue": "research",
                             "tasks": [{"name": "worker", "replicas": 2, "template": {"spec": worker}}]}}],
        "podgroups": [{"metadata": {"name": "llm-train-pg", "namespace": "training"},
                       "spec": {"minMember": 2, "queue": "research", "minResources": {"nvidia.com/gpu": 8}}}],
        "pods": [_pod("training", "llm-train-worker-0", "h100-3", 4, gang="llm-train-pg", job="llm-train"),
                 _pod("training", "llm-train-worker-1", "h100-3", 4, gang="llm-train-pg", job="llm-train"),
                 _pod("prod-inference", "recsys-ranker-7d9f8-abcde", "h100-1", 1, deployment="recsys-ranker"),
                 _pod("prod-search", "query-encoder-7d9f8-aaaaa", "l4-1", 1, deployment="query-encoder"),
                 _pod("prod-search", "embedder-7d9f8-bbbbb", "l4-1", 1, deployment="embedder"),
                 _pod("research", "notebook-7d9f8-ccccc", "h100-2", 1, deployment="notebook", app="notebook"),
                 _pod("batch", "etl-0", "h100-2", 2, app="etl"), _pod("batch", "etl-1", "h100-2", 2, app="etl")],
        "pdbs": [{"metadata": {"name": "etl", "namespace": "batch"},
                  "spec": {"selector": {"matchLabels": {"app": "etl"}}, "minAvailable": 2}}],
    }


def seeded(crd_dir: str | Path | None = None, **kwargs: Any) -> ApplyKubeAPI:
    api = ApplyKubeAPI(crd_dir=crd_dir, **kwargs)
    for name, objs in cluster_objects().items():
        api.add(name, *objs)
    return api


def live_state(api: ApplyKubeAPI) -> Any:
    """A ClusterState holding every object the fake serves (as a live refresh would see it)."""
    from gpuinsight.actions.state import ClusterState

    state = ClusterState()
    with api.lock:
        buckets = [copy.deepcopy(objs) for objs in api.objects.values()]
    for objs in buckets:
        for obj in objs:
            state.add_object(obj, "live")
    return state

"""A loopback fake of the Kubernetes API server for tests (read side).

    api = FakeKubeAPI(token="t0k3n")
    api.add("nodes", node_obj)                       # or api.load(nodes=[...], queues=[...])
    with api:                                        # ThreadingHTTPServer on 127.0.0.1:<free port>
        path = api.write_kubeconfig(tmp_path)        # kubeconfig with context "fake"
        ...                                          # the official client talks to api.url
    api.requests                                     # [RequestRecord(method, path, query, ...)]

Several clusters: one server each, and one kubeconfig with a context per server
(``write_kubeconfig_for(tmp_path, {"ctx-east": east, "ctx-west": west})``).

Serves list endpoints (``/api/v1/nodes``, ``/api/v1/pods``, ``/api/v1/namespaces/{ns}/pods``,
``/apis/{group}/{version}/{plural}`` cluster-wide and per namespace, with ``limit``/``continue``
paging), single-object GETs, and discovery (``/api``, ``/api/v1``, ``/apis``,
``/apis/{group}/{version}``, ``/version``). A group that is not registered answers 404 like a
missing CRD. ``fail(plural, status)`` injects 401/403/500 for one resource.

Extending it (e.g. PATCH / server-side apply / dryRun): subclass :class:`FakeKubeAPI` and
override :meth:`FakeKubeAPI.handle` (call ``super().handle`` for what it already serves); the
handler passes every method (GET, POST, PUT, PATCH, DELETE) with its body and headers there.
Objects live in ``api.objects[(group, version, plural)]`` as plain dicts.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml


@dataclass(frozen=True)
class Resource:
    group: str          # "" for the core API
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


CORE = {
    "nodes": Resource("", "v1", "nodes", "Node", False),
    "pods": Resource("", "v1", "pods", "Pod", True),
    "events": Resource("", "v1", "events", "Event", True),
    "namespaces": Resource("", "v1", "namespaces", "Namespace", False),
    "pdbs": Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
}
VOLCANO = {
    "queues": Resource("scheduling.volcano.sh", "v1beta1", "queues", "Queue", False),
    "podgroups": Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True),
    "vcjobs": Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job", True),
    "hypernodes": Resource("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", False),
}
KARPENTER = {"nodepools": Resource("karpenter.sh", "v1", "nodepools", "NodePool", False)}
KUBERAY = {
    "rayclusters": Resource("ray.io", "v1", "rayclusters", "RayCluster", True),
    "rayjobs": Resource("ray.io", "v1", "rayjobs", "RayJob", True),
    "rayservices": Resource("ray.io", "v1", "rayservices", "RayService", True),
}
KEDA = {"scaledobjects": Resource("keda.sh", "v1alpha1", "scaledobjects", "ScaledObject", True)}


def kueue(version: str = "v1beta2") -> dict[str, Resource]:
    """Kueue's kinds as one served version lists them (v1beta2 since Kueue 0.15, v1beta1 before)."""
    return {
        "clusterqueues": Resource("kueue.x-k8s.io", version, "clusterqueues", "ClusterQueue", False),
        "localqueues": Resource("kueue.x-k8s.io", version, "localqueues", "LocalQueue", True),
        "resourceflavors": Resource("kueue.x-k8s.io", version, "resourceflavors", "ResourceFlavor", False),
        "workloads": Resource("kueue.x-k8s.io", version, "workloads", "Workload", True),
    }


DRA = {"resourceclaims": Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)}


@dataclass
class RequestRecord:
    method: str
    path: str
    query: dict[str, list[str]]
    authorized: bool            # whether a bearer token was sent (the token itself is not kept)
    content_type: str | None = None
    body: Any = None


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class FakeKubeAPI:
    """Holds objects and answers requests; the HTTP plumbing is :class:`_Handler`."""

    def __init__(self, *, token: str | None = "test-token",
                 crds: tuple[str, ...] = ("volcano", "karpenter", "kuberay", "keda", "kueue", "dra"),
                 page_size_cap: int | None = None) -> None:
        self.token = token
        self.resources: dict[str, Resource] = dict(CORE)
        if "volcano" in crds:
            self.resources.update(VOLCANO)
        if "karpenter" in crds:
            self.resources.update(KARPENTER)
        if "kuberay" in crds:
            self.resources.update(KUBERAY)
        if "keda" in crds:
            self.resources.update(KEDA)
        if "kueue" in crds:  # "kueue-v1beta1": a Kueue that serves only v1beta1
            self.resources.update(kueue())
        if "kueue-v1beta1" in crds:
            self.resources.update(kueue("v1beta1"))
        if "dra" in crds:
            self.resources.update(DRA)
        self.objects: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        self.failures: dict[str, tuple[int, str]] = {}
        self.requests: list[RequestRecord] = []
        self.page_size_cap = page_size_cap
        self.lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- data ------------------------------------------------------------------------------
    def _res(self, name: str) -> Resource:
        return self.resources[name]

    def add(self, name: str, *objs: dict[str, Any]) -> None:
        """Add objects under a resource name (``nodes``, ``pods``, ``queues``, ``vcjobs`` ...)."""
        res = self._res(name)
        with self.lock:
            bucket = self.objects.setdefault((res.group, res.version, res.plural), [])
            for obj in objs:
                bucket.append({"apiVersion": res.api_version, "kind": res.kind, **obj})

    def load(self, **by_name: list[dict[str, Any]]) -> FakeKubeAPI:
        for name, objs in by_name.items():
            self.add(name, *objs)
        return self

    def fail(self, name: str, status: int, reason: str = "") -> None:
        """Make every request for one resource fail with ``status`` (401, 403, 500 ...)."""
        res = self._res(name)
        self.failures[res.plural + "." + res.group] = (status, reason or {401: "Unauthorized", 403: "Forbidden"}.get(status, "Error"))

    # -- serving ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeKubeAPI:
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-kube-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeKubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, folder: Path, *, context: str = "fake", token: str | None = None) -> Path:
        return write_kubeconfig_for(folder, {context: self}, token=token)

    # -- request handling ------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any,
               headers: dict[str, str]) -> Reply:
        """Answer one request. Subclasses add methods and paths; this serves reads."""
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            return Reply(401, status_body(401, "Unauthorized", "Unauthorized"))
        if method != "GET":
            return Reply(405, status_body(405, "MethodNotAllowed", f"{method} is not supported by this fake"))
        parts = [p for p in path.split("/") if p]
        if parts == ["version"]:
            return Reply(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake"})
        if parts == ["api"]:
            return Reply(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if parts == ["apis"]:
            return Reply(200, self._group_list())
        if parts[:1] == ["api"] and len(parts) == 2:
            return self._resource_list("", parts[1])
        if parts[:1] == ["apis"] and len(parts) == 3:
            return self._resource_list(parts[1], parts[2])
        target = self.match(parts)
        if target is None:
            return Reply(404, status_body(404, "NotFound", "the server could not find the requested resource"))
        res, namespace, name = target
        failure = self.failures.get(res.plural + "." + res.group)
        if failure:
            code, reason = failure
            return Reply(code, status_body(code, reason, f'{res.plural}.{res.group or "core"} is {reason.lower()}'))
        if name is not None:
            return self._get_one(res, namespace, name)
        return self._list(res, namespace, query)

    def match(self, parts: list[str]) -> tuple[Resource, str | None, str | None] | None:
        """(resource, namespace, name) for a resource path, None if nothing serves it."""
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 2:
            return None
        for res in self.resources.values():
            if (res.group, res.version, res.plural) == (group, version, rest[0]):
                if namespace is not None and not res.namespaced:
                    return None
                return res, namespace, rest[1] if len(rest) == 2 else None
        return None

    def _group_list(self) -> dict[str, Any]:
        groups: dict[str, list[str]] = {}
        for res in self.resources.values():
            if res.group:
                groups.setdefault(res.group, [])
                if res.version not in groups[res.group]:
                    groups[res.group].append(res.version)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
             "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
            for g, vs in sorted(groups.items())]}

    def _resource_list(self, group: str, version: str) -> Reply:
        served = [r for r in self.resources.values() if (r.group, r.version) == (group, version)]
        if not served:
            return Reply(404, status_body(404, "NotFound", "the server could not find the requested resource"))
        return Reply(200, {"kind": "APIResourceList", "apiVersion": "v1",
                           "groupVersion": f"{group}/{version}" if group else version,
                           "resources": [{"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced,
                                          "kind": r.kind, "verbs": ["get", "list"]} for r in served]})

    def _items(self, res: Resource, namespace: str | None) -> list[dict[str, Any]]:
        with self.lock:
            items = list(self.objects.get((res.group, res.version, res.plural), []))
        if namespace is not None:
            items = [o for o in items if (o.get("metadata") or {}).get("namespace") == namespace]
        return items

    def _get_one(self, res: Resource, namespace: str | None, name: str) -> Reply:
        for obj in self._items(res, namespace):
            if (obj.get("metadata") or {}).get("name") == name:
                return Reply(200, obj)
        return Reply(404, status_body(404, "NotFound", f'{res.plural} "{name}" not found'))

    def _list(self, res: Resource, namespace: str | None, query: dict[str, list[str]]) -> Reply:
        items = self._items(res, namespace)
        start = int((query.get("continue") or ["0"])[0] or 0)
        limit = int((query.get("limit") or ["0"])[0] or 0) or len(items) or 1
        if self.page_size_cap:
            limit = min(limit, self.page_size_cap)
        page = items[start:start + limit]
        more = start + limit < len(items)
        meta = {"resourceVersion": "1", **({"continue": str(start + limit)} if more else {})}
        return Reply(200, {"apiVersion": res.api_version, "kind": f"{res.kind}List", "metadata": meta, "items": page})


class _Handler(BaseHTTPRequestHandler):
    api: FakeKubeAPI
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        split = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = self.headers.get("Content-Type")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in self.headers.items()}
        query = parse_qs(split.query)
        with self.api.lock:
            self.api.requests.append(RequestRecord(self.command, split.path, query,
                                                   authorized="authorization" in headers,
                                                   content_type=content_type, body=body))
        reply = self.api.handle(self.command, split.path, query, body, headers)
        data = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # quiet: the request log is api.requests


def write_kubeconfig_for(folder: Path, apis: dict[str, FakeKubeAPI], *, token: str | None = None,
                         current: str | None = None) -> Path:
    """A kubeconfig with one context per running server ({context: api}); the current context
    is ``current`` (default: the first)."""
    clusters, users, contexts = [], [], []
    for i, (context, api) in enumerate(apis.items()):
        name = "fake" if i == 0 else f"fake-{i}"
        clusters.append({"name": name, "cluster": {"server": api.url}})
        users.append({"name": f"{name}-user", "user": {"token": token if token is not None else (api.token or "none")}})
        contexts.append({"name": context, "context": {"cluster": name, "user": f"{name}-user"}})
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": current or next(iter(apis)),
           "clusters": clusters, "users": users, "contexts": contexts}
    path = Path(folder) / "kubeconfig"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path

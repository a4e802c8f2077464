"""A thin client over the official ``kubernetes`` ApiClient for the calls apply needs.

GET, server-side apply (``PATCH application/apply-patch+yaml``, ``fieldManager=gpuinsight``,
``force=false``), JSON / merge patches, DELETE, pod eviction, ``dryRun=All`` on every write, and
discovery (is an API served at all?). API errors become one-line :class:`KubeError` messages.
"""

from __future__ import annotations

import json
import os
from typing import Any

from gpuinsight.actions.model import FIELD_MANAGER
from gpuinsight.actions.refs import Ref
from gpuinsight.errors import RuntimeFailure
from gpuinsight.imports import kubernetes
from gpuinsight.plan.vocabulary import KindInfo, kind_info

CONTENT_TYPES = {
    "apply": "application/apply-patch+yaml",
    "json": "application/json-patch+json",
    "merge": "application/merge-patch+json",
}


class KubeError(RuntimeFailure):
    def __init__(self, message: str, status: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class MissingApi(KubeError):
    """The API (CRD) is not served by this cluster."""


class Conflict(KubeError):
    """Server-side apply conflict: another field manager owns a field gpuinsight would change."""


class Forbidden(KubeError):
    """RBAC denied the request."""


class Kube:
    def __init__(self, api_client: Any, *, field_manager: str = FIELD_MANAGER, timeout_s: float = 30.0) -> None:
        self.api = api_client
        self.field_manager = field_manager
        self.timeout_s = timeout_s
        self._discovery: dict[str, set[str] | None] = {}

    @classmethod
    def from_kubeconfig(cls, context: str | None = None, config_file: str | None = None) -> Kube:
        """From kubeconfig (``context`` or its current one), else the in-cluster service account."""
        k8s = kubernetes()
        client, config = k8s.client, k8s.config
        # KUBECONFIG is read now, not when the kubernetes package was imported (kubectl's semantics).
        config_file = config_file or os.environ.get("KUBECONFIG") or None
        try:
            api = config.new_client_from_config(config_file=config_file, context=context)
        except Exception as exc:  # kubeconfig missing or unreadable
            if context:
                raise RuntimeFailure(f"kubeconfig context {context!r}: {exc}") from exc
            try:
                config.load_incluster_config()
                api = client.ApiClient()
            except Exception:
                raise RuntimeFailure(f"no usable kubeconfig and not running in a cluster: {exc}") from exc
        return cls(api)

    @property
    def host(self) -> str:
        return str(getattr(self.api.configuration, "host", "?"))

    # -- transport -------------------------------------------------------------------------
    def _call(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
              body: Any = None, content_type: str = "application/json", what: str = "") -> Any:
        ApiException = kubernetes().client.exceptions.ApiException  # noqa: N806

        what = what or f"{method} {path}"
        try:
            resp = self.api.call_api(
                path, method, query_params=query or [], body=body,
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
                _request_timeout=(self.timeout_s, self.timeout_s))  # a float alone is ignored
        except ApiException as exc:
            raise self._error(exc, what) from None
        except Exception as exc:  # urllib3 connection errors and timeouts
            raise RuntimeFailure(f"{what}: cannot reach the API server at {self.host}: "
                                 f"{type(exc).__name__}: {exc}") from exc
        data = resp.data
        return json.loads(data) if data else None

    @staticmethod
    def _status(exc: Any) -> dict[str, Any]:
        try:
            body = json.loads(exc.body or b"{}")
            return body if isinstance(body, dict) else {}
        except (TypeError, ValueError):
            return {}

    def _error(self, exc: Any, what: str) -> KubeError:
        status = self._status(exc)
        msg = status.get("message") or (exc.body.decode(errors="replace") if isinstance(exc.body, bytes)
                                         else str(exc.body or exc.reason)).strip()
        reason, code = status.get("reason"), exc.status
        if code == 403 and "admission webhook" in msg:
            return KubeError(f"{what}: refused: {msg}", code, reason)
        if code == 403:
            return Forbidden(f"{what}: forbidden: {msg} (grant the rules in deploy/rbac/apply-clusterrole.yaml)",
                             code, reason)
        if code == 409:
            return Conflict(f"{what}: conflict: {msg} (another field manager owns the field: change it where it "
                            f"is managed, e.g. Helm or GitOps, or use the emitted YAML there)", code, reason)
        if code == 404 and not (status.get("details") or {}).get("name"):
            return MissingApi(f"{what}: the API is not served by this cluster (CRD not installed?): {msg}",
                              code, reason)
        return KubeError(f"{what}: {code} {reason or exc.reason}: {msg}", code, reason)

    # -- discovery -------------------------------------------------------------------------
    def served(self, info: KindInfo, subresource: str | None = None) -> bool:
        if info.api_version not in self._discovery:
            path = f"/api/{info.api_version}" if not info.group else f"/apis/{info.api_version}"
            try:
                doc = self._call("GET", path, what=f"discover {info.api_version}")
                self._discovery[info.api_version] = {r.get("name") for r in (doc or {}).get("resources", [])}
            except MissingApi:
                self._discovery[info.api_version] = None
            except KubeError as exc:
                if exc.status != 404:
                    raise
                self._discovery[info.api_version] = None
        names = self._discovery[info.api_version]
        wanted = info.plural + (f"/{subresource}" if subresource else "")
        return names is not None and wanted in names

    # -- reads -----------------------------------------------------------------------------
    def get(self, ref: Ref) -> dict[str, Any] | None:
        """The object, or None when it does not exist (MissingApi when its API is not served)."""
        try:
            return self._call("GET", ref.path, what=f"get {ref.key}")
        except KubeError as exc:
            if exc.status != 404:
                raise
            if isinstance(exc, MissingApi) and not self.served(ref.info):
                raise
            return None

    def list(self, kind: str, namespace: str | None = None, *, field_selector: str | None = None,
             label_selector: str | None = None) -> list[dict[str, Any]]:
        info = kind_info(kind)
        query = [(k, v) for k, v in (("fieldSelector", field_selector), ("labelSelector", label_selector)) if v]
        doc = self._call("GET", info.collection_path(namespace), query=query, what=f"list {info.plural}")
        return list((doc or {}).get("items") or [])

    # -- writes ----------------------------------------------------------------------------
    def _write_query(self, dry_run: bool, manager: str | None, force: bool | None = None) -> list[tuple[str, str]]:
        query = [("fieldManager", manager or self.field_manager)]
        if force is not None:
            query.append(("force", "true" if force else "false"))
        if dry_run:
            query.append(("dryRun", "All"))
        return query

    def apply(self, obj: dict[str, Any], *, dry_run: bool = False, force: bool = False) -> dict[str, Any]:
        """Server-side apply of an apply configuration (creates the object if it is absent)."""
        ref = Ref.of(obj)
        verb = "dry-run apply" if dry_run else "apply"
        return self._call("PATCH", ref.path, query=self._write_query(dry_run, None, force), body=obj,
                          content_type=CONTENT_TYPES["apply"], what=f"{verb} {ref.key}")

    def patch(self, ref: Ref, body: Any, patch_type: str, *, dry_run: bool = False,
              field_manager: str | None = None) -> dict[str, Any]:
        if patch_type not in ("json", "merge"):
            raise ValueError(f"patch type {patch_type!r}")
        verb = "dry-run patch" if dry_run else "patch"
        return self._call("PATCH", ref.path, query=self._write_query(dry_run, field_manager), body=body,
                          content_type=CONTENT_TYPES[patch_type], what=f"{verb} {ref.key}")

    def delete(self, ref: Ref, *, dry_run: bool = False) -> None:
        query = [("dryRun", "All")] if dry_run else []
        try:
            self._call("DELETE", ref.path, query=query, what=f"delete {ref.key}")
        except KubeError as exc:
            if exc.status != 404 or isinstance(exc, MissingApi):
                raise

    def evict(self, namespace: str, name: str, *, dry_run: bool = False) -> None:
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": namespace}}
        if dry_run:
            body["deleteOptions"] = {"dryRun": ["All"]}
        path = f"{Ref('Pod', namespace, name).path}/eviction"
        verb = "dry-run evict" if dry_run else "evict"
        self._call("POST", path, query=[("dryRun", "All")] if dry_run else [], body=body,
                   what=f"{verb} pod {namespace}/{name}")

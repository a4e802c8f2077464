"""Kubernetes source: kubectl dumps (offline) or the API (kubeconfig / in-cluster), read-only.

Both paths feed the same object -> row mappers (:mod:`gpuinsight.sources.k8s`) and write every
table in one transaction: nodes, pods, events, Volcano queues/podgroups/jobs, Karpenter
NodePools (plus EKS node groups seen through node labels), PodDisruptionBudgets, KubeRay
RayClusters/RayJobs/RayServices, KEDA ScaledObjects, Kueue ClusterQueues/LocalQueues/
ResourceFlavors/Workloads and DRA ResourceClaims.

Contracts (natural key, merge): see :data:`CONTRACTS`. Pods merge with pods from Prometheus by
uid: a field the API or dump leaves empty keeps the stored value.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from gpuinsight.config import Config
from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.imports import kubernetes
from gpuinsight.sources.base import LoadContract, LoadReport
from gpuinsight.sources.k8s.common import MapContext, utcnow
from gpuinsight.sources.k8s.dumpfile import find_dump, read_objects
from gpuinsight.sources.k8s.kinds import KINDS, Kind
from gpuinsight.sources.k8s.writer import write_objects
from gpuinsight.sources.plausible import time_problem
from gpuinsight.warehouse.db import Warehouse

CONTRACTS: tuple[LoadContract, ...] = tuple(k.contract for k in KINDS)
PAGE_SIZE = 500
REQUEST_TIMEOUT = (10.0, 300.0)  # connect, read (seconds)


# -- offline: kubectl dumps -------------------------------------------------------------------

def load_dump_dir(wh: Warehouse, cfg: Config, folder: Path, *, observed_at: datetime | None = None) -> LoadReport:
    """Load any subset of the dumps of :data:`KINDS` (``nodes``, ``pods``, ... ``workloads``,
    ``resourceclaims``; ``.json``/``.yaml``) from ``folder``. The dump's time is when it was read:
    ``observed_at`` (``--as-of``), else the newest modification time of its files (kubectl wrote
    them when it read the cluster), never the newest timestamp inside the objects (design.md,
    "Offline Kubernetes input")."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BadInput(f"{folder}: not a directory")
    report = LoadReport(source="kubernetes:dump")
    objects: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    mtimes = []
    for kind in KINDS:
        path, ignored = find_dump(folder, kind.stem)
        if path is None:
            continue
        for other in ignored:
            report.notes.append(f"{other.name} ignored: {path.name} was read instead")
        objects[kind.stem] = (str(path), read_objects(path))
        mtimes.append(path.stat().st_mtime)
    if not objects:
        names = ", ".join(f"{k.stem}.json" for k in KINDS)
        raise BadInput(f"{folder}: no kubectl dumps found (expected any of {names}, or .yaml)")
    ctx = MapContext(cluster=cfg.cluster, source="dump", observed_at=observed_at)
    fallback = min(datetime.fromtimestamp(max(mtimes), UTC).replace(tzinfo=None, microsecond=0), utcnow())
    if time_problem(fallback):
        fallback = utcnow()
    return write_objects(wh, ctx, objects, report, scope=str(folder.resolve()), fallback_time=fallback)


# -- live: the API server ---------------------------------------------------------------------

def _redact_host(host: str) -> str:
    parts = urlsplit(host)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _first_line(exc: BaseException, limit: int = 200) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:limit]


def api_client(context: str | None = None, kubeconfig: Path | None = None) -> Any:
    """An ``ApiClient`` from the kubeconfig (``context`` or its current one), else in-cluster.

    The kubeconfig is never written back (token refreshes stay in memory)."""
    k8s = kubernetes()
    client, config, ConfigException = k8s.client, k8s.config, k8s.config.ConfigException  # noqa: N806
    try:
        return config.new_client_from_config(
            config_file=str(kubeconfig) if kubeconfig else None, context=context, persist_config=False
        )
    except ConfigException as exc:
        if context or kubeconfig:
            where = f"kubeconfig {kubeconfig}" if kubeconfig else "kubeconfig"
            what = f"context {context!r}: " if context else ""
            raise BadInput(f"{where}: {what}{_first_line(exc)}") from None
        kube_error = _first_line(exc)
    try:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException:
        raise RuntimeFailure(
            f"no usable kubeconfig ({kube_error}) and not running inside a cluster; "
            "give --context, or --from-dir with kubectl dumps"
        ) from None
    return client.ApiClient(configuration)


def _lister(client_mod: Any, api: Any, kind: Kind, version: str) -> Any:
    if kind.stem == "nodes":
        return client_mod.CoreV1Api(api).list_node
    if kind.stem == "pods":
        return client_mod.CoreV1Api(api).list_pod_for_all_namespaces
    if kind.stem == "events":
        return client_mod.CoreV1Api(api).list_event_for_all_namespaces
    if kind.stem == "pdbs":
        return client_mod.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces
    custom = client_mod.CustomObjectsApi(api)

    def list_custom(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(kind.group, version, kind.plural, **kwargs)

    return list_custom


def _list_all(api: Any, kind: Kind, version: str, where: str, page_size: int) -> list[dict[str, Any]]:
    """Every object of one kind, page by page (raw JSON: the same shape kubectl writes)."""
    lister = _lister(kubernetes().client, api, kind, version)
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": page_size, "_preload_content": False,
                                  "_request_timeout": REQUEST_TIMEOUT}
        if token:
            kwargs["_continue"] = token
        resp = lister(**kwargs)
        try:
            body = orjson.loads(resp.data)
        except orjson.JSONDecodeError as exc:
            raise RuntimeFailure(f"Kubernetes API {where}: {kind.stem}: invalid JSON in the list response ({exc.msg})") from None
        page = body.get("items") if isinstance(body, dict) else None
        if not isinstance(page, list):
            raise RuntimeFailure(f"Kubernetes API {where}: {kind.stem}: list response without items")
        for item in page:  # the API's list items carry no kind of their own
            if isinstance(item, dict):
                item.setdefault("kind", kind.kind)
        items.extend(page)
        token = (body.get("metadata") or {}).get("continue") or None
        if not token:
            return items


def _resource(kind: Kind, version: str) -> str:
    return f"{kind.plural}.{kind.group}/{version}" if kind.group else kind.plural


def collect_live(
    wh: Warehouse,
    cfg: Config,
    context: str | None = None,
    *,
    kubeconfig: Path | None = None,
    page_size: int = PAGE_SIZE,
) -> LoadReport:
    """List nodes, pods, events, PDBs, Volcano and Karpenter objects (read-only) and load them.

    A CRD the cluster does not serve (404) is a note in the report; 401/403 are failures."""
    from urllib3.exceptions import HTTPError

    ApiException = kubernetes().client.exceptions.ApiException  # noqa: N806

    api = api_client(context, kubeconfig)
    where = _redact_host(api.configuration.host)
    report = LoadReport(source="kubernetes:live")
    objects: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    try:
        for kind in KINDS:
            for version in kind.versions:
                try:
                    objects[kind.stem] = (f"{where} {_resource(kind, version)}",
                                          _list_all(api, kind, version, where, page_size))
                    break
                except ApiException as exc:
                    status = int(exc.status or 0)
                    if status == 404 and kind.crd:
                        continue
                    if status == 401:
                        raise RuntimeFailure(
                            f"Kubernetes API {where}: 401 Unauthorized listing {_resource(kind, version)}: "
                            "the credentials were rejected (expired token?)") from None
                    if status == 403:
                        raise RuntimeFailure(
                            f"Kubernetes API {where}: 403 Forbidden listing {_resource(kind, version)}: "
                            "grant this identity get/list on it (read-only ClusterRole)") from None
                    if status == 0:
                        raise RuntimeFailure(f"cannot reach Kubernetes API at {where}: {exc.reason}") from None
                    raise RuntimeFailure(
                        f"Kubernetes API {where}: HTTP {status} {exc.reason} listing {_resource(kind, version)}"
                    ) from None
                except (HTTPError, OSError) as exc:
                    raise RuntimeFailure(
                        f"cannot reach Kubernetes API at {where}: {type(exc).__name__}: {_first_line(exc)}"
                    ) from None
            else:
                report.notes.append(
                    f"{kind.stem}: {kind.plural}.{kind.group} is not served by this cluster (CRD or API not installed); skipped")
    finally:
        api.close()
    ctx = MapContext(cluster=cfg.cluster, source="kubernetes", observed_at=utcnow())
    scope = where + (f" context={context}" if context else "")
    return write_objects(wh, ctx, objects, report, scope=scope)


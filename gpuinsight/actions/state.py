"""What the action builders know about the cluster: ``ClusterState``.

It is read from the warehouse tables (what the rules saw), optionally from kubectl dumps, and,
before an apply, completed or refreshed from the live API server. Objects are kept as
Kubernetes-shaped dicts keyed by :class:`Ref`; objects rebuilt from warehouse rows only know
some of their fields (``known`` prefixes), so the plan records only those as observed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuinsight.actions.patching import get
from gpuinsight.actions.redact import redact_fields
from gpuinsight.actions.refs import Ref
from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.plan.vocabulary import OBJECT_KINDS
from gpuinsight.sources.k8s.common import MapError, resource_list, str_map
from gpuinsight.sources.k8s.nodes import node_facts

if TYPE_CHECKING:
    from gpuinsight.actions.kube import Kube
    from gpuinsight.warehouse import Warehouse

ALIVE_PHASES = ("Running", "Pending")
# the RayJob fields the warehouse keeps (rayjobs.spec holds the spec without rayClusterSpec)
RAYJOB_KNOWN = ("/spec/shutdownAfterJobFinishes", "/spec/ttlSecondsAfterFinished", "/spec/clusterSelector",
                "/spec/deletionStrategy", "/spec/suspend")


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


@dataclass
class ClusterState:
    cluster: str = "default"
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)   # Ref.key -> object
    sources: dict[str, str] = field(default_factory=dict)              # warehouse | dump | live
    known: dict[str, tuple[str, ...]] = field(default_factory=dict)    # warehouse objects: known fields
    missing: set[str] = field(default_factory=set)                     # confirmed absent (live 404)
    pods: list[dict[str, Any]] = field(default_factory=list)           # alive pods (warehouse row shape)
    pdbs: list[dict[str, Any]] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)     # node -> warehouse row
    node_pools: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {kind, spec, ...}
    notes: list[str] = field(default_factory=list)
    planned: dict[str, Any] = field(default_factory=dict)  # builders' choices shared across a plan

    # -- objects ---------------------------------------------------------------------------
    def get(self, ref: Ref) -> dict[str, Any] | None:
        return self.objects.get(ref.key)

    def put(self, obj: dict[str, Any], source: str, known: tuple[str, ...] | None = None) -> Ref:
        ref = Ref.of(obj)
        self.objects[ref.key] = obj
        self.sources[ref.key] = source
        self.missing.discard(ref.key)
        if known is None:
            self.known.pop(ref.key, None)
        else:
            self.known[ref.key] = known
        return ref

    def is_known(self, ref: Ref, ptr: str) -> bool:
        if ref.key not in self.objects:
            return False
        prefixes = self.known.get(ref.key)
        return prefixes is None or any(ptr == p or ptr.startswith(p + "/") for p in prefixes)

    def observe(self, ref: Ref, ptrs: Iterable[str]) -> dict[str, Any]:
        """What a plan records about ``ref`` so that apply can detect drift (secrets redacted:
        a plan is a file people read and the warehouse keeps)."""
        obj = self.get(ref)
        if obj is None:
            return {"exists": False if ref.key in self.missing else None, "fields": {}}
        meta = obj.get("metadata") or {}
        return {
            "exists": True,
            "source": self.sources.get(ref.key),
            "resourceVersion": meta.get("resourceVersion"),
            "generation": meta.get("generation"),
            "fields": redact_fields({p: copy.deepcopy(get(obj, p)) for p in ptrs if self.is_known(ref, p)}),
        }

    # -- pods, gangs, PDBs -----------------------------------------------------------------
    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        for row in self.pods:
            if row["namespace"] == namespace and row["name"] == name:
                return row
        return None

    def gang_pods(self, namespace: str, podgroup: str) -> list[dict[str, Any]]:
        return [p for p in self.pods if p["namespace"] == namespace and p.get("podgroup") == podgroup]

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        return [p for p in self.pods if p.get("node") == node]

    def workload_pods(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        wanted = {"VolcanoJob": ("VolcanoJob", "Job")}.get(kind, (kind,))
        return [p for p in self.pods if p["namespace"] == namespace and p.get("workload") == name
                and (p.get("workload_kind") in wanted or p.get("vcjob") == name and kind == "VolcanoJob")]

    def copy(self) -> ClusterState:
        return copy.deepcopy(self)

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def from_warehouse(cls, wh: Warehouse, cluster: str = "default") -> ClusterState:
        st = cls(cluster=cluster)
        for row in wh.sql("SELECT * FROM nodes WHERE cluster = ?", [cluster]).to_dicts():
            row["labels"] = _json(row.get("labels")) or {}
            st.nodes[row["node"]] = row
            st.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": row["node"], "labels": row["labels"]}},
                   "warehouse", ("/metadata/labels",))
        for row in wh.sql("SELECT * FROM queues WHERE cluster = ?", [cluster]).to_dicts():
            spec = _json(row.get("spec")) or {}
            if not spec:
                spec = {k: v for k, v in {"weight": row.get("weight"), "capability": _json(row.get("capability")),
                                          "deserved": _json(row.get("deserved")), "reclaimable": row.get("reclaimable"),
                                          "parent": row.get("parent")}.items() if v is not None}
                if row.get("guarantee"):
                    spec["guarantee"] = {"resource": _json(row["guarantee"])}
            st.put({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                    "metadata": {"name": row["name"]}, "spec": spec}, "warehouse", ("/spec",))
        for row in wh.sql("SELECT * FROM node_pools WHERE cluster = ?", [cluster]).to_dicts():
            st._add_pool(row["name"], row["kind"], _json(row.get("spec")) or {}, "warehouse",
                         capacity_types=_json(row.get("capacity_types")), limits=_json(row.get("limits")),
                         consolidation_policy=row.get("consolidation_policy"))
        for row in wh.sql("SELECT * FROM podgroups WHERE cluster = ?", [cluster]).to_dicts():
            st.put({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                    "metadata": {"name": row["name"], "namespace": row["namespace"]},
                    "spec": _json(row.get("spec")) or {"minMember": row.get("min_member"), "queue": row.get("queue")}},
                   "warehouse", ("/spec",))
        for row in wh.sql("SELECT * FROM vcjobs WHERE cluster = ?", [cluster]).to_dicts():
            tasks = [{"name": t.get("name"), "replicas": t.get("replicas")} for t in _json(row.get("tasks")) or []]
            st.put({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                    "metadata": {"name": row["name"], "namespace": row["namespace"]},
                    "spec": {"queue": row.get("queue"), "tasks": tasks}}, "warehouse", ())
        for row in wh.sql("SELECT name, spec FROM kueue_cluster_queues WHERE cluster = ?", [cluster]).to_dicts():
            spec = _json(row.get("spec")) or {}
            spec.pop("cohortName", None)  # v1beta2's name of v1beta1's cohort: kept in the form it is served
            st.put({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": row["name"]},
                    "spec": spec}, "warehouse", ("/spec/resourceGroups",))
        st._add_ray_keda(wh, cluster)
        phases = ", ".join(f"'{p}'" for p in ALIVE_PHASES)  # constants, not user input
        for row in wh.sql(f"SELECT * FROM pods WHERE cluster = ? AND finished IS NULL AND "
                          f"coalesce(phase, 'Running') IN ({phases})", [cluster]).to_dicts():
            row["labels"] = _json(row.get("labels")) or {}
            row["annotations"] = _json(row.get("annotations")) or {}
            st.pods.append(row)
        for row in wh.sql("SELECT * FROM pdbs WHERE cluster = ?", [cluster]).to_dicts():
            row["selector"] = _json(row.get("selector")) or {}
            st.pdbs.append(row)
        return st

    def _add_ray_keda(self, wh: Warehouse, cluster: str) -> None:
        """RayClusters (whole spec), RayJobs (their cleanup fields) and ScaledObjects (their target)."""
        for row in wh.sql("SELECT namespace, name, spec FROM rayclusters WHERE cluster = ?", [cluster]).to_dicts():
            self.put({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                      "metadata": {"name": row["name"], "namespace": row["namespace"]},
                      "spec": _json(row.get("spec")) or {}}, "warehouse", ("/spec",))
        for row in wh.sql("SELECT namespace, name, spec FROM rayjobs WHERE cluster = ?", [cluster]).to_dicts():
            self.put({"apiVersion": "ray.io/v1", "kind": "RayJob",
                      "metadata": {"name": row["name"], "namespace": row["namespace"]},
                      "spec": _json(row.get("spec")) or {}}, "warehouse", RAYJOB_KNOWN)
        for row in wh.sql("SELECT namespace, name, target_api_version, target_kind, target_name FROM scaled_objects "
                          "WHERE cluster = ?", [cluster]).to_dicts():
            self.put({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                      "metadata": {"name": row["name"], "namespace": row["namespace"]},
                      "spec": {"scaleTargetRef": {"apiVersion": row["target_api_version"],
                                                  "kind": row["target_kind"], "name": row["target_name"]}}},
                     "warehouse", ("/spec/scaleTargetRef",))

    def _add_pool(self, name: str, kind: str, spec: dict[str, Any], source: str, **extra: Any) -> None:
        if kind == "karpenter":
            if "spec" in spec and isinstance(spec["spec"], dict):
                spec = spec["spec"]
            reqs = get(spec, "/template/spec/requirements") or []
            caps = next((r.get("values") for r in reqs if r.get("key") == "karpenter.sh/capacity-type"), None)
            self.put({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
                      "spec": spec}, source, ("/spec",) if source == "warehouse" else None)
            derived = {"capacity_types": caps, "limits": spec.get("limits"),
                       "consolidation_policy": get(spec, "/disruption/consolidationPolicy")}
            for key, value in derived.items():
                if extra.get(key) is None:
                    extra[key] = value
        self.node_pools[name] = {"name": name, "kind": kind, "spec": spec, **extra}

    @classmethod
    def from_dump_dir(cls, folder: Path, cluster: str = "default") -> ClusterState:
        """kubectl ``get -o json|yaml`` dumps (nodes.json, pods.json, queues.json, ...)."""
        folder = Path(folder)
        if not folder.is_dir():
            raise BadInput(f"{folder}: not a directory of kubectl dumps")
        st = cls(cluster=cluster)
        for path in sorted(folder.iterdir()):
            if path.suffix not in (".json", ".yaml", ".yml"):
                continue
            try:
                doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            except yaml.YAMLError as exc:
                raise BadInput(f"{path}: not JSON/YAML: {str(exc).splitlines()[0]}") from exc
            items = doc.get("items", []) if isinstance(doc, dict) and "items" in doc else [doc]
            for obj in items:
                if isinstance(obj, dict):
                    st.add_object(obj, "dump")
        return st

    def add_object(self, obj: dict[str, Any], source: str) -> None:
        kinds = {(k.api_version, k.kind) for k in OBJECT_KINDS}
        key = (obj.get("apiVersion"), obj.get("kind"))
        if key not in kinds:
            return
        ref = self.put(obj, source)
        if ref.kind == "Pod":
            self.pods = [p for p in self.pods if (p["namespace"], p["name"]) != (ref.namespace, ref.name)]
            if (obj.get("status") or {}).get("phase", "Running") in ALIVE_PHASES:
                self.pods.append(pod_row(obj))
        elif ref.kind == "Node":
            self.nodes[ref.name] = node_state_row(obj)
        elif ref.kind == "NodePool":
            self._add_pool(ref.name, "karpenter", obj.get("spec") or {}, source)
            self.objects[ref.key] = obj
        elif ref.kind == "PodDisruptionBudget":
            spec = obj.get("spec") or {}
            self.pdbs.append({"namespace": ref.namespace, "name": ref.name, "selector": spec.get("selector") or {},
                              "min_available": _str(spec.get("minAvailable")),
                              "max_unavailable": _str(spec.get("maxUnavailable"))})

    def refresh(self, kube: Kube, refs: Iterable[Ref], *, overwrite: bool = True) -> None:
        """GET ``refs`` from the API server; ``overwrite=False`` only fills what is unknown.

        An object the warehouse knows none of the fields of (a Volcano Job: only its task names
        and replicas are stored) counts as unknown: builders patch its pod templates, and must
        see them (e.g. to add a toleration instead of replacing the job's own).
        """
        from gpuinsight.actions.kube import MissingApi

        for ref in dict.fromkeys(refs):
            unknown = ref.key not in self.objects or self.known.get(ref.key) == ()
            if not overwrite and (not unknown or ref.key in self.missing):
                continue
            try:
                obj = kube.get(ref)
            except MissingApi as exc:
                self.notes.append(str(exc))
                continue
            except RuntimeFailure:
                raise
            if obj is None:
                if not overwrite and ref.key in self.objects:
                    continue  # the warehouse saw it: apply's drift check reports it gone
                self.objects.pop(ref.key, None)
                self.missing.add(ref.key)
            else:
                self.add_object(obj, "live")


def node_state_row(obj: dict[str, Any]) -> dict[str, Any]:
    """A Node object (dump or live) as the ``nodes`` row the warehouse would hold for it: pool,
    capacity type, GPU model and count read by the sources' one :func:`node_facts` (every
    platform's pool label: Karpenter, its old provisioner-name, EKS, GKE, AKS)."""
    name = get(obj, "/metadata/name")
    try:
        labels = str_map(obj, "metadata", "labels")
        capacity = resource_list(obj, "status", "capacity")
    except MapError as exc:
        raise BadInput(f"Node {name}: {exc}") from None
    return {"node": name, "labels": labels, **node_facts(labels, capacity)}


def pod_row(obj: dict[str, Any]) -> dict[str, Any]:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    ann = meta.get("annotations") or {}
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    wkind, wname = "Pod", meta.get("name")
    if owner:
        wkind, wname = owner.get("kind"), owner.get("name")
        if wkind == "ReplicaSet" and "pod-template-hash" in (meta.get("labels") or {}):
            wkind, wname = "Deployment", str(wname).rsplit("-", 1)[0]
        elif wkind == "Job" and str(owner.get("apiVersion", "")).startswith("batch.volcano.sh"):
            wkind = "VolcanoJob"
    gpus = sum(_float(get(c, "/resources/limits/nvidia.com~1gpu")) for c in spec.get("containers") or [])
    return {"namespace": meta.get("namespace"), "name": meta.get("name"), "node": spec.get("nodeName"),
            "workload_kind": wkind, "workload": wname, "gpu_request": gpus,
            "podgroup": ann.get("scheduling.k8s.io/group-name"), "labels": meta.get("labels") or {},
            "annotations": ann, "phase": (obj.get("status") or {}).get("phase")}


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _str(value: Any) -> str | None:
    return None if value is None else str(value)

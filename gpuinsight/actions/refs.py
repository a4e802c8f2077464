"""The Kubernetes kinds gpuinsight reads or changes, and references to single objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinsight.errors import BadInput


@dataclass(frozen=True)
class KindInfo:
    kind: str            # the object's ``kind``
    api_version: str     # group/version (``v1`` for the core group)
    plural: str
    namespaced: bool
    alias: str           # the name plans use (VolcanoJob for batch.volcano.sh Job)

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def collection_path(self, namespace: str | None = None) -> str:
        root = f"/api/{self.api_version}" if not self.group else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"


KINDS: tuple[KindInfo, ...] = (
    KindInfo("Node", "v1", "nodes", False, "Node"),
    KindInfo("Pod", "v1", "pods", True, "Pod"),
    KindInfo("ConfigMap", "v1", "configmaps", True, "ConfigMap"),
    KindInfo("Deployment", "apps/v1", "deployments", True, "Deployment"),
    KindInfo("StatefulSet", "apps/v1", "statefulsets", True, "StatefulSet"),
    KindInfo("CronJob", "batch/v1", "cronjobs", True, "CronJob"),
    KindInfo("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", True, "PodDisruptionBudget"),
    KindInfo("Queue", "scheduling.volcano.sh/v1beta1", "queues", False, "Queue"),
    KindInfo("PodGroup", "scheduling.volcano.sh/v1beta1", "podgroups", True, "PodGroup"),
    KindInfo("Job", "batch.volcano.sh/v1alpha1", "jobs", True, "VolcanoJob"),
    KindInfo("NodePool", "karpenter.sh/v1", "nodepools", False, "NodePool"),
    KindInfo("RayCluster", "ray.io/v1", "rayclusters", True, "RayCluster"),
    KindInfo("RayJob", "ray.io/v1", "rayjobs", True, "RayJob"),
    KindInfo("RayService", "ray.io/v1", "rayservices", True, "RayService"),
    KindInfo("ScaledObject", "keda.sh/v1alpha1", "scaledobjects", True, "ScaledObject"),
    # v1beta1: served by every Kueue release (v1beta2 only from 0.15); resourceGroups read alike
    KindInfo("ClusterQueue", "kueue.x-k8s.io/v1beta1", "clusterqueues", False, "ClusterQueue"),
)

_BY_ALIAS = {k.alias: k for k in KINDS}
_BY_GVK = {(k.api_version, k.kind): k for k in KINDS}


def known_kind(alias: str) -> bool:
    return alias in _BY_ALIAS


def kind_info(alias_or_kind: str, api_version: str | None = None) -> KindInfo:
    if api_version is not None and (api_version, alias_or_kind) in _BY_GVK:
        return _BY_GVK[(api_version, alias_or_kind)]
    if alias_or_kind in _BY_ALIAS:
        return _BY_ALIAS[alias_or_kind]
    raise BadInput(f"kind {alias_or_kind!r} ({api_version or 'any version'}): not a kind gpuinsight handles")


@dataclass(frozen=True)
class Ref:
    """One object: ``Ref("Queue", None, "team-a")``; ``kind`` is the alias (VolcanoJob)."""

    kind: str
    namespace: str | None
    name: str

    @property
    def info(self) -> KindInfo:
        return kind_info(self.kind)

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"

    @property
    def path(self) -> str:
        return f"{self.info.collection_path(self.namespace)}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"apiVersion": self.info.api_version, "kind": self.info.kind,
                "namespace": self.namespace, "name": self.name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ref:
        info = kind_info(str(data.get("kind")), data.get("apiVersion"))
        return cls(info.alias, data.get("namespace") if info.namespaced else None, str(data["name"]))

    @classmethod
    def of(cls, obj: dict[str, Any]) -> Ref:
        info = kind_info(str(obj.get("kind")), obj.get("apiVersion"))
        meta = obj.get("metadata") or {}
        return cls(info.alias, meta.get("namespace") if info.namespaced else None, str(meta.get("name")))

    def skeleton(self) -> dict[str, Any]:
        """``apiVersion``/``kind``/``metadata`` of an apply configuration for this object."""
        meta: dict[str, Any] = {"name": self.name}
        if self.namespace:
            meta["namespace"] = self.namespace
        return {"apiVersion": self.info.api_version, "kind": self.info.kind, "metadata": meta}

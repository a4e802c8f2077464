"""The words of a plan's actions (the recommendation JSON's ``actions``): their types, the phases
they run in, the EKS calls, and the Kubernetes kinds they may name. The plan file's validation
(:mod:`gpuinsight.plan.io`) and the actions that build and apply them (:mod:`gpuinsight.actions`)
read the same lists from here."""

from __future__ import annotations

from dataclasses import dataclass

from gpuinsight.errors import BadInput

PHASES = ("config", "node-pool", "host-cordon", "host-drain", "label", "uncordon", "workload", "scale-down",
          "cordon", "drain", "note")
ACTION_TYPES = ("k8s-apply", "k8s-label", "k8s-patch", "cordon", "uncordon", "drain", "aws-eks", "note", "refused",
                "manifest-patch")
# Kinds of action that change nothing: shown and emitted, skipped by apply.
INERT_TYPES = ("note", "refused", "manifest-patch")
EKS_CALLS = ("create_nodegroup", "update_nodegroup_config")


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


OBJECT_KINDS: tuple[KindInfo, ...] = (
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

_BY_ALIAS = {k.alias: k for k in OBJECT_KINDS}
# (apiVersion, kind) -> the kind: what an object or a plan's reference names
BY_GVK = {(k.api_version, k.kind): k for k in OBJECT_KINDS}


def kind_info(alias_or_kind: str, api_version: str | None = None) -> KindInfo:
    if api_version is not None and (api_version, alias_or_kind) in BY_GVK:
        return BY_GVK[(api_version, alias_or_kind)]
    if alias_or_kind in _BY_ALIAS:
        return _BY_ALIAS[alias_or_kind]
    raise BadInput(f"kind {alias_or_kind!r} ({api_version or 'any version'}): not a kind gpuinsight handles")

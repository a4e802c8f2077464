"""The kinds the Kubernetes source reads: dump file stem, API location, table, key, mapper."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuinsight.sources.base import LoadContract
from gpuinsight.sources.k8s.cluster import event_row, nodepool_row, pdb_row
from gpuinsight.sources.k8s.common import MapContext
from gpuinsight.sources.k8s.dra import resourceclaim_row
from gpuinsight.sources.k8s.kueue import clusterqueue_row, localqueue_row, resourceflavor_row, workload_row
from gpuinsight.sources.k8s.nodes import node_row
from gpuinsight.sources.k8s.pods import pod_row
from gpuinsight.sources.k8s.ray import raycluster_row, rayjob_row, rayservice_row, scaledobject_row
from gpuinsight.sources.k8s.volcano import hypernode_row, podgroup_row, queue_row, vcjob_row

Mapper = Callable[[dict[str, Any], MapContext], dict[str, Any]]


@dataclass(frozen=True)
class Kind:
    stem: str                       # dump file name without extension (kubectl get <x> -o json)
    kind: str                       # object kind, checked when items carry one
    contract: LoadContract
    mapper: Mapper
    group: str = ""                 # "" = core API
    versions: tuple[str, ...] = ("v1",)
    plural: str = ""
    crd: bool = False               # optional: a 404 means "not installed", not a failure


def _contract(table: str, *key: str, what: str) -> LoadContract:
    return LoadContract(table=table, primary_key=("cluster", *key), write_disposition="merge", description=what)


KINDS: tuple[Kind, ...] = (
    Kind("nodes", "Node", _contract("nodes", "node", what="Node labels and capacity"), node_row,
         plural="nodes"),
    Kind("podgroups", "PodGroup", _contract("podgroups", "namespace", "name", what="Volcano PodGroups"),
         podgroup_row, "scheduling.volcano.sh", ("v1beta1",), "podgroups", crd=True),
    Kind("vcjobs", "Job", _contract("vcjobs", "namespace", "name", what="Volcano Jobs"), vcjob_row,
         "batch.volcano.sh", ("v1alpha1",), "jobs", crd=True),
    Kind("pods", "Pod", _contract("pods", "uid", what="Pods: owner, GPU requests, timeline"), pod_row,
         plural="pods"),
    Kind("queues", "Queue", _contract("queues", "name", what="Volcano Queues"), queue_row,
         "scheduling.volcano.sh", ("v1beta1",), "queues", crd=True),
    Kind("nodepools", "NodePool", _contract("node_pools", "name", "kind", what="Karpenter NodePools"),
         nodepool_row, "karpenter.sh", ("v1", "v1beta1"), "nodepools", crd=True),
    Kind("pdbs", "PodDisruptionBudget", _contract("pdbs", "namespace", "name", what="PodDisruptionBudgets"),
         pdb_row, "policy", ("v1",), "poddisruptionbudgets"),
    Kind("events", "Event", _contract("events", "uid", what="Events"), event_row, plural="events"),
    Kind("rayclusters", "RayCluster", _contract("rayclusters", "namespace", "name", what="KubeRay RayClusters"),
         raycluster_row, "ray.io", ("v1",), "rayclusters", crd=True),
    Kind("rayjobs", "RayJob", _contract("rayjobs", "namespace", "name", what="KubeRay RayJobs"),
         rayjob_row, "ray.io", ("v1",), "rayjobs", crd=True),
    Kind("rayservices", "RayService", _contract("rayservices", "namespace", "name", what="KubeRay RayServices"),
         rayservice_row, "ray.io", ("v1",), "rayservices", crd=True),
    Kind("scaledobjects", "ScaledObject",
         _contract("scaled_objects", "namespace", "name", what="KEDA ScaledObjects"),
         scaledobject_row, "keda.sh", ("v1alpha1",), "scaledobjects", crd=True),
    Kind("hypernodes", "HyperNode", _contract("hypernodes", "name", what="Volcano HyperNodes (network topology)"),
         hypernode_row, "topology.volcano.sh", ("v1alpha1",), "hypernodes", crd=True),
    Kind("resourceflavors", "ResourceFlavor",
         _contract("kueue_resource_flavors", "name", what="Kueue ResourceFlavors"), resourceflavor_row,
         "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "resourceflavors", crd=True),
    Kind("clusterqueues", "ClusterQueue",
         _contract("kueue_cluster_queues", "name", what="Kueue ClusterQueues: quotas per flavor and resource"),
         clusterqueue_row, "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "clusterqueues", crd=True),
    Kind("localqueues", "LocalQueue",
         _contract("kueue_local_queues", "namespace", "name", what="Kueue LocalQueues"), localqueue_row,
         "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "localqueues", crd=True),
    Kind("workloads", "Workload",
         _contract("kueue_workloads", "namespace", "name", what="Kueue Workloads: needs, admission, state"),
         workload_row, "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "workloads", crd=True),
    Kind("resourceclaims", "ResourceClaim",
         _contract("resource_claims", "namespace", "name", what="DRA ResourceClaims: allocated devices"),
         resourceclaim_row, "resource.k8s.io", ("v1", "v1beta2", "v1beta1"), "resourceclaims", crd=True),
)

BY_STEM = {k.stem: k for k in KINDS}

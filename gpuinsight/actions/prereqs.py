"""What must hold in a cluster before each kind of change works (docs/actions.md and the
``README.md`` of an emitted plan both show these; a test keeps the docs in step with this list).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Prerequisite:
    key: str
    title: str
    text: str
    applies: Callable[[dict[str, Any]], bool]


def _obj(action: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    ref = action.get("ref") or {}
    return ref.get("kind"), ref.get("namespace"), ref.get("name")


def _labels(action: dict[str, Any]) -> set[str]:
    return set(action.get("labels") or {}) if action.get("type") == "k8s-label" else set()


def _spec(action: dict[str, Any]) -> dict[str, Any]:
    return (action.get("object") or {}).get("spec") or {}


PREREQUISITES: tuple[Prerequisite, ...] = (
    Prerequisite(
        "device-plugin-config", "GPU sharing (MPS, time-slicing): the device plugin must read the config",
        "The NVIDIA GPU Operator's ClusterPolicy must reference the ConfigMap the change writes: "
        "`spec.devicePlugin.config.name: device-plugin-config` (the ConfigMap lives in the operator's namespace, "
        "`gpu-operator`). Without it the node label `nvidia.com/device-plugin.config` names a config the device "
        "plugin never reads and the GPU is not shared. MPS needs the device plugin v0.15 or later (GPU Operator "
        "v24.3 or later). Relabelling a node restarts the device plugin there.",
        lambda a: _obj(a)[1:] == ("gpu-operator", "device-plugin-config")
        or "nvidia.com/device-plugin.config" in _labels(a)),
    Prerequisite(
        "mig", "MIG: mig-manager must know the layout and expose the slices",
        "The GPU Operator's mig-manager must be enabled (ClusterPolicy `spec.migManager.enabled: true`) and the "
        "layout named by `nvidia.com/mig.config` must exist in the config it reads. A node whose GPUs are "
        "partitioned one by one (some kept whole) gets its own config in the ConfigMap `gpu-operator/custom-mig-config` "
        "(key `config.yaml`, which keeps mig-manager's default configs beside the plan's); ClusterPolicy must name it: "
        "`spec.migManager.config.name: custom-mig-config` (else mig-manager reports "
        "`nvidia.com/mig.config.state=failed` and the apply stops with the node cordoned). Such a node needs the "
        "device plugin's mixed strategy (ClusterPolicy `spec.mig.strategy: mixed`): whole GPUs stay "
        "`nvidia.com/gpu`, slices appear as `nvidia.com/mig-<profile>`, the resource the workload is changed to ask "
        "for. Under the single strategy every GPU of a node gets one named layout (`all-1g.10gb` and the like, in "
        "the default config) and slices stay `nvidia.com/gpu`; set `consolidation.mig_strategy=single` when the node "
        "label `nvidia.com/mig.strategy` does not say so. The GPUs must be MIG-capable (A100, A30, H100, H200). "
        "mig-manager restarts the GPU Operator's device plugin, feature discovery and DCGM exporter on the node; "
        "workloads on GPUs that are not repartitioned keep running, a GPU being repartitioned must be idle (the plan "
        "empties it first). Turning MIG mode on resets that GPU on A100/A30 (a per-GPU setting, MIG user guide, "
        "\"Deployment Considerations\"); where the platform cannot reset one GPU alone (GPU pass-through, some cloud "
        "instances) mig-manager runs with `WITH_REBOOT=true` and reboots the node, restarting every pod on it: the plan "
        "cannot see the platform, check it before applying.",
        lambda a: "nvidia.com/mig.config" in _labels(a) or _obj(a)[1:] == ("gpu-operator", "custom-mig-config")),
    Prerequisite(
        "karpenter-nodepool", "Karpenter NodePools",
        "Karpenter v1 (API `karpenter.sh/v1`) must run, and the node class the NodePool references "
        "(`spec.template.spec.nodeClassRef`, e.g. an EC2NodeClass) must exist. For spot capacity, Karpenter's "
        "interruption handling (its interruption queue) must be enabled so that a node is drained when its "
        "spot instance is reclaimed, and the workload must survive a restart (checkpoints).",
        lambda a: _obj(a)[0] == "NodePool" and "template" in _spec(a)),
    Prerequisite(
        "consolidation", "Karpenter consolidation",
        "`consolidationPolicy: WhenEmptyOrUnderutilized` lets Karpenter remove or replace underused nodes of the "
        "pool, evicting their pods (PodDisruptionBudgets are respected): workloads on that pool must tolerate a "
        "restart or carry a PodDisruptionBudget.",
        lambda a: _obj(a)[0] == "NodePool"
        and (_spec(a).get("disruption") or {}).get("consolidationPolicy") == "WhenEmptyOrUnderutilized"),
    Prerequisite(
        "volcano-scheduler-conf", "Volcano scheduler configuration",
        "Volcano's scheduler must read `volcano-system/volcano-scheduler-configmap` (the chart's default); it "
        "reloads the conf when the mounted file changes (within about a minute), without a restart. If the "
        "chart manages that ConfigMap, change the chart's values as well or the next upgrade reverts it.",
        lambda a: _obj(a)[1:] == ("volcano-system", "volcano-scheduler-configmap")),
    Prerequisite(
        "queue", "Volcano queues",
        "A queue's `weight` is its share under the proportion plugin; `deserved` is read by the capacity plugin "
        "(Volcano 1.9 or later) and `capability` caps the queue under both. Jobs already running above a lowered "
        "share are reclaimed only if the queue is `reclaimable`.",
        lambda a: _obj(a)[0] == "Queue"),
    Prerequisite(
        "scale-to-zero", "Scaling an idle workload to zero",
        "No HorizontalPodAutoscaler or KEDA ScaledObject may manage the workload's replicas (it would scale it "
        "back up; with KEDA use its pause annotation instead). If Helm or a GitOps tool deploys the workload, "
        "change its manifest too, or the next sync reverts the change.",
        lambda a: _spec(a).get("replicas") == 0 or _spec(a).get("suspend") is True),
    Prerequisite(
        "kuberay", "KubeRay changes (RayJob, RayCluster, RayService)",
        "The KubeRay operator (API `ray.io/v1`) must run. With `shutdownAfterJobFinishes` it deletes a RayJob's "
        "RayCluster `ttlSecondsAfterFinished` seconds after the job's end, also for a job that finished before the "
        "change; the submitter Job and its logs stay. A job on an existing cluster (`clusterSelector`) is never "
        "changed. Worker-group changes apply to the RayCluster in place; turning on `enableInTreeAutoscaling` "
        "takes effect when the head pod is recreated (the autoscaler runs beside the head), and a head asked to "
        "hold no GPU gives it back when it restarts. A RayService's cluster config is rolled out by KubeRay as a "
        "new RayCluster (a zero-downtime upgrade): both clusters hold their GPUs until the new one serves.",
        lambda a: _obj(a)[0] in ("RayCluster", "RayJob", "RayService")),
    Prerequisite(
        "keda", "KEDA ScaledObjects (scale to zero on demand)",
        "KEDA 2.x must run (API `keda.sh/v1alpha1`), and the Prometheus the ScaledObject names (`serverAddress`, "
        "setting `scale_to_zero.prometheus_url`) must hold the request metric (`scale_to_zero.request_metric`: "
        "ingress-nginx's `nginx_ingress_controller_requests` by default, the Service name in its `service` label; "
        "check the query in the plan) and the DCGM series. The request trigger is what wakes a workload at zero: "
        "without the metric it stays at zero outside its cron hours. The workload may have no "
        "HorizontalPodAutoscaler of its own (KEDA's webhook refuses a second scaler), and its first request after "
        "an idle stretch waits for a pod to start and load its model (the finding gives the expected cold starts "
        "a day).",
        lambda a: _obj(a)[0] == "ScaledObject"),
    Prerequisite(
        "node-labels", "Labels set on Node objects",
        "A label set on a Node lives as long as that node: when Karpenter or a node group replaces the node, the "
        "new one comes without it. For a lasting change set the label in the NodePool template "
        "(`spec.template.metadata.labels`) or the node group's labels as well.",
        lambda a: a.get("type") == "k8s-label"),
    Prerequisite(
        "cordon-evict", "Cordon and evictions",
        "Evictions honour PodDisruptionBudgets: one that would break a budget is refused (429) and the step stops; "
        "run it again later. A pod without a controller is not recreated. A Volcano gang is evicted together "
        "and placed again as a whole. A node binpack frees stays cordoned until the plan is rolled back or the node "
        "is removed (Karpenter or the cluster autoscaler removes an empty node). A node that gets shared GPUs is "
        "cordoned, emptied of what must leave, relabelled once those pods are gone, and uncordoned once its "
        "reconfiguration succeeded (`nvidia.com/mig.config.state=success` for MIG), before the small workloads move "
        "in; `--apply` waits for both (15 minutes for the pods, an hour for mig-manager), `steps.sh` with "
        "`kubectl wait`.",
        lambda a: a.get("type") in ("cordon", "drain", "uncordon")),
    Prerequisite(
        "volcano-job-manifest", "Changes to a submitted Volcano Job",
        "Volcano's admission webhook refuses any change to a submitted Job's spec except `minAvailable` and task "
        "`replicas`. The change is therefore a patch for the job's manifest (where the job is kept: a pipeline, "
        "a chart, a GitOps repository), applied before its next submission; the new node pool must exist by then.",
        lambda a: a.get("type") == "manifest-patch"),
    Prerequisite(
        "eks-nodegroup", "EKS managed node groups",
        "The AWS identity needs `eks:DescribeNodegroup`, `eks:CreateNodegroup`, `eks:UpdateNodegroupConfig` "
        "(and `eks:DeleteNodegroup` to roll back) on the cluster's node groups and `iam:PassRole` on the node "
        "role. A new group takes its subnets and node role from the on-demand group it is copied from "
        "(`aws eks describe-nodegroup`): `gpuinsight recommend --apply` does that itself, `steps.sh` does not.",
        lambda a: a.get("type") == "aws-eks"),
    Prerequisite(
        "field-managers", "Server-side apply and field ownership",
        "Changes are server-side applies with field manager `gpuinsight` and no force: a field another manager "
        "owns (Helm, Argo CD, kubectl) is a conflict that stops the step. Change such a field where it is "
        "managed (its chart values or repository), using these files there.",
        lambda a: a.get("type") in ("k8s-apply", "k8s-label", "cordon")),
)


def prerequisites_for(actions: list[dict[str, Any]]) -> list[Prerequisite]:
    """The prerequisites of the kinds of change in ``actions``, in the documented order."""
    return [p for p in PREREQUISITES if any(p.applies(a) for a in actions)]


def markdown(prereqs: list[Prerequisite] | tuple[Prerequisite, ...] = PREREQUISITES) -> str:
    return "\n\n".join(f"### {p.title}\n\n{p.text}" for p in prereqs) + "\n"

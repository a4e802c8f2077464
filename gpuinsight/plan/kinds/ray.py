"""``ray``: KubeRay clusters holding GPUs for nothing (a finished job's cluster, idle workers kept by
minReplicas, GPUs on the head)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuinsight.plan.kind import Evidence, FindingKind, figure
from gpuinsight.plan.schema import DNS_LABEL, DNS_NAME, Schema, Target, boolean, integer, optional, spec, text

CHANGES = ("job_cleanup", "worker_min_replicas", "head_gpus")


@dataclass
class RayProposed(Schema):
    change: str = spec(text(choices=CHANGES))
    min_replicas: int | None = spec(optional(integer(0)), None)
    autoscaling: bool | None = spec(optional(boolean), None)
    idle_timeout_s: int | None = spec(optional(integer(0)), None)
    head_gpus: int | None = spec(optional(integer(0, 0)), None)
    shutdown_after_finish: bool | None = spec(optional(boolean), None)
    ttl_after_finish_s: int | None = spec(optional(integer(0)), None)


@dataclass
class RayTarget(Target):
    """The object patched (RayCluster, or the RayJob / RayService that owns it) and its group."""

    kind: str = spec(text(choices=("RayCluster", "RayJob", "RayService")))
    name: str = spec(text(DNS_NAME))
    namespace: str | None = spec(optional(text(DNS_LABEL)), None)
    ray_cluster: str | None = spec(optional(text(DNS_NAME)), None)
    group: str | None = spec(optional(text(max_len=253)), None)
    group_index: int | None = spec(optional(integer(0)), None)


@dataclass
class RayEvidence(Evidence):
    """How long the GPUs were held for nothing, by change."""

    gpu_hours_after_end: float | None = figure()           # job_cleanup
    hours_held_after_end: float | None = figure()
    idle_hours_in_long_stretches: float | None = figure()  # worker_min_replicas
    gr_hourly_max_p95_pct: float | None = figure()         # head_gpus


RAY = FindingKind("ray", "KubeRay", "#0097a7", "gpus_returned", RayProposed, RayTarget, RayEvidence)

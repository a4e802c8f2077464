"""QueueRule: Volcano queues and Kueue ClusterQueues whose quota is far from their use.

(Kueue: :mod:`gpuinsight.rules.kueue`; this module holds the kind and the Volcano part.)

Over-provisioned: deserved (or capability) far above the p95 of what the queue's pods held ->
shrink it to the p95 plus headroom, and scale the weight down in proportion. Starved: pods
wait long while the queue sits at its capability -> raise capability and deserved. A quota is
an entitlement, not a bill: resizing it saves nothing by itself (the dollars come when the
capacity kept for it is released, which binpack and idle findings price), so the saving is 0
and the evidence shows what the idle entitlement is worth at list price.

Safety floor: neither deserved nor capability is ever set below the largest GPU need of one
pod, or of one gang (a PodGroup's minResources, a Job's minAvailable pods), among the queue's
running, pending and recent work: below it that work could never be admitted again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from gpuinsight.plan import Recommendation, finding_id
from gpuinsight.plan.kinds.queue import QUEUE, QueueProposed, QueueTarget
from gpuinsight.rules.base import Rule
from gpuinsight.rules.common import cluster_of, monthly, num
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.kueue import kueue_findings
from gpuinsight.rules.settings import FRACTION, Setting
from gpuinsight.sql.rows import Row

GPU = "nvidia.com/gpu"


class QueueRule(Rule):
    name = "queue"
    summary = ("Resize Volcano queue weight/deserved/capability and Kueue ClusterQueue nominalQuota to what the "
               "queue really uses.")
    needs = ("queue_usage", "kueue_quota_usage", "cluster_summary")
    settings = (
        Setting("idle_quota_ratio", 0.5, "Flag when the p95 held GPUs are below this share of deserved.",
                bounds=FRACTION),
        Setting("min_idle_gpus", 2.0, "...and at least this many deserved GPUs go unused."),
        Setting("headroom", 0.25, "Headroom over the p95 when proposing a new deserved value."),
        Setting("starved_pending_s", 1800.0, "p95 scheduling wait that counts as starved."),
        Setting("starved_use_ratio", 0.9, "...while the queue holds at least this share of its capability.",
                bounds=FRACTION),
    )
    kinds = (QUEUE,)

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        clusters = {c.cluster: ClusterFigures.of(c) for c in ctx.rows(frames, "cluster_summary")}
        out = []
        for q in ctx.rows(frames, "queue_usage"):
            if q.weight is None:
                continue  # seen on pods only: no Queue object to change
            figures = clusters.get(cluster_of(q), ClusterFigures())
            deserved = q.deserved_gpu
            cap = q.capability_gpu
            quota = num(deserved if deserved is not None else cap)
            p95 = num(q.allocated_gpu_p95)
            peak = num(q.allocated_gpu_max)
            floor = math.ceil(max(num(q.largest_pod_gpus), num(q.largest_gang_gpus)) - 1e-9)
            if quota and p95 < quota * settings["idle_quota_ratio"] and quota - p95 >= settings["min_idle_gpus"]:
                new_deserved = max(1, math.ceil(p95 * (1 + settings["headroom"])), floor)
                new_cap = max(new_deserved, math.ceil(peak * (1 + settings["headroom"])), floor)
                lower_deserved = deserved is not None and new_deserved < num(deserved)
                lower_cap = cap is not None and new_cap < num(cap)
                if not lower_deserved and not lower_cap:
                    continue  # the floor leaves nothing to lower
                new_deserved = min(new_deserved, math.ceil(quota))
                new_weight = max(1, round(num(q.weight) * new_deserved / quota))
                proposed = QueueProposed(weight=new_weight,
                                         deserved={GPU: new_deserved} if lower_deserved else None,
                                         capability={GPU: new_cap} if lower_cap else None).to_dict()
                current: dict[str, Any] = {"weight": q.weight}
                if lower_deserved:
                    current["deserved"] = {GPU: deserved}
                if lower_cap:
                    current["capability"] = {GPU: cap}
                freed = quota - new_deserved
                out.append(Recommendation(
                    rule=QUEUE.name, queue=q.queue, cluster=cluster_of(q),
                    id=finding_id(QUEUE.name, cluster_of(q), None, None, None, q.queue),
                    title=(f"Queue {q.queue} is entitled to {quota:g} GPUs but its pods held at most "
                           f"{p95:.1f} (p95): lower "
                           + (f"deserved to {new_deserved}, " if lower_deserved else "")
                           + (f"capability to {new_cap}, " if lower_cap else "") + f"weight to {new_weight}"),
                    current=current, proposed=proposed,
                    monthly_savings_usd=0.0,
                    confidence=0.6,
                    evidence={
                        "deserved_gpu": deserved, "capability_gpu": cap, "weight": q.weight,
                        "allocated_gpu_avg": round(num(q.allocated_gpu_avg), 2),
                        "allocated_gpu_p95": round(p95, 2), "allocated_gpu_max": round(peak, 2),
                        "used_gpu_avg": round(num(q.used_gpu_avg), 2),
                        "cluster_unallocated_gpus_avg": round(figures.unallocated_gpus_avg, 2),
                        "idle_entitlement_gpus": round(freed, 2),
                        "idle_entitlement_usd_per_month_at_list": round(monthly(freed * figures.usd_per_gpu_hour), 2),
                        "saving_note": "an entitlement change; dollars come from releasing the capacity",
                        **floor_evidence(q, floor),
                    },
                    target=QueueTarget(q.queue).to_dict(),
                ))
            elif (cap and num(q.pending_p95_s) > settings["starved_pending_s"]
                  and peak >= cap * settings["starved_use_ratio"]):
                new_cap = max(math.ceil(cap * 1.5), floor)
                proposed = QueueProposed(
                    capability={GPU: new_cap},
                    deserved={GPU: max(num(deserved), math.ceil(p95), floor)} if deserved is not None else None,
                ).to_dict()
                out.append(Recommendation(
                    rule=QUEUE.name, queue=q.queue, cluster=cluster_of(q),
                    id=finding_id(QUEUE.name, cluster_of(q), None, None, None, q.queue),
                    title=(f"Queue {q.queue} is starved: pods wait {num(q.pending_p95_s) / 60:.0f} min (p95) "
                           f"at its capability of {cap:g} GPUs; raise it to {new_cap}"),
                    current={"capability": {GPU: cap}}, proposed=proposed,
                    monthly_savings_usd=0.0, confidence=0.5,
                    evidence={"pending_p95_s": q.pending_p95_s, "capability_gpu": cap,
                              "allocated_gpu_max": peak, "pending_pods": q.pending_pods,
                              **floor_evidence(q, floor)},
                    target=QueueTarget(q.queue).to_dict(),
                ))
        prices = {name: c.usd_per_gpu_hour for name, c in clusters.items()}
        out += kueue_findings(ctx.rows(frames, "kueue_quota_usage"), settings, prices)
        return out


@dataclass(frozen=True)
class ClusterFigures:
    """What a queue finding quotes about its own cluster (cluster_summary): the GPUs it leaves
    unallocated on average and the average price of one of its GPU-hours."""

    unallocated_gpus_avg: float = 0.0
    usd_per_gpu_hour: float = 0.0

    @classmethod
    def of(cls, row: Row) -> ClusterFigures:
        gpu_hours, hours = num(row.gpu_hours), num(row.hours)
        return cls(unallocated_gpus_avg=(gpu_hours - num(row.allocated_gpu_hours)) / hours if hours else 0.0,
                   usd_per_gpu_hour=num(row.total_usd) / gpu_hours if gpu_hours else 0.0)


def floor_evidence(q: Any, floor: int) -> dict[str, Any]:
    return {"floor_gpus": floor, "largest_pod_gpus": num(q.largest_pod_gpus),
            "largest_gang_gpus": num(q.largest_gang_gpus),
            "floor_reason": "never below the largest GPU need of one pod or one gang (PodGroup minResources, "
                            "Job minAvailable) among the queue's running, pending and recent work"}

"""QueueRule: Volcano queues whose quota is far from their use.

Over-provisioned: deserved (or capability) far above the p95 of what the queue's pods held ->
shrink it to the p95 plus headroom, and scale the weight down in proportion. Starved: pods
wait long while the queue sits at its capability -> raise capability and deserved. A quota is
an entitlement, not a bill: resizing it saves nothing by itself (the dollars come when the
capacity kept for it is released, which binpack and idle findings price), so the saving is 0
and the evidence shows what the idle entitlement is worth at list price.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from gpuinsight.rules.base import Recommendation, Rule, Setting
from gpuinsight.rules.common import monthly, num, rows


class QueueRule(Rule):
    name = "queue"
    summary = "Resize Volcano queue weight/deserved/capability to what the queue really uses."
    needs = ("queue_usage", "fleet_summary")
    settings = (
        Setting("idle_quota_ratio", 0.5, "Flag when the p95 held GPUs are below this share of deserved."),
        Setting("min_idle_gpus", 2.0, "...and at least this many deserved GPUs go unused."),
        Setting("headroom", 0.25, "Headroom over the p95 when proposing a new deserved value."),
        Setting("starved_pending_s", 1800.0, "p95 scheduling wait that counts as starved."),
        Setting("starved_use_ratio", 0.9, "...while the queue holds at least this share of its capability."),
    )

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any]) -> list[Recommendation]:
        summary = rows(frames.get("fleet_summary"))
        s = summary[0] if summary else {}
        gpu_hours = num(s.get("gpu_hours"))
        usd_per_gpu_hour = num(s.get("total_usd")) / gpu_hours if gpu_hours else 0.0
        hours = num(s.get("hours"))
        unallocated_gpus = num(s.get("gpu_hours")) - num(s.get("allocated_gpu_hours"))
        unallocated_avg = unallocated_gpus / hours if hours else 0.0
        out = []
        for q in rows(frames.get("queue_usage")):
            if q.get("weight") is None:
                continue  # seen on pods only: no Queue object to change
            deserved = q.get("deserved_gpu")
            cap = q.get("capability_gpu")
            quota = num(deserved if deserved is not None else cap)
            p95 = num(q.get("allocated_gpu_p95"))
            peak = num(q.get("allocated_gpu_max"))
            if quota and p95 < quota * settings["idle_quota_ratio"] and quota - p95 >= settings["min_idle_gpus"]:
                new_deserved = max(1, math.ceil(p95 * (1 + settings["headroom"])))
                new_cap = max(new_deserved, math.ceil(peak * (1 + settings["headroom"])))
                new_weight = max(1, round(num(q["weight"]) * new_deserved / quota))
                proposed: dict[str, Any] = {"weight": new_weight}
                current: dict[str, Any] = {"weight": q["weight"]}
                if deserved is not None:
                    proposed["deserved"] = {"nvidia.com/gpu": new_deserved}
                    current["deserved"] = {"nvidia.com/gpu": deserved}
                if cap is not None and cap > new_cap:
                    proposed["capability"] = {"nvidia.com/gpu": new_cap}
                    current["capability"] = {"nvidia.com/gpu": cap}
                freed = quota - new_deserved
                out.append(Recommendation(
                    rule="queue", queue=q["queue"],
                    title=(f"Queue {q['queue']} is entitled to {quota:g} GPUs but its pods held at most "
                           f"{p95:.1f} (p95): lower deserved to {new_deserved}"
                           + (f", capability to {proposed['capability']['nvidia.com/gpu']}" if "capability" in proposed
                              else "") + f" and weight to {new_weight}"),
                    current=current, proposed=proposed,
                    monthly_savings_usd=0.0,
                    confidence=0.6,
                    evidence={
                        "deserved_gpu": deserved, "capability_gpu": cap, "weight": q["weight"],
                        "allocated_gpu_avg": round(num(q.get("allocated_gpu_avg")), 2),
                        "allocated_gpu_p95": round(p95, 2), "allocated_gpu_max": round(peak, 2),
                        "used_gpu_avg": round(num(q.get("used_gpu_avg")), 2),
                        "fleet_unallocated_gpus_avg": round(unallocated_avg, 2),
                        "idle_entitlement_gpus": round(freed, 2),
                        "idle_entitlement_usd_per_month_at_list": round(monthly(freed * usd_per_gpu_hour), 2),
                        "saving_basis": "an entitlement change; dollars come from releasing the capacity",
                    },
                    target={"kind": "Queue", "name": q["queue"]},
                ))
            elif (cap and num(q.get("pending_p95_s")) > settings["starved_pending_s"]
                  and peak >= cap * settings["starved_use_ratio"]):
                new_cap = math.ceil(cap * 1.5)
                proposed = {"capability": {"nvidia.com/gpu": new_cap}}
                if deserved is not None:
                    proposed["deserved"] = {"nvidia.com/gpu": max(num(deserved), math.ceil(p95))}
                out.append(Recommendation(
                    rule="queue", queue=q["queue"],
                    title=(f"Queue {q['queue']} is starved: pods wait {num(q.get('pending_p95_s')) / 60:.0f} min (p95) "
                           f"at its capability of {cap:g} GPUs; raise it to {new_cap}"),
                    current={"capability": {"nvidia.com/gpu": cap}}, proposed=proposed,
                    monthly_savings_usd=0.0, confidence=0.5,
                    evidence={"pending_p95_s": q.get("pending_p95_s"), "capability_gpu": cap,
                              "allocated_gpu_max": peak, "pending_pods": q.get("pending_pods")},
                    target={"kind": "Queue", "name": q["queue"]},
                ))
        return out

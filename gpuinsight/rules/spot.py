"""SpotRule: interruption-tolerant work running on on-demand capacity.

Tolerant means the workload says so: a Volcano Job whose policies restart the task (or job)
when a pod is evicted and that may retry, with short tasks in its history; or a replicated
service guarded by a PodDisruptionBudget. Saving = (on-demand - spot) x GPU-hours minus the
expected rework: interruptions per node-hour x the work lost per interruption (half a task
on average; the whole gang's for RestartJob).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import polars as pl

from gpuinsight.rules.base import FindingKind, Recommendation, Rule, Setting, stable_id
from gpuinsight.rules.common import (
    FULL_CONFIDENCE,
    evidence_confidence,
    monthly,
    num,
    window_hours,
    workload_ref,
)
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.typed import DNS_NAME, Schema, WorkloadTarget, list_of, number, optional, spec, text


def _type_name(value: Any, where: str) -> None:
    if value is not None:
        text()(value, where)


@dataclass
class SpotProposed(Schema):
    node_pool: str = spec(text(DNS_NAME))
    capacity_type: str = spec(text(choices=("spot",)), "spot")
    from_node_pool: str | None = spec(optional(text()), None)
    node_pool_kind: str = spec(text(choices=("karpenter", "eks-nodegroup")), "karpenter")
    instance_types: list[str | None] = spec(list_of(_type_name), [])
    gpu_model: str | None = spec(optional(text()), None)
    usd_per_gpu_hour: float = spec(number, 0.0)

RESTARTS = {"RestartTask", "RestartJob", "RestartPod"}
EVICTION_EVENTS = {"PodEvicted", "*", "Any", "PodFailed"}


class SpotRule(Rule):
    name = "spot"
    summary = "Move interruption-tolerant batch jobs and replicated services from on-demand to spot capacity."
    needs = ("workload_gpu_profile", "disruption_controls", "instance_prices", "nodes_current", "analysis_window")
    settings = (
        Setting("interruptions_per_node_hour", 0.005, "Expected spot interruptions per node-hour (0.005 ~ 3.6/month)."),
        Setting("assumed_spot_discount", 0.60, "Spot discount to assume when the catalog has no spot price."),
        Setting("max_task_hours", 4.0, "Jobs qualify when their p90 task runtime is at most this."),
        Setting("min_finished_tasks", 3, "Finished tasks needed to trust the runtime distribution."),
        Setting("min_replicas_for_services", 2, "Services need at least this many replicas and a PDB."),
        FULL_CONFIDENCE,
    )
    kinds = (FindingKind("spot", "gpuinsight.actions.builders.spot", SpotProposed, WorkloadTarget, "price_difference"),)

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        controls = {(c["cluster"], c["namespace"], c["workload"]): c for c in ctx.rows(frames, "disruption_controls")}
        prices = {p["instance_type"]: p for p in ctx.rows(frames, "instance_prices")}
        pool_kinds = {n["node_pool"]: n.get("node_pool_kind") for n in ctx.rows(frames, "nodes_current")}
        out = []
        for r in ctx.rows(frames, "workload_gpu_profile"):
            hours = window_hours(frames, r.get("cluster"))
            if r.get("capacity_type") != "on-demand" or not hours:
                continue
            if ctx.ledger.workload_claimed(r.get("cluster"), r["namespace"], r["workload"]):
                continue  # already reclaimed or consolidated in this plan
            c = controls.get((r["cluster"], r["namespace"], r["workload"]), {})
            production, production_reason = ctx.is_production(r)
            why, restart = tolerance(r, c, settings, production)
            if why is None:
                continue
            price = prices.get(r.get("instance_type") or "")
            if not price or price.get("on_demand_usd_per_hour") is None or not price.get("gpu_count"):
                continue
            gpus_per_node = num(price["gpu_count"], 1)
            od = num(price["on_demand_usd_per_hour"]) / gpus_per_node
            assumed = price.get("spot_usd_per_hour") is None
            spot = od * (1 - settings["assumed_spot_discount"]) if assumed else num(price["spot_usd_per_hour"]) / gpus_per_node
            gpu_hours_month = monthly(num(r.get("gpu_hours")) / hours)
            task_h = num(r.get("runtime_p50_s"), 3600.0) / 3600.0
            gang = max(1, int(num(c.get("min_available"), 1))) if restart == "RestartJob" else 1
            # interruptions hit nodes; per GPU-hour that's the node rate / GPUs per node
            interruptions = gpu_hours_month * settings["interruptions_per_node_hour"] / gpus_per_node
            rework_gpu_hours = interruptions * (task_h / 2.0) * gang * (gpus_per_node if gang > 1 else 1)
            saving = (od - spot) * gpu_hours_month - spot * rework_gpu_hours
            if saving <= 0:
                continue
            rid = stable_id("spot", r["namespace"], r["workload"], None, None)
            granted = ctx.claim_price_difference(rid, r, frames, (od - spot) / od if od else 0.0)
            saving = min(saving, monthly(granted))
            if saving <= 0:
                continue
            conf = evidence_confidence(num(r.get("hours_held")), settings["full_confidence_hours"])
            pool = r.get("node_pool") or "gpu"
            out.append(Recommendation(
                rule="spot", id=rid,
                namespace=r["namespace"], workload=r["workload"], queue=r.get("queue"),
                title=(f"{r['namespace']}/{r['workload']} tolerates interruption ({why}) but runs on on-demand "
                       f"{r.get('instance_type')}: move it to spot"),
                current={"capacity_type": "on-demand", "node_pool": r.get("node_pool"),
                         "usd_per_gpu_hour": round(od, 4)},
                proposed=SpotProposed(spot_pool_name(pool), "spot", r.get("node_pool"),
                                      pool_kinds.get(r.get("node_pool")) or "karpenter", [r.get("instance_type")],
                                      r.get("gpu_model"), round(spot, 4)).to_dict(),
                monthly_savings_usd=saving,
                confidence=conf * (0.75 if assumed else 1.0),
                evidence={
                    "tolerance": why,
                    "restart_policy": restart,
                    "gpu_hours_per_month": round(gpu_hours_month, 1),
                    "task_runtime_p50_min": round(task_h * 60, 1),
                    "task_runtime_p90_min": round(num(r.get("runtime_p90_s")) / 60, 1),
                    "finished_tasks": int(num(r.get("finished_pods"))),
                    "expected_interruptions_per_month": round(interruptions, 2),
                    "expected_rework_gpu_hours_per_month": round(rework_gpu_hours, 2),
                    "on_demand_usd_per_gpu_hour": round(od, 4),
                    "spot_usd_per_gpu_hour": round(spot, 4),
                    "spot_price_assumed": assumed,
                    "production": production, "production_reason": production_reason,
                },
                target=WorkloadTarget(**workload_ref(r)).to_dict(),
            ))
        return out


def spot_pool_name(pool: str) -> str:
    base = pool[:-3] if pool.endswith("-od") else pool
    return f"{base}-spot"


def _policies(c: dict[str, Any]) -> list[dict[str, Any]]:
    """Every lifecycle policy ({event(s), action}) anywhere in the job's or its tasks' specs."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "action" in node and ("event" in node or "events" in node):
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for raw in (c.get("policies"), c.get("tasks")):
        walk(json.loads(raw) if isinstance(raw, str) else raw)
    return found


def tolerance(r: dict[str, Any], c: dict[str, Any], settings: dict[str, Any],
              production: bool) -> tuple[str | None, str | None]:
    """Why the workload tolerates interruption, and its restart action; (None, None) if not."""
    if r.get("workload_kind") == "VolcanoJob":
        restarts = [p for p in _policies(c) if p.get("action") in RESTARTS
                    and ({p.get("event")} | set(p.get("events") or [])) & EVICTION_EVENTS]
        if not restarts or num(c.get("max_retry"), 3) < 1:  # Volcano's default maxRetry is 3
            return None, None
        if num(r.get("finished_pods")) < settings["min_finished_tasks"]:
            return None, None
        if num(r.get("runtime_p90_s")) / 3600.0 > settings["max_task_hours"]:
            return None, None
        action = restarts[0]["action"]
        return f"Volcano Job restarts on eviction ({action}, maxRetry {int(num(c.get('max_retry'), 3))})", action
    if r.get("workload_kind") in ("Deployment", "ReplicaSet") and not production:
        replicas = round(num(r.get("avg_gpus_held")) / max(num(r.get("gpus_per_pod"), 1), 1e-9))
        if replicas >= settings["min_replicas_for_services"] and has_pdb(c):
            return f"{replicas} replicas behind a PodDisruptionBudget", "RestartPod"
    return None, None


def has_pdb(c: dict[str, Any]) -> bool:
    labels = c.get("pod_labels")
    labels = json.loads(labels) if isinstance(labels, str) else (labels or {})
    for sel in c.get("pdb_selectors") or []:
        sel = json.loads(sel) if isinstance(sel, str) else (sel or {})
        match = sel.get("matchLabels") or {}
        if match and all(labels.get(k) == v for k, v in match.items()):
            return True
    return False

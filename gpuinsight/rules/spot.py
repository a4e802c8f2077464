"""SpotRule: interruption-tolerant work running on on-demand capacity.

Tolerant means the workload says so: a Volcano Job whose policies restart the task (or job)
when a pod is evicted and that may retry, with short tasks in its history or a known checkpoint
interval; or a replicated service guarded by a PodDisruptionBudget. Saving = (on-demand - spot)
x GPU-hours minus the expected rework at spot prices.

Rework on an interruption is the work since the last checkpoint, not the whole run: half the
checkpoint interval on average, where the interval is known, from (in this order) the job's
annotation or label ``gpuinsight.io/checkpoint-interval`` (``30m``, ``1h``, ``900s`` or seconds),
or periodic PCIe TX bursts (the state copied to the host; ``workload_checkpoint_signal``);
else half a task (the median runtime of finished tasks), else half the runtime so far. Per
month: GPU-hours x the pool's interruptions per node-hour x the hours lost per interruption (x
the nodes a RestartJob gang spans: any of them restarts all).
"""

from __future__ import annotations

import json
import re
from typing import Any

import polars as pl

from gpuinsight.kubelabels import json_object, label_map, selector_matches
from gpuinsight.plan import Recommendation, finding_id
from gpuinsight.plan.kinds.spot import SPOT, SpotProposed
from gpuinsight.plan.schema import WorkloadTarget
from gpuinsight.rules.base import Rule
from gpuinsight.rules.common import (
    FULL_CONFIDENCE,
    cluster_of,
    evidence_confidence,
    monthly,
    num,
    window_hours,
    workload_ref,
)
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.settings import FRACTION, Setting
from gpuinsight.rules.topology_domains import csv
from gpuinsight.sql.rows import Row, make_row

RESTARTS = {"RestartTask", "RestartJob", "RestartPod"}
EVICTION_EVENTS = {"PodEvicted", "*", "Any", "PodFailed"}


class SpotRule(Rule):
    name = "spot"
    summary = "Move interruption-tolerant batch jobs and replicated services from on-demand to spot capacity."
    needs = ("workload_gpu_profile", "disruption_controls", "instance_prices", "nodes_current", "analysis_window",
             "workload_checkpoint_signal")
    settings = (
        Setting("interruptions_per_node_hour", 0.005, "Expected spot interruptions per node-hour (0.005 ~ 3.6/month).",
                bounds=FRACTION),
        Setting("interruption_rates", "", "Per instance type rates overriding the default, e.g. "
                                          "'p5.48xlarge=0.01,g6.xlarge=0.002' (from the Spot Instance Advisor)."),
        Setting("assumed_spot_discount", 0.60, "Spot discount to assume when the catalog has no spot price.",
                bounds=FRACTION),
        Setting("max_task_hours", 4.0, "Jobs qualify when their p90 task runtime (or, checkpointing, the interval "
                                       "between checkpoints) is at most this."),
        Setting("checkpoint_keys", "gpuinsight.io/checkpoint-interval",
                "Annotations or labels giving the checkpoint interval (30m, 1h, 900s, or seconds)."),
        Setting("min_checkpoint_intervals", 3, "Inferred interval: at least this many intervals between PCIe TX bursts ..."),
        Setting("max_checkpoint_cv", 0.25, "... regular ones (stddev / mean at most this) ..."),
        Setting("min_finished_tasks", 3, "Finished tasks needed to trust the runtime distribution."),
        Setting("min_replicas_for_services", 2, "Services need at least this many replicas and a PDB."),
        FULL_CONFIDENCE,
    )
    kinds = (SPOT,)

    @classmethod
    def resolve_settings(cls, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        resolved = super().resolve_settings(overrides)
        interruption_rates(resolved)  # a malformed rate is bad input before any query runs
        return resolved

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        controls = {c.workload_key: c for c in ctx.rows(frames, "disruption_controls")}
        no_controls = make_row("disruption_controls")
        signals = {c.workload_key: c for c in ctx.rows(frames, "workload_checkpoint_signal")}
        rates = interruption_rates(settings)
        prices = {p.instance_type: p for p in ctx.rows(frames, "instance_prices")}
        pool_kinds = {n.node_pool: n.node_pool_kind for n in ctx.rows(frames, "nodes_current")}
        out = []
        for r in ctx.rows(frames, "workload_gpu_profile"):
            hours = window_hours(frames, r.cluster)
            if r.capacity_type != "on-demand" or not hours:
                continue
            if ctx.ledger.workload_claimed(*r.workload_key):
                continue  # already reclaimed or consolidated in this plan
            c = controls.get(r.workload_key, no_controls)
            production, production_reason = ctx.is_production(r)
            ckpt = checkpoint_interval(r, signals.get(r.workload_key), settings)
            why, restart = tolerance(r, c, settings, production, ckpt[0] if ckpt else None)
            if why is None:
                continue
            price = prices.get(r.instance_type or "")
            if not price or price.on_demand_usd_per_hour is None or not price.gpu_count:
                continue
            gpus_per_node = num(price.gpu_count, 1)
            od = num(price.on_demand_usd_per_hour) / gpus_per_node
            assumed = price.spot_usd_per_hour is None
            spot = od * (1 - settings["assumed_spot_discount"]) if assumed else num(price.spot_usd_per_hour) / gpus_per_node
            gpu_hours_month = monthly(num(r.gpu_hours) / hours)
            task_h = num(r.runtime_p50_s, 3600.0) / 3600.0
            rate, rate_basis = rates.get(r.instance_type or "", (settings["interruptions_per_node_hour"],
                                                                     "default"))
            lost_h, rework_basis = lost_hours(r, ckpt)
            # a RestartJob gang restarts whole when any of its nodes is reclaimed
            spread = max(1, len(r.node_gpu_hours or [])) if restart == "RestartJob" else 1
            # each GPU-hour on spot sits on a node reclaimed at `rate` per hour, losing lost_h of its work
            rework_gpu_hours = gpu_hours_month * rate * lost_h * spread
            runtime_h = (task_h if num(r.finished_pods) else num(r.hours_held)) / 2.0
            rework_no_ckpt = gpu_hours_month * rate * runtime_h * spread
            interruptions = gpu_hours_month * rate / gpus_per_node
            saving = (od - spot) * gpu_hours_month - spot * rework_gpu_hours
            if saving <= 0:
                continue
            rid = finding_id(SPOT.name, cluster_of(r), r.namespace, r.workload, None, None)
            granted = ctx.claim_price_difference(rid, r.workload_key, r.node_gpu_hours, frames,
                                                 (od - spot) / od if od else 0.0)
            saving = min(saving, monthly(granted))
            if saving <= 0:
                continue
            conf = evidence_confidence(num(r.hours_held), settings["full_confidence_hours"])
            pool = r.node_pool or "gpu"
            out.append(Recommendation(
                rule=SPOT.name, id=rid, cluster=cluster_of(r),
                namespace=r.namespace, workload=r.workload, queue=r.queue,
                title=(f"{r.namespace}/{r.workload} tolerates interruption ({why}) but runs on on-demand "
                       f"{r.instance_type}: move it to spot"),
                current={"capacity_type": "on-demand", "node_pool": r.node_pool,
                         "usd_per_gpu_hour": round(od, 4)},
                proposed=SpotProposed(spot_pool_name(pool), "spot", r.node_pool,
                                      pool_kinds.get(r.node_pool) or "karpenter", [r.instance_type],
                                      r.gpu_model, round(spot, 4)).to_dict(),
                monthly_savings_usd=saving,
                confidence=conf * (0.75 if assumed else 1.0),
                evidence={
                    "tolerance": why,
                    "restart_policy": restart,
                    "gpu_hours_per_month": round(gpu_hours_month, 1),
                    "task_runtime_p50_min": round(task_h * 60, 1) if num(r.finished_pods) else None,
                    "task_runtime_p90_min": round(num(r.runtime_p90_s) / 60, 1) if num(r.finished_pods)
                    else None,
                    "finished_tasks": int(num(r.finished_pods)),
                    "expected_interruptions_per_month": round(interruptions, 2),
                    "interruptions_per_node_hour": rate, "interruption_rate_basis": rate_basis,
                    "checkpoint_interval_min": round(ckpt[0] * 60, 1) if ckpt else None,
                    "checkpoint_basis": ckpt[1] if ckpt else "no checkpoint interval known",
                    "lost_hours_per_interruption": round(lost_h, 3), "rework_basis": rework_basis,
                    "expected_rework_gpu_hours_per_month": round(rework_gpu_hours, 2),
                    "rework_usd_per_month": round(spot * rework_gpu_hours, 2),
                    "rework_without_checkpoints_gpu_hours_per_month": round(rework_no_ckpt, 2),
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


def _policies(c: Row) -> list[dict[str, Any]]:
    """Every lifecycle policy ({event(s), action}) anywhere in the job's or its tasks' specs."""
    found: list[dict[str, Any]] = []

    def walk(node: Row) -> None:
        if isinstance(node, dict):
            if "action" in node and ("event" in node or "events" in node):
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for raw in (c.policies, c.tasks):
        walk(json.loads(raw) if isinstance(raw, str) else raw)
    return found


def tolerance(r: Row, c: Row, settings: dict[str, Any],
              production: bool, checkpoint_h: float | None = None) -> tuple[str | None, str | None]:
    """Why the workload tolerates interruption, and its restart action; (None, None) if not.
    A job that checkpoints at most every ``max_task_hours`` loses at most that much whatever its
    runtime: its task history is not needed."""
    if r.workload_kind == "VolcanoJob":
        restarts = [p for p in _policies(c) if p.get("action") in RESTARTS
                    and ({p.get("event")} | set(p.get("events") or [])) & EVICTION_EVENTS]
        if not restarts or num(c.max_retry, 3) < 1:  # Volcano's default maxRetry is 3
            return None, None
        action = restarts[0]["action"]
        retries = f"{action}, maxRetry {int(num(c.max_retry, 3))}"
        if checkpoint_h is not None and checkpoint_h <= settings["max_task_hours"]:
            return f"Volcano Job restarts on eviction ({retries}) and checkpoints every {checkpoint_h * 60:.0f} min", action
        if num(r.finished_pods) < settings["min_finished_tasks"]:
            return None, None
        if num(r.runtime_p90_s) / 3600.0 > settings["max_task_hours"]:
            return None, None
        return f"Volcano Job restarts on eviction ({retries})", action
    if r.workload_kind in ("Deployment", "ReplicaSet") and not production:
        replicas = round(num(r.avg_gpus_held) / max(num(r.gpus_per_pod, 1), 1e-9))
        if replicas >= settings["min_replicas_for_services"] and has_pdb(c):
            return f"{replicas} replicas behind a PodDisruptionBudget", "RestartPod"
    return None, None


def has_pdb(c: Row) -> bool:
    """Is one of the workload's pods covered by a PodDisruptionBudget of its namespace
    (``matchLabels`` and ``matchExpressions``; an empty selector is not counted)?"""
    labels = label_map(c.pod_labels)
    return any(selector_matches(json_object(sel), labels) for sel in c.pdb_selectors or [])


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*$", re.IGNORECASE)


def parse_interval_hours(value: Any) -> float | None:
    """``30m`` / ``1h`` / ``900s`` / ``1800`` (seconds) -> hours; None when not a positive duration."""
    m = _DURATION.match(str(value or ""))
    if not m:
        return None
    n = float(m.group(1))
    unit = (m.group(2) or "s").lower()
    hours = n / 3600.0 if unit == "s" else n / 60.0 if unit in ("m", "min") else n
    return hours if hours > 0 else None


def checkpoint_interval(r: Row, sig: Row | None,
                        settings: dict[str, Any]) -> tuple[float, str] | None:
    """(interval in hours, how it is known): the owner's annotation or label, else periodic PCIe
    TX bursts regular enough and resolved by the step (at most half the interval), else None."""
    keys = csv(settings["checkpoint_keys"])
    for where, values in (("annotation", label_map(r.annotations)), ("label", label_map(r.labels))):
        for key in keys:
            # kube-state-metrics publishes the key sanitized (gpuinsight_io_checkpoint_interval)
            for spelling in dict.fromkeys((key, re.sub(r"[^a-zA-Z0-9_]", "_", key))):
                hours = parse_interval_hours(values.get(spelling))
                if hours is not None:
                    return hours, f"{where} {key}={values[spelling]}"
    if not sig:
        return None
    gap, cv, n = num(sig.interval_median_s), sig.interval_cv, int(num(sig.intervals))
    step = num(sig.step_s)
    if gap <= 0 or n < settings["min_checkpoint_intervals"] or cv is None or num(cv) > settings["max_checkpoint_cv"]:
        return None
    if step > gap / 2:
        return None  # the step cannot resolve bursts this close together
    return gap / 3600.0, (f"inferred: {int(num(sig.burst_events))} PCIe TX bursts (GPU -> host copies), "
                          f"every {gap / 60:.0f} min (cv {num(cv):.2f}) at {int(step)} s steps")


def lost_hours(r: Row, ckpt: tuple[float, str] | None) -> tuple[float, str]:
    """Hours of work one interruption loses on average, and why: half a checkpoint interval (never
    more than half a task), else half a task, else half the runtime so far."""
    task_h = num(r.runtime_p50_s) / 3600.0 if num(r.finished_pods) else None
    if ckpt is not None:
        if task_h is not None and task_h < ckpt[0]:
            return task_h / 2.0, f"half a task ({task_h * 60:.0f} min): tasks end before their next checkpoint"
        return ckpt[0] / 2.0, f"half the checkpoint interval ({ckpt[0] * 60:.0f} min; {ckpt[1]})"
    if task_h is not None:
        return task_h / 2.0, f"no checkpoint known: half the median task runtime ({task_h * 60:.0f} min)"
    run_h = num(r.hours_held)
    return run_h / 2.0, f"no checkpoint known and no finished task: half the runtime so far ({run_h:.0f} h)"


def interruption_rates(settings: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """instance type -> (interruptions per node-hour, basis) from the ``interruption_rates`` setting."""
    out: dict[str, tuple[float, str]] = {}
    for item in csv(settings.get("interruption_rates")):
        name, _, value = item.partition("=")
        try:
            rate = float(value)
        except ValueError:
            raise ValueError(f"spot.interruption_rates: {item!r} is not TYPE=RATE") from None
        if rate < 0 or rate > 1:
            raise ValueError(f"spot.interruption_rates: {item!r}: a rate per node-hour is within 0..1")
        out[name.strip()] = (rate, f"setting interruption_rates for {name.strip()}")
    return out

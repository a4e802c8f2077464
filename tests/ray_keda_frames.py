"""Literal frames of the models the ray and scale_to_zero rules read (``idle_stretches``,
``ray_groups``, ``ray_jobs``, ``scaled_workloads``) for a :class:`tests.rule_fleets.Fleet`: a
workload's idle stretches are priced at its own cost per hour, its node split is the fleet's.
Used by the rule tests and the random-fleet property tests."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import polars as pl

from tests.rule_fleets import Fleet

T0 = datetime(2026, 3, 2)  # a Monday, 00:00 UTC


def _pods(fleet: Fleet, namespace: str, workload: str, group: str | None = None) -> list[Any]:
    return [p for p in fleet.pods if p.namespace == namespace and p.workload == workload
            and (group is None or p.labels.get("ray.io/group", "") == group)]


def node_split(fleet: Fleet, pods: list[Any], hours: float) -> list[dict[str, Any]]:
    parts: dict[str, list[float]] = {}
    for p in pods:
        n = fleet.node(p.node)
        gh = fleet._gpu_equiv(p) * hours
        acc = parts.setdefault(p.node, [0.0, 0.0])
        acc[0] += gh
        acc[1] += gh * n.price / n.gpus
    return [{"node": k, "gpu_hours": v[0], "cost_usd": v[1]} for k, v in sorted(parts.items())]


def stretch_row(fleet: Fleet, namespace: str, workload: str, stretches: list[tuple[datetime, int]], *,
                kind: str = "Deployment", group: str = "", hours: float | None = None,
                pods_active_min: int = 0, woke_last: bool = False) -> dict[str, Any]:
    """The idle_stretches row of one workload (or Ray group): ``stretches`` as (start, hours)."""
    hours = hours if hours is not None else fleet.hours
    pods = _pods(fleet, namespace, workload, group if group else None)
    split = node_split(fleet, pods, hours)
    cost = sum(s["cost_usd"] for s in split)
    gph = sum(s["gpu_hours"] for s in split) / hours
    per_h = cost / hours
    end = T0 + timedelta(hours=hours)
    rows = [{"start": s, "hours": h, "usd": per_h * h, "gpu_hours": gph * h, "pods": len(pods),
             "woke": (s + timedelta(hours=h) < end) or woke_last} for s, h in stretches]
    idle = {s + timedelta(hours=i) for s, h in stretches for i in range(h)}
    week: dict[int, list[float]] = {}
    for i in range(int(hours)):
        t = T0 + timedelta(hours=i)
        week.setdefault(t.weekday() * 24 + t.hour, []).append(1.0 if t in idle else 0.0)
    return {
        "cluster": fleet.cluster, "namespace": namespace, "workload_kind": kind, "workload": workload,
        "ray_group": group, "hours_held": int(hours), "idle_hours": len(idle), "unmeasured_hours": 0,
        "gpu_hours": gph * hours, "cost_usd": cost, "pods_max": len(pods), "pods_active_min": pods_active_min,
        "days_observed": int(hours // 24) or 1, "weeks_observed": int(hours // 168) + 1,
        "first_hour": T0, "last_hour": end - timedelta(hours=1), "stretches": rows,
        "hour_of_week": [{"how": k, "gr_avg": 0.3 * (1 - sum(v) / len(v)), "gr_max": 0.6,
                          "idle_share": sum(v) / len(v), "hours": len(v)} for k, v in sorted(week.items())],
        "node_gpu_hours": split,
    }


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def ray_group_row(fleet: Fleet, namespace: str, cluster: str, group: str, *, replicas: int = 0,
                  min_replicas: int = 0, max_replicas: int = 8, autoscaling: bool = False,
                  idle_timeout_s: int | None = None, head_gpus: float = 0.0, group_index: int | None = 0,
                  owner: tuple[str, str] | None = None, gr_hourly_max_p95: float = 0.5,
                  hours: float | None = None) -> dict[str, Any]:
    hours = hours if hours is not None else fleet.hours
    pods = _pods(fleet, namespace, cluster, group)
    split = node_split(fleet, pods, hours)
    head = group == "headgroup"
    return {
        "cluster": fleet.cluster, "namespace": namespace, "ray_cluster": cluster, "ray_group": group,
        "node_type": "head" if head else "worker", "workload_kind": "RayCluster", "workload": cluster,
        "pods": len(pods), "gpus_per_pod": max((fleet._gpu_equiv(p) for p in pods), default=0.0),
        "gpu_hours": sum(s["gpu_hours"] for s in split), "cost_usd": sum(s["cost_usd"] for s in split),
        "hours_held": int(hours), "gr_mean": gr_hourly_max_p95 / 2, "gr_hourly_max_p95": gr_hourly_max_p95,
        "gr_max": min(1.0, gr_hourly_max_p95 * 1.2), "node_gpu_hours": split, "configured": True,
        "owner_kind": owner[0] if owner else None, "owner_name": owner[1] if owner else None,
        "autoscaling": autoscaling, "autoscaler_version": None, "idle_timeout_s": idle_timeout_s,
        "upgrade_strategy": None, "head_gpus": head_gpus, "group_index": None if head else group_index,
        "replicas": None if head else replicas, "min_replicas": None if head else min_replicas,
        "max_replicas": None if head else max_replicas, "num_of_hosts": None if head else 1,
        "configured_gpus_per_pod": None, "group_idle_timeout_s": None,
    }


def ray_job_row(fleet: Fleet, namespace: str, job: str, cluster: str, end: datetime, *,
                shutdown: bool = False, ttl_s: int = 0, status: str = "Complete", uses_existing: bool = False,
                post_peak: float = 0.0, alive_at_end: bool = True) -> dict[str, Any]:
    """A finished RayJob whose cluster's pods held their GPUs until the end of the window."""
    first_post = end.replace(minute=0, second=0, microsecond=0) + (timedelta(hours=1) if end.minute or end.second
                                                                   else timedelta(0))
    post_h = max(0.0, (T0 + timedelta(hours=fleet.hours) - first_post).total_seconds() / 3600)
    pods = _pods(fleet, namespace, cluster)
    split = node_split(fleet, pods, post_h)
    return {
        "cluster": fleet.cluster, "namespace": namespace, "name": job, "ray_cluster": cluster,
        "uses_existing": uses_existing, "shutdown_after_finish": shutdown, "ttl_after_finish_s": ttl_s,
        "deletion_strategy": False, "submission_mode": "K8sJobMode", "job_status": "SUCCEEDED",
        "deployment_status": status, "start_time": T0, "end_time": end, "first_post_hour": first_post,
        "gpu_hours": 0.0, "cost_usd": 0.0, "post_hours": post_h, "post_gpu_hours": sum(s["gpu_hours"] for s in split),
        "post_cost_usd": sum(s["cost_usd"] for s in split), "post_node_gpu_hours": split,
        "post_gr_hourly_max_p95": post_peak, "post_gr_max": post_peak, "alive_at_end": alive_at_end,
    }


def scaled_row(fleet: Fleet, namespace: str, workload: str, kind: str = "Deployment") -> dict[str, Any]:
    return {"cluster": fleet.cluster, "namespace": namespace, "scaled_object": workload,
            "target_api_version": "apps/v1", "target_kind": kind, "target_name": workload, "min_replicas": 1,
            "max_replicas": 4, "idle_replicas": None, "trigger_types": '["prometheus"]', "paused": False,
            "scales_to_zero": False}

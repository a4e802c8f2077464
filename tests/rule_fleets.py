"""Fleets as the literal frames the rules read (no warehouse): nodes, pods and per-workload
usage in, ``workload_gpu_profile`` / ``placement_current`` / ``nodes_current`` / ``node_costs``
/ ``mig_capacity`` / ``disruption_budgets`` ... out. Used by the rule tests and by the
random-fleet property tests, so that hundreds of fleets cost milliseconds each."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import polars as pl

from gpuinsight.gpumodels import MEMORY_MIB

HOURS = 48.0


@dataclass
class Node:
    name: str
    model: str = "H100-80GB"
    gpus: int = 8
    price: float = 55.04              # $/hour for the node
    pool: str = "pool-a"
    zone: str = "z1"
    capacity_type: str = "on-demand"
    mig_config: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    device_plugin_config: str | None = None
    instance_type: str = "it-1"


@dataclass
class Pod:
    name: str
    node: str
    workload: str
    namespace: str = "ns"
    kind: str = "Deployment"
    gpus: float = 1.0                 # whole GPUs, or MIG instances when mig_profile is set
    mig_profile: str | None = None
    gang: str | None = None
    gang_min: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    priority_class: str | None = None
    queue: str | None = None
    # the GPU indices DCGM saw it on: None = the next free ones of its node, in pod order; [] = unknown
    gpu_indices: list[int] | None = None
    share: float | None = None        # part of a GPU it shares with others (a HAMi vGPU, a KAI fraction)


@dataclass
class Usage:
    """What DCGM saw of a workload (fractions of a GPU, MiB)."""

    gr_mean: float = 0.6
    gr_p50: float = 0.6
    gr_p95: float = 0.8
    peak_p95: float | None = None     # p95 of the per-step max of GR and SM (defaults to the p95s)
    sm_p95: float | None = None
    gr_max: float = 0.95
    active_fraction: float = 0.99
    fb_p99: float = 60000.0
    fb_max: float = 64000.0
    hours_held: float = HOURS
    recurring_hours: list[int] = field(default_factory=list)
    stray_active_hours: float = 0.0
    days_observed: int = 2
    step_s: int = 60
    max_pushed_down: bool = True
    # workload_input_profile / workload_checkpoint_signal columns (None: no such row)
    input: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None


@dataclass
class Fleet:
    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    usage: dict[tuple[str, str], Usage] = field(default_factory=dict)   # (namespace, workload)
    pdbs: list[dict[str, Any]] = field(default_factory=list)
    hours: float = HOURS
    cluster: str = "c"
    hypernodes: list[dict[str, Any]] = field(default_factory=list)   # {name, tier, members}

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def frames(self, **extra: pl.DataFrame) -> dict[str, pl.DataFrame]:
        out = {
            "analysis_window": pl.DataFrame([{"cluster": self.cluster, "hours": self.hours, "catalog": "test",
                                              "window_start": None, "window_end": None}]),
            "workload_gpu_profile": self.profiles(),
            "placement_current": self.placement(),
            "nodes_current": self.nodes_current(),
            "node_costs": pl.DataFrame([{"cluster": self.cluster, "node": n.name, "gpu_count": n.gpus,
                                         "usd_per_hour": n.price, "avg_usd_per_hour": n.price,
                                         "present_at_end": True} for n in self.nodes],
                                       schema={"cluster": pl.Utf8, "node": pl.Utf8, "gpu_count": pl.Int64,
                                               "usd_per_hour": pl.Float64, "avg_usd_per_hour": pl.Float64,
                                               "present_at_end": pl.Boolean}),
            "mig_catalog": mig_catalog(),
            "mig_capacity": self.mig_capacity(),
            "disruption_budgets": pl.DataFrame(self.pdbs, schema={
                "cluster": pl.Utf8, "namespace": pl.Utf8, "name": pl.Utf8, "selector": pl.Utf8,
                "min_available": pl.Utf8, "max_unavailable": pl.Utf8}),
            "workload_input_profile": self._signal("input"),
            "workload_checkpoint_signal": self._signal("checkpoint"),
            "network_topology": pl.DataFrame(
                [{"cluster": self.cluster, "name": h["name"], "tier": h["tier"], "tier_name": h.get("tier_name"),
                  "members": json.dumps(h["members"])} for h in self.hypernodes],
                schema={"cluster": pl.Utf8, "name": pl.Utf8, "tier": pl.Int32, "tier_name": pl.Utf8,
                        "members": pl.Utf8}),
        }
        out.update(extra)
        return out

    def _signal(self, attr: str) -> pl.DataFrame:
        kinds = {(p.namespace, p.workload): p.kind for p in self.pods}
        rows = [{"cluster": self.cluster, "namespace": ns, "workload_kind": kinds.get((ns, wl), "Deployment"),
                 "workload": wl, **getattr(u, attr)} for (ns, wl), u in self.usage.items() if getattr(u, attr)]
        return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()

    def _gpu_equiv(self, p: Pod) -> float:
        if p.share is not None:
            return p.share
        if p.mig_profile:
            slices = int(p.mig_profile.split("g", 1)[0])
            return p.gpus * slices / 7
        return p.gpus

    def profiles(self) -> pl.DataFrame:
        rows = []
        by_wl: dict[tuple[str, str, str], list[Pod]] = {}
        for p in self.pods:
            by_wl.setdefault((p.namespace, p.kind, p.workload), []).append(p)
        for (ns, kind, wl), pods in by_wl.items():
            u = self.usage.get((ns, wl), Usage())
            first = self.node(pods[0].node)
            parts: dict[str, list[float]] = {}
            for p in pods:
                n = self.node(p.node)
                gh = self._gpu_equiv(p) * u.hours_held
                acc = parts.setdefault(p.node, [0.0, 0.0])
                acc[0] += gh
                acc[1] += gh * n.price / n.gpus
            gpu_hours = sum(v[0] for v in parts.values())
            cost = sum(v[1] for v in parts.values())
            rows.append({
                "cluster": self.cluster, "namespace": ns, "workload_kind": kind, "workload": wl,
                "queue": pods[0].queue, "vcjob": wl if kind == "VolcanoJob" else None, "podgroup": pods[0].gang,
                "gpu_model": first.model, "node_pool": first.pool, "capacity_type": first.capacity_type,
                "instance_type": first.instance_type, "zone": first.zone, "pods": len(pods),
                "gpus_per_pod": max(self._gpu_equiv(p) for p in pods),
                "gpu_request_per_pod": max(0.0 if p.mig_profile else p.gpus for p in pods),
                "mig_profile": pods[0].mig_profile, "gpu_hours": gpu_hours, "cost_usd": cost,
                "usd_per_gpu_hour": cost / gpu_hours if gpu_hours else None, "hours_held": u.hours_held,
                "avg_gpus_held": gpu_hours / u.hours_held if u.hours_held else 0.0,
                "priority_class": pods[0].priority_class, "labels": json.dumps(pods[0].labels),
                "annotations": json.dumps(pods[0].annotations),
                "node_gpu_hours": [{"node": k, "gpu_hours": v[0], "cost_usd": v[1]} for k, v in sorted(parts.items())],
                "samples": int(u.hours_held * 3600 / u.step_s), "gr_mean": u.gr_mean, "gr_p50": u.gr_p50,
                "gr_p95": u.gr_p95, "gr_p99": max(u.gr_p95, min(u.gr_max, u.gr_p95 * 1.1)), "gr_max": u.gr_max,
                "sm_mean": u.gr_mean * 0.9, "sm_p95": u.sm_p95 if u.sm_p95 is not None else u.gr_p95 * 0.9,
                "sm_p99": u.gr_p95, "sm_max": u.gr_max,
                "peak_p95": u.peak_p95 if u.peak_p95 is not None else max(
                    u.gr_p95, u.sm_p95 if u.sm_p95 is not None else u.gr_p95 * 0.9),
                "step_s": u.step_s, "max_pushed_down": u.max_pushed_down,
                "fb_p95_mib": u.fb_p99 * 0.98, "fb_p99_mib": u.fb_p99, "fb_max_mib": u.fb_max,
                "gpu_memory_mib": float(MEMORY_MIB.get(first.model, 81559)), "active_fraction": u.active_fraction,
                "diurnal_swing": 0.1, "peak_hour_utc": 12, "recurring_hours_utc": list(u.recurring_hours),
                "stray_active_hours": u.stray_active_hours, "days_observed": u.days_observed,
                "finished_pods": 0, "runtime_p50_s": None, "runtime_p90_s": None, "pending_p95_s": 5.0,
            })
        return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()

    def gpu_indices(self) -> dict[tuple[str, str], list[int] | None]:
        """(namespace, pod) -> the GPU indices it holds: stated ones, else the next free of its node."""
        taken: dict[str, set[int]] = {}
        for p in self.pods:
            if p.gpu_indices:
                taken.setdefault(p.node, set()).update(p.gpu_indices)
        out: dict[tuple[str, str], list[int] | None] = {}
        for p in self.pods:
            if p.mig_profile or p.gpu_indices == []:
                out[(p.namespace, p.name)] = None
            elif p.gpu_indices is not None:
                out[(p.namespace, p.name)] = sorted(p.gpu_indices)
            else:
                used = taken.setdefault(p.node, set())
                free = [i for i in range(self.node(p.node).gpus) if i not in used][: int(p.gpus)]
                used.update(free)
                out[(p.namespace, p.name)] = free
        return out

    def placement(self) -> pl.DataFrame:
        sizes: dict[tuple[str, str], int] = {}
        for p in self.pods:
            if p.gang:
                sizes[(p.namespace, p.gang)] = sizes.get((p.namespace, p.gang), 0) + 1
        indices = self.gpu_indices()
        rows = []
        for p in self.pods:
            n = self.node(p.node)
            rows.append({
                "cluster": self.cluster, "uid": f"uid-{p.namespace}-{p.name}", "namespace": p.namespace, "pod": p.name,
                "workload_kind": p.kind, "workload": p.workload, "node": p.node, "node_pool": n.pool, "zone": n.zone,
                "gpu_model": n.model, "capacity_type": n.capacity_type, "gpus": self._gpu_equiv(p),
                "gpu_request": 0.0 if p.mig_profile else p.gpus, "mig_profile": p.mig_profile,
                "mig_request": p.gpus if p.mig_profile else 0.0, "gang": p.gang,
                "alloc_kind": "vgpu" if p.share is not None else ("mig" if p.mig_profile else "gpu"),
                "fractional": p.share is not None,
                "gang_pods": sizes.get((p.namespace, p.gang)) if p.gang else None,
                "gang_min_member": p.gang_min if p.gang else None, "queue": p.queue,
                "priority_class": p.priority_class, "labels": json.dumps(p.labels),
                "annotations": json.dumps(p.annotations), "gpu_indices": indices[(p.namespace, p.name)],
            })
        return pl.DataFrame(rows, infer_schema_length=None, schema_overrides={"gpu_indices": pl.List(pl.Int32)})

    def nodes_current(self) -> pl.DataFrame:
        held: dict[str, float] = {}
        for p in self.pods:
            held[p.node] = held.get(p.node, 0.0) + self._gpu_equiv(p)
        return pl.DataFrame([{
            "cluster": self.cluster, "node": n.name, "node_pool": n.pool, "zone": n.zone,
            "capacity_type": n.capacity_type, "instance_type": n.instance_type, "gpu_model": n.model,
            "gpu_count": n.gpus, "mig_config": n.mig_config,
            "is_mig": (n.mig_config or "") not in ("", "all-disabled"), "sharing_strategy": "none",
            "device_plugin_config": n.device_plugin_config, "gpus_held": held.get(n.name, 0.0),
            "pods": sum(1 for p in self.pods if p.node == n.name),
            "fractional_pods": sum(1 for p in self.pods if p.node == n.name and p.share is not None),
            "usd_per_hour": n.price,
            "on_demand_usd_per_hour": n.price, "node_pool_kind": "karpenter", "labels": json.dumps(n.labels),
        } for n in self.nodes], infer_schema_length=None)

    def mig_capacity(self) -> pl.DataFrame:
        catalog = {(r["gpu_model"], r["profile"]): r for r in mig_catalog().to_dicts()}
        rows = []
        for n in self.nodes:
            if not n.mig_config or not n.mig_config.startswith("all-") or n.mig_config == "all-disabled":
                continue
            profile = n.mig_config[4:]
            spec = catalog.get((n.model, profile))
            if spec is None:
                continue
            cap = n.gpus * spec["max_instances"]
            held = sum(p.gpus for p in self.pods if p.node == n.name and p.mig_profile == profile)
            rows.append({"cluster": self.cluster, "node": n.name, "gpu_model": n.model, "zone": n.zone,
                         "node_pool": n.pool, "profile": profile, "capacity": float(cap), "held": float(held),
                         "free": float(cap - held)})
        return pl.DataFrame(rows, schema={"cluster": pl.Utf8, "node": pl.Utf8, "gpu_model": pl.Utf8, "zone": pl.Utf8,
                                          "node_pool": pl.Utf8, "profile": pl.Utf8, "capacity": pl.Float64,
                                          "held": pl.Float64, "free": pl.Float64})


@cache
def mig_catalog() -> pl.DataFrame:
    """The package's MIG catalog model, from an in-memory warehouse (migration 002's tables)."""
    import tempfile
    from pathlib import Path

    import gpuinsight as gi

    with tempfile.TemporaryDirectory() as tmp, gi.open(Path(tmp) / "catalog.duckdb") as g:
        return g.query("mig_catalog")

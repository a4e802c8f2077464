"""The fleet's ground truth: exact allocations, prices, planted findings and what must stay clean."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from . import k8s
from .fleet import Fleet
from .signals import cell_blocks, cell_values
from .spec import (
    EKS_NODEGROUP,
    GAP_LEN_S,
    GAP_NODE,
    GAP_START_H,
    INSTANCE_TYPES,
    KV_ANNOTATION,
    MIG_INSTANCES,
    MIG_PROFILE,
    MIG_RESOURCE,
    NODE_POOLS,
    PRICE_SOURCE,
    QUEUES,
    SPOT_PRICE_FRACTION,
    WORKLOADS,
    cell_suffix,
)

HOURS_PER_MONTH = 730


def _r(x: float, nd: int = 6) -> float:
    return float(round(x, nd))


def node_prices(fleet: Fleet) -> list[dict[str, Any]]:
    out = []
    for n in fleet.nodes.iter_rows(named=True):
        it = INSTANCE_TYPES[n["instance_type"]]
        spot = n["capacity_type"] == "spot"
        hourly = it.on_demand_usd * (SPOT_PRICE_FRACTION if spot else 1.0)
        out.append({
            "node": n["name"], "cell": n["cell"], "node_pool": n["pool"],
            "pool_kind": "karpenter-nodepool" if n["pool_kind"] == "karpenter" else "eks-managed-nodegroup",
            "instance_type": it.name, "capacity_type": n["capacity_type"], "zone": n["zone"],
            "gpu_model": it.gpu_model, "model_name": it.model_name, "gpu_count": it.gpu_count,
            "mig_profile": MIG_PROFILE if n["mig"] else None, "mig_instances": MIG_INSTANCES if n["mig"] else 0,
            "dcgm_hostname_label": n["hostname_label"], "dcgm_honor_labels": n["honor_labels"],
            "on_demand_usd_per_hour": it.on_demand_usd, "hourly_usd": _r(hourly),
            "gpu_hourly_usd": _r(hourly / it.gpu_count),
            "price_basis": f"spot = {SPOT_PRICE_FRACTION:.0%} of on-demand (assumed)" if spot else "on-demand",
        })
    return out


def _observed(fleet: Fleet) -> dict[int, dict[str, Any]]:
    """Per workload row: sample statistics of its DCGM series (allocated samples, gap excluded)."""
    sp = fleet.spec
    pod_wl = fleet.pods["workload"].to_numpy()
    parts = []
    for c0, c1 in cell_blocks(fleet, sp.steps):
        v = cell_values(fleet, c0, c1, 0, sp.steps)
        m = (v.holder >= 0) & ~v.gap
        parts.append(pl.DataFrame({"wl": pod_wl[v.holder[m]], "gr": v.gr[m], "sm": v.sm[m], "fb": v.fb[m]}))
    df = pl.concat(parts)
    stats = df.group_by("wl").agg(
        samples=pl.len(), gr_active_mean=pl.col("gr").mean(),
        gr_active_p95=pl.col("gr").quantile(0.95, interpolation="linear"), gr_active_max=pl.col("gr").max(),
        sm_active_mean=pl.col("sm").mean(), sm_active_p95=pl.col("sm").quantile(0.95, interpolation="linear"),
        fb_used_p95_mib=pl.col("fb").quantile(0.95, interpolation="linear"), fb_used_max_mib=pl.col("fb").max(),
        idle_fraction=(pl.col("gr") < 0.01).mean(),
    )
    return {r.pop("wl"): {k: (_r(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
            for r in stats.iter_rows(named=True)}


def _finding_workload(wl: dict[str, Any]) -> str:
    """The workload a finding names: a RayJob's cluster is named after its job."""
    wd = WORKLOADS[wl["template"]]
    return wd.ray_job + cell_suffix(wl["cell"]) if wd.ray_job else wl["name"]


def _hourly_activity(fleet: Fleet) -> dict[int, list[tuple[float, float]]]:
    """Per workload row: (max, mean) GR activity of its GPUs in each clock hour of the window,
    for the hours it held its GPUs throughout (the KubeRay and scale-to-zero workloads only:
    they hold their GPUs from before the window to its end)."""
    sp = fleet.spec
    per_hour = 3600 // sp.interval_s
    wanted = {i for i, t in enumerate(fleet.workloads["template"].to_list())
              if WORKLOADS[t].planted in ("ray", "scale_to_zero")}
    pod_wl = fleet.pods["workload"].to_numpy()
    out: dict[int, list[tuple[float, float]]] = {}
    for c0, c1 in cell_blocks(fleet, sp.steps):
        v = cell_values(fleet, c0, c1, 0, sp.steps)
        for wl in wanted:
            rows = np.flatnonzero((v.holder >= 0).all(axis=1) & (pod_wl[np.maximum(v.holder[:, 0], 0)] == wl))
            if not rows.size:
                continue
            gr = v.gr[rows][:, : sp.steps // per_hour * per_hour].reshape(len(rows), -1, per_hour)
            out[wl] = [(float(gr[:, h].max()), float(gr[:, h].mean())) for h in range(gr.shape[1])]
    return out


def _runs(flags: list[bool]) -> list[tuple[int, int]]:
    """(first hour, length) of each run of True."""
    out: list[tuple[int, int]] = []
    for h, idle in enumerate(flags):
        if idle and out and out[-1][0] + out[-1][1] == h:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        elif idle:
            out.append((h, 1))
    return out


# what the sample's findings of issue 14 are worth, from the generated activity (an hour is idle
# when no step in it is above 1 % GR; docs/rules.md, ray and scale_to_zero)
IDLE_LEVEL, ACTIVE_LEVEL = 0.01, 0.05
STZ_MIN_STRETCH_H, STZ_COOLDOWN_H = 4, 0.5
RAY_MIN_STRETCH_H, RAY_DEFAULT_IDLE_TIMEOUT_H, RAY_JOB_TTL_S = 2, 60 / 3600, 300


def issue14_finding(fleet: Fleet, wl: dict[str, Any], wd: Any, hours: list[tuple[float, float]],
                    usd_per_hour: float) -> dict[str, Any]:
    """Expected saving of a planted ray / scale_to_zero finding (``usd_per_hour``: the GPUs held)."""
    sp = fleet.spec
    window_h = (sp.end_s - sp.start_s) / 3600.0
    month = HOURS_PER_MONTH / window_h
    idle = [mx <= IDLE_LEVEL for mx, _ in hours]
    if wd.ray_job:
        from .spec import RAY_JOB_END_H

        first_post = int(np.ceil(RAY_JOB_END_H))
        kept = max(0, int(np.ceil((RAY_JOB_END_H * 3600 + RAY_JOB_TTL_S - first_post * 3600) / 3600)))
        post = len(hours) - first_post - kept
        return {"monthly_savings_usd": _r(usd_per_hour * post * month, 2),
                "proposed": {"change": "job_cleanup", "shutdown_after_finish": True, "ttl_after_finish_s": RAY_JOB_TTL_S},
                "basis": f"RayJob {wd.ray_job} ended at {RAY_JOB_END_H:.2f} h; its cluster's GPUs held {post} whole "
                         "hours after it: shutdownAfterJobFinishes with a 300 s TTL frees them"}
    if wd.ray_group == "headgroup":
        return {"monthly_savings_usd": _r(usd_per_hour * HOURS_PER_MONTH, 2),
                "proposed": {"change": "head_gpus", "head_gpus": 0},
                "basis": "the head's idle GPU is given back (num-gpus 0; Ray work runs on the workers)"}
    if wd.kind == "RayCluster":
        stretches = [(h, n) for h, n in _runs(idle) if n >= RAY_MIN_STRETCH_H]
        at_zero = sum(n - RAY_DEFAULT_IDLE_TIMEOUT_H for _, n in stretches)
        return {"monthly_savings_usd": _r(usd_per_hour * at_zero * month, 2),
                "proposed": {"change": "worker_min_replicas", "min_replicas": 0},
                "basis": f"all {len(wd.pods)} GPU workers idle in stretches of {[n for _, n in stretches]} h; "
                         "minReplicas 0 lets the autoscaler (60 s idle timeout) remove them"}
    # scale_to_zero: busy UTC hours that recur on two days or more get a cron trigger
    days = max(1, len(hours) // 24)
    active = [mean > ACTIVE_LEVEL for _, mean in hours]
    recurring = {h for h in range(24) if sum(active[d * 24 + h] for d in range(len(hours) // 24)) >= max(2, days / 2)}
    cron = {(h + d) % 24 for h in recurring for d in (-1, 0, 1)}
    stretches = [(h, n) for h, n in _runs(idle) if n >= STZ_MIN_STRETCH_H]
    at_zero = sum(max(0.0, sum((h + i) % 24 not in cron for i in range(n)) - STZ_COOLDOWN_H) for h, n in stretches)
    woke = sum(h + n < len(hours) for h, n in stretches)
    return {"monthly_savings_usd": _r(usd_per_hour * at_zero * month, 2),
            "proposed": {"replicas_when_idle": 0, "replicas_when_active": len(wd.pods)},
            "evidence": {"idle_stretches_h": [n for _, n in stretches], "hours_at_zero": at_zero,
                         "expected_cold_starts_per_day": _r(woke / days, 2)},
            "basis": f"idle {[n for _, n in stretches]} h in stretches of {STZ_MIN_STRETCH_H} h or more (nights, the "
                     "weekend); KEDA keeps it at zero after a 30-minute cooldown"}


def _allocations(fleet: Fleet) -> dict[int, dict[str, float]]:
    """Exact allocated hours per workload row from the pod timeline (start .. completion, clipped)."""
    sp = fleet.spec
    pods = fleet.pods
    started = pods["started_s"].to_numpy().astype(np.float64)
    done = pods["completed_s"].cast(pl.Float64).fill_null(float(sp.end_s)).to_numpy()
    hours = np.clip(np.minimum(done, sp.end_s) - np.maximum(started, sp.start_s), 0, None) / 3600.0
    kr0, kr1 = fleet.k_run
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    gap_k = max(0, fleet.k_gap[1] - fleet.k_gap[0])
    for wl, h, g, res, i0, i1 in zip(pods["workload"].to_list(), hours.tolist(), pods["gpus"].to_list(),
                                     pods["resource"].to_list(), kr0.tolist(), kr1.tolist(), strict=True):
        a = out[wl]
        a["pods"] += 1
        a["samples"] += (i1 - i0) * g
        a["mig_instance_hours" if res == MIG_RESOURCE else "gpu_hours"] += h * g
    # DCGM samples lost to the exporter gap (only on the gap node)
    in_gap = fleet.dev_gap[fleet.assign_dev]
    wl_of = pods["workload"].to_numpy()
    for row in fleet.assign_pod[in_gap].tolist() if gap_k else []:
        lo, hi = max(int(kr0[row]), fleet.k_gap[0]), min(int(kr1[row]), fleet.k_gap[1])
        out[int(wl_of[row])]["samples"] -= max(0, hi - lo)
    return out


# the spot rule's documented default (docs/rules.md, "spot"): the truth prices rework with it too
INTERRUPTIONS_PER_NODE_HOUR = 0.005
TARGET_DUTY_CYCLE = 0.95  # the input_starved rule's documented default


def starved_saving(wd: Any, gpus: int, gpu_price: float) -> dict[str, Any]:
    """The planted duty cycle (time busy at the burst level, plus the stall level's share) and the
    share of the GPU cost a fed pipeline removes (1 - duty / target)."""
    pr = wd.profile
    busy = pr.cycle_busy_s / pr.cycle_s
    duty = busy + (1 - busy) * pr.stall_level / pr.gr_base
    share = 1 - duty / TARGET_DUTY_CYCLE
    return {"monthly_savings_usd": _r(gpus * gpu_price * share, 2),
            "evidence": {"duty_cycle": _r(duty, 4), "burst_period_min": pr.cycle_s / 60,
                         "stall_min": (pr.cycle_s - pr.cycle_busy_s) / 60, "cause": "cpu",
                         "cpu_request_cores": float(wd.cpu), "cpu_stalled_cores": pr.cpu_stall},
            "basis": (f"GPUs busy {busy:.0%} of each {pr.cycle_s / 60:.0f}-minute cycle (duty {duty:.3f}) with the "
                      f"loader CPU at its request in the stalls; saving = cost x (1 - duty / {TARGET_DUTY_CYCLE})")}


def checkpointed_spot(wd: Any, gpus: int, gpu_price: float) -> dict[str, Any]:
    """Spot price difference less the rework: half a checkpoint interval lost per interruption."""
    pr_h = wd.profile.ckpt_s / 3600.0
    lost_h = pr_h / 2
    gpu_h = gpus * HOURS_PER_MONTH
    rework = gpu_h * INTERRUPTIONS_PER_NODE_HOUR * lost_h
    spot_gpu_h = gpu_price / HOURS_PER_MONTH * SPOT_PRICE_FRACTION
    saving = gpus * gpu_price * (1 - SPOT_PRICE_FRACTION) - rework * spot_gpu_h
    how = ("annotation gpuinsight.io/checkpoint-interval" if wd.annotations else
           "PCIe TX bursts (no annotation)")
    return {"monthly_savings_usd": _r(saving, 2), "proposed": {"capacity_type": "spot"},
            "evidence": {"checkpoint_interval_min": pr_h * 60, "checkpoint_from": how,
                         "rework_gpu_hours_per_month": _r(rework, 4)},
            "basis": (f"{gpus} on-demand GPUs -> spot at {SPOT_PRICE_FRACTION:.0%} of on-demand, less the rework of "
                      f"half a {pr_h * 60:.0f}-minute checkpoint interval per interruption ("
                      f"{INTERRUPTIONS_PER_NODE_HOUR}/node-hour); no finished task: only the checkpoint makes it "
                      "spot-tolerant")}


def unit_economics(fleet: Fleet, by_node: dict[str, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per serving workload row: the tokens its counters count (an interval's tokens need the sample
    at its end, so the last sample's interval is not counted) and what a million cost on the GPUs it
    held for the whole window."""
    from .openmetrics import serving_values

    sp = fleet.spec
    pods = fleet.pods.to_dicts()
    first_dev = fleet.first_devices()
    kr0, kr1 = fleet.k_run
    acc: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for c0, c1 in cell_blocks(fleet, sp.steps):
        v = cell_values(fleet, c0, c1, 0, sp.steps)
        for i, p in enumerate(pods):
            sd = WORKLOADS[p["template"]].serving
            a, b = int(kr0[i]), int(kr1[i])
            if sd is None or b - a < 2 or i not in first_dev or not c0 <= p["cell"] < c1:
                continue
            x = serving_values(fleet, np.arange(a, b), v.gr[first_dev[i] - v.d0, a:b], sd)
            a_ = acc[p["workload"]]
            a_["prompt_tokens"] += float(x["prompt"][:-1].sum())
            a_["generation_tokens"] += float(x["generated"][:-1].sum())
            a_["kv_cache_peak"] = max(a_["kv_cache_peak"], float(x["kv"].max()))
    alloc = _allocations(fleet)
    wls = fleet.workloads.to_dicts()
    out = {}
    for wl, a_ in acc.items():
        wd = WORKLOADS[wls[wl]["template"]]
        price = by_node[wd.pods[0][0] + cell_suffix(wls[wl]["cell"])]["gpu_hourly_usd"]
        cost = alloc[wl]["gpu_hours"] * price
        tokens = a_["prompt_tokens"] + a_["generation_tokens"]
        out[wl] = {"model_name": wd.serving.model, "server": wd.serving.server,
                   "prompt_tokens": a_["prompt_tokens"], "generation_tokens": a_["generation_tokens"],
                   "kv_cache_peak": a_["kv_cache_peak"],
                   "cost_usd": _r(cost, 4), "usd_per_1m_tokens": _r(cost / tokens * 1e6, 4) if tokens else None}
    return out


def kv_sized_setting(fb_max_mib: float, kv_peak: float, kv_mib: float, profile: str) -> dict[str, Any]:
    """The memory setting of a vLLM server sized on the KV cache it used (docs/rules.md, "Serving
    memory", with the documented defaults): it needs its reservation less the KV cache it did not
    use at peak x 1.5, plus 10 % headroom; on a slice of `profile` (its memory x 998 MiB per GB, as
    DCGM reports an instance) --gpu-memory-utilization asks that share of the slice."""
    memory_gb = float(profile.split("g.", 1)[1].removesuffix("gb"))
    kept = min(1.0, kv_peak * 1.5)
    reservation = (fb_max_mib - (1 - kept) * kv_mib) * 1.1
    return {"flag": "--gpu-memory-utilization", "basis": "kv_cache", "kv_cache_peak": kv_peak,
            "reservation_mib": _r(reservation, 1),
            "value": math.ceil(reservation / (memory_gb * 998.0) * 1000) / 1000}


def ground_truth(fleet: Fleet) -> dict[str, Any]:
    sp = fleet.spec
    prices = node_prices(fleet)
    by_node = {p["node"]: p for p in prices}
    alloc = _allocations(fleet)
    observed = _observed(fleet)
    wls = fleet.workloads.to_dicts()
    workloads, findings, clean = [], [], []
    hourly = _hourly_activity(fleet)
    economics = unit_economics(fleet, by_node)
    planted_names = {(wl["namespace"], _finding_workload(wl)) for wl in wls if WORKLOADS[wl["template"]].planted}
    queue_hours: dict[str, float] = defaultdict(float)
    groups: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, wl in enumerate(wls):
        wd = WORKLOADS[wl["template"]]
        nodes = sorted({n + cell_suffix(wl["cell"]) for n, _ in wd.pods})
        price = by_node[nodes[0]]
        a = alloc.get(i, {})
        slice_h = a.get("mig_instance_hours", 0.0) / MIG_INSTANCES
        mig = wd.resource == MIG_RESOURCE
        sampled = _r(a.get("samples", 0) * sp.interval_s / 3600.0)
        gpu_h = a.get("gpu_hours", 0.0)
        queue_hours[wl["queue"]] += gpu_h + slice_h
        entry = {
            "namespace": wl["namespace"], "workload": wl["name"], "workload_kind": wd.kind, "cell": wl["cell"],
            "queue": wl["queue"] or None, "production": wd.production, "env": wd.env or None,
            "priority_class": wd.priority_class or None, "gpu_model": price["gpu_model"],
            "node_pool": price["node_pool"], "capacity_type": price["capacity_type"], "nodes": nodes,
            "resource": wd.resource, "gpus_per_pod": wd.gpus_per_pod, "replicas": len(wd.pods),
            "lifecycle": wd.lifecycle, "pod_incarnations": int(a.get("pods", 0)),
            "allocated_gpu_hours": _r(gpu_h), "allocated_mig_instance_hours": _r(a.get("mig_instance_hours", 0.0)),
            "allocated_mig_slice_hours": _r(slice_h),
            "allocated_gpu_hours_sampled": 0.0 if mig else sampled,
            "allocated_mig_instance_hours_sampled": sampled if mig else 0.0,
            "allocated_cost_usd": _r((gpu_h + slice_h) * price["gpu_hourly_usd"], 4),
            "planted_finding": wd.planted, "observed": observed.get(i, {}),
        }
        if wd.ray_group:
            entry["ray_group"] = wd.ray_group
        if i in economics:
            entry["unit_economics"] = economics[i]
        workloads.append(entry)
        if wd.planted is None:
            if (wl["namespace"], _finding_workload(wl)) not in planted_names:  # a Ray cluster is one workload
                clean.append({"namespace": wl["namespace"], "workload": wl["name"], "cell": wl["cell"]})
            continue
        gpu_price = price["gpu_hourly_usd"] * HOURS_PER_MONTH
        gpus = wd.gpus_per_pod * len(wd.pods)
        f = {"rule": wd.planted, "namespace": wl["namespace"], "workload": wl["name"], "node": nodes[0],
             "queue": wl["queue"] or None, "cell": wl["cell"]}
        if wd.planted == "mig":
            profile, share = wd.mig_target
            f.update(monthly_savings_usd=_r(gpus * gpu_price * (1 - share), 2),
                     proposed={"mig_profile": profile},
                     basis=f"{gpus} whole GPU -> one {profile} slice, paying {share:.3g} of a GPU")
            if i in economics:
                e = economics[i]
                f["unit_economics"] = {"usd_per_1m_tokens": e["usd_per_1m_tokens"],
                                       "usd_per_1m_tokens_after": _r(e["usd_per_1m_tokens"] * share, 4),
                                       "share_of_gpu_after": share}
            if i in economics and KV_ANNOTATION in wd.annotations:
                f["server_memory"] = kv_sized_setting(observed[i]["fb_used_max_mib"], economics[i]["kv_cache_peak"],
                                                      wd.serving.kv_gib * 1024, profile)
        elif wd.planted == "idle":
            f.update(monthly_savings_usd=_r(gpus * gpu_price, 2), basis=f"reclaim {gpus} idle GPU")
        elif wd.planted == "binpack":
            f.update(monthly_savings_usd=_r(price["hourly_usd"] * HOURS_PER_MONTH, 2),
                     proposed={"move_to_node": "h100-od-3" + cell_suffix(wl["cell"])},
                     basis=f"move the whole gang to h100-od-3 (2 free GPUs) and release {nodes[0]}")
        elif wd.planted in ("ray", "scale_to_zero"):
            f.update(issue14_finding(fleet, wl, wd, hourly.get(i, []), price["gpu_hourly_usd"] * gpus),
                     workload=_finding_workload(wl))
        elif wd.planted == "spot" and wd.profile.ckpt_s > 0:
            f.update(checkpointed_spot(wd, gpus, gpu_price))
        elif wd.planted == "spot":
            f.update(monthly_savings_usd=_r(gpus * gpu_price * (1 - SPOT_PRICE_FRACTION), 2),
                     proposed={"capacity_type": "spot"},
                     basis=f"{gpus} on-demand GPUs -> spot at {SPOT_PRICE_FRACTION:.0%} of on-demand")
        elif wd.planted == "input_starved":
            f.update(starved_saving(wd, gpus, gpu_price))
        elif wd.planted == "topology":
            f.update(monthly_savings_usd=0.0, evidence={"current_span": "tier2", "tightest_feasible": "tier1",
                                                        "feasible_domain": "rack-a" + cell_suffix(wl["cell"])},
                     basis="gang spread over racks rack-a and rack-b while rack-a has room for it; slowdown risk "
                           "is evidence only (no dollars)")
        else:  # timeslice / mps: the group shares one GPU, releasing the other nodes
            groups[(wl["cell"], wd.planted)].append(len(findings))
        findings.append(f)
    for (_, rule), idx in groups.items():
        n = len(idx)
        released = sum(by_node[findings[j]["node"]]["hourly_usd"] for j in idx[1:])
        total = _r(released * HOURS_PER_MONTH, 2)
        members = [findings[j]["workload"] for j in idx]
        for j in idx:
            findings[j].update(monthly_savings_usd=_r(total / n, 2), group_monthly_savings_usd=total,
                               group=members, proposed={"sharing": "mps" if rule == "mps" else "time-slicing",
                                                        "replicas": n},
                               basis=f"{n} workloads share one GPU ({rule}); releases {n - 1} node(s)")
    window_h = (sp.end_s - sp.start_s) / 3600.0
    queues = []
    for q in QUEUES:
        deserved = q.deserved.get("nvidia.com/gpu", 0) * sp.cell_count
        mean = queue_hours[q.name] / window_h
        queues.append({"name": q.name, "weight": q.weight,
                       "deserved": {r: v * sp.cell_count for r, v in q.deserved.items()},
                       "capability": {r: v * sp.cell_count for r, v in q.capability.items()},
                       "allocated_gpu_hours": _r(queue_hours[q.name]), "mean_allocated_gpus": _r(mean, 4)})
        if q.name == "research":
            findings.append({"rule": "queue", "namespace": None, "workload": None, "node": None, "queue": q.name,
                             "cell": None, "monthly_savings_usd": 0.0,
                             "evidence": {"deserved_gpus": deserved, "mean_allocated_gpus": _r(mean, 4)},
                             "basis": "over-provisioned: deserved far above use; lower deserved/capability "
                                      "(a re-weighting, no direct dollar saving)"})
    g0 = sp.start_s + int(GAP_START_H * 3600)
    gap_nodes = [n["name"] for n in fleet.nodes.to_dicts() if n["name"] == GAP_NODE + cell_suffix(n["cell"])]
    return {
        "generator": "tests.samplegen",
        "spec": {"cell_count": sp.cell_count, "days": sp.days, "interval_s": sp.interval_s, "seed": sp.seed,
                 "start": k8s.iso(sp.start_s), "cluster": sp.cluster},
        "cluster": sp.cluster,
        "window": {"start": k8s.iso(sp.start_s), "end": k8s.iso(sp.end_s), "interval_s": sp.interval_s,
                   "steps": sp.steps, "hours": window_h},
        "pricing": {"source": PRICE_SOURCE, "spot_price_fraction": SPOT_PRICE_FRACTION,
                    "hours_per_month": HOURS_PER_MONTH},
        "node_pools": [{"name": name, "kind": "karpenter-nodepool", "instance_type": it, "capacity_type": ct,
                        "zone": z, "consolidation_policy": pol, "consolidate_after": after,
                        "nodes": sum(p["node_pool"] == name for p in prices)}
                       for name, (it, ct, z, pol, after) in NODE_POOLS.items()]
        + [{"name": EKS_NODEGROUP, "kind": "eks-managed-nodegroup", "instance_type": "g6.xlarge",
            "capacity_type": "on-demand", "zone": "us-east-1b",
            "nodes": sum(p["node_pool"] == EKS_NODEGROUP for p in prices)}],
        "nodes": prices,
        "queues": queues,
        "workloads": workloads,
        "expected_findings": findings,
        "must_not_flag": clean,
        "dcgm_gap": {"nodes": gap_nodes, "start": k8s.iso(g0), "end": k8s.iso(g0 + GAP_LEN_S),
                     "missing_samples_per_gpu": max(0, fleet.k_gap[1] - fleet.k_gap[0])},
    }


def write_ground_truth(fleet: Fleet, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(ground_truth(fleet), indent=2) + "\n", encoding="utf-8")
    return path

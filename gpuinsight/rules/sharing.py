"""Group low-utilization single-GPU workloads onto shared GPUs (used by MPS and time-slicing).

Pure packing: first-fit decreasing by p95 SM activity into GPUs of the same model, pool and
zone, keeping the summed p95 activity under a cap and the memory within the GPU (MPS: each
client within its equal 1/N share, since MPS splits memory evenly).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpuinsight.gpumodels import MEMORY_MIB
from gpuinsight.rules.base import Recommendation, Setting, stable_id
from gpuinsight.rules.common import evidence_confidence, mib_to_gb, monthly, num, pct, workload_ref

SHARING_SETTINGS = (
    Setting("max_single_p95", 0.30, "Only workloads whose p95 SM (and GR) activity is below this share."),
    Setting("max_summed_p95", 0.70, "Cap on the summed p95 activity of the workloads sharing one GPU."),
    Setting("memory_headroom", 0.20, "Extra framebuffer over each workload's p99 use (fraction)."),
    Setting("max_clients", 8, "Most workloads on one shared GPU."),
    Setting("min_hours", 12.0, "Minimum hours of samples before judging."),
    Setting("full_confidence_hours", 72.0, "Hours of evidence that give full confidence."),
)


@dataclass
class SharedGpu:
    members: list[dict[str, Any]] = field(default_factory=list)
    p95: float = 0.0
    mem_mib: float = 0.0
    max_member_mib: float = 0.0


def candidates(profiles: list[dict[str, Any]], settings: dict[str, Any], *, production: bool) -> list[dict[str, Any]]:
    out = []
    for r in profiles:
        if bool(r.get("production")) != production or r.get("mig_profile") or r.get("samples") is None:
            continue
        if num(r.get("gpu_request_per_pod")) != 1 or num(r.get("hours_held")) < settings["min_hours"]:
            continue
        if max(num(r.get("sm_p95")), num(r.get("gr_p95"))) >= settings["max_single_p95"]:
            continue
        if round(num(r.get("avg_gpus_held"), 1)) != 1:  # one replica: several replicas are spread on purpose
            continue
        out.append(r)
    return out


def group(cands: list[dict[str, Any]], settings: dict[str, Any], *, mps: bool) -> list[list[dict[str, Any]]]:
    buckets: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in cands:
        buckets[(r.get("gpu_model"), r.get("node_pool"), r.get("zone"), r.get("capacity_type"))].append(r)
    groups: list[list[dict[str, Any]]] = []
    for (model, *_), items in buckets.items():
        memory = num(items[0].get("gpu_memory_mib")) or MEMORY_MIB.get(model or "", 0)
        gpus: list[SharedGpu] = []
        for r in sorted(items, key=lambda x: max(num(x.get("sm_p95")), num(x.get("gr_p95"))), reverse=True):
            load = max(num(r.get("sm_p95")), num(r.get("gr_p95")))
            need = num(r.get("fb_p99_mib")) * (1 + settings["memory_headroom"])
            for g in gpus:
                n = len(g.members) + 1
                fits_mem = (max(g.max_member_mib, need) * n <= memory) if mps else (g.mem_mib + need <= memory * 0.9)
                if n <= settings["max_clients"] and g.p95 + load <= settings["max_summed_p95"] and fits_mem:
                    g.members.append(r)
                    g.p95 += load
                    g.mem_mib += need
                    g.max_member_mib = max(g.max_member_mib, need)
                    break
            else:
                gpus.append(SharedGpu([r], load, need, need))
        groups.extend(g.members for g in gpus if len(g.members) >= 2)
    return groups


def recommend_groups(rule: str, groups: list[list[dict[str, Any]]], settings: dict[str, Any],
                     why: str) -> list[Recommendation]:
    out = []
    for members in groups:
        n = len(members)
        names = sorted(f"{m['namespace']}/{m['workload']}" for m in members)
        group_key = stable_id(rule, *names)
        config_name = f"{'mps' if rule == 'mps' else 'ts'}-{n}x-{group_key[-8:]}"
        price = sum(num(m.get("usd_per_gpu_hour")) for m in members) / n
        per_member_freed = (n - 1) / n
        summed = sum(max(num(m.get("sm_p95")), num(m.get("gr_p95"))) for m in members)
        workloads = [workload_ref(m) for m in members]
        for m in members:
            out.append(Recommendation(
                rule=rule,  # type: ignore[arg-type]
                namespace=m["namespace"], workload=m["workload"], queue=m.get("queue"),
                title=(f"{m['namespace']}/{m['workload']} uses {pct(max(num(m.get('sm_p95')), num(m.get('gr_p95'))))}% "
                       f"of a {m.get('gpu_model') or 'GPU'}: share one GPU with {n - 1} other(s) via "
                       f"{'MPS' if rule == 'mps' else 'time-slicing'} ({why})"),
                current={"gpus": 1, "gpu_model": m.get("gpu_model"), "sharing": "none"},
                proposed={"sharing": "mps" if rule == "mps" else "time-slicing", "replicas": n, "node": None,
                          "config_name": config_name, "group": names, "gpus_freed": round(per_member_freed, 3)},
                monthly_savings_usd=monthly(per_member_freed * price),
                confidence=evidence_confidence(min(num(x.get("hours_held")) for x in members),
                                               settings["full_confidence_hours"]),
                evidence={
                    "sm_active_p95_pct": pct(m.get("sm_p95")),
                    "gr_active_p95_pct": pct(m.get("gr_p95")),
                    "fb_used_p99_gb": mib_to_gb(m.get("fb_p99_mib")),
                    "group_summed_p95_pct": pct(summed),
                    "group_size": n,
                    "gpu_memory_gb": mib_to_gb(num(m.get("gpu_memory_mib")) or None),
                    "usd_per_gpu_hour": round(price, 4),
                    "production": bool(m.get("production")),
                },
                target={"kind": "SharedGroup", "workloads": workloads, "member": workload_ref(m)},
            ))
    return out


"""ConsolidationRule: one planner per GPU model for MIG slices, MPS and time-slicing.

Small single-replica workloads (peak compute at most ``max_compute`` of a GPU) become demands
sized on peaks: framebuffer = observed maximum x (1 + headroom), compute = short-window p95.
The planner (:mod:`gpuinsight.rules.consolidation_plan`) packs each group (cluster, GPU model,
capacity type, zone) onto free MIG instances and host nodes, and each workload it moves is one
finding, of kind ``mig``, ``mps`` or ``timeslice`` after where it lands, naming the workloads
that share its GPU. The saving is the GPU it gives back less its share of the host's GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import polars as pl

from gpuinsight.gpumodels import MEMORY_MIB, is_mig_capable
from gpuinsight.rules.base import FindingKind, Recommendation, Rule, Setting, stable_id
from gpuinsight.rules.common import (
    FULL_CONFIDENCE,
    MIN_HOURS,
    compute_evidence,
    compute_peak,
    evidence_confidence,
    mib_to_gb,
    monthly,
    num,
    pct,
    workload_ref,
)
from gpuinsight.rules.consolidation_plan import (
    Demand,
    HostNode,
    Placement,
    Slot,
    Targets,
    mig_configs,
    plan_group,
)
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.mig_packing import MigProfile, parse_layouts
from gpuinsight.rules.serving import serving_by_workload, unit_cost_evidence
from gpuinsight.rules.typed import (
    DNS_NAME,
    LABEL_VALUE,
    MIG_PROFILE,
    Schema,
    WorkloadTarget,
    bad,
    boolean,
    integer,
    list_of,
    number,
    optional,
    spec,
    text,
    workload,
)


def _resource_matches(data: dict[str, Any], where: str) -> None:
    if "resource" in data and data["resource"] != f"nvidia.com/mig-{data.get('mig_profile')}":
        raise bad(f"{where}.resource", f"{data['resource']!r} does not match mig_profile {data.get('mig_profile')!r}")


@dataclass
class MigProposed(Schema):
    mig_profile: str = spec(text(MIG_PROFILE))
    node_mig_config: str = spec(text(LABEL_VALUE))
    resource: str = spec(text(), "")
    count: int = spec(integer(1), 1)
    gpu_model: str | None = spec(optional(text()), None)
    node: str | None = spec(optional(text(DNS_NAME)), None)
    repartition: bool = spec(boolean, False)  # the node is to get node_mig_config (else it runs it)
    group: list[str] = spec(list_of(text()), [])
    gpus_freed: float = spec(number, 0.0)
    extra_checks = (_resource_matches,)


@dataclass
class SharedProposed(Schema):
    replicas: int = spec(integer(2, 64))
    config_name: str = spec(text(LABEL_VALUE))
    node: str | None = spec(optional(text(DNS_NAME)), None)
    group: list[str] = spec(list_of(text()), [])
    gpus_freed: float = spec(number, 0.0)


@dataclass
class MpsProposed(SharedProposed):
    sharing: str = spec(text(choices=("mps",)), "mps")


@dataclass
class TimeslicingProposed(SharedProposed):
    sharing: str = spec(text(choices=("time-slicing",)), "time-slicing")


@dataclass
class SharedGroupTarget(Schema):
    workloads: list[dict[str, Any]] = spec(list_of(workload, non_empty=True))
    kind: str = spec(text(choices=("SharedGroup",)), "SharedGroup")
    member: dict[str, Any] | None = spec(optional(workload), None)


SHARING_BUILDER = "gpuinsight.actions.builders.sharing"
KIND_OF_MODE = {"mig": "mig", "mps": "mps", "time-slicing": "timeslice"}


class ConsolidationRule(Rule):
    name = "consolidation"
    summary = ("Pack small workloads of one GPU model onto fewer GPUs: MIG slices, MPS (production) or "
               "time-slicing (other work), sized on peak memory and peak compute.")
    needs = ("workload_gpu_profile", "placement_current", "nodes_current", "mig_catalog", "mig_capacity",
             "analysis_window", "unit_economics")
    settings = (
        Setting("memory_headroom", 0.10, "Framebuffer a workload gets over its observed maximum (fraction)."),
        Setting("compute_target", 0.80, "Most of a slice's (or a shared GPU's) compute the short-window p95 may use."),
        Setting("max_compute", 0.50, "Only workloads whose short-window p95 is at most this share of a GPU."),
        Setting("ts_memory_fill", 0.90, "Time-slicing: summed framebuffer of clients within this share of the GPU."),
        Setting("max_clients", 8, "Most workloads sharing one GPU (MPS / time-slicing replicas)."),
        Setting("max_replicas", 1, "Only workloads with at most this many pods (more are spread on purpose)."),
        MIN_HOURS,
        FULL_CONFIDENCE,
    )
    kinds = (
        FindingKind("mig", "gpuinsight.actions.builders.mig", MigProposed, WorkloadTarget, "gpus_returned"),
        FindingKind("mps", SHARING_BUILDER, MpsProposed, SharedGroupTarget, "gpus_returned"),
        FindingKind("timeslice", SHARING_BUILDER, TimeslicingProposed, SharedGroupTarget, "gpus_returned"),
    )

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        t = Targets(settings["memory_headroom"], settings["compute_target"], settings["ts_memory_fill"],
                    int(settings["max_clients"]))
        nodes = {(str(n.get("cluster") or ""), n["node"]): n for n in ctx.rows(frames, "nodes_current")}
        pods_on: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        pods_of: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
        for p in ctx.rows(frames, "placement_current"):
            c = str(p.get("cluster") or "")
            pods_on[(c, p["node"])].append(p)
            pods_of[(c, p["namespace"], p["workload"])].append(p)
        demands = self._demands(frames, settings, ctx, nodes, pods_of, t)
        by_pod = {(d.key[0], d.key[1], d.pod): d for d in demands}
        profiles: dict[str, list[MigProfile]] = defaultdict(list)
        catalog = ctx.rows(frames, "mig_catalog")
        layouts = parse_layouts(catalog[0]["layouts"] or []) if catalog else []
        for c in catalog:
            profiles[c["gpu_model"]].append(MigProfile(c["gpu_model"], c["profile"], c["memory_gb"],
                                                       c["compute_slices"], c["memory_slices"], c["max_instances"]))
        groups: dict[tuple[Any, ...], list[Demand]] = defaultdict(list)
        for d in demands:
            groups[group_key(d.row["_node"])].append(d)
        out: list[Recommendation] = []
        for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
            hosts = host_nodes(key, nodes, pods_on, by_pod, ctx)
            slots = free_slots(key, ctx.rows(frames, "mig_capacity"), nodes, profiles.get(key[1], []))
            configs = mig_configs(profiles.get(key[1], []), layouts) if is_mig_capable(key[1]) else []
            for placement in plan_group(members, hosts, slots, configs, t):
                rec = self._finding(placement, frames, settings, ctx, nodes)
                if rec is not None:
                    out.append(rec)
        return out

    def _demands(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any], ctx: PlanContext,
                 nodes: dict[tuple[str, str], dict[str, Any]], pods_of: dict[tuple[str, str, str], list[dict[str, Any]]],
                 t: Targets) -> list[Demand]:
        out = []
        for r in ctx.rows(frames, "workload_gpu_profile"):
            cluster = str(r.get("cluster") or "")
            if ctx.ledger.workload_claimed(cluster, r["namespace"], r["workload"]):
                continue
            if r.get("mig_profile") or r.get("samples") is None or num(r.get("hours_held")) < settings["min_hours"]:
                continue
            pods = pods_of.get((cluster, r["namespace"], r["workload"]), [])
            if not pods or len(pods) > settings["max_replicas"]:
                continue  # not running now, or several replicas spread on purpose
            if any(num(p.get("gpu_request")) != 1 or p.get("mig_profile") for p in pods):
                continue
            if any(num(p.get("gang_min_member"), 1) > 1 for p in pods):
                continue  # a gang member is not a small service
            peak = compute_peak(r)
            if peak > settings["max_compute"] or r.get("fb_max_mib") is None:
                continue
            production, why = ctx.is_production(r)
            for p in pods:
                node = nodes.get((cluster, p["node"]))
                if node is None or node.get("is_mig"):
                    continue
                row = {**r, "_node": node, "_production_reason": why}
                out.append(Demand((cluster, r["namespace"], r["workload"]), p["pod"], p["node"],
                                  num(r["fb_max_mib"]) * (1 + t.memory_headroom), peak, production, row))
        return out

    def _finding(self, pl_: Placement, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext, nodes: dict[tuple[str, str], dict[str, Any]]) -> Recommendation | None:
        d, r = pl_.demand, pl_.demand.row
        freed = 1.0 - pl_.share
        if freed <= 1e-9:
            return None
        kind = KIND_OF_MODE[pl_.mode]
        cluster, node = d.key[0], d.node
        rid = stable_id(kind, r["namespace"], r["workload"], None, None)
        src = nodes[(cluster, node)]
        gpu_price = num(src.get("usd_per_hour")) / max(num(src.get("gpu_count"), 1), 1)
        ctx.ledger.account((cluster, node), num(src.get("usd_per_hour")), num(src.get("gpu_count")), price_known=True)
        granted = ctx.ledger.claim(rid, (cluster, node), freed * gpu_price, freed)
        ctx.ledger.claim_workload(cluster, r["namespace"], r["workload"], rid)
        ctx.pods_leaving[(cluster, r["namespace"], d.pod)] = rid
        if not pl_.existing:
            ctx.hosts.add((cluster, pl_.node))
        mates = sorted(f"{m.key[1]}/{m.key[2]}" for m in pl_.group if m is not d)
        host = nodes.get((cluster, pl_.node)) or {}
        memory = MEMORY_MIB.get(host.get("gpu_model") or "", 0) or num(r.get("gpu_memory_mib"))
        model = r.get("gpu_model") or "GPU"
        evidence: dict[str, Any] = {
            "fb_used_max_gb": mib_to_gb(r.get("fb_max_mib")),
            "fb_used_p99_gb": mib_to_gb(r.get("fb_p99_mib")),
            "memory_needed_gb": mib_to_gb(d.mem_mib),
            "memory_headroom": settings["memory_headroom"],
            **compute_evidence(r),
            "compute_target_pct": pct(settings["compute_target"]),
            "sm_active_p95_pct": pct(r.get("sm_p95")),
            "gr_active_p95_pct": pct(r.get("gr_p95")),
            "host_node": pl_.node, "host_gpus_used": pl_.gpus_used, "sharing_with": mates,
            "gpus_freed": round(freed, 3), "usd_per_gpu_hour": round(gpu_price, 4),
            "production": d.production, "production_reason": r["_production_reason"],
            "hours_observed": num(r.get("hours_held")),
            # a serving workload: its cost per 1M tokens after the change and the latency it keeps
            **unit_cost_evidence(serving_by_workload(frames, ctx).get(d.key), 1.0, pl_.share),
        }
        current = {"gpus": 1, "gpu_model": r.get("gpu_model"), "node": node, "resource": "nvidia.com/gpu"}
        target: dict[str, Any]
        if pl_.mode == "mig":
            prof = pl_.profile
            assert prof is not None
            where = (f"a free {prof.profile} instance on {pl_.node}" if pl_.existing
                     else f"{pl_.node} repartitioned {pl_.config}" + (f", with {len(mates)} other(s)" if mates else ""))
            title = (f"{r['namespace']}/{r['workload']} needs at most {mib_to_gb(r.get('fb_max_mib'))} GB and "
                     f"{pct(d.compute)}% of a {model} at peak: run it on a {prof.profile} MIG slice ({where})")
            proposed: Schema = MigProposed(prof.profile, pl_.config, f"nvidia.com/mig-{prof.profile}", 1,
                                           r.get("gpu_model"), pl_.node, not pl_.existing, mates, round(freed, 3))
            evidence.update(slice_memory_gb=prof.memory_gb, slice_usable_mib=round(prof.usable_mib),
                            slice_compute_fraction=round(prof.compute_slices / 7, 3),
                            slice_peak_load_pct=pct(d.compute * 7 / prof.compute_slices))
            target = WorkloadTarget(**workload_ref(r)).to_dict()
        else:
            mps = pl_.mode == "mps"
            config_name = sharing_config_name(pl_)
            members = [workload_ref(m.row) for m in pl_.group]
            proposed = (MpsProposed if mps else TimeslicingProposed)(pl_.replicas, config_name, pl_.node, mates,
                                                                     round(freed, 3))
            title = (f"{r['namespace']}/{r['workload']} needs at most {mib_to_gb(r.get('fb_max_mib'))} GB and "
                     f"{pct(d.compute)}% of a {model} at peak: share {pl_.node}'s GPUs with {len(mates)} other(s) "
                     f"via {'MPS' if mps else 'time-slicing'} ({pl_.replicas} per GPU"
                     + (", memory-limited: production" if mps else ", non-production") + ")")
            evidence.update(sharing_replicas=pl_.replicas, gpu_memory_gb=mib_to_gb(memory or None),
                            client_memory_limit_gb=mib_to_gb(memory / pl_.replicas) if mps and memory else None,
                            group_peak_p95_pct=pct(sum(sorted((m.compute for m in pl_.group), reverse=True)
                                                       [:pl_.replicas])))
            target = SharedGroupTarget(members, "SharedGroup", workload_ref(r)).to_dict()
        return Recommendation(
            rule=kind, id=rid, namespace=r["namespace"], workload=r["workload"], queue=r.get("queue"),
            title=title, current=current, proposed=proposed.to_dict(), monthly_savings_usd=monthly(granted),
            confidence=evidence_confidence(num(r.get("hours_held")), settings["full_confidence_hours"]),
            evidence=evidence, target=target,
        )


def group_key(node: dict[str, Any]) -> tuple[Any, ...]:
    return (str(node.get("cluster") or ""), node.get("gpu_model"), node.get("capacity_type"), node.get("zone"))


def host_nodes(key: tuple[Any, ...], nodes: dict[tuple[str, str], dict[str, Any]],
               pods_on: dict[tuple[str, str], list[dict[str, Any]]], by_pod: dict[tuple[str, str, str], Demand],
               ctx: PlanContext) -> list[HostNode]:
    """Nodes of the group that may take one configuration: not MIG, not already sharing, and
    every GPU pod on them a demand of this plan (or scaled away by an earlier finding)."""
    out = []
    for (cluster, name), n in nodes.items():
        if group_key(n) != key or n.get("is_mig") or n.get("device_plugin_config"):
            continue
        if (n.get("sharing_strategy") or "none") not in ("none", ""):
            continue
        pods = [p for p in pods_on.get((cluster, name), [])
                if (cluster, p["namespace"], p["workload"]) not in ctx.workloads_leaving]
        own = [by_pod.get((cluster, p["namespace"], p["pod"])) for p in pods]
        if not pods or any(d is None for d in own):
            continue
        memory = MEMORY_MIB.get(n.get("gpu_model") or "", 0) or max(num(d.row.get("gpu_memory_mib")) for d in own if d)
        out.append(HostNode(name, int(num(n.get("gpu_count"))), memory, [d for d in own if d is not None]))
    return out


def free_slots(key: tuple[Any, ...], capacity: list[dict[str, Any]], nodes: dict[tuple[str, str], dict[str, Any]],
               profiles: list[MigProfile]) -> list[Slot]:
    """Free instances of nodes in the group that already run MIG (mig_capacity)."""
    by_name = {p.profile: p for p in profiles}
    out = []
    for f in capacity:
        n = nodes.get((str(f.get("cluster") or ""), f["node"]))
        prof = by_name.get(f.get("profile"))
        if n is None or prof is None or group_key(n) != key:
            continue
        config = n.get("mig_config") or f"all-{prof.profile}"
        out += [Slot(f["node"], prof, str(config))] * int(num(f.get("free")))
    return out


def sharing_config_name(p: Placement) -> str:
    """One device-plugin config per host node, named after its members (a stable label value)."""
    names = sorted(f"{m.key[1]}/{m.key[2]}" for m in p.group)
    digest = stable_id("sharing", p.node, *names)[-8:]
    return f"{'mps' if p.mode == 'mps' else 'ts'}-{p.replicas}x-{digest}"

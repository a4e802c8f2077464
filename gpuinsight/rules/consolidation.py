"""ConsolidationRule: GPU sharing per node pool, planned with binpack: MIG slices, MPS, time-slicing.

Small single-replica workloads (peak compute at most ``max_compute`` of a GPU) become demands
sized on peaks (:func:`~gpuinsight.rules.consolidation_plan.demand_size`): framebuffer = observed
maximum x (1 + headroom), compute = short-window p95. First, free instances of nodes already
running MIG take what they hold (no repartitioning). Then each node pool is planned as one
placement problem with binpack (:mod:`gpuinsight.rules.pool_sharing`): GPUs partitioned with
MIG one by one (a node keeps its other GPUs whole, a custom mig-parted config per node), nodes
given one sharing configuration for all their GPUs (MPS, time-slicing, or a named MIG layout
under the single strategy), and the whole-GPU pods that must move to make room for them. Each
workload moved is one finding, of kind ``mig``, ``mps`` or ``timeslice`` after where it lands,
naming the workloads that share its GPU, the steps its node goes through and every pod that
restarts. The saving is the GPU it gives back less its share of the shared GPU, claimed on GPUs
the plan really leaves free.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

import polars as pl

from gpuinsight.errors import BadInput
from gpuinsight.gpumodels import MEMORY_MIB
from gpuinsight.keys import NodeKey, PodKey, PoolKey, WorkloadKey
from gpuinsight.plan import Recommendation, finding_id, stable_id
from gpuinsight.plan.kinds.mig import MIG, MigProposed, StoppedPod
from gpuinsight.plan.kinds.server_memory import ServerMemory
from gpuinsight.plan.kinds.sharing import MPS, TIMESLICE, MpsProposed, SharedGroupTarget, TimeslicingProposed
from gpuinsight.plan.schema import (
    Schema,
    WorkloadTarget,
)
from gpuinsight.rules.base import Rule
from gpuinsight.rules.common import (
    FULL_CONFIDENCE,
    MIN_HOURS,
    Targets,
    cluster_of,
    compute_evidence,
    evidence_confidence,
    mib_to_gb,
    monthly,
    num,
    pct,
    workload_ref,
)
from gpuinsight.rules.consolidation_plan import (
    Demand,
    HostChoice,
    Slot,
    demand_size,
    take_free_slots,
)
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.effects import GpusPartitioned, PodLeaves, SharingHost
from gpuinsight.rules.mig_packing import MigProfile, parse_layouts
from gpuinsight.rules.pool_plan import (
    PoolInputs,
    in_pool_order,
    plannable,
    pods_after,
    pool_key,
    record_moves,
)
from gpuinsight.rules.pool_sharing import Host, PoolSharing, Repartition, plan_pool
from gpuinsight.rules.serving import (
    memory_by_workload,
    server_setting,
    serving_by_workload,
    serving_size,
    unit_cost_evidence,
)
from gpuinsight.rules.settings import FRACTION, Setting
from gpuinsight.sql.rows import Row, key_cluster

KIND_OF_MODE = {"mig": "mig", "mps": "mps", "time-slicing": "timeslice"}
# what mig-manager restarts on a node it repartitions (GPU Operator components, not workloads)
OPERATOR_RESTARTS = ("the GPU Operator's device plugin, GPU feature discovery and DCGM exporter pods on the node "
                     "(mig-manager stops and restarts them around the repartition; workloads on GPUs that stay "
                     "whole keep running)")


class ConsolidationRule(Rule):
    name = "consolidation"
    summary = ("Share GPUs among small workloads of a node pool, planned with binpack: MIG slices on single GPUs "
               "(the node keeps its others whole), MPS (production) or time-slicing (other work), sized on peaks.")
    needs = ("workload_gpu_profile", "placement_current", "nodes_current", "mig_catalog", "mig_capacity",
             "analysis_window", "disruption_budgets", "unit_economics", "serving_memory")
    settings = (
        Setting("memory_headroom", 0.10, "Framebuffer a workload gets over its observed maximum (fraction)."),
        Setting("compute_target", 0.80, "Most of a slice's (or a shared GPU's) compute the short-window p95 may use.",
                bounds=(0.01, 1.0)),
        Setting("max_compute", 0.50, "Only workloads whose short-window p95 is at most this share of a GPU.",
                bounds=FRACTION),
        Setting("ts_memory_fill", 0.90, "Time-slicing: summed framebuffer of clients within this share of the GPU.",
                bounds=(0.01, 1.0)),
        Setting("max_clients", 8, "Most workloads sharing one GPU (MPS / time-slicing replicas).",
                bounds=(2, 64)),
        Setting("max_replicas", 1, "Only workloads with at most this many pods (more are spread on purpose).",
                bounds=(1, math.inf)),
        Setting("mig_strategy", "auto", "The device plugin's MIG strategy: auto (the node label "
                                        "nvidia.com/mig.strategy, mixed without it), mixed or single.",
                choices=("auto", "mixed", "single")),
        Setting("kv_cache_headroom", 0.5, "An inference server sized on its KV cache keeps this much more than "
                                          "the KV cache it used at peak (fraction)."),
        Setting("server_context_mib", 1024.0, "MiB a server's device holds beside the share of memory it "
                                              "reserves (its CUDA context, created before it reserves)."),
        MIN_HOURS,
        FULL_CONFIDENCE,
    )
    kinds = (MIG, MPS, TIMESLICE)

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        if settings["mig_strategy"] not in ("auto", "mixed", "single"):
            raise BadInput(f"consolidation.mig_strategy: {settings['mig_strategy']!r} is not auto, mixed or single")
        t = Targets(settings["memory_headroom"], settings["compute_target"], settings["ts_memory_fill"],
                    int(settings["max_clients"]), settings["kv_cache_headroom"], settings["min_hours"],
                    settings["server_context_mib"])
        nodes = {n.node_key: n for n in ctx.rows(frames, "nodes_current")}
        inputs = PoolInputs(frames, ctx)
        placed_now: dict[NodeKey, list[Row]] = defaultdict(list)
        pods_of: dict[WorkloadKey, list[Row]] = defaultdict(list)
        for p in inputs.placement:
            placed_now[p.node_key].append(p)
            pods_of[p.workload_key].append(p)
        demands = self._demands(frames, settings, ctx, nodes, pods_of, inputs, t)
        profiles: dict[str, list[MigProfile]] = defaultdict(list)
        catalog = ctx.rows(frames, "mig_catalog")
        layouts = parse_layouts(catalog[0].layouts or []) if catalog else []
        for c in catalog:
            profiles[c.gpu_model].append(MigProfile.from_row(c))
        out: list[Recommendation] = []
        # 1. free instances of nodes already running MIG: already paid for, no repartitioning
        groups: dict[tuple[Any, ...], list[Demand]] = defaultdict(list)
        for d in demands:
            groups[group_key(d.node_row)].append(d)
        taken: set[int] = set()
        for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
            slots = free_slots(key, ctx.rows(frames, "mig_capacity"), nodes, profiles.get(key[1], []))
            for d, slot in take_free_slots(members, slots, t):
                taken.add(id(d))
                out.append(self._slot_finding(d, slot, settings, ctx, nodes))
        # 2. each node pool: partitioned GPUs, sharing hosts and the moves they need, with binpack
        pods_on = pods_after(inputs.placement, ctx)
        by_pool: dict[PoolKey, list[Demand]] = defaultdict(list)
        for d in demands:
            if id(d) not in taken:
                by_pool[pool_key(d.node_row)].append(d)
        pool_nodes: dict[PoolKey, list[Row]] = defaultdict(list)
        for key, n in nodes.items():
            if pool_key(n) in by_pool and plannable(n, key, ctx):
                pool_nodes[pool_key(n)].append(n)
        for pool, members in in_pool_order(by_pool):
            here = pool_nodes.get(pool, [])
            sharing = plan_pool(pool, here, members, pods_on,
                                {n.node: placed_now[NodeKey(pool.cluster, n.node)] for n in here},
                                inputs, profiles.get(pool.gpu_model, []), layouts, t, settings, ctx)
            if sharing is not None:
                out += self._commit(sharing, settings, ctx, nodes)
        return out

    def _demands(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any], ctx: PlanContext,
                 nodes: dict[NodeKey, Row], pods_of: dict[WorkloadKey, list[Row]],
                 inputs: PoolInputs, t: Targets) -> list[Demand]:
        out = []
        serving, memory = serving_by_workload(frames, ctx), memory_by_workload(frames, ctx)
        for r in ctx.rows(frames, "workload_gpu_profile"):
            key = r.workload_key
            cluster = key.cluster
            if ctx.ledger.workload_claimed(*key):
                continue
            if r.mig_profile or r.samples is None or num(r.hours_held) < settings["min_hours"]:
                continue
            pods = pods_of.get(key, [])
            if not pods or len(pods) > settings["max_replicas"]:
                continue  # not running now, or several replicas spread on purpose
            if any(num(p.gpu_request) != 1 or p.mig_profile or p.fractional for p in pods):
                continue  # a fraction of a shared GPU (vGPU, time-slicing, KAI) is already shared
            if any(num(p.gang_min_member, 1) > 1 for p in pods):
                continue  # a gang member is not a small service
            mem, compute = demand_size(r, memory.get(key), t)
            if compute > settings["max_compute"] or r.fb_max_mib is None:
                continue
            production, why = ctx.is_production(r)
            for p in pods:
                node = nodes.get(NodeKey(cluster, p.node))
                if node is None or node.is_mig:
                    continue
                indices = tuple(int(i) for i in p.gpu_indices or []) or None
                # stopped first: not a gang of several pods (never split), no PodDisruptionBudget; the
                # one pod of a gang (Volcano's podgroup of a Deployment) restarts whole
                gang = bool(p.gang) and num(p.gang_pods, 1) > 1
                evictable = not gang and not inputs.pod_budgets(p)
                out.append(Demand(key, p.pod, p.node, mem, compute, production, r, indices, evictable,
                                  node_row=node, production_reason=why, serving=serving.get(key),
                                  serving_size=serving_size(r, memory.get(key), t)))
        return out

    # -- findings ---------------------------------------------------------------------------
    def _evidence(self, d: Demand, settings: dict[str, Any], freed: float, gpu_price: float) -> dict[str, Any]:
        r = d.row
        return {
            "fb_used_max_gb": mib_to_gb(r.fb_max_mib),
            "fb_used_p99_gb": mib_to_gb(r.fb_p99_mib),
            "memory_needed_gb": mib_to_gb(d.mem_mib),
            "memory_headroom": settings["memory_headroom"],
            **compute_evidence(r),
            "compute_target_pct": pct(settings["compute_target"]),
            "sm_active_p95_pct": pct(r.sm_p95),
            "gr_active_p95_pct": pct(r.gr_p95),
            "gpus_freed": round(freed, 3), "usd_per_gpu_hour": round(gpu_price, 4),
            "production": d.production, "production_reason": d.production_reason,
            "hours_observed": num(r.hours_held),
            # a serving workload: its cost per 1M tokens after the change and the latency it keeps
            **unit_cost_evidence(d.serving, 1.0, 1.0 - freed),
            # an inference server: what its memory was sized on
            **(d.serving_size.evidence if d.serving_size else {}),
        }

    def _with_setting(self, d: Demand, proposed: Schema, evidence: dict[str, Any], device_mib: float) -> None:
        """An inference server moving to a device of ``device_mib`` (or reserving less of its own):
        the memory setting that makes its size true goes with the change."""
        size = d.serving_size
        setting = server_setting(size, device_mib, _device_mib(d.row))
        if setting is None:
            return
        proposed.server_memory = ServerMemory(**setting).to_dict()  # type: ignore[attr-defined]  # MigProposed or SharedProposed
        if setting["mode"] == "set":
            evidence["server_setting"] = f"{setting['flag']}={setting['value']:g}"
        else:
            evidence["server_setting"] = (f"{setting['flag']} x {setting['value']:g} (the same bytes on a device of "
                                          f"{setting['device_mib']:,} MiB)")

    def _recommendation(self, kind: str, rid: str, d: Demand, title: str, proposed: Schema, target: dict[str, Any],
                        granted: float, evidence: dict[str, Any], settings: dict[str, Any]) -> Recommendation:
        r = d.row
        return Recommendation(
            rule=kind, id=rid, cluster=cluster_of(r), namespace=r.namespace, workload=r.workload,
            queue=r.queue, title=title, current={"gpus": 1, "gpu_model": r.gpu_model, "node": d.node,
                                                        "resource": "nvidia.com/gpu"},
            proposed=proposed.to_dict(), monthly_savings_usd=monthly(granted),
            confidence=evidence_confidence(num(r.hours_held), settings["full_confidence_hours"]),
            evidence=evidence, target=target,
        )

    def _leave(self, ctx: PlanContext, d: Demand, rid: str) -> None:
        cluster, ns, wl = d.key
        ctx.ledger.claim_workload(cluster, ns, wl, rid)
        ctx.record(rid, PodLeaves(PodKey(cluster, ns, d.pod)))

    def _head(self, d: Demand) -> str:
        r = d.row
        size = d.serving_size
        if size is not None and size.basis == "kv_cache":
            return (f"{r.namespace}/{r.workload} reserves {mib_to_gb(r.fb_max_mib)} GB but its KV cache "
                    f"was at most {size.evidence.get('kv_cache_peak_pct')}% used: it needs "
                    f"{mib_to_gb(size.budget_mib)} GB and {pct(d.compute)}% of a {r.gpu_model or 'GPU'} at peak")
        return (f"{r.namespace}/{r.workload} needs at most {mib_to_gb(r.fb_max_mib)} GB and "
                f"{pct(d.compute)}% of a {r.gpu_model or 'GPU'} at peak")

    def _slot_finding(self, d: Demand, slot: Slot, settings: dict[str, Any], ctx: PlanContext,
                      nodes: dict[NodeKey, Row]) -> Recommendation:
        """A free instance of a node already running MIG: the workload frees its GPU less the slice."""
        r, prof = d.row, slot.profile
        cluster = d.key[0]
        freed = 1.0 - prof.compute_slices / 7
        rid = finding_id(MIG.name, cluster_of(r), r.namespace, r.workload, None, None)
        src = nodes[NodeKey(cluster, d.node)]
        gpu_price = _gpu_price(src)
        ctx.ledger.account(src.node_key, num(src.usd_per_hour), num(src.gpu_count), price_known=True)
        granted = ctx.ledger.claim(rid, src.node_key, freed * gpu_price, freed)
        self._leave(ctx, d, rid)
        evidence = self._evidence(d, settings, freed, gpu_price)
        evidence.update(host_node=slot.node, sharing_with=[], **_slice_evidence(d, prof),
                        restarts=[_restart(d, f"moves onto a free {prof.profile} instance of {slot.node}")])
        title = f"{self._head(d)}: run it on a {prof.profile} MIG slice (a free {prof.profile} instance on {slot.node})"
        proposed = MigProposed(prof.profile, slot.config, f"nvidia.com/mig-{prof.profile}", 1, r.gpu_model,
                               slot.node, False, [], round(freed, 3))
        self._with_setting(d, proposed, evidence, prof.usable_mib)
        return self._recommendation("mig", rid, d, title, proposed, WorkloadTarget(**workload_ref(r)).to_dict(),
                                    granted, evidence, settings)

    def _commit(self, sharing: PoolSharing, settings: dict[str, Any], ctx: PlanContext,
                nodes: dict[NodeKey, Row]) -> list[Recommendation]:
        """The findings of one pool's plan: claims on GPUs the plan leaves free, and what the later
        rules must know (pods leaving, partitioned GPUs, sharing hosts, pods moved)."""
        cluster = sharing.key[0]
        room = dict(sharing.free_after)
        out: list[Recommendation] = []
        for name, rp in sorted(sharing.repartitions.items()):
            if not rp.gpus:
                continue
            mine = [self._repartition_finding(d, prof, index, rp, settings, ctx, nodes, room, sharing.room)
                    for index, gpu in sorted(rp.gpus.items()) for d, prof in gpu.members]
            ctx.record(mine[0].id, GpusPartitioned(NodeKey(cluster, name), float(len(rp.gpus))))
            record_moves(ctx, mine[0].id, cluster, rp.evict, sharing.problem)
            out += mine
        for host in sharing.hosts:
            mine = [self._host_finding(d, host, settings, ctx, nodes, room, sharing.room) for d in host.choice.members]
            ctx.record(mine[0].id, SharingHost(NodeKey(cluster, host.node)))
            record_moves(ctx, mine[0].id, cluster, host.evict, sharing.problem)
            out += mine
        if out:  # the moves elsewhere that make room: every finding of the pool carries them
            record_moves(ctx, out[0].id, cluster, sharing.room, sharing.problem)
        return out

    def _claim(self, rid: str, d: Demand, gpus: float, ctx: PlanContext,
               nodes: dict[NodeKey, Row], room: dict[str, float], hosts: set[str]) -> float:
        """Claim ``gpus`` GPUs for a finding on GPUs the pool's plan leaves free: its own node
        first, then the others (sharing hosts last); dollars per hour granted."""
        cluster = d.key[0]
        order = [d.node] + sorted((n for n in room if n != d.node), key=lambda n: (n in hosts, n))
        if d.node not in room:
            room[d.node] = gpus  # its node is not planned with the pool: it frees its own GPU there
        granted, left = 0.0, gpus
        for name in order:
            take = min(left, room.get(name, 0.0))
            if take <= 1e-9:
                continue
            n = nodes[NodeKey(cluster, name)]
            ctx.ledger.account(n.node_key, num(n.usd_per_hour), num(n.gpu_count), price_known=True)
            granted += ctx.ledger.claim(rid, n.node_key, take * _gpu_price(n), take)
            room[name] -= take
            left -= take
            if left <= 1e-9:
                break
        return granted

    def _repartition_finding(self, d: Demand, prof: MigProfile, index: int, rp: Repartition, settings: dict[str, Any],
                             ctx: PlanContext, nodes: dict[NodeKey, Row],
                             room: dict[str, float], extra: list[dict[str, Any]]) -> Recommendation:
        r, cluster = d.row, d.key[0]
        gpu = rp.gpus[index]
        freed = 1.0 - gpu.share(d)
        rid = finding_id(MIG.name, cluster_of(r), r.namespace, r.workload, None, None)
        layout = rp.layout()
        config = mig_config_name(rp.node, layout)
        granted = self._claim(rid, d, freed, ctx, nodes, room, set())
        self._leave(ctx, d, rid)
        mates = sorted(f"{m.key[1]}/{m.key[2]}" for m, _ in gpu.members if m is not d)
        whole = rp.gpu_count - len(rp.gpus)
        evidence = self._evidence(d, settings, freed, _gpu_price(nodes[NodeKey(cluster, d.node)]))
        evidence.update(host_node=rp.node, host_gpu_index=index, host_gpus_partitioned=sorted(rp.gpus),
                        host_gpus_whole=whole, sharing_with=mates, gpu_instances=gpu.devices(),
                        **_slice_evidence(d, prof),
                        restarts=[_restart(d, f"moves onto a {prof.profile} instance of GPU {index} on {rp.node}")]
                        + _node_restarts(rp.evict, rp.stop_first, rp.node, d) + _room_restarts(extra),
                        also_restarted=OPERATOR_RESTARTS)
        title = (f"{self._head(d)}: run it on a {prof.profile} MIG slice of GPU {index} on {rp.node}"
                 + (f", shared with {len(mates)} other(s)" if mates else "")
                 + (f"; the node keeps {whole} GPU(s) whole" if whole else ""))
        proposed = MigProposed(
            prof.profile, config, f"nvidia.com/mig-{prof.profile}", 1, r.gpu_model, rp.node, True, mates,
            round(freed, 3), "mixed", index, layout, [_move(m) for m in rp.evict + extra],
            [StoppedPod(s.key[1], s.pod, s.key[2]).to_dict() for s in rp.stop_first])
        self._with_setting(d, proposed, evidence, prof.usable_mib)
        return self._recommendation("mig", rid, d, title, proposed, WorkloadTarget(**workload_ref(r)).to_dict(),
                                    granted, evidence, settings)

    def _host_finding(self, d: Demand, host: Host, settings: dict[str, Any], ctx: PlanContext,
                      nodes: dict[NodeKey, Row], room: dict[str, float],
                      extra: list[dict[str, Any]]) -> Recommendation:
        r, cluster, choice = d.row, d.key[0], host.choice
        kind = KIND_OF_MODE[choice.mode]
        freed = 1.0 - choice.share(d)
        rid = finding_id(kind, cluster_of(r), r.namespace, r.workload, None, None)
        granted = self._claim(rid, d, freed, ctx, nodes, room, {host.node})
        self._leave(ctx, d, rid)
        mates = sorted(f"{m.key[1]}/{m.key[2]}" for m in choice.members if m is not d)
        host_row = nodes.get(NodeKey(cluster, host.node))
        memory = MEMORY_MIB.get((host_row.gpu_model if host_row else None) or "", 0) or num(r.gpu_memory_mib)
        evidence = self._evidence(d, settings, freed, _gpu_price(nodes[NodeKey(cluster, d.node)]))
        evidence.update(host_node=host.node, host_gpus_used=choice.gpus_used, sharing_with=mates,
                        restarts=[_restart(d, f"moves onto {host.node}, shared by {choice.mode}")]
                        + _node_restarts(host.evict, host.stop_first, host.node, d) + _room_restarts(extra))
        if choice.mode == "mig":  # the single strategy: every GPU of the host one named layout
            prof = choice.profiles[id(d)][0]
            evidence.update(**_slice_evidence(d, prof), also_restarted=OPERATOR_RESTARTS)
            title = (f"{self._head(d)}: run it on a {prof.profile} MIG slice ({host.node} repartitioned "
                     f"{choice.config}" + (f", with {len(mates)} other(s))" if mates else ")"))
            proposed: Schema = MigProposed(prof.profile, choice.config, f"nvidia.com/mig-{prof.profile}", 1,
                                           r.gpu_model, host.node, True, mates, round(freed, 3), "single",
                                           None, [], [_move(m) for m in host.evict + extra],
                                           [StoppedPod(s.key[1], s.pod, s.key[2]).to_dict() for s in host.stop_first])
            self._with_setting(d, proposed, evidence, prof.usable_mib)
            return self._recommendation("mig", rid, d, title, proposed, WorkloadTarget(**workload_ref(r)).to_dict(),
                                        granted, evidence, settings)
        mps = choice.mode == "mps"
        members = [workload_ref(m.row) for m in choice.members]
        proposed = (MpsProposed if mps else TimeslicingProposed)(
            choice.replicas, sharing_config_name(host, choice), host.node, mates, round(freed, 3),
            [_move(m) for m in host.evict + extra])
        title = (f"{self._head(d)}: share {host.node}'s GPUs with {len(mates)} other(s) via "
                 f"{'MPS' if mps else 'time-slicing'} ({choice.replicas} per GPU"
                 + (", memory-limited: production" if mps else ", non-production") + ")")
        evidence.update(sharing_replicas=choice.replicas, gpu_memory_gb=mib_to_gb(memory or None),
                        client_memory_limit_gb=mib_to_gb(memory / choice.replicas) if mps and memory else None,
                        group_peak_p95_pct=pct(sum(sorted((m.compute for m in choice.members), reverse=True)
                                                   [:choice.replicas])))
        target = SharedGroupTarget(members, "SharedGroup", workload_ref(r)).to_dict()
        self._with_setting(d, proposed, evidence, memory)
        return self._recommendation(kind, rid, d, title, proposed, target, granted, evidence, settings)


def _device_mib(r: Row) -> float:
    """The memory of the device a workload holds now (a whole GPU of its model)."""
    return float(MEMORY_MIB.get(r.gpu_model or "", 0) or num(r.gpu_memory_mib))


def _gpu_price(n: Row) -> float:
    return num(n.usd_per_hour) / max(num(n.gpu_count, 1), 1)


def _slice_evidence(d: Demand, prof: MigProfile) -> dict[str, Any]:
    return {"slice_memory_gb": prof.memory_gb, "slice_usable_mib": round(prof.usable_mib),
            "slice_compute_fraction": round(prof.compute_slices / 7, 3),
            "slice_peak_load_pct": pct(d.compute * 7 / prof.compute_slices)}


def _restart(d: Demand, why: str) -> dict[str, str]:
    return {"pod": f"{d.key[1]}/{d.pod}", "why": why}


def _node_restarts(evict: list[dict[str, Any]], stopped: list[Demand], node: str, me: Demand) -> list[dict[str, str]]:
    """Pods the node's own steps restart: whole pods evicted first, small workloads stopped first."""
    out = [{"pod": f"{m['namespace']}/{pod}",
            "why": f"evicted from {node} first (its GPU is needed whole for the shared work); planned to land on "
                   f"{m['to']}" + (f" with the rest of gang {m['gang']}" if m.get("gang") else "")}
           for m in evict for pod in m["pods"]]
    out += [{"pod": f"{s.key[1]}/{s.pod}", "why": f"stopped before its GPU on {node} is repartitioned; starts again "
                                                  f"on its slice"} for s in stopped if s is not me]
    return out


def _room_restarts(moves: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"pod": f"{m['namespace']}/{pod}", "why": f"moved from {m['from']} to {m['to']} to make room there for "
                                                      f"the pods the shared GPUs displace"
             + (f" (with the rest of gang {m['gang']})" if m.get("gang") else "")}
            for m in moves for pod in m["pods"]]


def _move(m: dict[str, Any]) -> dict[str, Any]:
    """A move as plans carry it (binpack's Move, with ``from``)."""
    return {"namespace": m["namespace"], "pods": list(m["pods"]), "to": m["to"], "workload": m.get("workload"),
            "gang": m.get("gang"), "gpus": m["gpus"], "from": m["from"]}


def group_key(node: Row) -> tuple[Any, ...]:
    return (key_cluster(node), node.gpu_model, node.capacity_type, node.zone)


def free_slots(key: tuple[Any, ...], capacity: list[Row], nodes: dict[NodeKey, Row],
               profiles: list[MigProfile]) -> list[Slot]:
    """Free instances of nodes in the group that already run MIG (mig_capacity)."""
    by_name = {p.profile: p for p in profiles}
    out = []
    for f in capacity:
        n = nodes.get(f.node_key)
        prof = by_name.get(f.profile)
        if n is None or prof is None or group_key(n) != key:
            continue
        config = n.mig_config or f"all-{prof.profile}"
        out += [Slot(f.node, prof, str(config))] * int(num(f.free))
    return out


def mig_config_name(node: str, layout: list[dict[str, Any]]) -> str:
    """The node's own mig-parted config (a label value), named after the node and its layout (the
    config lives in its cluster's mig-manager ConfigMap, so the cluster is not part of the name)."""
    return "gpuinsight-" + stable_id("mig-layout", node, json.dumps(layout, sort_keys=True))[-12:]


def sharing_config_name(host: Host, choice: HostChoice) -> str:
    """One device-plugin config per host node, named after its members (a stable label value)."""
    names = sorted(f"{m.key[1]}/{m.key[2]}" for m in choice.members)
    digest = stable_id("sharing", host.node, *names)[-8:]
    return f"{'mps' if choice.mode == 'mps' else 'ts'}-{choice.replicas}x-{digest}"

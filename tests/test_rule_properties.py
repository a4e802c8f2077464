"""Property tests: the rules on hundreds of random fleets (tests/random_fleets.py), with the
plan's invariants checked from the outside on every one:

* no double counting: a workload gets at most one workload-level finding, a node is released
  once, the savings touching a node never exceed its cost, the plan never exceeds the spend,
  each saving is covered by its claims, and binpack never fills GPUs another finding returned;
* no gang split (strict gangs move whole; elastic ones at most beyond minMember), busy gangs
  never touched, PodDisruptionBudgets held;
* memory: a slice or a shared GPU holds 1.05 x the observed maximum framebuffer;
* compute: nothing right-sized above its short-window p95 at the target load;
* queue floors held;
* KubeRay and scale-to-zero: one finding per Ray group, a cleaned-up job's cluster gets no other
  finding (from any rule), savings within the idle stretches or post-job hours they came from,
  never production or a KEDA-scaled workload scaled to zero by default;
* binpack reaches the optimum on every pool the ILP solves: checked against an independent
  brute force on the pools small enough for it (nodes sit in racks: the topology preference
  never costs a node);
* input-starved findings only for bursts, a low duty cycle, stalls and a resident model, never
  with another workload finding, priced at most 1 - duty/target of the cost;
* topology findings carry no dollars, leave binpack's gangs alone, and propose a placement that
  fits the free GPUs of one domain the gang is not already within.

``GPUINSIGHT_PROPERTY_FLEETS`` (default 220) and ``GPUINSIGHT_PROPERTY_SEED`` (default 1000)
choose the fleets; a failure names its seed (``random_fleet(seed)`` rebuilds it).

A slice of fleets (``GPUINSIGHT_MULTI_CLUSTER_FLEETS``, default 24) is planned as several clusters
of the same names (the same stack deployed in each): each cluster must get the single-cluster
plan, with ids unique across clusters and the savings per cluster adding up.

A slice of fleets (``GPUINSIGHT_SCRAPED_FLEETS``, default 16; tests/random_scrapes.py) goes
through the real loading path instead: per-step readings written as OpenMetrics text in two
randomly chosen real dcgm-exporter label spellings, each loaded into DuckDB and planned from
the SQL models; both plans must hold the same invariants and be the same plan.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from gpuinsight.gpumodels import MEMORY_MIB
from gpuinsight.keys import PodKey, WorkloadKey
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.engine import evaluate_plan
from tests.random_fleets import RandomFleet, random_fleet
from tests.random_scrapes import random_spelling, scrape_fleet, write_catalog

FLEETS = int(os.environ.get("GPUINSIGHT_PROPERTY_FLEETS", "220"))
SCRAPED = int(os.environ.get("GPUINSIGHT_SCRAPED_FLEETS", "16"))
MULTI = int(os.environ.get("GPUINSIGHT_MULTI_CLUSTER_FLEETS", "24"))
SEED = int(os.environ.get("GPUINSIGHT_PROPERTY_SEED", "1000"))
COMPUTE_TARGET, MEMORY_FACTOR, IDLE_PEAK = 0.80, 1.05, 0.10
WORKLOAD_KINDS = ("idle", "mig", "mps", "timeslice", "spot", "scale_to_zero", "input_starved")
TARGET_DUTY = 0.95
ORACLE_NODES, ORACLE_PODS = 5, 8

STATS: dict[str, int] = defaultdict(int)


def peak(u: Any) -> float:
    return u.peak_p95 if u.peak_p95 is not None else max(u.gr_p95, u.sm_p95 if u.sm_p95 is not None else u.gr_p95 * 0.9)


def allowed(pdb: dict[str, Any], covered: int) -> int:
    def count(v: str) -> int:
        return math.ceil(float(v[:-1]) * covered / 100) if v.endswith("%") else int(v)
    if pdb.get("min_available") is not None:
        return max(0, covered - count(pdb["min_available"]))
    return max(0, count(pdb["max_unavailable"])) if pdb.get("max_unavailable") is not None else covered


def check_ledger(rf: RandomFleet, recs: list[Any]) -> None:
    nodes = {n.name: n for n in rf.fleet.nodes}
    per_node: dict[str, float] = defaultdict(float)
    shown: dict[str, int] = defaultdict(int)  # claims shown on the node, each rounded to 4 decimals
    gpus_back: dict[str, float] = defaultdict(float)
    for r in recs:
        claims = r.evidence["claims"]
        # claims are shown rounded to 4 decimals per hour
        assert r.monthly_savings_usd <= sum(c["usd_per_hour"] for c in claims) * 730 + 0.01 + 0.04 * len(claims), r.id
        for c in claims:
            per_node[c["node"]] += c["usd_per_hour"]
            shown[c["node"]] += 1
            gpus_back[c["node"]] += c["gpus"]
    for node, usd in per_node.items():
        assert usd <= nodes[node].price + 5e-5 * shown[node], f"node {node}: ${usd}/h claimed of ${nodes[node].price}/h"
        assert gpus_back[node] <= nodes[node].gpus + 1e-3 * shown[node]
    assert sum(r.monthly_savings_usd for r in recs) <= sum(n.price for n in rf.fleet.nodes) * 730 + 0.01
    seen: set[tuple[str, str]] = set()
    for r in recs:
        if r.rule in WORKLOAD_KINDS:
            key = (r.namespace, r.workload)
            assert key not in seen, f"{key} has two workload findings"
            seen.add(key)
    released = [n for r in recs if r.rule == "binpack" for n in r.proposed["nodes_freed"]]
    assert len(released) == len(set(released))
    # binpack never moves work onto GPUs another finding returned to the pool (nor do the moves
    # consolidation makes to make room for shared GPUs): every node holds what lands on it
    where, _, partitioned, _ = consolidation_state(rf, recs)
    load: dict[str, float] = defaultdict(float)
    for p in rf.fleet.pods:
        load[where[(p.namespace, p.name)]] += rf.fleet._gpu_equiv(p)
    for node, gpus in partitioned.items():
        load[node] += len(gpus)
    leaving = leaving_workloads(recs)
    for p in rf.fleet.pods:
        if (p.namespace, p.workload) in leaving:
            load[where[(p.namespace, p.name)]] -= rf.fleet._gpu_equiv(p)
    arrivals: set[str] = {m["to"] for r in recs if r.rule in SHARING for m in r.proposed.get("evict") or []
                          if m["to"] != m["from"]}
    for r in recs:
        if r.rule == "binpack":
            for m in r.proposed["moves"]:
                load[m["from"]] -= m["gpus"]
                load[m["to"]] += m["gpus"]
                if m["to"] != m["from"]:
                    arrivals.add(m["to"])
    returned = defaultdict(float)
    for r in recs:
        # scale_to_zero returns a staying workload's own GPU in its hours at zero (counted in load
        # as held): not GPUs in space that moved work could fill
        if r.rule not in ("binpack", "scale_to_zero"):
            for c in r.evidence["claims"]:
                returned[c["node"]] += c["gpus"]
    for node in arrivals:  # claims are shown rounded to 3 decimals of a GPU
        assert load[node] <= nodes[node].gpus - returned[node] + 1e-3 * shown[node], f"{node} filled with returned GPUs"
    for node, held in load.items():
        assert held <= nodes[node].gpus + 1e-6, f"{node}: {held:g} GPUs after the plan, it has {nodes[node].gpus}"


def leaving_workloads(recs: list[Any]) -> set[tuple[str, str]]:
    """Workloads the plan takes off their nodes: scaled away (idle), shared, clusters deleted."""
    leaving = {(r.namespace, r.workload) for r in recs if r.rule in ("idle", "mig", "mps", "timeslice")
               and r.proposed.get("reason") != "periodic"}
    leaving |= {(r.namespace, r.target["ray_cluster"]) for r in recs if r.rule == "ray"
                and r.proposed["change"] == "job_cleanup" and r.evidence["cluster_alive_at_window_end"]}
    return leaving


def check_gangs(rf: RandomFleet, recs: list[Any]) -> None:
    """Every eviction of the plan (binpack's moves, and the pods moved off the nodes that host
    shared GPUs): gangs whole, busy gangs never, budgets held."""
    gangs: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for p in rf.fleet.pods:
        if p.gang:
            gangs[(p.namespace, p.gang)].append(p)
    moved = {(m["namespace"], p) for r in recs if r.rule == "binpack" for m in r.proposed["moves"] for p in m["pods"]}
    moved |= {(m["namespace"], p) for r in recs if r.rule in SHARING for m in r.proposed.get("evict") or []
              for p in m["pods"]}
    for (ns, gang), pods in gangs.items():
        mine = {(ns, p.name) for p in pods}
        n_moved = len(mine & moved)
        if not n_moved:
            continue
        strict = len(pods) > 1 and (pods[0].gang_min is None or pods[0].gang_min >= len(pods))
        assert (ns, gang) not in rf.busy, f"busy gang {ns}/{gang} was touched"
        if strict:
            assert n_moved == len(pods), f"gang {ns}/{gang} split: {n_moved} of {len(pods)}"
        elif len(pods) > 1:
            assert n_moved <= len(pods) - (pods[0].gang_min or 1), f"elastic gang {ns}/{gang} below minMember"
    for r in (r for r in recs if r.rule == "binpack"):  # what the action builder checks on a freed node
        gone = {(m["namespace"], p) for m in r.proposed["moves"] for p in m["pods"]}
        gone |= {(x["namespace"], x["pod"]) for x in r.proposed["pods_leaving"]}
        for node in r.proposed["nodes_freed"]:
            stay = [p.name for p in rf.fleet.pods if p.node == node and (p.namespace, p.name) not in gone]
            assert not stay, f"{r.id}: freed node {node} keeps {stay}"
    for pdb in rf.fleet.pdbs:
        sel = json.loads(pdb["selector"])["matchLabels"]
        covered = [p for p in rf.fleet.pods if p.namespace == pdb["namespace"]
                   and all(p.labels.get(k) == v for k, v in sel.items())]
        evicted = sum(1 for p in covered if (p.namespace, p.name) in moved)
        stopped = sum(1 for r in recs if r.rule == "mig" for x in r.proposed.get("stop_first") or []
                      if any(p.namespace == x["namespace"] and p.name == x["pod"] for p in covered))
        assert evicted <= allowed(pdb, len(covered)), f"PDB {pdb['name']}: {evicted} evicted"
        assert not stopped, f"PDB {pdb['name']}: a pod it covers is stopped before a repartition"


def check_sharing(rf: RandomFleet, recs: list[Any]) -> None:
    """The shared GPUs: a GPU is partitioned only when nothing that stays runs on it; each node's
    mig-parted config is valid, covers its GPUs once and keeps every partitioned GPU within a
    valid layout; a sharing host keeps no whole-GPU pod; the lone small production services the
    fleet planted beside busy work got their MIG slice."""
    from gpuinsight.migparted import layout_errors, spec_errors
    from tests.genai_trace import mig_reference

    f = rf.fleet
    indices = f.gpu_indices()
    nodes = {n.name: n for n in f.nodes}
    leaving = leaving_workloads(recs)
    where, moved, partitioned, hosts = consolidation_state(rf, recs)
    for r in (r for r in recs if r.rule == "mig" and r.proposed.get("gpu_index") is not None):
        node, index = r.proposed["node"], r.proposed["gpu_index"]
        cleared = {(m["namespace"], p) for m in r.proposed["evict"] for p in m["pods"]}
        cleared |= {(x["namespace"], x["pod"]) for x in r.proposed["stop_first"]}
        for p in f.pods:
            if p.node == node and index in (indices[(p.namespace, p.name)] or []):
                assert (p.namespace, p.name) in cleared, \
                    f"{r.id}: GPU {index} of {node} repartitioned while {p.namespace}/{p.name} runs on it"
        layout = r.proposed["node_layout"]
        assert spec_errors({"version": "v1", "mig-configs": {r.proposed["node_mig_config"]: layout}}) == [], r.id
        profiles, layouts = mig_reference(nodes[node].model)
        assert layout_errors(layout, nodes[node].gpus, {p[0]: p[3] for p in profiles}, layouts) == [], r.id
        STATS["mig_per_gpu"] += 1
        STATS["mig_on_8_gpu_nodes"] += nodes[node].gpus == 8
        STATS["mig_after_evictions"] += bool(r.proposed["evict"])
    single = {r.proposed["node"]: r for r in recs if r.rule == "mig" and r.proposed.get("strategy") == "single"}
    for node in hosts:
        stay = [p for p in f.pods if where[(p.namespace, p.name)] == node and (p.namespace, p.workload) not in leaving]
        assert not stay, f"sharing host {node} keeps whole-GPU pods {[p.name for p in stay]}"
        if node in single:  # every GPU repartitioned: every pod on it gone first
            r = single[node]
            cleared = {(m["namespace"], p) for m in r.proposed["evict"] for p in m["pods"]}
            cleared |= {(x["namespace"], x["pod"]) for x in r.proposed["stop_first"]}
            running = [p.name for p in f.pods if p.node == node and (p.namespace, p.name) not in cleared]
            assert not running, f"{node} repartitioned whole while {running} run on it"
        STATS["sharing_hosts_emptied"] += any(p.node == node and (p.namespace, p.name) in moved for p in f.pods)
    for node, gpus in partitioned.items():
        assert len(gpus) <= nodes[node].gpus
    mig = {(r.namespace, r.workload) for r in recs if r.rule == "mig"}
    for key in rf.expect_mig:
        assert key in mig, f"the lone small production service {key} on a mixed node got no MIG slice"
        STATS["lone_production_mig"] += 1


def check_sizing(rf: RandomFleet, recs: list[Any]) -> None:
    usage = rf.fleet.usage
    hosts: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for r in recs:
        u = usage[(r.namespace, r.workload)] if r.rule in WORKLOAD_KINDS else None
        if r.rule == "idle" and r.proposed["reason"] == "idle":
            assert peak(u) <= IDLE_PEAK + 1e-9, f"{r.workload} peaks at {peak(u)} but was called idle"
        if r.rule == "mig":
            assert r.evidence["slice_usable_mib"] >= MEMORY_FACTOR * u.fb_max, r.id
            assert peak(u) / r.evidence["slice_compute_fraction"] <= COMPUTE_TARGET + 1e-3, r.id
            STATS["mig"] += 1
        if r.rule in ("mps", "timeslice"):
            hosts[(r.rule, r.proposed["node"])].append(r)
    for (rule, node), group in hosts.items():
        replicas = group[0].proposed["replicas"]
        memory = MEMORY_MIB[rf.fleet.node(node).model]
        peaks = sorted((peak(usage[(g.namespace, g.workload)]) for g in group), reverse=True)
        mems = sorted((usage[(g.namespace, g.workload)].fb_max for g in group), reverse=True)
        if rule == "mps":
            assert all(memory / replicas >= MEMORY_FACTOR * m for m in mems), f"MPS on {node}: memory"
            assert all(p <= COMPUTE_TARGET / replicas + 1e-9 for p in peaks), f"MPS on {node}: compute"
            assert all(g.evidence["production"] for g in group)
        else:
            assert MEMORY_FACTOR * sum(mems[:replicas]) <= memory, f"time-slicing on {node}: memory"
            assert sum(peaks[:replicas]) <= COMPUTE_TARGET + 1e-9, f"time-slicing on {node}: compute"
            assert not any(g.evidence["production"] for g in group), "production time-sliced"
        STATS[rule] += len(group)


def check_ray_and_scale_to_zero(rf: RandomFleet, recs: list[Any]) -> None:
    """KubeRay and scale-to-zero findings: what they may act on, and no GPU-hour counted twice."""
    hours = rf.fleet.hours
    stretches = {(s["namespace"], s["workload"], s["ray_group"]): s for s in rf.models.get("idle_stretches", [])}
    groups = {(g["namespace"], g["ray_cluster"], g["ray_group"]): g for g in rf.models.get("ray_groups", [])}
    jobs = {(j["namespace"], j["name"]): j for j in rf.models.get("ray_jobs", [])}
    ray_clusters: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for r in (r for r in recs if r.rule == "ray"):
        ray_clusters[(r.namespace, r.target["ray_cluster"])].append(r)
        change = r.proposed["change"]
        if change == "job_cleanup":
            j = jobs[(r.namespace, r.workload)]
            assert not j["uses_existing"] and j["post_gr_hourly_max_p95"] <= 0.1, r.id
            assert r.monthly_savings_usd <= j["post_cost_usd"] / hours * 730 + 0.01, r.id
        elif change == "head_gpus":
            g = groups[(r.namespace, r.target["ray_cluster"], "headgroup")]
            assert g["gr_hourly_max_p95"] <= 0.1 and r.monthly_savings_usd <= g["cost_usd"] / hours * 730 + 0.01
        else:
            s = stretches[(r.namespace, r.target["ray_cluster"], r.target["group"])]
            long = sum(st["usd"] for st in s["stretches"] if st["hours"] >= 2)
            assert r.monthly_savings_usd <= long / hours * 730 + 0.01, r.id
        STATS[f"ray:{change}"] += 1
    for (ns, cluster), found in ray_clusters.items():
        changes = [r.proposed["change"] for r in found]
        keys = [(r.proposed["change"], r.target.get("group")) for r in found]
        assert len(keys) == len(set(keys)), f"{ns}/{cluster}: one finding per group"
        assert "job_cleanup" not in changes or len(found) == 1, f"{ns}/{cluster}: the job's hours claimed twice"
        others = [r.rule for r in recs if r.rule in WORKLOAD_KINDS and (r.namespace, r.workload) == (ns, cluster)]
        assert not others, f"{ns}/{cluster} is the ray rule's but also got {others}"
    for r in (r for r in recs if r.rule == "scale_to_zero"):
        assert (r.namespace, r.workload) not in rf.scaled, f"{r.workload}: KEDA already scales it"
        assert not r.evidence["production"], f"{r.workload}: production scaled to zero by default"
        assert r.proposed["replicas_when_idle"] == 0 and r.evidence["expected_cold_starts_per_day"] <= 3
        s = stretches[(r.namespace, r.workload, "")]
        long = sum(st["usd"] for st in s["stretches"] if st["hours"] >= 4)
        assert r.monthly_savings_usd <= long / hours * 730 + 0.01, f"{r.workload}: more than its idle stretches"
        STATS["scale_to_zero"] += 1


def check_signals(rf: RandomFleet, recs: list[Any]) -> None:
    f = rf.fleet
    nodes = {n.name: n for n in f.nodes}
    for r in (r for r in recs if r.rule == "input_starved"):
        inp = f.usage[(r.namespace, r.workload)].input
        assert inp is not None and inp["burst_level"] >= 0.5 and inp["duty_cycle"] <= 0.8, r.id
        assert inp["idle_step_fraction"] + inp["mixed_step_fraction"] >= 0.1 and inp["fb_cv"] <= 0.15, r.id
        assert inp["fb_idle_mib"] >= 0.9 * inp["fb_busy_mib"], r.id
        cost = sum(f._gpu_equiv(p) * nodes[p.node].price / nodes[p.node].gpus for p in f.pods
                   if (p.namespace, p.workload) == (r.namespace, r.workload)) * 730
        assert r.monthly_savings_usd <= cost * (1 - inp["duty_cycle"] / TARGET_DUTY) + 0.02, r.id
        assert all(c["gpus"] == 0 for c in r.evidence["claims"]), "waiting time returns no GPUs in space"
        if inp["cpu_idle_cores"] is not None and inp["cpu_idle_cores"] >= 0.8 * inp["cpu_request"]:
            assert r.proposed["cause"] == "cpu", r.id
        STATS["input_starved"] += 1
    where, _, partitioned, hosts = consolidation_state(rf, recs)
    moved_workloads, released = set(), set()
    for r in (r for r in recs if r.rule == "binpack"):
        released |= set(r.proposed["nodes_freed"])
        for m in r.proposed["moves"]:
            moved_workloads.add((m["namespace"], m["workload"]))
            for pod in m["pods"]:
                where[(m["namespace"], pod)] = m["to"]
    for r in (r for r in recs if r.rule == "topology"):
        assert r.monthly_savings_usd == 0 and r.evidence["claims"] == [], r.id
        assert (r.namespace, r.workload) not in moved_workloads, "binpack already places the gangs it moves"
        gang = [p for p in f.pods if (p.namespace, p.workload) == (r.namespace, r.workload)]
        size = {p.name: f._gpu_equiv(p) for p in gang}
        load: dict[str, float] = defaultdict(float)
        for p in f.pods:
            if p.name not in size or p.namespace != r.namespace:
                load[where[(p.namespace, p.name)]] += f._gpu_equiv(p)
        for node, gpus in partitioned.items():
            load[node] += len(gpus)
        placed: dict[str, float] = defaultdict(float)
        for item in r.proposed["placement"]:
            placed[item["to"]] += size[item["pod"]]
        for node, g in placed.items():
            assert node not in released and nodes[node].model == nodes[gang[0].node].model, r.id
            assert node not in hosts, f"{r.id}: {node} is a sharing host"
            assert load[node] + g <= nodes[node].gpus + 1e-9, f"{r.id}: {node} cannot hold the gang"
        level, domain = r.proposed["level"], r.proposed["domain"]

        def inside(names: set[str], level: str = level, domain: str = domain) -> bool:
            if level == "node":
                return names == {domain}
            key, _, value = domain.partition("=")
            return all(nodes[n].labels.get(key) == value for n in names)

        assert inside(set(placed)) and not inside({p.node for p in gang}), r.id
        STATS["topology"] += 1


def check_queues(rf: RandomFleet, recs: list[Any]) -> None:
    floors = {q["queue"]: math.ceil(max(q["largest_pod_gpus"], q["largest_gang_gpus"])) for q in rf.queues}
    for r in (r for r in recs if r.rule == "queue"):
        for key in ("deserved", "capability"):
            if key in r.proposed:
                assert r.proposed[key]["nvidia.com/gpu"] >= floors[r.queue], f"queue {r.queue} {key} below floor"
        STATS["queue"] += 1


# -- binpack against a brute force ------------------------------------------------------------
def oracle_min_nodes(caps: list[float], pods: list[dict[str, Any]], budgets: dict[str, int],
                     closed: list[bool] | None = None) -> int:
    """Fewest nodes that can keep all pods, by exhaustive search (small pools only)."""
    n = len(caps)
    keep = {p["node"] for p in pods if p["pinned"]}
    gangs = sorted({p["gang"] for p in pods if p["gang"]})

    def feasible(chosen: tuple[int, ...]) -> bool:
        inside = set(chosen)
        forced = {p["gang"] for p in pods if p["gang"] and p["node"] not in inside}
        free_gangs = [g for g in gangs if g not in forced]
        for bits in range(2 ** len(free_gangs)):
            restart = forced | {g for i, g in enumerate(free_gangs) if bits >> i & 1}
            if any(p["pinned"] and p["gang"] in restart for p in pods):
                continue
            order = sorted(range(len(pods)), key=lambda i: -pods[i]["gpus"])
            if search(order, 0, [0.0] * n, defaultdict(int), inside, restart):
                return True
        return False

    def search(order: list[int], k: int, load: list[float], used: dict[str, int], inside: set[int],
               restart: set[str]) -> bool:
        if k == len(order):
            return True
        p = pods[order[k]]
        options: list[tuple[int, bool]] = []
        if p["node"] in inside and not (p["gang"] and p["gang"] in restart):
            options.append((p["node"], False))
        if not p["pinned"] and not (p["gang"] and p["gang"] not in restart):
            evicted = p["gang"] in restart if p["gang"] else True
            options += [(j, evicted) for j in inside if (j != p["node"] or evicted)
                        and (j == p["node"] or not (closed and closed[j]))]
        for j, evicted in options:
            if load[j] + p["gpus"] > caps[j] + 1e-9:
                continue
            if evicted and any(used[b] + 1 > budgets.get(b, 0) for b in p["budgets"]):
                continue
            load[j] += p["gpus"]
            for b in p["budgets"] if evicted else ():
                used[b] += 1
            ok = search(order, k + 1, load, used, inside, restart)
            load[j] -= p["gpus"]
            for b in p["budgets"] if evicted else ():
                used[b] -= 1
            if ok:
                return True
        return False

    for size in range(len(keep), n + 1):
        for chosen in combinations(range(n), size):
            if keep <= set(chosen) and feasible(chosen):
                return size
    return n


SHARING = ("mig", "mps", "timeslice")


def consolidation_state(rf: RandomFleet, recs: list[Any]) -> tuple[dict[tuple[str, str], str], set[tuple[str, str]],
                                                                    dict[str, set[int]], set[str]]:
    """What the consolidation findings do before binpack: where each pod is after their moves,
    the pods they moved, the GPU indices they partition on each node, the nodes they make hosts."""
    where = {(p.namespace, p.name): p.node for p in rf.fleet.pods}
    moved: set[tuple[str, str]] = set()
    partitioned: dict[str, set[int]] = defaultdict(set)
    hosts: set[str] = set()
    for r in recs:
        if r.rule not in SHARING:
            continue
        for m in r.proposed.get("evict") or []:
            for pod in m["pods"]:
                where[(m["namespace"], pod)] = m["to"]
                moved.add((m["namespace"], pod))
        if r.rule == "mig" and r.proposed.get("gpu_index") is not None:
            partitioned[r.proposed["node"]].add(r.proposed["gpu_index"])
        elif r.rule != "mig" or r.proposed.get("strategy") == "single":
            hosts.add(r.proposed["node"])
    return where, moved, partitioned, hosts


def check_shared(rf: RandomFleet, recs: list[Any]) -> None:
    """A pod holding a fraction of a shared GPU is already shared: no MIG / MPS / time-slicing
    for it, and binpack neither moves it nor plans its node as whole GPUs."""
    fractional = {(p.namespace, p.workload) for p in rf.fleet.pods if p.share is not None}
    shared_nodes = {p.node for p in rf.fleet.pods if p.share is not None}
    for r in recs:
        if r.rule in ("mig", "mps", "timeslice"):
            assert (r.namespace, r.workload) not in fractional, f"{r.rule} for the fractional {r.workload}"
            assert r.proposed.get("node") not in shared_nodes, f"{r.rule} host {r.proposed.get('node')} is shared"
        if r.rule == "binpack":
            for m in r.proposed["moves"]:
                assert m["from"] not in shared_nodes and m["to"] not in shared_nodes, f"binpack moved {m}"
            assert not set(r.proposed["nodes_freed"]) & shared_nodes
    STATS["fractional_pods"] += sum(1 for p in rf.fleet.pods if p.share is not None)


def check_binpack_optimal(rf: RandomFleet, recs: list[Any], ctx: PlanContext) -> None:
    f = rf.fleet
    findings = {r.evidence["pool"]: r for r in recs if r.rule == "binpack"}
    where, moved, partitioned, hosts = consolidation_state(rf, recs)
    gone = {(p.namespace, p.name) for p in f.pods
            if ctx.is_gone(PodKey(f.cluster, p.namespace, p.name), WorkloadKey(f.cluster, p.namespace, p.workload))}
    returned: dict[str, float] = defaultdict(float)
    for r in recs:
        if r.rule != "binpack":
            for c in r.evidence["claims"]:
                returned[c["node"]] += c["gpus"]
    gang_size = defaultdict(int)
    for p in f.pods:
        if p.gang:
            gang_size[(p.namespace, p.gang)] += 1
    pools: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for n in f.nodes:
        if (n.mig_config or "") not in ("", "all-disabled") or n.device_plugin_config or n.name in hosts:
            continue
        if any(p.node == n.name and p.share is not None for p in f.pods):
            continue  # a node of shared GPUs is not planned
        if partitioned.get(n.name) or any(where[(p.namespace, p.name)] == n.name and (p.namespace, p.name) not in gone
                                          for p in f.pods):
            pools[(n.pool, n.zone, n.model)].append(n)
    for (pool, _, _), members in pools.items():
        index = {n.name: i for i, n in enumerate(members)}
        pods = [p for p in f.pods if where[(p.namespace, p.name)] in index and (p.namespace, p.name) not in gone]
        if len(members) > ORACLE_NODES or len(pods) > ORACLE_PODS:
            continue
        caps, closed = [], []
        for n in members:
            staying = sum(f._gpu_equiv(p) for p in pods if where[(p.namespace, p.name)] == n.name)
            staying += len(partitioned.get(n.name, ()))
            caps.append(max(n.gpus - returned[n.name], staying))
            closed.append(staying > n.gpus - returned[n.name] + 1e-9)  # takes no arrivals
        budgets: dict[str, int] = {}
        rows = []
        in_pool = defaultdict(int)
        for p in pods:
            if p.gang:
                in_pool[(p.namespace, p.gang)] += 1
        for p in pods:
            size = gang_size[(p.namespace, p.gang)] if p.gang else 1
            strict = bool(p.gang) and size > 1 and (p.gang_min is None or p.gang_min >= size)
            own = []
            for pdb in f.pdbs:
                sel = json.loads(pdb["selector"])["matchLabels"]
                if pdb["namespace"] == p.namespace and all(p.labels.get(k) == v for k, v in sel.items()):
                    covered = [q for q in f.pods if q.namespace == pdb["namespace"]
                               and all(q.labels.get(k) == v for k, v in sel.items())]
                    used = sum((q.namespace, q.name) in moved for q in covered)  # evicted by consolidation
                    budgets[pdb["name"]] = allowed(pdb, len(covered)) - used
                    own.append(pdb["name"])
            if p.gang and size > 1 and not strict:
                used = sum((q.namespace, q.name) in moved for q in f.pods if q.gang == p.gang and q.namespace == p.namespace)
                budgets[f"gang-{p.gang}"] = size - (p.gang_min or 1) - used
                own.append(f"gang-{p.gang}")
            pinned = (strict and ((p.namespace, p.gang) in rf.busy or in_pool[(p.namespace, p.gang)] < size)) \
                or (p.namespace, p.name) in moved
            rows.append({"node": index[where[(p.namespace, p.name)]], "gpus": f._gpu_equiv(p),
                         "gang": p.gang if strict else None, "pinned": pinned, "budgets": own})
        for n in members:  # GPUs partitioned for shared work stay where they are
            if partitioned.get(n.name):
                rows.append({"node": index[n.name], "gpus": float(len(partitioned[n.name])), "gang": None,
                             "pinned": True, "budgets": []})
        best = oracle_min_nodes(caps, rows, budgets, closed)
        r = findings.get(pool)
        kept = r.evidence["nodes_after"] if r else len(members)
        if r is None or r.evidence["plan_is_optimal"]:
            assert kept == best, f"pool {pool}: plan keeps {kept} nodes, the optimum is {best}"
            STATS["pools_checked"] += 1
            STATS["pools_with_release"] += best < len(members)


@pytest.mark.parametrize("batch", range(11))
def test_plans_on_random_fleets_hold_their_invariants(batch: int) -> None:
    per = math.ceil(FLEETS / 11)
    for seed in range(SEED + batch * per, SEED + min(FLEETS, (batch + 1) * per)):
        rf = random_fleet(seed)
        try:
            recs, ctx = evaluate_plan(rf.frames())  # the ledger checks its own invariants too
            check_ledger(rf, recs)
            check_gangs(rf, recs)
            check_sizing(rf, recs)
            check_sharing(rf, recs)
            check_queues(rf, recs)
            check_ray_and_scale_to_zero(rf, recs)
            check_signals(rf, recs)
            check_binpack_optimal(rf, recs, ctx)
            check_shared(rf, recs)
        except AssertionError as exc:
            raise AssertionError(f"random_fleet({seed}): {exc}") from exc
        STATS["fleets"] += 1
        STATS["findings"] += len(recs)


def plan_summary(recs: list[Any]) -> list[tuple[Any, ...]]:
    """What must not depend on how the exporter spelled its labels, nor on the cluster's name:
    every finding, its target, saving, confidence and proposal (not the id, which hashes the
    cluster: a proposal naming another finding names it by rule and target instead)."""
    names = {r.id: f"{r.rule}:{r.namespace}/{r.workload}/{r.node}/{r.queue}" for r in recs}

    def proposal(r: Any) -> str:
        text = json.dumps(r.proposed, sort_keys=True, default=str)
        for rid, name in names.items():
            text = text.replace(json.dumps(rid), json.dumps(name))
        return text

    return sorted(((r.rule, r.namespace, r.workload, r.node, round(r.monthly_savings_usd, 2),
                    round(r.confidence, 4), proposal(r)) for r in recs), key=repr)


def in_clusters(frames: dict[str, Any], clusters: list[str]) -> dict[str, Any]:
    """The same fleet collected under each of ``clusters``: every namespace, workload, node,
    pool and queue name the same in all of them (frames without a cluster column are the
    fleet's: the price catalog, the MIG catalog, the fleet summary)."""
    import polars as pl

    return {name: pl.concat([f.with_columns(pl.lit(c).alias("cluster")) for c in clusters])
            if "cluster" in f.columns else f for name, f in frames.items()}


@pytest.mark.parametrize("batch", range(2))
def test_clusters_with_the_same_names_are_planned_apart(batch: int) -> None:
    """Several clusters of one fleet (the same stack deployed in each): each cluster gets the
    single-cluster plan, with ids unique across the plan (and the ones of cluster "c" unchanged),
    each finding, target and saving its own cluster's, and the savings per cluster adding up."""
    import random

    from gpuinsight.plan import Plan

    per = math.ceil(MULTI / 2)
    for seed in range(SEED + batch * per, SEED + min(MULTI, (batch + 1) * per)):
        rf = random_fleet(seed)
        rng = random.Random(seed)
        clusters = ["c", *rng.sample(["east", "west", "eu-1", "prod a", "Prod-A"], rng.randint(1, 3))]
        try:
            single, _ = evaluate_plan(rf.frames())
            recs, _ = evaluate_plan(in_clusters(rf.frames(), clusters))
            ids = [r.id for r in recs]
            assert len(ids) == len(set(ids)) == len(single) * len(clusters)
            plan = Plan("plan-multi", datetime.now(UTC), None, (None, None), recs)
            assert plan.clusters == sorted(clusters) or not single
            mine = plan.by_cluster()
            for cluster in clusters:
                own = mine.get(cluster, [])
                assert plan_summary(own) == plan_summary(single), cluster
                assert all(r.target.get("cluster") == cluster for r in own if r.target)
                assert plan.savings_by_cluster().get(cluster, 0.0) == pytest.approx(
                    sum(r.monthly_savings_usd for r in single), abs=0.01 * max(1, len(single)))
            assert sorted(r.id for r in mine.get("c", [])) == sorted(r.id for r in single), "ids are stable"
            assert sum(plan.savings_by_cluster().values()) == pytest.approx(plan.total_monthly_savings_usd,
                                                                            abs=0.01 * len(clusters))
        except AssertionError as exc:
            raise AssertionError(f"random_fleet({seed}) in clusters {clusters}: {exc}") from exc
        STATS["multi_cluster_fleets"] += 1
        STATS["multi_cluster_findings"] += len(recs)


def test_scraped_fleets_give_one_plan_in_every_exporter_spelling(tmp_path: Path) -> None:
    """Each fleet is written twice, in two different real spellings, and loaded as two clusters of
    one warehouse by the file loader (every fleet and spelling its own cluster: one model build
    and one set of queries for all); each cluster's frames are planned by the rules engine."""
    import random

    import polars as pl

    from gpuinsight.api import GpuInsight
    from gpuinsight.config import Config
    from gpuinsight.sources.openmetrics import load_openmetrics
    from gpuinsight.sources.prices import load_catalog

    cases = []
    with GpuInsight(Config(db_path=tmp_path / "scraped.duckdb")) as gi:
        for seed in range(SEED, SEED + SCRAPED):
            rng = random.Random(seed)
            sf = scrape_fleet(seed)
            first = random_spelling(rng, mig=sf.mig)
            second = first
            while str(second) == str(first):
                second = random_spelling(rng, mig=sf.mig)
            for i, spelling in enumerate((first, second)):
                cluster = f"f{seed}-{i}"
                report = load_openmetrics(gi.wh, gi.config.with_(cluster=cluster),
                                          sf.write(tmp_path / f"{cluster}.om", spelling))
                assert not any("not matched" in n or "skipped" in n for n in report.notes), (seed, spelling, report)
                cases.append((seed, cluster, spelling, sf))
        load_catalog(gi.wh, gi.config, write_catalog(tmp_path / "prices.csv"))
        gi.refresh()
        frames = gi.rule_frames()  # what recommend reads
    plans: dict[int, list[Any]] = defaultdict(list)
    for seed, cluster, spelling, sf in cases:
        mine = {k: f.filter(pl.col("cluster") == cluster) if "cluster" in f.columns else f for k, f in frames.items()}
        try:
            recs, ctx = evaluate_plan(mine)
            rf = sf.as_random_fleet(cluster)
            check_ledger(rf, recs)
            check_gangs(rf, recs)
            check_sizing(rf, recs)
            check_binpack_optimal(rf, recs, ctx)
            check_shared(rf, recs)
        except AssertionError as exc:
            raise AssertionError(f"scrape_fleet({seed}) spelled {spelling}: {exc}") from exc
        plans[seed].append((str(spelling), plan_summary(recs)))
    for seed, ((first, a), (second, b)) in plans.items():
        assert a == b, f"scrape_fleet({seed}): {first} and {second} give different plans"
        STATS["scraped_fleets"] += 1
        for rec in a:
            STATS[f"scraped_{rec[0]}"] += 1
    assert STATS["scraped_fleets"] == SCRAPED


def test_the_random_fleets_exercised_every_invariant() -> None:
    # the batches above ran first (file order): the generator must have reached each case
    if STATS["fleets"] < FLEETS:
        pytest.skip("run with the whole module")
    print(f"random fleets: {dict(sorted(STATS.items()))}")  # seen with pytest -s
    assert STATS["fleets"] >= 200
    for key, least in (("mig", 20), ("mps", 20), ("timeslice", 20), ("queue", 20), ("pools_checked", 50),
                       ("mig_per_gpu", 20), ("mig_on_8_gpu_nodes", 10), ("mig_after_evictions", 3),
                       ("lone_production_mig", 10), ("sharing_hosts_emptied", 3),
                       ("pools_with_release", 10), ("scale_to_zero", 20), ("ray:job_cleanup", 10),
                       ("ray:head_gpus", 10), ("ray:worker_min_replicas", 20), ("input_starved", 10), ("topology", 10),
                       ("fractional_pods", 50)):
        assert STATS[key] >= least, (key, dict(STATS))
    if MULTI >= 24:  # the multi-cluster batches ran too, with findings to keep apart
        assert STATS["multi_cluster_fleets"] == MULTI and STATS["multi_cluster_findings"] >= 200, dict(STATS)
    if STATS["scraped_fleets"] >= 16:  # the loaded slice reached idle, consolidation and binpack
        assert STATS["scraped_idle"] and STATS["scraped_binpack"], dict(STATS)
        assert STATS["scraped_mig"] + STATS["scraped_mps"] + STATS["scraped_timeslice"], dict(STATS)


def test_greedy_fallback_is_valid_and_never_beats_the_ilp() -> None:
    import random

    from gpuinsight.rules.pack_bound import (
        PoolNode,
        PoolPod,
        PoolProblem,
        check_plan,
        solve_greedy,
        solve_ilp,
    )

    worse = 0
    for seed in range(60):
        rng = random.Random(seed)
        nodes = [PoolNode(f"n{i}", 8.0, 10.0) for i in range(rng.randint(2, 6))]
        pods, load = [], [0.0] * len(nodes)
        for i in range(rng.randint(1, 12)):
            g = rng.choice([1.0, 1.0, 2.0, 4.0])
            j = rng.randrange(len(nodes))
            if load[j] + g <= 8:
                load[j] += g
                pods.append(PoolPod(f"p{i}", j, g, gang=rng.choice([None, None, "g1", "g2"]),
                                    budgets=("b",) if rng.random() < 0.3 else ()))
        problem = PoolProblem(nodes, pods, {"b": rng.randint(0, 2)})
        exact, greedy = solve_ilp(problem), solve_greedy(problem)
        assert exact is not None and check_plan(problem, exact) == [] and check_plan(problem, greedy) == []
        assert len(set(greedy.assign)) >= len(set(exact.assign)), seed
        worse += len(set(greedy.assign)) > len(set(exact.assign))
    assert worse < 60  # the greedy plan is not always worse: it is a real fallback

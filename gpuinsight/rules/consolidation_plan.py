"""The consolidation planner (pure): pack small single-GPU workloads of one GPU model onto
fewer GPUs, as MIG slices or shared GPUs, using the GPUs they already hold.

Every workload is a *demand*: framebuffer it must be given (its observed maximum plus
headroom), peak compute (short-window p95) and whether it is production. Capacity is
(1) free instances on nodes that already run MIG, and (2) *host* nodes: nodes whose GPU pods
are all demands of this plan, so that the whole node can be given one configuration:

* MIG, a named mig-parted layout on every GPU (``all-<profile>`` or ``all-balanced``): each
  demand takes one instance whose memory and compute slices hold it (compute at most the
  target share of the slice). Production and other work may share a GPU (MIG isolates them).
* MPS with ``R`` replicas per GPU: the device plugin gives each client 1/R of the memory and
  of the compute, so each demand must fit 1/R; production only.
* time-slicing with ``R`` replicas: no isolation, so any ``R`` clients that could meet on one
  GPU must fit together (memory summed, compute summed under the target); non-production only.

Which physical GPU a shared replica lands on is the device plugin's choice, hence the "any R"
rule on multi-GPU nodes. Hosts are opened greedily (the node holding most demands first), each
with the configuration that frees the most GPUs; a host that frees nothing is not used.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuinsight.rules.mig_packing import MigProfile, fits_a_layout

# Per-GPU instance classes of mig-parted's `all-balanced` (2 x 1g, 1 x 2g, 1 x 3g on 7-slice GPUs).
BALANCED = ((3, 4), (2, 2), (1, 1), (1, 1))


@dataclass
class Demand:
    key: tuple[str, str, str]     # cluster, namespace, workload
    pod: str
    node: str
    mem_mib: float                # framebuffer it must be given (observed max + headroom)
    compute: float                # peak compute as a share of a whole GPU
    production: bool
    row: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> float:
        return max(self.mem_mib / 81920.0, self.compute)


@dataclass
class HostNode:
    node: str
    gpu_count: int
    memory_mib: float
    own: list[Demand]             # the demands running on it now


@dataclass
class Slot:
    """A free MIG instance on a node that already runs MIG."""

    node: str
    profile: MigProfile
    config: str


@dataclass
class Placement:
    """Where one demand goes."""

    demand: Demand
    mode: str                     # mig | mps | time-slicing
    node: str                     # the host (or existing MIG) node
    config: str                   # mig-parted config name, or the sharing replicas as text
    profile: MigProfile | None    # the MIG instance it takes
    share: float                  # share of a GPU it costs now (its GPU less this is freed)
    replicas: int = 0             # sharing replicas per GPU
    group: list[Demand] = field(default_factory=list)  # every demand on the same host
    gpus_used: int = 0            # GPUs of the host the group needs
    existing: bool = False        # a free instance on a node already running MIG


@dataclass(frozen=True)
class Targets:
    memory_headroom: float
    compute_target: float
    ts_memory_fill: float
    max_clients: int


def slices_needed(d: Demand, t: Targets) -> int:
    """Compute slices (of 7) so that the demand's peak is at most the target share of the slice."""
    return max(1, math.ceil(d.compute * 7 / t.compute_target - 1e-9))


def fits_profile(d: Demand, p: MigProfile, t: Targets) -> bool:
    return p.usable_mib >= d.mem_mib and p.compute_slices >= slices_needed(d, t) and p.compute_slices < 7


# -- MIG hosts -------------------------------------------------------------------------------
def mig_configs(profiles: list[MigProfile], layouts: list[Counter[str]] | None = None
                ) -> list[tuple[str, list[MigProfile]]]:
    """(mig-parted config name, instances per GPU) for the named layouts of one model that the
    GPU's valid placements allow (``layouts``, from the MIG user guide's placement rules)."""
    out = [(f"all-{p.profile}", [p] * p.max_instances) for p in profiles
           if p.compute_slices < 7 and "+me" not in p.profile]
    by_class = {(p.compute_slices, p.memory_slices): p for p in profiles if "+me" not in p.profile}
    if all(c in by_class for c in BALANCED):
        out.append(("all-balanced", [by_class[c] for c in BALANCED]))
    if layouts:
        out = [(name, per_gpu) for name, per_gpu in out
               if fits_a_layout(Counter(p.slice_class for p in per_gpu), layouts)]
    return out


def pack_mig(first: list[Demand], rest: list[Demand], per_gpu: list[MigProfile], gpus: int, t: Targets
             ) -> tuple[list[tuple[Demand, MigProfile, int]], int] | None:
    """First-fit decreasing into ``gpus`` GPUs of identical instance lists: every demand of
    ``first`` (None if one does not fit), then as many of ``rest`` as fit.

    Returns (demand, instance profile, GPU index) per placed demand, and the GPUs used."""
    free: list[list[MigProfile]] = []
    placed: list[tuple[Demand, MigProfile, int]] = []

    def order(ds: list[Demand]) -> list[Demand]:
        return sorted(ds, key=lambda d: (-slices_needed(d, t), -d.mem_mib, d.key))

    for must, batch in ((True, order(first)), (False, order(rest))):
        for d in batch:
            gpu = next((i for i, slots in enumerate(free) if any(fits_profile(d, p, t) for p in slots)), None)
            if gpu is None and len(free) < gpus and any(fits_profile(d, p, t) for p in per_gpu):
                free.append(list(per_gpu))
                gpu = len(free) - 1
            if gpu is None:
                if must:
                    return None
                continue
            best = min((p for p in free[gpu] if fits_profile(d, p, t)), key=lambda p: (p.compute_slices, p.memory_slices))
            free[gpu].remove(best)
            placed.append((d, best, gpu))
    return placed, len(free)


# -- shared GPUs -----------------------------------------------------------------------------
def _largest(values: Iterable[float], n: int) -> float:
    return sum(sorted(values, reverse=True)[:n])


def shared_ok(members: list[Demand], gpus: int, replicas: int, memory_mib: float, mps: bool, t: Targets) -> bool:
    if len(members) > gpus * replicas:
        return False
    if mps:  # each client is held to 1/R of the memory and of the compute
        return all(d.mem_mib <= memory_mib / replicas and d.compute <= t.compute_target / replicas for d in members)
    return (_largest((d.mem_mib for d in members), replicas) <= memory_mib * t.ts_memory_fill
            and _largest((d.compute for d in members), replicas) <= t.compute_target)


def pack_shared(own: list[Demand], orders: list[list[Demand]], host: HostNode, replicas: int, mps: bool,
                t: Targets) -> list[Demand] | None:
    """Own demands (all of them) plus as many others as fit, trying each candidate order;
    None if the own ones do not fit."""
    if not shared_ok(own, host.gpu_count, replicas, host.memory_mib, mps, t):
        return None
    best, room = list(own), host.gpu_count * replicas
    for order in orders:
        trial = list(own)
        for d in order:
            if len(trial) >= room:
                break
            if d.production == mps and shared_ok([*trial, d], host.gpu_count, replicas, host.memory_mib, mps, t):
                trial.append(d)
        if len(trial) > len(best):
            best = trial
    return best


# -- the planner -----------------------------------------------------------------------------
@dataclass
class HostChoice:
    mode: str
    config: str
    members: list[Demand]
    gpus_used: int
    replicas: int = 0
    profiles: dict[int, tuple[MigProfile, int]] = field(default_factory=dict)  # id(demand) -> (profile, gpu)

    @property
    def gain(self) -> int:
        return len(self.members) - self.gpus_used


def best_host_choice(host: HostNode, orders: list[list[Demand]], configs: list[tuple[str, list[MigProfile]]],
                     t: Targets) -> HostChoice | None:
    """The configuration of ``host`` that frees most GPUs, taking its own demands and others
    (``orders``: the candidates, smallest first and largest first)."""
    own = host.own
    others = list({id(d): d for order in orders for d in order}.values())
    choices: list[HostChoice] = []
    if configs:
        for config, per_gpu in configs:
            packed = pack_mig(own, others, per_gpu, host.gpu_count, t)
            if packed is not None:
                placed, used = packed
                choices.append(HostChoice("mig", config, [d for d, _, _ in placed], used,
                                          profiles={id(d): (p, g) for d, p, g in placed}))
    prod = {d.production for d in own}
    for mps in (True, False):
        if (True in prod and not mps) or (False in prod and mps):
            continue  # production only with MPS, other work only with time-slicing; never mixed
        for replicas in range(2, t.max_clients + 1):
            members = pack_shared(own, orders, host, replicas, mps, t)
            if members is not None:
                choices.append(HostChoice("mps" if mps else "time-slicing", str(replicas), members,
                                          math.ceil(len(members) / replicas), replicas))
    choices = [c for c in choices if c.gain >= 1]
    # most GPUs freed; then MIG (hardware isolation), then fewer replicas
    return min(choices, key=lambda c: (-c.gain, c.mode != "mig", c.replicas, c.config)) if choices else None


def plan_group(demands: list[Demand], hosts: list[HostNode], slots: list[Slot],
               configs: list[tuple[str, list[MigProfile]]], t: Targets) -> list[Placement]:
    """Placements for one group (cluster, GPU model, capacity type, zone); ``configs`` are the
    MIG layouts hosts may take (none for GPUs without MIG)."""
    out: list[Placement] = []
    placed: set[int] = set()
    # 1. free instances of nodes already running MIG: already paid for, no repartitioning
    free = list(slots)
    for d in sorted(demands, key=lambda d: (-d.size, d.key)):
        fit = [s for s in free if fits_profile(d, s.profile, t)]
        if fit:
            s = min(fit, key=lambda s: (s.profile.compute_slices, s.profile.memory_slices, s.node))
            free.remove(s)
            placed.add(id(d))
            out.append(Placement(d, "mig", s.node, s.config, s.profile, s.profile.compute_slices / 7,
                                 group=[d], existing=True))
    # 2. host nodes, the one holding most demands first
    ascending = sorted(demands, key=lambda d: (d.size, d.key))
    for host in sorted(hosts, key=lambda h: (-len(h.own), h.gpu_count, h.node)):
        own = [d for d in host.own if id(d) not in placed]
        if not own:
            continue
        mine = {id(d) for d in own}
        free_cands = [d for d in ascending if id(d) not in placed and id(d) not in mine]
        # enough candidates to fill the host twice over, smallest first and largest first
        n = 2 * host.gpu_count * max(t.max_clients, 7)
        orders = [free_cands[:n], free_cands[::-1][:n]]
        choice = best_host_choice(HostNode(host.node, host.gpu_count, host.memory_mib, own), orders, configs, t)
        if choice is None:
            continue
        share = choice.gpus_used / len(choice.members)
        for d in choice.members:
            placed.add(id(d))
            prof = choice.profiles[id(d)][0] if id(d) in choice.profiles else None
            out.append(Placement(d, choice.mode, host.node, choice.config, prof, share, choice.replicas,
                                 group=choice.members, gpus_used=choice.gpus_used))
    return out

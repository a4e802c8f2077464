"""How small workloads share GPUs (pure): demands, MIG instances per GPU, shared-GPU groups.

Every small workload is a *demand*: framebuffer it must be given (its observed maximum plus
headroom, :func:`demand_size`), peak compute (short-window p95) and whether it is production.
The shapes of sharing:

* **MIG, per GPU** (:func:`pack_mig_gpus`): a GPU is partitioned into instances, one per demand,
  each the smallest whose memory and compute slices hold it (compute at most the target share of
  the slice), the instances of one GPU within one of its valid layouts (the MIG user guide's
  placement rules, ``mig_catalog``). Production and other work may share a GPU (MIG isolates
  them in hardware). A node may partition some GPUs and keep the others whole.
* **MIG, a named layout on every GPU of a node** (``all-<profile>``, ``all-balanced``:
  :func:`mig_configs`): for nodes whose device plugin runs the single strategy, where a node's
  GPUs are either all MIG with one profile or none.
* **MPS with ``R`` replicas per GPU**, production only: the device plugin gives each client 1/R
  of the memory and of the compute, so each demand must fit 1/R.
* **time-slicing with ``R`` replicas**, non-production only: no isolation, so any ``R`` clients
  that could meet on one GPU must fit together (memory summed, compute summed under the target).

MPS, time-slicing and the single strategy configure a whole node (the device plugin's config
applies to every GPU of it: :func:`best_host_choice`); which physical GPU a shared replica
lands on is the device plugin's choice, hence the "any R" rule on multi-GPU nodes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuinsight.keys import WorkloadKey
from gpuinsight.rules.common import Targets, compute_peak, num
from gpuinsight.rules.mig_packing import MigProfile, fits, fits_a_layout, slice_profiles, slices_for
from gpuinsight.rules.serving import ServingSize, serving_size
from gpuinsight.sql.rows import Row

# Per-GPU instance classes of mig-parted's `all-balanced` (2 x 1g, 1 x 2g, 1 x 3g on 7-slice GPUs).
BALANCED = ((3, 4), (2, 2), (1, 1), (1, 1))


@dataclass
class Demand:
    key: WorkloadKey              # its workload, with its cluster
    pod: str
    node: str
    mem_mib: float                # framebuffer it must be given (observed max + headroom)
    compute: float                # peak compute as a share of a whole GPU
    production: bool
    row: Any = field(default=None, repr=False)   # its workload_gpu_profile row
    gpu_indices: tuple[int, ...] | None = None  # the GPU(s) its pod holds now (DCGM), None: unknown
    evictable: bool = False       # its pod may be stopped before a repartition (no PDB, no gang of several)
    node_row: Any = field(default=None, repr=False)  # the nodes_current row of its pod's node
    production_reason: str = ""
    serving: dict[str, Any] | None = field(default=None, repr=False)  # its serving totals (serving_by_workload)
    serving_size: ServingSize | None = field(default=None, repr=False)  # an inference server: its memory sizing

    @property
    def size(self) -> float:
        return max(self.mem_mib / 81920.0, self.compute)


def demand_size(profile: Row, facts: Row | None, t: Targets) -> tuple[float, float]:
    """What a workload (its ``workload_gpu_profile`` row; ``facts``: its ``serving_memory`` row)
    must be given where it shares a GPU: framebuffer (MiB: the observed maximum plus headroom; an
    inference server what it reserves, or what it needs of it,
    :func:`~gpuinsight.rules.serving.serving_size`) and compute (its short-window p95 as a share
    of a GPU). The one place a workload's demand is sized."""
    sized = serving_size(profile, facts, t)
    mem = sized.mem_mib if sized is not None else num(profile.fb_max_mib) * (1 + t.memory_headroom)
    return mem, compute_peak(profile)


def slices_needed(d: Demand, t: Targets) -> int:
    """Compute slices (of 7) so that the demand's peak is at most the target share of the slice."""
    return slices_for(d.compute, t.compute_target)


def fits_profile(d: Demand, p: MigProfile, t: Targets) -> bool:
    return fits(p, d.mem_mib, slices_needed(d, t))


def layout_ok(classes: Counter[str], layouts: list[Counter[str]], per_gpu: list[MigProfile]) -> bool:
    """Whether a multiset of slice classes fits one GPU: within a valid layout when the catalog
    has them, else within the GPU's 7 compute and 8 memory slices."""
    if layouts:
        return fits_a_layout(classes, layouts)
    by_class = {p.slice_class: p for p in per_gpu}
    return (sum(by_class[c].compute_slices * n for c, n in classes.items()) <= 7
            and sum(by_class[c].memory_slices * n for c, n in classes.items()) <= 8)


# -- MIG per GPU --------------------------------------------------------------------------------
@dataclass
class MigGpu:
    """One GPU partitioned for demands: the instance each takes."""

    members: list[tuple[Demand, MigProfile]] = field(default_factory=list)

    def classes(self) -> Counter[str]:
        return Counter(p.slice_class for _, p in self.members)

    def devices(self) -> dict[str, int]:
        """The GPU's mig-parted ``mig-devices``: profile -> count."""
        return dict(sorted(Counter(p.profile for _, p in self.members).items()))

    def share(self, d: Demand) -> float:
        """The part of the GPU a member costs: its compute slices over those of every member."""
        total = sum(p.compute_slices for _, p in self.members)
        return next(p.compute_slices for m, p in self.members if m is d) / total

    @property
    def gain(self) -> int:
        return len(self.members) - 1


def pack_mig_gpus(demands: Iterable[Demand], profiles: list[MigProfile], layouts: list[Counter[str]],
                  t: Targets) -> list[MigGpu]:
    """First-fit decreasing of the demands that fit a MIG instance onto GPUs, each GPU any
    valid layout: a demand takes the smallest instance that keeps its GPU's layout valid, on
    the first GPU where one does. Demands that fit no instance are left out."""
    usable = slice_profiles(profiles)
    gpus: list[MigGpu] = []
    for d in sorted(demands, key=lambda d: (-slices_needed(d, t), -d.mem_mib, d.key, d.pod)):
        fits = [p for p in usable if fits_profile(d, p, t)]
        if not fits:
            continue
        for gpu in gpus:
            have = gpu.classes()
            prof = next((p for p in fits if layout_ok(have + Counter([p.slice_class]), layouts, usable)), None)
            if prof is not None:
                gpu.members.append((d, prof))
                break
        else:
            gpus.append(MigGpu([(d, fits[0])]))
    return gpus


# -- MIG, one named layout on every GPU of a node ----------------------------------------------
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


# -- shared GPUs (MPS, time-slicing) ------------------------------------------------------------
def _largest(values: Iterable[float], n: int) -> float:
    return sum(sorted(values, reverse=True)[:n])


def shared_ok(members: list[Demand], gpus: int, replicas: int, memory_mib: float, mps: bool, t: Targets) -> bool:
    if len(members) > gpus * replicas:
        return False
    if mps:  # each client is held to 1/R of the memory and of the compute
        return all(d.mem_mib <= memory_mib / replicas and d.compute <= t.compute_target / replicas for d in members)
    return (_largest((d.mem_mib for d in members), replicas) <= memory_mib * t.ts_memory_fill
            and _largest((d.compute for d in members), replicas) <= t.compute_target)


@dataclass
class HostNode:
    node: str
    gpu_count: int
    memory_mib: float
    own: list[Demand]             # the demands running on it now


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


@dataclass
class HostChoice:
    """A node given one configuration for all its GPUs: MPS, time-slicing or a named MIG layout."""

    mode: str                     # mig | mps | time-slicing
    config: str                   # mig-parted config name, or the sharing replicas as text
    members: list[Demand]
    gpus_used: int
    replicas: int = 0
    profiles: dict[int, tuple[MigProfile, int]] = field(default_factory=dict)  # id(demand) -> (profile, gpu)

    @property
    def gain(self) -> int:
        return len(self.members) - self.gpus_used

    def share(self, d: Demand) -> float:
        return self.gpus_used / len(self.members)


def best_host_choice(host: HostNode, orders: list[list[Demand]], configs: list[tuple[str, list[MigProfile]]],
                     t: Targets) -> HostChoice | None:
    """The configuration of ``host`` that frees most GPUs, taking its own demands and others
    (``orders``: the candidates, smallest first and largest first); ``configs`` are the named
    MIG layouts it may take (none where the node cannot run MIG that way)."""
    own = host.own
    others = list({id(d): d for order in orders for d in order}.values())
    choices: list[HostChoice] = []
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


# -- free instances on nodes that already run MIG -----------------------------------------------
@dataclass
class Slot:
    """A free MIG instance on a node that already runs MIG."""

    node: str
    profile: MigProfile
    config: str


def take_free_slots(demands: list[Demand], slots: list[Slot], t: Targets) -> list[tuple[Demand, Slot]]:
    """Largest demands first, each into the smallest free instance that holds it: already paid
    for, no repartitioning."""
    free = list(slots)
    out = []
    for d in sorted(demands, key=lambda d: (-d.size, d.key)):
        fit = [s for s in free if fits_profile(d, s.profile, t)]
        if fit:
            s = min(fit, key=lambda s: (s.profile.compute_slices, s.profile.memory_slices, s.node))
            free.remove(s)
            out.append((d, s))
    return out

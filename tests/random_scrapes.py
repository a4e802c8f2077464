"""Random fleets that go through the real loading path, in random dcgm-exporter spellings.

A fleet is generated as per-step readings (GR/SM activity, framebuffer, power of every GPU
and MIG instance) and kube-state-metrics facts (nodes with their labels and capacity, pods
with owner, GPU request and node, the exporter DaemonSet's pods), then written as OpenMetrics
text as one real dcgm-exporter deployment would label it (:class:`Spelling`; the label sets of
``tests/fixtures/real/dcgm/`` and docs/collectors.md, "Generations"):

* metric names of 2.x-4.x (``DCGM_FI_*``) or of 1.x (``dcgm_fb_used``, ``dcgm_gpu_utilization``,
  ``dcgm_fi_prof_*``), which has no ``modelName`` and no MIG;
* the GPU's ``UUID`` or ``uuid``;
* the node as ``Hostname`` (2.x-3.x) or ``hostname`` (2026) naming the node, or naming the
  exporter *pod* (no ``NODE_NAME``), a relabelled ``node`` / ``kubernetes_node``, or nothing
  (1.x: the node comes from the exporter pod's address);
* the workload as ``pod``/``namespace``/``container`` (labels honoured), ``exported_pod``/
  ``exported_namespace``/``exported_container`` beside the exporter's own ``pod`` (not
  honoured), or 1.x's ``pod_name``/``pod_namespace``/``container_name``; a free GPU with empty
  or absent pod labels;
* kube-state-metrics scraped with or without its labels honoured (``exported_namespace``/
  ``exported_pod``).

Every spelling carries the same information, so the same fleet must give the same plan in
each. What the SQL models compute from the readings (peak framebuffer, p95 of per-step
activity) is recomputed here from the written values and kept as a
:class:`tests.rule_fleets.Fleet`, so the property tests' invariant checks apply unchanged.

The fleets hold services (small, bursty or memory-spiky, production or not), idle and nightly
workloads, busy training and batch Jobs, free GPUs and MIG nodes, in pools whose mix varies;
gangs, queues, PodDisruptionBudgets and spot candidates (finished tasks, PDBs) need kubectl
dumps and are left to the frame-level fleets of tests/random_fleets.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from gpuinsight.gpumodels import canonical_gpu_model
from gpuinsight.sources.dcgm import POWER_LIMIT_W
from tests.random_fleets import NOT_PROD_NS, PRIORITY, PROD_NS, RandomFleet, fresh_name, word
from tests.rule_fleets import Fleet, Node, Pod, Usage

T0_S = int(datetime(2026, 6, 1, tzinfo=UTC).timestamp())
STEP_S = 600
STEPS = 78  # 13 h of 10-minute scrapes: above the rules' 12 h minimum of evidence
MIG_PROFILE, MIG_SLICE_MIB = "1g.10gb", 9856

# model, product label, DCGM modelName, GPUs per node, memory MiB, on-demand and spot $/node-hour
SHAPES = [
    ("H100-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3", 8, 81559, 55.04, 22.0),
    ("H100-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3", 1, 81559, 6.88, 2.9),
    ("A100-80GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 8, 81920, 27.45, 11.0),
    ("A100-40GB", "NVIDIA-A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 8, 40960, 21.96, 8.8),
    ("L4", "NVIDIA-L4", "NVIDIA L4", 4, 22888, 4.60, 1.9),
    ("A10G", "NVIDIA-A10G", "NVIDIA A10G", 1, 22888, 1.01, 0.45),
]
# What a pool runs (weights of the workload kinds per GPU): small services that could share
# GPUs, training and batch work, or a mix; "none" leaves a GPU free.
POOL_MIXES = {
    "services": {"idle": 1, "service": 12, "none": 2},  # single replicas only (see below)
    "training": {"busy": 6, "batch": 3, "idle": 1, "none": 2},
    "mixed": {"idle": 3, "service": 6, "busy": 3, "batch": 1, "nightly": 1, "none": 4},
}
V1_NAMES = {"gr": "dcgm_fi_prof_gr_engine_active", "sm": "dcgm_fi_prof_sm_active", "util": "dcgm_gpu_utilization",
            "fb": "dcgm_fb_used", "fb_free": "dcgm_fb_free", "power": "dcgm_power_usage"}
NAMES = {"gr": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "sm": "DCGM_FI_PROF_SM_ACTIVE", "util": "DCGM_FI_DEV_GPU_UTIL",
         "fb": "DCGM_FI_DEV_FB_USED", "fb_free": "DCGM_FI_DEV_FB_FREE", "power": "DCGM_FI_DEV_POWER_USAGE"}


@dataclass(frozen=True)
class Spelling:
    """How one dcgm-exporter deployment (and the kube-state-metrics scrape) labels its series."""

    generation: str   # "1.x" | "2.x" | "4.x"
    uuid: str         # "UUID" | "uuid"
    node: str         # "Hostname" | "hostname" | "Hostname=pod" | "hostname=pod" | "node" | "kubernetes_node" | ""
    workload: str     # "honoured" | "exported" | "1.x"
    ksm_exported: bool

    def __str__(self) -> str:
        return (f"{self.generation}/{self.uuid}/{self.node or 'no-node-label'}/{self.workload}"
                f"{'/ksm-exported' if self.ksm_exported else ''}")


def random_spelling(rng: random.Random, *, mig: bool) -> Spelling:
    generation = rng.choice(["2.x", "4.x"] if mig else ["1.x", "2.x", "4.x"])
    if generation == "1.x":  # no Hostname, no MIG, the 1.x pod labels
        return Spelling("1.x", rng.choice(["uuid", "UUID"]), rng.choice(["", "node", "kubernetes_node"]), "1.x",
                        rng.random() < 0.5)
    host = "Hostname" if generation == "2.x" else "hostname"
    return Spelling(generation, rng.choice(["UUID", "UUID", "uuid"]),
                    rng.choice([host, f"{host}=pod", "node", "kubernetes_node"]),
                    rng.choice(["honoured", "exported"]), rng.random() < 0.5)


@dataclass
class Device:
    """One GPU or MIG instance of a node, with what runs on it and its readings."""

    node: str
    gpu: int
    uuid: str
    model_name: str
    memory: float
    mig_instance: int | None = None
    pod: Pod | None = None
    gr: np.ndarray | None = None
    fb: np.ndarray | None = None
    text: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class ScrapeFleet:
    seed: int
    fleet: Fleet
    devices: list[Device]
    shapes: dict[str, tuple]          # node -> its SHAPES row
    exporter: dict[str, tuple[str, str]]   # node -> (exporter pod, its IP)
    mig: bool

    def as_random_fleet(self, cluster: str | None = None) -> RandomFleet:
        """The fleet as the property checks take it (loaded as ``cluster``)."""
        return RandomFleet(self.seed, replace(self.fleet, cluster=cluster or self.fleet.cluster))

    # -- writing ----------------------------------------------------------------------------
    def write(self, path: Path, spelling: Spelling) -> Path:
        """The fleet's scrapes as one OpenMetrics file, labelled as ``spelling`` says."""
        path.write_text("\n".join([*self._dcgm(spelling), *self._ksm(spelling), "# EOF"]) + "\n")
        return path

    def _dcgm(self, sp: Spelling) -> list[str]:
        names = V1_NAMES if sp.generation == "1.x" else NAMES
        ts = [str(T0_S + k * STEP_S) for k in range(STEPS)]
        out: list[str] = []
        for key in ("gr", "sm", "util", "fb", "fb_free", "power"):
            metric = names[key]
            out += [f"# HELP {metric} {key}", f"# TYPE {metric} gauge"]
            for d in self.devices:
                if key == "util" and d.mig_instance is not None:
                    continue  # MIG instances have no GPU_UTIL (GR engine active instead)
                values = _values(d, key)
                head = f"{metric}{{{_labels(self, d, sp)}}} "
                out += [f"{head}{v} {t}" for v, t in zip(values, ts, strict=True)]
        return out

    def _ksm(self, sp: Spelling) -> list[str]:
        ksm = ',instance="10.0.4.17:8080",job="kube-state-metrics"'
        scrape = ',namespace="kube-system",pod="kube-state-metrics-6d4f8"' if sp.ksm_exported else ""
        ns_key, pod_key = ("exported_namespace", "exported_pod") if sp.ksm_exported else ("namespace", "pod")
        every = [str(T0_S + k * STEP_S) for k in range(STEPS)]
        ends = [every[0], every[-1]]
        out: list[str] = []

        def series(metric: str, labels: str, value: object, times: list[str]) -> None:
            out.extend(f"{metric}{{{labels}{ksm}}} {value} {t}" for t in times)

        for metric in ("kube_node_info", "kube_node_labels", "kube_node_status_capacity"):
            out += [f"# HELP {metric} x", f"# TYPE {metric} gauge"]
            for n in self.fleet.nodes:
                shape = self.shapes[n.name]
                if metric == "kube_node_info":
                    series(metric, f'node="{n.name}",provider_id="aws:///{n.zone}/i-{n.name}",internal_ip="'
                           f'{self.exporter[n.name][1]}"', 1, every)
                elif metric == "kube_node_labels":
                    labels = {"node_kubernetes_io_instance_type": _instance_type(shape[0], shape[3]),
                              "karpenter_sh_capacity_type": n.capacity_type, "karpenter_sh_nodepool": n.pool,
                              "nvidia_com_gpu_product": shape[1], "nvidia_com_gpu_count": str(n.gpus),
                              "topology_kubernetes_io_zone": n.zone}
                    if n.mig_config:
                        labels["nvidia_com_mig_config"] = n.mig_config
                    text = ",".join(f'label_{k}="{v}"' for k, v in labels.items())
                    series(metric, f'node="{n.name}",{text}', 1, ends)
                else:
                    resource, count = ((f"nvidia_com_mig_{MIG_PROFILE.replace('.', '_')}", 7 * n.gpus)
                                       if n.mig_config else ("nvidia_com_gpu", n.gpus))
                    series(metric, f'node="{n.name}",resource="{resource}",unit="integer"', count, ends)
        pods = [(p, f"uid-{p.namespace}-{p.name}", i) for i, p in enumerate(self.fleet.pods)]
        exporters = [(node, pod, ip) for node, (pod, ip) in self.exporter.items()]
        families = ("kube_pod_info", "kube_pod_owner", "kube_pod_container_resource_requests", "kube_pod_created",
                    "kube_pod_start_time", "kube_pod_status_phase", "kube_replicaset_owner")
        for metric in families:
            out += [f"# HELP {metric} x", f"# TYPE {metric} gauge"]
            if metric == "kube_replicaset_owner":
                for wl, ns in sorted({(p.workload, p.namespace) for p, _, _ in pods if p.kind == "Deployment"}):
                    series(metric, f'{ns_key}="{ns}",replicaset="{_replicaset(wl)}",owner_kind="Deployment",'
                           f'owner_name="{wl}",owner_is_controller="true"{scrape}', 1, ends)
                continue
            for p, uid, i in pods:
                base = f'{ns_key}="{p.namespace}",{pod_key}="{p.name}",uid="{uid}"'
                owner_kind, owner = (("ReplicaSet", _replicaset(p.workload)) if p.kind == "Deployment"
                                     else (p.kind, p.workload))
                if metric == "kube_pod_info":
                    series(metric, f'{base},node="{p.node}",created_by_kind="{owner_kind}",created_by_name="{owner}",'
                           f'priority_class="{p.priority_class or ""}",host_ip="{self.exporter[p.node][1]}",'
                           f'pod_ip="10.1.{i // 250}.{i % 250}",'
                           f'host_network="false"{scrape}', 1, every)
                elif metric == "kube_pod_owner":
                    series(metric, f'{base},owner_kind="{owner_kind}",owner_name="{owner}",'
                           f'owner_is_controller="true"{scrape}', 1, ends)
                elif metric == "kube_pod_container_resource_requests":
                    resource = (f"nvidia_com_mig_{p.mig_profile.replace('.', '_')}" if p.mig_profile
                                else "nvidia_com_gpu")
                    series(metric, f'{base},container="main",node="{p.node}",resource="{resource}",'
                           f'unit="integer"{scrape}', int(p.gpus), ends)
                elif metric in ("kube_pod_created", "kube_pod_start_time"):
                    series(metric, f"{base}{scrape}", T0_S - 600, ends)
                else:
                    series(metric, f'{base},phase="Running"{scrape}', 1, every)
            if metric == "kube_pod_info":  # the exporter DaemonSet's pods: where each exporter runs
                for node, pod, ip in exporters:
                    series(metric, f'{ns_key}="gpu-operator",{pod_key}="{pod}",uid="uid-{pod}",node="{node}",'
                           f'created_by_kind="DaemonSet",created_by_name="nvidia-dcgm-exporter",priority_class="",'
                           f'host_ip="{ip}",pod_ip="{_pod_ip(ip)}",host_network="false"{scrape}', 1, every)
        return out


def write_catalog(path: Path) -> Path:
    """The price catalog of every shape (one for all fleets: instance types name their shape)."""
    rows = sorted(f"{_instance_type(model, gpus)},{model},{gpus},{od},{spot},random-scrapes,2026-05-30"
                  for model, _, _, gpus, _, od, spot in SHAPES)
    header = "instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour,catalog,as_of"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _instance_type(model: str, gpus: int) -> str:
    return f"{model.lower().replace('-', '')}x{gpus}.sample"


def _replicaset(workload: str) -> str:
    return f"{workload}-7d9f8c6b5"


def _pod_ip(host_ip: str) -> str:
    return "10.2." + ".".join(host_ip.split(".")[2:])


def _values(d: Device, key: str) -> list[str]:
    """The readings of one field as written (cached: every spelling writes the same numbers)."""
    if key not in d.text:
        d.text[key] = _format(d, key)
    return d.text[key]


def _format(d: Device, key: str) -> list[str]:
    assert d.gr is not None and d.fb is not None
    if key == "gr":
        return [f"{v:.6f}" for v in d.gr]
    if key == "sm":
        return [f"{v:.6f}" for v in d.gr * 0.9]
    if key == "util":
        return [str(int(round(v * 100))) for v in d.gr]
    if key == "fb":
        return [str(int(v)) for v in d.fb]
    if key == "fb_free":
        return [str(int(d.memory - v)) for v in d.fb]
    limit = POWER_LIMIT_W[canonical_gpu_model(d.model_name) or ""]
    return [f"{limit * (0.15 + 0.6 * v):.3f}" for v in d.gr]


def _labels(sf: ScrapeFleet, d: Device, sp: Spelling) -> str:
    parts = [f'gpu="{d.gpu}"', f'{sp.uuid}="{d.uuid}"']
    if sp.generation != "1.x":
        parts += [f'device="nvidia{d.gpu}"', f'modelName="{d.model_name}"']
    if d.mig_instance is not None:
        parts += [f'GPU_I_PROFILE="{MIG_PROFILE}"', f'GPU_I_ID="{d.mig_instance}"']
    exporter, ip = sf.exporter[d.node]
    if sp.node in ("Hostname", "hostname", "node", "kubernetes_node"):
        parts.append(f'{sp.node}="{d.node}"')
    elif sp.node:  # Hostname=pod: the container's hostname, i.e. the exporter pod
        parts.append(f'{sp.node.split("=")[0]}="{exporter}"')
    p = d.pod
    if sp.workload == "1.x":
        parts += [f'pod_name="{p.name if p else ""}"', f'pod_namespace="{p.namespace if p else ""}"',
                  f'container_name="{"main" if p else ""}"']
    elif sp.workload == "honoured":
        parts += [f'container="{"main" if p else ""}"', f'namespace="{p.namespace if p else ""}"',
                  f'pod="{p.name if p else ""}"']
    else:  # not honoured: the workload's labels are exported_*, pod/namespace are the exporter's own
        if p is not None:
            parts += ['exported_container="main"', f'exported_namespace="{p.namespace}"', f'exported_pod="{p.name}"']
        parts += ['container="nvidia-dcgm-exporter"', 'namespace="gpu-operator"', f'pod="{exporter}"']
    parts += [f'instance="{_pod_ip(ip)}:9400"', 'job="dcgm-exporter"']
    return ",".join(parts)


# -- the fleet ------------------------------------------------------------------------------
class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.nprng = np.random.default_rng(seed)
        self.seed = seed
        self.names: set[str] = set()
        self.fleet = Fleet(hours=STEPS * STEP_S / 3600)
        self.devices: list[Device] = []
        self.shapes: dict[str, tuple] = {}
        self.exporter: dict[str, tuple[str, str]] = {}

    def name(self) -> str:
        return fresh_name(self.rng, self.names)

    def uuid(self) -> str:
        h = "".join(self.rng.choice("0123456789abcdef") for _ in range(32))
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def node(self, shape: tuple, pool: str, zone: str, capacity: str, mig: bool) -> Node:
        model, _, model_name, gpus, memory, od, spot = shape
        n = Node(self.name(), model=model, gpus=gpus, price=spot if capacity == "spot" else od, pool=pool,
                 zone=zone, capacity_type=capacity, mig_config=f"all-{MIG_PROFILE}" if mig else None,
                 instance_type=_instance_type(model, gpus))
        self.fleet.nodes.append(n)
        self.shapes[n.name] = shape
        i = len(self.fleet.nodes)
        self.exporter[n.name] = (f"nvidia-dcgm-exporter-{word(self.rng, 5)}", f"10.0.{i // 200}.{i % 200 + 10}")
        for g in range(gpus):
            uuid = self.uuid()
            if mig:
                self.devices += [Device(n.name, g, uuid, model_name, MIG_SLICE_MIB, mig_instance=7 + s)
                                 for s in range(7)]
            else:
                self.devices.append(Device(n.name, g, uuid, model_name, memory))
        return n

    def workload(self, devices: list[Device], kind: str) -> None:
        """Put one workload's pods on ``devices`` (one device per pod) and draw their readings."""
        production = self.rng.random() < 0.4
        ns = self.rng.choice(PROD_NS if production else NOT_PROD_NS).format(x=self.name())
        wl = self.name()
        owner = "Job" if kind == "batch" else self.rng.choice(["Deployment", "StatefulSet"])
        pc = self.rng.choice(PRIORITY)
        priority = pc.format(x=self.name()) if pc else None
        level = self.rng.uniform(0.02, 0.3)
        bursty, spiky = self.rng.random() < 0.3, self.rng.random() < 0.3
        fb_share = self.rng.uniform(0.02, 0.35)
        for i, d in enumerate(devices):
            memory, fb_level = d.memory, fb_share * d.memory
            name = f"{wl}-{_replicaset(wl).rsplit('-', 1)[1]}-{word(self.rng, 5)}" if owner == "Deployment" \
                else f"{wl}-{i}"
            d.pod = Pod(name, d.node, wl, namespace=ns, kind=owner, priority_class=priority,
                        mig_profile=MIG_PROFILE if d.mig_instance is not None else None)
            self.fleet.pods.append(d.pod)
            noise = self.nprng.uniform(0.6, 1.2, STEPS)
            if kind == "idle":
                d.gr = self.nprng.uniform(0, 0.01, STEPS)
                d.fb = np.full(STEPS, float(self.rng.randint(300, 3000)))
            elif kind in ("busy", "batch"):
                d.gr = self.nprng.uniform(0.7, 0.95, STEPS)
                d.fb = np.full(STEPS, memory * self.rng.uniform(0.6, 0.9))
            elif kind == "nightly":
                hours = (np.arange(STEPS) * STEP_S // 3600 + self.rng.randrange(24)) % 24
                d.gr = np.where(hours < self.rng.randint(1, 3), 0.9, 0.0)
                d.fb = np.where(d.gr > 0, memory * 0.5, 500.0)
            else:  # a small service, maybe bursty or memory-spiky
                d.gr = level * noise
                if bursty:
                    d.gr = np.where(self.nprng.random(STEPS) < 0.15, level * self.rng.uniform(2, 4), d.gr)
                d.fb = fb_level * self.nprng.uniform(0.9, 1.0, STEPS)
                if spiky:
                    d.fb = np.where(self.nprng.random(STEPS) < 0.03, fb_level * self.rng.uniform(1.3, 2.2), d.fb)
            d.gr = np.minimum(np.round(d.gr, 6), 1.0)
            d.fb = np.minimum(np.floor(d.fb), memory * 0.98 // 1)

    def build(self) -> ScrapeFleet:
        shapes = self.rng.sample(SHAPES, self.rng.randint(1, 2))
        for shape in shapes:
            pool, zone = self.name(), self.rng.choice(["z1", "z2"])
            capacity = "spot" if self.rng.random() < 0.25 else "on-demand"
            count = self.rng.randint(1, 2) if shape[3] > 1 else self.rng.randint(2, 5)
            for _ in range(count):
                self.node(shape, pool, zone, capacity, mig=False)
        mig = self.rng.random() < 0.35
        if mig:
            shape = self.rng.choice([s for s in SHAPES if s[3] == 1 and s[0].startswith(("H100", "A100"))])
            self.node(shape, self.name(), "z1", "on-demand", mig=True)
        free: dict[str, list[Device]] = {}  # by pool: a workload's replicas run in one pool
        pool_of = {n.name: n.pool for n in self.fleet.nodes}
        for d in self.devices:
            if d.mig_instance is None:
                free.setdefault(pool_of[d.node], []).append(d)
        for devices in free.values():
            self.rng.shuffle(devices)
            inference = devices[0].memory < 30000  # L4, A10G: mostly services, as in real fleets
            mix = self.rng.choices(list(POOL_MIXES), [4, 1, 1] if inference else [2, 2, 2])[0]
            weights = POOL_MIXES[mix]
            while devices:
                kind = self.rng.choices(list(weights), list(weights.values()))[0]
                replicas = 1 if mix == "services" else min(len(devices), self.rng.choice([1, 1, 1, 2]))
                taken, devices[:] = devices[:replicas], devices[replicas:]
                if kind != "none":
                    self.workload(taken, kind)
        mig_devices = [d for d in self.devices if d.mig_instance is not None]
        if mig_devices:
            self.workload(mig_devices[: self.rng.randint(1, len(mig_devices))], "service")
        for d in self.devices:  # a free GPU (or slice) idles with an empty framebuffer
            if d.gr is None:
                d.gr = np.zeros(STEPS)
                d.fb = np.zeros(STEPS)
        self._usage()
        return ScrapeFleet(self.seed, self.fleet, self.devices, self.shapes, self.exporter, mig)

    def _usage(self) -> None:
        """What the SQL models compute from the readings as written (sample_stats_core/_tails, migration 015)."""
        by_wl: dict[tuple[str, str], list[Device]] = {}
        for d in self.devices:
            if d.pod is not None:
                by_wl.setdefault((d.pod.namespace, d.pod.workload), []).append(d)
        for key, devs in by_wl.items():
            gr, sm, fb = (np.concatenate([np.array(_values(d, key), dtype=float) for d in devs])
                          for key in ("gr", "sm", "fb"))
            q = lambda a, p: float(np.quantile(a, p))  # noqa: E731 - linear: DuckDB's quantile_cont
            self.fleet.usage[key] = Usage(
                gr_mean=float(gr.mean()), gr_p50=q(gr, 0.5), gr_p95=q(gr, 0.95), sm_p95=q(sm, 0.95),
                peak_p95=q(np.maximum(gr, sm), 0.95), gr_max=float(gr.max()),
                active_fraction=float((gr > 0.05).mean()), fb_p99=q(fb, 0.99), fb_max=float(fb.max()),
                hours_held=STEPS * STEP_S / 3600, step_s=STEP_S, max_pushed_down=False)


def scrape_fleet(seed: int) -> ScrapeFleet:
    return _Builder(seed).build()

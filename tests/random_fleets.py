"""Random fleets for the rules' property tests: meaningless names, several GPU models and
pools, MIG nodes (and nodes labelled ``all-disabled``), nodes in racks, gangs spread over nodes
(strict and elastic, busy and idle), training pods that may wait for their input, memory-spiky
and bursty services, busy single-replica services, idle pods alone on nodes, nightly jobs,
services behind PodDisruptionBudgets, production markers spelled every which way, and queues
holding large-pod jobs. 8-GPU nodes mix all of these; some pools run the device plugin's single
MIG strategy, some have pods DCGM does not locate on a GPU, GPU indices are taken in any order;
some 8-GPU H100 nodes hold a lone small production service beside a busy 3-replica service and
an idle pod (``expect_mig``: it must get a MIG slice). Every fleet is built from one seed, so a
failure names it."""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from tests.ray_keda_frames import T0, frame, ray_group_row, ray_job_row, scaled_row, stretch_row
from tests.rule_fleets import Fleet, Node, Pod, Usage

RACK_LABEL = "topology.kubernetes.io/rack"

# (model, GPUs per node, $/node-hour, GPU memory MiB) - prices of the same order as the catalog's
SHAPES = [("H100-80GB", 8, 55.04, 81559), ("H100-80GB", 1, 6.88, 81559), ("A100-80GB", 8, 27.45, 81920),
          ("A100-40GB", 8, 21.96, 40960), ("L4", 1, 0.80, 22888), ("L4", 4, 4.60, 22888), ("A10G", 1, 1.01, 22888)]
PROD_NS = ["prod", "prod-{x}", "{x}-prod", "prd-{x}"]
NOT_PROD_NS = ["products", "{x}", "non-prod-{x}", "preprod-{x}", "dev-{x}", "{x}-staging"]
PRIORITY = [None, None, "production-high", "system-cluster-critical", "non-production", "{x}-batch"]
ENV_KEYS = ["env", "environment", "tier", "stage"]
ENV_VALUES = ["production", "prod", "dev", "staging", "non-production", "productivity", "qa"]


def word(rng: random.Random, n: int = 5) -> str:
    return rng.choice(string.ascii_lowercase) + "".join(rng.choice(string.ascii_lowercase + string.digits)
                                                        for _ in range(n - 1))


def fresh_name(rng: random.Random, taken: set[str]) -> str:
    """A meaningless name not in ``taken`` (added to it)."""
    while True:
        n = word(rng, rng.randint(3, 7))
        if n not in taken:
            taken.add(n)
            return n


@dataclass
class RandomFleet:
    seed: int
    fleet: Fleet
    queues: list[dict[str, Any]] = field(default_factory=list)
    busy: set[tuple[str, str]] = field(default_factory=set)    # (namespace, workload) of busy gangs
    # rows of the KubeRay / scale-to-zero models (idle_stretches, ray_groups, ray_jobs, scaled_workloads)
    models: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    scaled: set[tuple[str, str]] = field(default_factory=set)  # workloads KEDA already scales
    # lone small production services beside busy work on a mixed 8-GPU node: each must get MIG
    expect_mig: set[tuple[str, str]] = field(default_factory=set)

    def frames(self) -> dict[str, pl.DataFrame]:
        extra: dict[str, pl.DataFrame] = {name: frame(rows) for name, rows in self.models.items()}
        if self.queues:
            extra["queue_usage"] = pl.DataFrame([{"cluster": self.fleet.cluster, **q} for q in self.queues],
                                                infer_schema_length=None)
            extra["cluster_summary"] = pl.DataFrame([{"cluster": self.fleet.cluster, "gpu_hours": 48.0 * 100,
                                                      "total_usd": 48 * 100 * 4.0, "hours": 48.0,
                                                      "allocated_gpu_hours": 48.0 * 60}])
        return self.fleet.frames(**extra)


class Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.fleet = Fleet()
        self.free: dict[str, float] = {}
        self.busy: set[tuple[str, str]] = set()
        self.names: set[str] = set()
        self.models: dict[str, list[dict[str, Any]]] = {}
        self.scaled: set[tuple[str, str]] = set()
        self.expect_mig: set[tuple[str, str]] = set()
        self.mixed: dict[tuple[str, str], tuple[str, str]] = {}  # lone production service -> its two nodes

    def name(self) -> str:
        return fresh_name(self.rng, self.names)

    def namespace(self, production: bool) -> str:
        pattern = self.rng.choice(PROD_NS if production else NOT_PROD_NS)
        return pattern.format(x=self.name())

    def markers(self, pod: Pod) -> None:
        """Production spelled in the priority class or labels, or misleading look-alikes."""
        pc = self.rng.choice(PRIORITY)
        pod.priority_class = pc.format(x=self.name()) if pc else None
        if self.rng.random() < 0.5:
            pod.labels[self.rng.choice(ENV_KEYS)] = self.rng.choice(ENV_VALUES)

    def nodes(self, model: str, gpus: int, price: float, count: int, pool: str, zone: str, **kw: Any) -> list[str]:
        out = []
        racks = [self.name() for _ in range(self.rng.randint(1, 3))] if self.rng.random() < 0.6 else []
        for _ in range(count):
            labels = {RACK_LABEL: self.rng.choice(racks)} if racks else {}
            n = Node(self.name(), model=model, gpus=gpus, price=price, pool=pool, zone=zone, labels=labels, **kw)
            self.fleet.nodes.append(n)
            self.free[n.name] = float(gpus)
            out.append(n.name)
        return out

    def place(self, nodes: list[str], gpus: float, avoid: set[str] | None = None) -> str | None:
        options = [n for n in nodes if self.free[n] >= gpus - 1e-9 and n not in (avoid or set())]
        if not options:
            return None
        node = self.rng.choice(options)
        self.free[node] -= gpus
        return node

    # -- workloads ------------------------------------------------------------------------
    def small_service(self, nodes: list[str], memory: float) -> None:
        prod = self.rng.random() < 0.4
        ns, wl = self.namespace(prod), self.name()
        node = self.place(nodes, 1)
        if node is None:
            return
        pod = Pod(f"{wl}-{self.name()}", node, wl, namespace=ns)
        self.markers(pod)
        self.fleet.pods.append(pod)
        if self.rng.random() < 0.2:  # a budget that lets no pod go: it is never stopped first
            app = self.name()
            pod.labels["app"] = app
            self.fleet.pdbs.append({"cluster": "c", "namespace": ns, "name": self.name(),
                                    "selector": json.dumps({"matchLabels": {"app": app}}),
                                    "min_available": "1", "max_unavailable": None})
        gr = self.rng.uniform(0.01, 0.35)
        spiky = self.rng.random() < 0.3
        bursty = self.rng.random() < 0.3
        fb = self.rng.uniform(0.02, 0.45) * memory
        self.fleet.usage[(ns, wl)] = Usage(
            gr_mean=gr * 0.7, gr_p50=gr * 0.7, gr_p95=gr, gr_max=min(1.0, gr * 3),
            peak_p95=min(1.0, gr * self.rng.uniform(2.0, 4.0)) if bursty else gr * self.rng.uniform(1.0, 1.2),
            fb_p99=fb, fb_max=min(memory * 0.98, fb * (self.rng.uniform(1.3, 2.2) if spiky else 1.02)),
            step_s=self.rng.choice([15, 30, 60, 300]), max_pushed_down=self.rng.random() < 0.7,
            active_fraction=self.rng.uniform(0.3, 1.0))

    def busy_service(self, nodes: list[str], memory: float) -> None:
        """A single-replica service that uses its GPU: it keeps it whole, but may be moved."""
        ns, wl = self.namespace(self.rng.random() < 0.5), self.name()
        node = self.place(nodes, 1)
        if node is None:
            return
        self.fleet.pods.append(Pod(f"{wl}-{self.name()}", node, wl, namespace=ns))
        gr = self.rng.uniform(0.6, 0.95)
        self.fleet.usage[(ns, wl)] = Usage(gr_mean=gr * 0.9, gr_p50=gr * 0.9, gr_p95=gr, gr_max=min(1.0, gr * 1.1),
                                           fb_p99=memory * 0.6, fb_max=memory * 0.65)

    def mixed_node(self, nodes: list[str], memory: float) -> None:
        """The issue's shape: one 8-GPU node holding a busy 3-replica service, an idle pod and a
        lone small production service, and a small dev service elsewhere in the pool."""
        node = next((n for n in nodes if self.free[n] >= 5), None)
        other = next((n for n in nodes if n != node and self.free[n] >= 1), None)
        if node is None or other is None:
            return
        ns, api = self.namespace(False), self.name()
        for i in range(3):
            self.free[node] -= 1
            self.fleet.pods.append(Pod(f"{api}-{i}", node, api, namespace=ns))
        self.fleet.usage[(ns, api)] = Usage(gr_mean=0.7, gr_p50=0.7, gr_p95=0.85, gr_max=0.95,
                                            fb_p99=memory * 0.7, fb_max=memory * 0.72)
        self.free[node] -= 1
        nb_ns, nb = self.namespace(False), self.name()
        self.fleet.pods.append(Pod(f"{nb}-0", node, nb, namespace=nb_ns, kind="StatefulSet"))
        self.fleet.usage[(nb_ns, nb)] = Usage(gr_mean=0.002, gr_p50=0.0, gr_p95=0.005, gr_max=0.3,
                                              active_fraction=0.01, fb_p99=2000, fb_max=2100)
        for target, prod in ((node, True), (other, False)):
            self.free[target] -= 1
            svc_ns, svc = self.namespace(prod), self.name()
            pod = Pod(f"{svc}-{self.name()}", target, svc, namespace=svc_ns,
                      labels={"env": "production" if prod else "dev"})
            self.fleet.pods.append(pod)
            gr = self.rng.uniform(0.03, 0.1)
            fb = self.rng.uniform(0.03, 0.1) * memory
            self.fleet.usage[(svc_ns, svc)] = Usage(gr_mean=gr * 0.8, gr_p50=gr * 0.8, gr_p95=gr, gr_max=gr * 1.3,
                                                    peak_p95=gr * 1.1, fb_p99=fb, fb_max=fb * 1.02)
            if prod:
                self.mixed[(svc_ns, svc)] = (node, other)

    def idle(self, nodes: list[str]) -> None:
        ns, wl = self.namespace(False), self.name()
        node = self.place(nodes, 1)
        if node is None:
            return
        self.fleet.pods.append(Pod(f"{wl}-0", node, wl, namespace=ns, kind="StatefulSet"))
        self.fleet.usage[(ns, wl)] = Usage(gr_mean=0.003, gr_p50=0.0, gr_p95=0.01, gr_max=0.5,
                                           active_fraction=self.rng.uniform(0.0, 0.08), fb_p99=2000, fb_max=2200)

    def nightly(self, nodes: list[str]) -> None:
        ns, wl = self.namespace(False), self.name()
        node = self.place(nodes, 1)
        if node is None:
            return
        start = self.rng.randrange(24)
        run = [(start + i) % 24 for i in range(self.rng.randint(1, 4))]
        self.fleet.pods.append(Pod(f"{wl}-0", node, wl, namespace=ns))
        self.fleet.usage[(ns, wl)] = Usage(gr_mean=0.9 * len(run) / 24, gr_p50=0.0, gr_p95=0.9, gr_max=0.97,
                                           active_fraction=len(run) / 24, recurring_hours=run, days_observed=7)

    def gang(self, nodes: list[str], per_node: int) -> None:
        ns, wl = self.namespace(self.rng.random() < 0.2), self.name()
        size = self.rng.randint(2, 4)
        g = self.rng.choice([1, 2, per_node // 2 or 1])
        strict = self.rng.random() < 0.6
        placed: list[str] = []
        for _ in range(size):
            node = self.place(nodes, g, avoid=set(placed) if self.rng.random() < 0.7 else None)
            if node is None:
                break
            placed.append(node)
        if not placed:
            return
        busy = self.rng.random() < 0.5
        least = len(placed) if strict else self.rng.randint(1, len(placed))
        for i, node in enumerate(placed):
            self.fleet.pods.append(Pod(f"{wl}-{i}", node, wl, namespace=ns, kind="VolcanoJob", gpus=g, gang=wl,
                                       gang_min=least))
        self.fleet.usage[(ns, wl)] = Usage(gr_mean=0.85 if busy else 0.2, gr_p50=0.85 if busy else 0.15,
                                           gr_p95=0.95 if busy else 0.4, fb_p99=30000, fb_max=32000)
        if busy and least >= len(placed) > 1:  # strict: minMember covers every pod
            self.busy.add((ns, wl))

    def trainer(self, nodes: list[str], per_node: int) -> None:
        """A training pod that may wait for its input: bursts, stalls, loader CPU, PCIe RX."""
        ns, wl = self.namespace(False), self.name()
        g = self.rng.choice([1, 2, per_node // 2 or 1])
        node = self.place(nodes, g)
        if node is None:
            return
        burst = self.rng.uniform(0.3, 0.98)
        duty = self.rng.uniform(0.3, 0.98)
        stalls = self.rng.uniform(0.0, 0.6)
        request = float(self.rng.choice([2, 4, 8, 16]))
        measured = self.rng.random()
        inp = {"pod_steps": 576, "hours_observed": 48.0, "step_s": self.rng.choice([30, 60, 300]),
               "min_pushed_down": self.rng.random() < 0.5, "burst_level": burst, "gr_mean": burst * duty,
               "duty_cycle": duty, "busy_step_fraction": duty, "idle_step_fraction": stalls * 0.7,
               "mixed_step_fraction": stalls * 0.3, "fb_mean_mib": 15000.0, "fb_cv": self.rng.choice([0.01, 0.3]),
               "fb_busy_mib": 15000.0, "fb_idle_mib": self.rng.choice([14900.0, 3000.0]), "gr_idle_mean": 0.01,
               "pcie_coverage": 1.0 if measured > 0.3 else 0.0,
               "pcie_rx_busy_bps": 4e9, "pcie_rx_idle_bps": self.rng.choice([5e7, 3e9]) if measured > 0.3 else None,
               "pcie_rx_gr_corr": 0.5, "nvlink_coverage": 0.0, "nvlink_rx_busy_bps": None, "nvlink_rx_idle_bps": None,
               "cpu_coverage": 1.0 if measured > 0.6 else 0.0, "cpu_busy_cores": request / 2,
               "cpu_idle_cores": self.rng.choice([request * 0.95, request / 3]) if measured > 0.6 else None,
               "cpu_max_cores": request, "cpu_gr_corr": -0.5, "busy_runs": 40, "idle_runs": 40,
               "busy_run_mean_s": 1200.0, "idle_run_mean_s": 600.0, "burst_period_s": 1800.0, "idle_run_cv": 0.2,
               "cpu_request": request}
        self.fleet.pods.append(Pod(f"{wl}-0", node, wl, namespace=ns, kind="VolcanoJob", gpus=g))
        self.fleet.usage[(ns, wl)] = Usage(gr_mean=burst * duty, gr_p50=burst if duty > 0.5 else 0.01, gr_p95=burst,
                                           gr_max=min(1.0, burst * 1.05), peak_p95=burst,
                                           active_fraction=duty, fb_p99=15000, fb_max=15500, input=inp)

    def replicated(self, nodes: list[str]) -> None:
        ns, wl = self.namespace(self.rng.random() < 0.5), self.name()
        n = self.rng.randint(2, 3)
        app = self.name()
        placed = 0
        for i in range(n):
            node = self.place(nodes, 1)
            if node is None:
                break
            self.fleet.pods.append(Pod(f"{wl}-{i}", node, wl, namespace=ns, labels={"app": app}))
            placed += 1
        if placed:
            self.fleet.usage[(ns, wl)] = Usage(gr_mean=0.5, gr_p95=0.7, fb_p99=20000, fb_max=21000)
            if self.rng.random() < 0.7:
                key, value = self.rng.choice([("min_available", "1"), ("max_unavailable", "1"),
                                              ("min_available", str(placed)), ("max_unavailable", "50%")])
                self.fleet.pdbs.append({"cluster": "c", "namespace": ns, "name": self.name(),
                                        "selector": json.dumps({"matchLabels": {"app": app}}),
                                        "min_available": value if key == "min_available" else None,
                                        "max_unavailable": value if key == "max_unavailable" else None})

    def shared_gpus(self, nodes: list[str]) -> None:
        """Small services holding fractions of GPUs they share (HAMi vGPUs): already shared, so
        neither consolidated nor moved by binpack as whole GPUs."""
        for _ in range(self.rng.randint(1, 4)):
            share = self.rng.choice([0.1, 0.25, 0.3, 0.5])
            node = self.place(nodes, share)
            if node is None:
                return
            ns, wl = self.namespace(self.rng.random() < 0.3), self.name()
            pod = Pod(f"{wl}-{self.name()}", node, wl, namespace=ns, share=share)
            self.markers(pod)
            self.fleet.pods.append(pod)
            gr = self.rng.uniform(0.0, 0.3)
            self.fleet.usage[(ns, wl)] = Usage(gr_mean=gr * 0.7, gr_p50=gr * 0.7, gr_p95=gr, gr_max=min(1.0, gr * 2),
                                               fb_p99=2000.0, fb_max=2500.0, active_fraction=self.rng.uniform(0.2, 1))

    def mig_node(self, model: str, price: float, zone: str) -> None:
        (node,) = self.nodes(model, 1, price, 1, self.name(), zone, mig_config="all-1g.10gb")
        ns, wl = self.namespace(True), self.name()
        for i in range(self.rng.randint(0, 7)):
            self.fleet.pods.append(Pod(f"{wl}-{i}", node, wl, namespace=ns, mig_profile="1g.10gb"))
        self.fleet.usage[(ns, wl)] = Usage(gr_p95=0.6, fb_p99=7000, fb_max=8000)

    def queue(self) -> None:
        pod = self.rng.choice([1, 2, 3, 4, 8])
        gang = pod * self.rng.randint(1, 4)
        quota = float(self.rng.randint(1, 40))
        self.fleet_queues.append({
            "queue": self.name(), "weight": self.rng.randint(1, 10),
            "deserved_gpu": quota if self.rng.random() < 0.7 else None,
            "capability_gpu": quota + self.rng.randint(0, 8) if self.rng.random() < 0.8 else None,
            "allocated_gpu_avg": quota * self.rng.uniform(0, 0.6),
            "allocated_gpu_p95": quota * self.rng.uniform(0, 0.6), "allocated_gpu_max": quota * self.rng.uniform(0, 0.9),
            "used_gpu_avg": 0.5, "pending_p95_s": self.rng.choice([2.0, 4000.0]), "pending_pods": 0,
            "largest_pod_gpus": float(pod), "largest_gang_gpus": float(gang)})

    # -- KubeRay and services that sleep -------------------------------------------------
    def stretches(self, hours: int, busy_hours: int) -> list[tuple[datetime, int]]:
        """Idle stretches over ``hours``: busy ``busy_hours`` a day from a random hour, idle otherwise."""
        if busy_hours <= 0:
            return [(T0, hours)]
        start = self.rng.randrange(24)
        busy = [(h - start) % 24 < busy_hours for h in range(hours)]
        out: list[tuple[datetime, int]] = []
        for h, b in enumerate(busy):
            if b:
                continue
            if out and (out[-1][0] - T0).total_seconds() / 3600 + out[-1][1] == h:
                out[-1] = (out[-1][0], out[-1][1] + 1)
            else:
                out.append((T0 + timedelta(hours=h), 1))
        return out

    def sleepy_service(self, nodes: list[str]) -> None:
        """A service busy some hours a day (maybe with recurring hours), idle in between; sometimes
        production, sometimes already scaled by KEDA, sometimes idle nearly all along."""
        prod = self.rng.random() < 0.3
        ns, wl = self.namespace(prod), self.name()
        kind = self.rng.choice(["Deployment", "Deployment", "StatefulSet", "VolcanoJob"])
        replicas = self.rng.choice([1, 1, 2])
        placed = [n for n in (self.place(nodes, 1) for _ in range(replicas)) if n]
        if not placed:
            return
        for i, node in enumerate(placed):
            self.fleet.pods.append(Pod(f"{wl}-{i}", node, wl, namespace=ns, kind=kind))
        busy = self.rng.choice([0, 1, 2, 6, 12, 20])
        share = busy / 24
        recurring = sorted({(self.rng.randrange(24) + i) % 24 for i in range(busy)}) if self.rng.random() < 0.5 else []
        self.fleet.usage[(ns, wl)] = Usage(
            gr_mean=0.4 * share, gr_p50=0.4 if share > 0.5 else 0.0, gr_p95=0.7 if busy else 0.004,
            peak_p95=0.8 if busy else 0.004, gr_max=0.9 if busy else 0.01, active_fraction=share,
            recurring_hours=recurring, days_observed=2, fb_p99=9000, fb_max=9500)
        self.models.setdefault("idle_stretches", []).append(
            stretch_row(self.fleet, ns, wl, self.stretches(int(self.fleet.hours), busy), kind=kind))
        if self.rng.random() < 0.2:
            self.models.setdefault("scaled_workloads", []).append(scaled_row(self.fleet, ns, wl, kind))
            self.scaled.add((ns, wl))

    def ray_cluster(self, nodes: list[str], per_node: int) -> None:
        """A Ray cluster: maybe a GPU head, one or two GPU worker groups (random autoscaler, minReplicas,
        idle stretches), maybe created by a RayJob that finished while the cluster stayed."""
        ns, name = self.namespace(self.rng.random() < 0.2), self.name()
        groups: list[tuple[str, list[str]]] = []
        for group in (["headgroup"] if self.rng.random() < 0.4 else []) + [self.name() for _ in range(
                self.rng.randint(1, 2))]:
            n = 1 if group == "headgroup" else self.rng.randint(1, max(1, per_node))
            placed = [p for p in (self.place(nodes, 1) for _ in range(n)) if p]
            if placed:
                groups.append((group, placed))
        if not groups:
            return
        for group, placed in groups:
            kind = "head" if group == "headgroup" else "worker"
            for i, node in enumerate(placed):
                self.fleet.pods.append(Pod(f"{name}-{group}-{kind}-{i}", node, name, namespace=ns, kind="RayCluster",
                                           labels={"ray.io/group": group, "ray.io/cluster": name}))
        self.fleet.usage[(ns, name)] = Usage(gr_mean=0.3, gr_p50=0.2, gr_p95=0.8, active_fraction=0.5)
        owner = ("RayJob", self.name()) if self.rng.random() < 0.4 else None
        for index, (group, placed) in enumerate(groups):
            autoscaling = self.rng.random() < 0.5
            low = self.rng.choice([0, len(placed)])
            self.models.setdefault("ray_groups", []).append(ray_group_row(
                self.fleet, ns, name, group, replicas=len(placed), min_replicas=low, autoscaling=autoscaling,
                idle_timeout_s=self.rng.choice([None, 60, 7200]), head_gpus=1.0 if group == "headgroup" else 0.0,
                group_index=index, owner=owner, gr_hourly_max_p95=self.rng.choice([0.02, 0.5])))
            self.models.setdefault("idle_stretches", []).append(stretch_row(
                self.fleet, ns, name, self.stretches(int(self.fleet.hours), self.rng.choice([1, 2, 6, 20])),
                kind="RayCluster", group=group))
        if owner:
            end = T0 + timedelta(hours=self.rng.randint(0, 40), minutes=self.rng.choice([0, 17, 58]))
            self.models.setdefault("ray_jobs", []).append(ray_job_row(
                self.fleet, ns, owner[1], name, end, shutdown=self.rng.random() < 0.3,
                ttl_s=self.rng.choice([0, 300, 86400]), uses_existing=self.rng.random() < 0.1,
                post_peak=self.rng.choice([0.0, 0.0, 0.5])))

    fleet_queues: list[dict[str, Any]]

    def build(self) -> RandomFleet:
        self.fleet_queues = []
        shapes = self.rng.sample(SHAPES, self.rng.randint(1, 3))
        flavours: dict[str, str] = {}  # node -> how its pool's GPUs are known: clean, shuffled, unknown
        for model, gpus, price, memory in shapes:
            for _ in range(self.rng.randint(1, 2)):
                pool, zone = self.name(), self.rng.choice(["z1", "z2"])
                mig = "all-disabled" if model.startswith(("H100", "A100")) and self.rng.random() < 0.4 else None
                single = model.startswith(("H100", "A100")) and self.rng.random() < 0.15
                nodes = self.nodes(model, gpus, price, self.rng.randint(2, 6 if gpus > 1 else 9), pool, zone,
                                   mig_config=mig)
                flavour = self.rng.choice(["clean", "clean", "shuffled", "unknown"])
                for n in nodes:
                    flavours[n] = flavour
                    if single:
                        self.fleet.node(n).labels["nvidia.com/mig.strategy"] = "single"
                if gpus == 8 and model.startswith("H100") and flavour != "unknown" and not single \
                        and self.rng.random() < 0.5:
                    self.mixed_node(nodes, memory)
                for _ in range(self.rng.randint(0, 5)):
                    self.small_service(nodes, memory)
                for _ in range(self.rng.randint(0, 3) if gpus > 1 else self.rng.randint(0, 1)):
                    self.busy_service(nodes, memory)
                if self.rng.random() < 0.35:
                    self.shared_gpus(nodes)
                for _ in range(self.rng.randint(0, 2)):
                    self.idle(nodes)
                if self.rng.random() < 0.3:
                    self.nightly(nodes)
                if self.rng.random() < 0.4:
                    self.sleepy_service(nodes)
                if self.rng.random() < 0.3:
                    self.ray_cluster(nodes, gpus)
                for _ in range(self.rng.randint(0, 2)):
                    self.trainer(nodes, gpus)
                if gpus > 1:
                    for _ in range(self.rng.randint(0, 3)):
                        self.gang(nodes, gpus)
                    if self.rng.random() < 0.5:
                        self.replicated(nodes)
            if model.startswith(("H100", "A100")) and self.rng.random() < 0.5:
                self.mig_node(model, price / gpus, self.rng.choice(["z1", "z2"]))
        for _ in range(self.rng.randint(0, 3)):
            self.queue()
        self.locate(flavours)
        # a node holding fractions of shared GPUs is shared already (not planned): the lone
        # production service is expected to get its slice where neither of its nodes is
        shared = {p.node for p in self.fleet.pods if p.share is not None}
        self.expect_mig = {k for k, nodes in self.mixed.items() if not set(nodes) & shared}
        # the model rows priced a workload's pods as they were when it was added; every pod is placed by now
        return RandomFleet(self.seed, self.fleet, self.fleet_queues, self.busy, self.models, self.scaled,
                           self.expect_mig)

    def locate(self, flavours: dict[str, str]) -> None:
        """The GPU indices DCGM reports: in order (clean), in any order (shuffled), or not for some
        pods (unknown: a dump, or an exporter without the pod mapping)."""
        on: dict[str, list[Pod]] = {}
        for p in self.fleet.pods:
            if not p.mig_profile:
                on.setdefault(p.node, []).append(p)
        for node, pods in on.items():
            flavour = flavours.get(node, "clean")
            if flavour == "shuffled":
                order = list(range(self.fleet.node(node).gpus))
                self.rng.shuffle(order)
                for p in pods:
                    p.gpu_indices, order = sorted(order[: int(p.gpus)]), order[int(p.gpus):]
            elif flavour == "unknown" and self.rng.random() < 0.5:
                self.rng.choice(pods).gpu_indices = []


def random_fleet(seed: int) -> RandomFleet:
    return Builder(seed).build()

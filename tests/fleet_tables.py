"""Build small, hand-computable fleets directly as warehouse rows (no source parsing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from gpuinsight.warehouse import Warehouse
from gpuinsight.warehouse.rollup import rebuild_rollups
from gpuinsight.warehouse.samples import store_sample_rows

T0 = datetime(2026, 11, 1, 0, 0, 0)
STEP = 300


@dataclass
class MiniFleet:
    """Append nodes, pods and flat utilisation series, then ``load(wh)``."""

    cluster: str = "test"
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    prices: list[dict[str, Any]] = field(default_factory=list)
    queues: list[dict[str, Any]] = field(default_factory=list)
    podgroups: list[dict[str, Any]] = field(default_factory=list)

    def node(self, name: str, instance_type: str, gpu_model: str, gpus: int, *, capacity_type: str = "on-demand",
             pool: str = "pool", zone: str = "z1", mig_config: str | None = None,
             first: datetime = T0, last: datetime | None = None) -> None:
        self.nodes.append(dict(cluster=self.cluster, node=name, instance_type=instance_type, capacity_type=capacity_type,
                               node_pool=pool, node_pool_kind="karpenter", gpu_model=gpu_model, gpu_count=gpus,
                               mig_config=mig_config, zone=zone, first_seen=first, last_seen=last))

    def pod(self, name: str, node: str, *, namespace: str = "ns", gpus: float = 1, mig_profile: str | None = None,
            start: datetime = T0, end: datetime | None = None, workload: str | None = None,
            kind: str = "Deployment", queue: str | None = None, podgroup: str | None = None,
            created: datetime | None = None, labels: dict[str, str] | None = None,
            priority_class: str | None = None) -> None:
        import json

        self.pods.append(dict(
            cluster=self.cluster, uid=f"uid-{name}", namespace=namespace, name=name, workload_kind=kind,
            workload=workload or name, node=node,
            gpu_request=0.0 if mig_profile else float(gpus), mig_profile=mig_profile,
            mig_request=float(gpus) if mig_profile else 0.0, queue=queue, podgroup=podgroup,
            priority_class=priority_class, created=created or start, scheduled=start, started=start,
            finished=end, last_seen=end, phase="Succeeded" if end else "Running",
            labels=json.dumps(labels or {}), source="test"))

    def series(self, node: str, gpu: int, pod: str, namespace: str, gr: float, *, start: datetime = T0,
               end: datetime, fb_mib: float = 1000.0, mem_mib: float = 81559.0, mig_instance: int = -1,
               mig_profile: str = "", sm: float | None = None, gr_max: float | None = None,
               fb_max_mib: float | None = None, active_hours: set[int] | None = None,
               model_name: str = "NVIDIA H100 80GB HBM3") -> None:
        """Flat series; ``gr_max``/``fb_max_mib`` are the per-step maxima (as ``max_over_time``
        gives them), ``active_hours`` the UTC hours the activity runs (0 at the others)."""
        t = start
        while t < end:
            on = active_hours is None or t.hour in active_hours
            g, gm = (gr, gr if gr_max is None else gr_max) if on else (0.0, 0.0)
            s = (gr if sm is None else sm) if on else 0.0
            self.samples.append(dict(
                cluster=self.cluster, ts=t, gpu_uuid=f"GPU-{node}-{gpu}", mig_instance=mig_instance,
                mig_profile=mig_profile, node=node, gpu_index=gpu, model_name=model_name,
                namespace=namespace, pod=pod, container="c" if pod else "", gr_active=g, gr_active_max=gm,
                sm_active=s, sm_active_max=max(s, gm if sm is None else s),
                gpu_util=None if mig_instance >= 0 else g * 100, fb_used_mib=fb_mib,
                fb_used_max_mib=fb_mib if fb_max_mib is None else fb_max_mib,
                fb_free_mib=mem_mib - fb_mib, power_w=100.0, step_s=STEP))
            t += timedelta(seconds=STEP)

    def price(self, instance_type: str, gpu_model: str, gpus: int, on_demand: float, spot: float | None = None,
              catalog: str = "test-catalog") -> None:
        self.prices.append(dict(catalog=catalog, instance_type=instance_type, gpu_model=gpu_model, gpu_count=gpus,
                                on_demand_usd_per_hour=on_demand, spot_usd_per_hour=spot, region="test",
                                source="hand-written", as_of=T0.date(), loaded_at=T0))

    def queue(self, name: str, *, weight: int = 1, deserved: float | None = None, capability: float | None = None,
              guarantee: float | None = None) -> None:
        import json

        def rl(v: float | None) -> str | None:
            return None if v is None else json.dumps({"nvidia.com/gpu": v})

        self.queues.append(dict(cluster=self.cluster, name=name, weight=weight, capability=rl(capability),
                                deserved=rl(deserved), guarantee=rl(guarantee), capability_gpu=capability,
                                deserved_gpu=deserved, guarantee_gpu=guarantee, reclaimable=True, state="Open"))

    def podgroup(self, name: str, namespace: str = "ns", *, queue: str | None = None, min_member: int = 1,
                 gpus: float | None = None) -> None:
        import json

        self.podgroups.append(dict(cluster=self.cluster, namespace=namespace, name=name, queue=queue,
                                   min_member=min_member, phase="Running",
                                   min_resources=None if gpus is None else json.dumps({"nvidia.com/gpu": gpus})))

    def load(self, wh: Warehouse) -> None:
        with wh.transaction() as con:
            if self.nodes:
                wh.merge("nodes", pl.DataFrame(self.nodes), ["cluster", "node"], con=con)
            if self.pods:
                wh.merge("pods", pl.DataFrame(self.pods), ["cluster", "uid"], con=con)
            if self.samples:
                store_sample_rows(con, pl.DataFrame(self.samples))
            if self.prices:
                wh.merge("prices", pl.DataFrame(self.prices), ["catalog", "instance_type", "gpu_model"], con=con)
            if self.queues:
                wh.merge("queues", pl.DataFrame(self.queues), ["cluster", "name"], con=con)
            if self.podgroups:
                wh.merge("podgroups", pl.DataFrame(self.podgroups, infer_schema_length=None),
                         ["cluster", "namespace", "name"], con=con)
            if self.samples:
                rebuild_rollups(con, pl.DataFrame(self.samples))

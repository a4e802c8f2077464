"""Every source as the facade loads it (:class:`gpuinsight.sources.base.Source`): the loaders as
they are, each with the contracts it writes under. :meth:`gpuinsight.api.GpuInsight.load` runs
one in a write session that checks each write against them.

Metrics files and Prometheus both write through the series writer (:mod:`gpuinsight.sources.series`):
besides their own tables they write the GPU inventory, container CPU and Kueue quota samples,
declared here from the writer's keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpuinsight.sources.base import LoadContract, LoadReport

if TYPE_CHECKING:
    from gpuinsight.config import Config
    from gpuinsight.warehouse.db import Warehouse


def series_contracts() -> tuple[LoadContract, ...]:
    """What the series writer writes besides samples, pods and nodes."""
    from gpuinsight.sources.cadvisor import KEY as CPU_KEY
    from gpuinsight.sources.energy import KEY as ENERGY_KEY
    from gpuinsight.sources.kueue_metrics import KEY as KUEUE_KEY
    from gpuinsight.sources.serving import CONFIG_KEY as SERVING_CONFIG_KEY
    from gpuinsight.sources.serving import KEY as SERVING_KEY

    return (LoadContract("gpus", ("cluster", "gpu_uuid"), description="GPU inventory from DCGM labels"),
            LoadContract("pod_cpu_samples", tuple(CPU_KEY), description="container CPU (cAdvisor)"),
            LoadContract("kueue_quota_samples", tuple(KUEUE_KEY), description="Kueue ClusterQueue quota metrics"),
            LoadContract("serving_samples", tuple(SERVING_KEY), description="inference servers' metrics"),
            LoadContract("serving_config", tuple(SERVING_CONFIG_KEY),
                         description="inference servers' settings (vLLM cache_config_info)"),
            LoadContract("gpu_energy_samples", tuple(ENERGY_KEY), description="DCGM energy counter, joules per step"))


def _with_series(contracts: tuple[LoadContract, ...]) -> tuple[LoadContract, ...]:
    declared = {c.table for c in contracts}
    return contracts + tuple(c for c in series_contracts() if c.table not in declared)


@dataclass
class MetricsFile:
    """A saved exposition file (OpenMetrics / Prometheus text) of dcgm-exporter and kube-state-metrics."""

    path: Path
    name: str = "openmetrics"

    @property
    def contracts(self) -> tuple[LoadContract, ...]:
        from gpuinsight.sources.openmetrics import CONTRACTS

        return _with_series(CONTRACTS)

    def load(self, wh: Warehouse, config: Config) -> LoadReport:
        from gpuinsight.sources.openmetrics import load_openmetrics

        return load_openmetrics(wh, config, self.path)


@dataclass
class PrometheusHistory:
    """dcgm-exporter and kube-state-metrics history from a Prometheus-compatible server
    (incremental: with no ``since``, from the stored cursor less the contract's lag)."""

    since: datetime | None
    until: datetime | None
    step_s: int = 300
    raw: bool = False
    on_commit: Callable[..., None] | None = None
    name: str = "prometheus"

    @property
    def contracts(self) -> tuple[LoadContract, ...]:
        from gpuinsight.sources.prometheus import CONTRACTS

        return _with_series(CONTRACTS)

    def load(self, wh: Warehouse, config: Config) -> LoadReport:
        from gpuinsight.sources.prometheus import PrometheusSource

        source = PrometheusSource(config, matchers=dict(config.prometheus.matchers) or None, on_commit=self.on_commit)
        return source.collect(wh, self.since, self.until, self.step_s, raw=self.raw)


@dataclass
class KubernetesDumps:
    """kubectl dumps of a cluster (``collect kubernetes --from-dir``), taken at ``as_of``."""

    folder: Path
    as_of: datetime | None = None
    name: str = "kubernetes"

    @property
    def contracts(self) -> tuple[LoadContract, ...]:
        from gpuinsight.sources.kubernetes import CONTRACTS

        return CONTRACTS

    def load(self, wh: Warehouse, config: Config) -> LoadReport:
        from gpuinsight.sources.kubernetes import load_dump_dir

        return load_dump_dir(wh, config, Path(self.folder), observed_at=self.as_of)


@dataclass
class KubernetesLive:
    """A live, read-only read of a cluster through a kubeconfig context (or in-cluster)."""

    context: str | None = None
    name: str = "kubernetes"

    @property
    def contracts(self) -> tuple[LoadContract, ...]:
        from gpuinsight.sources.kubernetes import CONTRACTS

        return CONTRACTS

    def load(self, wh: Warehouse, config: Config) -> LoadReport:
        from gpuinsight.sources.kubernetes import collect_live

        return collect_live(wh, config, context=self.context)


@dataclass
class PriceCatalog:
    """A price catalog CSV (default: the one shipped with the package)."""

    path: Path | None = None
    name: str = "prices"

    @property
    def contracts(self) -> tuple[LoadContract, ...]:
        from gpuinsight.sources.prices import CONTRACT

        return (CONTRACT,)

    def load(self, wh: Warehouse, config: Config) -> LoadReport:
        from gpuinsight.sources.prices import load_catalog

        return load_catalog(wh, config, self.path)


@dataclass
class AwsPrices:
    """On-demand and spot prices of every NVIDIA GPU instance type of a region, from AWS."""

    region: str
    name: str = "prices"

    @property
    def contracts(self) -> tuple[LoadContract, ...]:
        from gpuinsight.sources.prices import CONTRACT

        return (CONTRACT,)

    def load(self, wh: Warehouse, config: Config) -> LoadReport:
        from gpuinsight.sources.prices import load_aws

        return load_aws(wh, config, self.region)


@dataclass
class AlibabaOpenb:
    """The Alibaba GPU trace (openb, ATC'23): its pod list and node list."""

    pods: Path
    nodes: Path
    name: str = "alibaba-openb"

    @property
    def contracts(self) -> tuple[LoadContract, ...]:
        from gpuinsight.sources.alibaba import CONTRACTS

        return CONTRACTS

    def load(self, wh: Warehouse, config: Config) -> LoadReport:
        from gpuinsight.sources.alibaba import import_openb

        return import_openb(wh, config, Path(self.pods), Path(self.nodes))


@dataclass
class SampleFleet:
    """A generated fleet folder (``sample_data/`` by default): its metrics file, kubectl dumps
    and price catalog, loaded in that order (:mod:`gpuinsight.sources.sample_dir`)."""

    folder: Path | None = None
    name: str = "sample"

    @property
    def contracts(self) -> tuple[LoadContract, ...]:
        return (*MetricsFile(Path()).contracts, *KubernetesDumps(Path()).contracts, *PriceCatalog().contracts)

    def load(self, wh: Warehouse, config: Config) -> list[LoadReport]:
        from gpuinsight.sources.sample_dir import load_sample_dir

        return load_sample_dir(wh, config, self.folder)

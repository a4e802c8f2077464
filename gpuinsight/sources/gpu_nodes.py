"""Which node a measured GPU is on, when the exporter's own labels do not say it reliably.

dcgm-exporter's ``Hostname`` (``hostname`` since 2026) is ``$NODE_NAME`` only when the DaemonSet
sets it; otherwise it is ``os.Hostname()``, the exporter *pod* name inside Kubernetes (e.g.
``nvidia-dcgm-exporter-ml2wh``, NVIDIA/gpu-operator#340; dcgm-exporter PR #129), and
``--no-hostname`` drops it. The chart's recommended set-up relabels the target's node into
``node`` (or ``kubernetes_node``/``nodename``). So a GPU's node is, in order:

1. a configured relabelled label (default ``node``, ``kubernetes_node``, ``nodename``): taken as is;
   ``Hostname``/``hostname`` in the list count only when they name a known node;
2. the node of a pod named on the series, from ``kube_pod_info`` (or the warehouse's pods): the
   workload pod (``exported_pod``/``pod_name``/``pod``, with its namespace) runs on the GPU's
   node, and ``Hostname`` or the scrape's ``pod`` may name the exporter pod; the scrape's
   ``instance`` address matches the exporter pod's ``pod_ip`` (or ``host_ip`` with hostNetwork);
3. nothing: the GPU is *unmatched*. It keeps what the exporter said (``node_hint``) so the
   ``unmatched_gpus`` model can list it, match it later against a node loaded afterwards, and
   count it in the fleet totals.

A node is *known* when kube-state-metrics reports it (``kube_node_*`` series, or as the ``node``
of a pod) in the same load, or the warehouse already holds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import duckdb
import polars as pl

from gpuinsight.sources.prom.frames import first_label, lab

DEFAULT_NODE_LABELS: tuple[str, ...] = ("node", "kubernetes_node", "nodename", "Hostname", "hostname")
HOSTNAME_LABELS = frozenset({"Hostname", "hostname"})
# Labels on a DCGM series that can name a pod (workload or exporter) or the scrape address.
POD_LABELS = ("exported_pod", "pod_name", "pod")
NAMESPACE_LABELS = ("exported_namespace", "pod_namespace", "namespace")
EXPORTER_POD_INFO = "exporter_pod_info"  # kube_pod_info rows of DaemonSet pods (see promql.ksm_chunk_exprs)


@dataclass
class NodeDirectory:
    """Nodes and pods known in one load: the evidence node resolution may use."""

    known: set[str] = field(default_factory=set)
    pod_node: dict[tuple[str, str], str] = field(default_factory=dict)   # (namespace, pod) -> node
    name_node: dict[str, str | None] = field(default_factory=dict)       # pod -> node; None if ambiguous
    ip_node: dict[str, str | None] = field(default_factory=dict)         # pod or host IP -> node

    def add_pod(self, namespace: str | None, pod: str | None, node: str | None, ips: Iterable[str | None] = ()) -> None:
        if not pod or not node:
            return
        self.known.add(node)
        if namespace:
            self.pod_node[(namespace, pod)] = node
        prev = self.name_node.get(pod, node)
        self.name_node[pod] = node if prev == node else None
        for ip in ips:
            if ip:
                prev_ip = self.ip_node.get(ip, node)
                self.ip_node[ip] = node if prev_ip == node else None

    @classmethod
    def from_series(cls, series: pl.DataFrame) -> NodeDirectory:
        return cls().add_series(series)

    def add_series(self, series: pl.DataFrame) -> NodeDirectory:
        """Add the nodes and pod placements kube-state-metrics series say (newest wins)."""
        d = self
        metric = pl.col("metric")
        nodes = series.filter(metric.str.starts_with("kube_node_"))
        if nodes.height:
            d.known.update(nodes.select(first_label(nodes, "exported_node", "node")).to_series().drop_nulls().to_list())
        info = series.filter(metric.is_in(["kube_pod_info", EXPORTER_POD_INFO]))
        if info.height:
            rows = info.select(
                first_label(info, "exported_namespace", "namespace").alias("ns"),
                first_label(info, "exported_pod", "pod").alias("pod"),
                first_label(info, "exported_node", "node").alias("node"),
                lab(info, "pod_ip").alias("pod_ip"), lab(info, "host_ip").alias("host_ip"),
                host_network=(lab(info, "host_network") == "true").fill_null(False),
            ).unique()
            for r in rows.iter_rows(named=True):
                # a hostNetwork pod's address is the node's, shared by every such pod on it
                d.add_pod(r["ns"], r["pod"], r["node"], (r["pod_ip"], r["host_ip"]) if r["host_network"]
                          else (r["pod_ip"],))
                if r["host_network"] and r["host_ip"] and r["node"]:
                    d.ip_node[r["host_ip"]] = r["node"]
        return d

    def extend_from_warehouse(self, con: duckdb.DuckDBPyConnection, cluster: str) -> None:
        """Nodes and pod placements an earlier load stored (kubectl dumps, earlier chunks)."""
        self.known.update(r[0] for r in con.execute(
            "SELECT node FROM nodes WHERE cluster = ?", [cluster]).fetchall())
        for ns, pod, node in con.execute(
                "SELECT namespace, name, node FROM pods WHERE cluster = ? AND node IS NOT NULL "
                "ORDER BY coalesce(last_seen, created)", [cluster]).fetchall():
            if (ns, pod) not in self.pod_node:
                self.add_pod(ns, pod, node)


def _ip_of(instance: str | None) -> str | None:
    """``10.0.0.5:9400`` -> ``10.0.0.5``; ``[fd00::5]:9400`` -> ``fd00::5``."""
    if not instance:
        return None
    host = instance.rsplit(":", 1)[0] if instance.count(":") == 1 or instance.startswith("[") else instance
    return host.strip("[]") or None


def resolve_nodes(series: pl.DataFrame, directory: NodeDirectory,
                  node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS) -> pl.DataFrame:
    """``node`` (resolved or null) and ``node_hint`` (what the exporter said) for each row of
    ``series`` (DCGM rows), in order."""
    cols = [*node_labels, *POD_LABELS, *NAMESPACE_LABELS, "instance"]
    names = list(dict.fromkeys(cols))
    ident = series.with_columns([lab(series, c).alias(f"_{c}") for c in names]).select(
        [pl.col(f"_{c}").alias(c) for c in names])
    keys = ident.unique()
    nodes, hints = [], []
    for r in keys.iter_rows(named=True):
        node = _resolve_one(r, directory, node_labels)
        nodes.append(node)
        hints.append(None if node else next((r[c] for c in (*node_labels, "instance") if r.get(c)), None))
    table = keys.with_columns(pl.Series("_resolved", nodes, dtype=pl.Utf8), pl.Series("_hint", hints, dtype=pl.Utf8))
    return ident.join(table, on=list(keys.columns), how="left", nulls_equal=True, maintain_order="left").select(
        pl.col("_resolved").alias("node"), pl.col("_hint").alias("node_hint"))


def _resolve_one(r: dict[str, str | None], d: NodeDirectory, node_labels: tuple[str, ...]) -> str | None:
    for name in node_labels:
        value = r.get(name)
        if not value:
            continue
        if name not in HOSTNAME_LABELS:
            return value          # relabelled by the scrape config: trusted
        if value in d.known:
            return value
    ns = next((r[c] for c in NAMESPACE_LABELS if r.get(c)), None)
    for c in POD_LABELS:
        pod = r.get(c)
        if pod and ns and (ns, pod) in d.pod_node:
            return d.pod_node[(ns, pod)]
    for c in (*HOSTNAME_LABELS, *POD_LABELS):   # the exporter pod, whose namespace the series does not say
        pod = r.get(c)
        if pod and d.name_node.get(pod):
            return d.name_node[pod]
    ip = _ip_of(r.get("instance"))
    return d.ip_node.get(ip) if ip else None


def unmatched_note(summary: dict[str, object]) -> str | None:
    """One line for reports, the demo summary and ``recommend``: GPUs measured but on no node of
    the inventory (from a ``fleet_summary`` row), or None when there are none."""
    n = int(summary.get("unmatched_gpus") or 0)  # type: ignore[call-overload]
    if not n:
        return None
    hours = float(summary.get("unmatched_gpu_hours") or 0.0)  # type: ignore[arg-type]
    usd = summary.get("unmatched_usd")
    unpriced = int(summary.get("unmatched_unpriced_gpus") or 0)  # type: ignore[call-overload]
    price = f", about ${float(usd):,.0f} at list price" if usd is not None else ""  # type: ignore[arg-type]
    if unpriced:
        price += f" ({unpriced} of them unpriced: the catalog does not know their model)"
    return (f"{n} GPU(s) measured by DCGM are on no node of the inventory ({hours:,.0f} GPU-hours{price}); they are "
            "counted in the fleet's GPUs but in no node cost, allocation or finding: see "
            "`gpuinsight query unmatched_gpus`")

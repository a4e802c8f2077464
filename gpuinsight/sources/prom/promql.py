"""PromQL text built from parts: quoted matchers, the queries the collector issues, the plan.

Nothing from the user is pasted into a query: label names are validated and values go
through :func:`quote` (a PromQL string literal), regex values through :func:`regex_literal`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpuinsight.errors import BadInput
from gpuinsight.sources.dcgm import BY_SPELLING, MIN_SUFFIX
from gpuinsight.sources.gpu_nodes import EXPORTER_POD_INFO

Matcher = tuple[str, str, str]  # (label, op, value)

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*\Z")
_METRIC = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_OPS = ("=", "!=", "=~", "!~")
_HEX = "0123456789abcdef"
ANY_GPU_UUID = "GPU-[0-9a-fA-F].*"
GPU_RESOURCES = "nvidia_com_.+"


def quote(value: str) -> str:
    """A PromQL double-quoted string literal for any text."""
    out = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{out}"'


def regex_literal(value: str) -> str:
    """A regex (for ``=~``) that matches exactly ``value``."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", value)


def selector(metric: str | None, matchers: Sequence[Matcher] = ()) -> str:
    parts = []
    for label, op, value in matchers:
        if not _LABEL.match(label):
            raise BadInput(f"label matcher: {label!r} is not a valid Prometheus label name")
        if op not in _OPS:
            raise BadInput(f"label matcher on {label}: unknown operator {op!r}")
        parts.append(f"{label}{op}{quote(value)}")
    if metric is not None:
        if not _METRIC.match(metric):
            raise BadInput(f"{metric!r} is not a valid Prometheus metric name")
        return f"{metric}{{{','.join(parts)}}}" if parts else metric
    return "{" + ",".join(parts) + "}"


def dur(seconds: int) -> str:
    return f"{int(seconds)}s"


def uuid_shards(n: int, lowercase_label: bool) -> list[list[Matcher]]:
    """Split the GPU series into ``n`` disjoint groups by the first hex digit of the GPU UUID.

    UUIDs are random, so the groups are even whatever the node sizes (sharding by ``gpu``
    index would pile every single-GPU node into shard "0"). A series spelled with the old
    ``uuid`` label, or with no GPU-hex UUID at all, falls in exactly one extra group, so the
    shards always partition the fleet.
    """
    if n <= 1:
        return [[]]
    n = min(n, 16)
    size = math.ceil(16 / n)
    groups = [_HEX[i:i + size] for i in range(0, 16, size)]
    classes = [f"GPU-[{g}{g.upper()}].*" for g in groups]
    shards: list[list[Matcher]] = [[("UUID", "=~", c)] for c in classes]
    if lowercase_label:
        shards += [[("UUID", "!~", ANY_GPU_UUID), ("uuid", "=~", c)] for c in classes]
    shards.append([("UUID", "!~", ANY_GPU_UUID), ("uuid", "!~", ANY_GPU_UUID)])
    return shards


@dataclass(frozen=True)
class Query:
    """One range query and how to label its result."""

    expr: str
    metric: str          # the series frame's ``metric`` for every result series
    start: float         # unix seconds, first evaluation
    end: float
    step: int
    shift_s: float = 0   # subtracted from the evaluation time to give the row's ts
    keep: frozenset[str] | None = None  # labels worth keeping (None = all)


# The labels the DCGM transform reads (plus the configured node labels); pci_bus_id, device,
# driver version, job and other labels are dropped as results arrive (a third of the columns,
# and of the memory). ``instance`` stays: it can tell the exporter pod, hence the node.
DCGM_LABELS = frozenset({
    "UUID", "uuid", "gpu", "node", "kubernetes_node", "nodename", "Hostname", "hostname", "instance", "pod",
    "namespace", "container", "exported_pod", "exported_namespace", "exported_container", "pod_name",
    "pod_namespace", "container_name", "GPU_I_ID", "GPU_I_PROFILE", "modelName",
    # entities that share the field names but are not GPUs (counted, then skipped; kept apart)
    "nvswitch", "nvlink", "cpu", "cpucore", "gpu_uuid",
})


def _num(x: float) -> str:
    return repr(float(x))


def wants_min(name: str) -> bool:
    """Whether the rules read the field's per-step minimum (GR activity: a stall inside a busy step)."""
    f = BY_SPELLING.get(name)
    return f is not None and f.min_column is not None


def queries_per_field(name: str, raw: bool) -> int:
    """How many range queries :func:`dcgm_exprs` issues for one field (the planner's budget)."""
    f = BY_SPELLING.get(name)
    if raw or f is None:
        return 1
    return 1 + (f.max_column is not None) + (f.min_column is not None)


def dcgm_exprs(name: str, step: int, matchers: Sequence[Matcher], *, raw: bool, want_max: bool) -> list[tuple[str, str]]:
    """(expr, metric) pairs for one DCGM field: per-step avg (+ max, + min where the field has a
    min column), or the raw last sample. The three reductions read the same samples: min and max
    cost the server no more than the average.

    These are plain reductions (one scan of the samples). A step holding a reading that is not
    a measurement shows it in them and is read again with :func:`dcgm_filtered_exprs`
    (``prom/refine.py``)."""
    rng = f"{selector(name, matchers)}[{dur(step)}]"
    if raw:
        # last_over_time, not the bare selector: a vanished series would otherwise linger for
        # the 5-minute lookback and count as allocated after its pod is gone.
        return [(f"last_over_time({rng})", name)]
    out = [(f"avg_over_time({rng})", name)]
    if want_max:
        out.append((f"max_over_time({rng})", f"{name}:max"))
    if wants_min(name):
        out.append((f"min_over_time({rng})", f"{name}{MIN_SUFFIX}"))
    return out


def reading(name: str, matchers: Sequence[Matcher], resolution_s: int) -> str:
    """The series' one reading per scrape interval: ``last_over_time`` over a window 1 ms short
    of the resolution, so no reading is counted twice and none lingers after its series ends."""
    return f"last_over_time({selector(name, matchers)}[{resolution_s * 1000 - 1}ms])"


def kept(name: str, matchers: Sequence[Matcher], resolution_s: int, lo: float, hi: float) -> str:
    """Readings within ``lo..hi``: NaN, Inf, DCGM's blank sentinels and glitches fail the filter."""
    return f"({reading(name, matchers, resolution_s)} <= {_num(hi)} >= {_num(lo)})"


def dcgm_filtered_exprs(name: str, step: int, matchers: Sequence[Matcher], *, want_max: bool, lo: float, hi: float,
                        resolution_s: int) -> list[tuple[str, str]]:
    """The per-step avg (+ max) of one field over its readings within ``lo..hi``: the filter sits
    inside the ``*_over_time``, over a subquery that takes one reading per scrape interval, so a
    sentinel drops one reading, not the step."""
    sub = f"{kept(name, matchers, resolution_s, lo, hi)}[{dur(step)}:{dur(resolution_s)}]"
    out = [(f"avg_over_time({sub})", name)]
    if want_max:
        out.append((f"max_over_time({sub})", f"{name}:max"))
    if wants_min(name):
        out.append((f"min_over_time({sub})", f"{name}{MIN_SUFFIX}"))
    return out


def dcgm_dropped_expr(name: str, step: int, matchers: Sequence[Matcher], *, lo: float, hi: float,
                      resolution_s: int) -> tuple[str, str]:
    """Per series and step, how many readings the filter of :func:`dcgm_filtered_exprs` drops."""
    x = reading(name, matchers, resolution_s)
    bad = f"({x} unless {kept(name, matchers, resolution_s, lo, hi)})"
    return f"count_over_time({bad}[{dur(step)}:{dur(resolution_s)}])", f"{name}:dropped"


# kube-state-metrics before v2.1 puts `uid` only on kube_pod_info: pods are then joined by name
# (both spellings, for scrapes with and without honor_labels).
POD_BY_UID = "uid"
POD_BY_NAME = "namespace, pod, exported_namespace, exported_pod"


def gpu_pods_filter(window: str, matchers: Sequence[Matcher], pod_key: str = POD_BY_UID) -> str:
    req = selector("kube_pod_container_resource_requests", [("resource", "=~", GPU_RESOURCES), *matchers])
    return f"and on ({pod_key}) last_over_time({req}[{window}])"


def gpu_nodes_filter(window: str, matchers: Sequence[Matcher]) -> str:
    cap = selector("kube_node_status_capacity", [("resource", "=~", GPU_RESOURCES), *matchers])
    return f"and on (node) (last_over_time({cap}[{window}]) > 0)"


# Pod and node facts that do not change within a pod's life are read once per chunk; only
# kube_pod_info / kube_node_info are read per step, because their timestamps say when a pod or
# node was alive.
POD_FACTS = ("kube_pod_owner", "kube_pod_labels", "kube_pod_annotations", "kube_pod_created",
             "kube_pod_start_time", "kube_pod_status_scheduled_time", "kube_pod_completion_time",
             "kube_pod_scheduler")
OWNER_FACTS = ("kube_replicaset_owner", "kube_job_owner")


def ksm_step_exprs(step: int, matchers: Sequence[Matcher], pod_key: str = POD_BY_UID) -> list[tuple[str, str]]:
    w = dur(step)
    pod = f"last_over_time({selector('kube_pod_info', matchers)}[{w}]) {gpu_pods_filter(w, matchers, pod_key)}"
    node = f"last_over_time({selector('kube_node_info', matchers)}[{w}]) {gpu_nodes_filter(w, matchers)}"
    return [(pod, "kube_pod_info"), (node, "kube_node_info")]


def gpu_pod_keys(window: str, matchers: Sequence[Matcher]) -> str:
    """(namespace, pod) of the pods holding GPUs, whether kube-state-metrics was scraped with
    honor_labels (``namespace``/``pod``) or without (``exported_namespace``/``exported_pod``)."""
    req = f"last_over_time({selector('kube_pod_container_resource_requests', [('resource', '=~', GPU_RESOURCES), *matchers])}[{window}])"
    exported = selector("kube_pod_container_resource_requests",
                        [("resource", "=~", GPU_RESOURCES), ("exported_pod", "!=", ""), *matchers])
    renamed = (f'label_replace(label_replace(last_over_time({exported}[{window}]), "pod", "$1", "exported_pod", "(.+)"), '
               f'"namespace", "$1", "exported_namespace", "(.+)")')
    return f"(max by (namespace, pod) ({req}) or max by (namespace, pod) ({renamed}))"


def container_cpu_query(t0: float, t1: float, step: int, shift: float, resolution_s: int,
                        matchers: Sequence[Matcher]) -> Query:
    """Cores each GPU pod used per step: cAdvisor's CPU-seconds counter as a rate, summed over the
    pod's containers (not the pod cgroup ``container=""`` nor the pause container ``POD``).

    A counter's increase over a step needs the sample at the step's end, so the rate's window is
    one scrape interval longer than the step and the query is evaluated one interval later than
    the DCGM ones (the row keeps the step's start): the window then holds the samples from the
    step's start to just past its end (the DCGM scrape interval stands in for cAdvisor's)."""
    expr, metric = container_cpu_expr(step, matchers, resolution_s)
    return Query(expr, metric, t0 + resolution_s, t1 + resolution_s, step, shift + resolution_s)


def container_cpu_expr(step: int, matchers: Sequence[Matcher], resolution_s: int) -> tuple[str, str]:
    """The rate expression of :func:`container_cpu_query`."""
    from gpuinsight.sources.cadvisor import COUNTER, RATE_METRIC

    window = dur(step + resolution_s)
    cpu = selector(COUNTER, [("container", "!=", ""), ("container", "!=", "POD"), ("pod", "!=", ""), *matchers])
    expr = (f"sum by (namespace, pod) (rate({cpu}[{window}])) "
            f"and on (namespace, pod) {gpu_pod_keys(dur(step), matchers)}")
    return expr, RATE_METRIC


def ksm_chunk_exprs(window_s: int, matchers: Sequence[Matcher], pod_key: str = POD_BY_UID) -> list[tuple[str, str]]:
    w = dur(window_s)
    out = [(f"last_over_time({selector(m, matchers)}[{w}]) {gpu_pods_filter(w, matchers, pod_key)}", m)
           for m in POD_FACTS]
    req = selector("kube_pod_container_resource_requests", [("resource", "=~", GPU_RESOURCES), *matchers])
    out.append((f"last_over_time({req}[{w}])", "kube_pod_container_resource_requests"))
    # the GPU pods' CPU requests (the input-starved rule compares CPU use with them)
    cpu_req = selector("kube_pod_container_resource_requests", [("resource", "=", "cpu"), *matchers])
    out.append((f"last_over_time({cpu_req}[{w}]) {gpu_pods_filter(w, matchers, pod_key)}",
                "kube_pod_container_resource_requests"))
    # The current phase is the only phase series whose last value is 1.
    phase = selector("kube_pod_status_phase", matchers)
    out.append((f"(last_over_time({phase}[{w}]) == 1) {gpu_pods_filter(w, matchers, pod_key)}",
                "kube_pod_status_phase"))
    out += [(f"last_over_time({selector(m, matchers)}[{w}])", m) for m in OWNER_FACTS]
    out.append((f"last_over_time({selector('kube_node_labels', matchers)}[{w}]) {gpu_nodes_filter(w, matchers)}",
                "kube_node_labels"))
    cap = selector("kube_node_status_capacity", [("resource", "=~", GPU_RESOURCES), *matchers])
    out.append((f"last_over_time({cap}[{w}])", "kube_node_status_capacity"))
    # DaemonSet pods on GPU nodes (dcgm-exporter among them): their names and addresses tell which
    # node a GPU is on when the exporter's Hostname is its pod name (sources/gpu_nodes.py)
    ds = selector("kube_pod_info", [("created_by_kind", "=", "DaemonSet"), *matchers])
    out.append((f"last_over_time({ds}[{w}]) {gpu_nodes_filter(w, matchers)}", EXPORTER_POD_INFO))
    return out


def kueue_exprs(step: int, matchers: Sequence[Matcher]) -> list[tuple[str, str]]:
    """Kueue's ClusterQueue quota series (usage, reservation, nominal quota) and HAMi's
    per-container GPU series (utilisation, memory) per step: what other schedulers say of GPUs
    and quotas; empty answers where they are not installed or not scraped."""
    from gpuinsight.sources.hami_metrics import METRICS as HAMI
    from gpuinsight.sources.kueue_metrics import METRICS as KUEUE

    return [(f"avg_over_time({selector(m, matchers)}[{dur(step)}])" if m in HAMI
             else f"last_over_time({selector(m, matchers)}[{dur(step)}])", m) for m in (*KUEUE, *HAMI)]


def chunk_grid(t0: int, t1: int, step: int, steps_per_chunk: int) -> list[tuple[int, int]]:
    """Split the evaluation grid t0..t1 (multiples of step) into chunks of at most N points."""
    out = []
    a = t0
    while a <= t1:
        b = min(t1, a + (steps_per_chunk - 1) * step)
        out.append((a, b))
        a = b + step
    return out

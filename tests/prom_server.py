"""Reusable test helpers: a real Prometheus backfilled from OpenMetrics, and a fault proxy.

* :func:`write_openmetrics` writes series as an OpenMetrics file promtool accepts.
* :func:`backfill` runs ``promtool tsdb create-blocks-from openmetrics``.
* :func:`prometheus_server` starts ``prometheus`` on a free loopback port over that TSDB and
  yields its URL; it is killed at exit.
* :class:`FaultProxy` sits in front of a server on loopback and injects 5xx, connection
  resets, stalls, truncated bodies, broken JSON, partial-response warnings or wrong content
  types.

These never skip: without promtool/prometheus the test fails and says how to install them.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

INSTALL_HINT = (
    "promtool and prometheus are required for the Prometheus tests; install them with "
    "`apt-get install prometheus` (Debian/Ubuntu) or put both binaries on PATH"
)


def require_tools() -> tuple[str, str]:
    promtool = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    prom = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    if not promtool or not prom:
        pytest.fail(INSTALL_HINT, pytrace=False)
    return promtool, prom


@dataclass
class Series:
    name: str
    labels: dict[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)  # (unix seconds, value)


def _fmt_labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    body = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34)).replace(chr(10), chr(92) + "n")}"'
        for k, v in labels.items()
    )
    return "{" + body + "}"


def _fmt_value(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def write_openmetrics(series: Iterable[Series], path: Path) -> Path:
    """One family per metric name (OpenMetrics wants families contiguous), then ``# EOF``."""
    by_name: dict[str, list[Series]] = {}
    for s in series:
        by_name.setdefault(s.name, []).append(s)
    with open(path, "w", encoding="utf-8") as out:
        for name, members in by_name.items():
            out.write(f"# TYPE {name} gauge\n")
            for s in members:
                lab = _fmt_labels(s.labels)
                out.writelines(f"{name}{lab} {_fmt_value(v)} {t:.3f}\n" for t, v in s.points)
        out.write("# EOF\n")
    return path


def backfill(om_path: Path, tsdb_dir: Path, *, timeout_s: float = 300, max_block_duration: str | None = None) -> Path:
    """``max_block_duration`` (e.g. ``72h``): promtool reads the whole file once per block
    window (2 h by default), so a week of a large fleet is far faster in longer blocks."""
    promtool, _ = require_tools()
    tsdb_dir.mkdir(parents=True, exist_ok=True)
    blocks = [f"--max-block-duration={max_block_duration}"] if max_block_duration else []
    res = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", *blocks, str(om_path), str(tsdb_dir)],
                         capture_output=True, text=True, timeout=timeout_s)
    if res.returncode != 0:
        raise RuntimeError(f"promtool backfill failed: {res.stderr.strip()[-2000:]}")
    return tsdb_dir


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def prometheus_server(tsdb_dir: Path, *, lookback: str = "5m", timeout_s: float = 60.0) -> Iterator[str]:
    """Serve ``tsdb_dir`` with a real Prometheus on 127.0.0.1; yields the base URL."""
    with prometheus_process(tsdb_dir, lookback=lookback, timeout_s=timeout_s) as (url, _):
        yield url


@contextlib.contextmanager
def prometheus_process(tsdb_dir: Path, *, lookback: str = "5m",
                       timeout_s: float = 60.0) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """:func:`prometheus_server`, also yielding the process (the benchmarks read its CPU time)."""
    _, prom = require_tools()
    config = tsdb_dir.parent / f"{tsdb_dir.name}-prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n", encoding="utf-8")
    log_path = tsdb_dir.parent / f"{tsdb_dir.name}-prometheus.log"
    for _attempt in range(3):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [prom, f"--storage.tsdb.path={tsdb_dir}", f"--web.listen-address=127.0.0.1:{port}",
                 f"--config.file={config}",
                 # The fixtures' samples are days old relative to each other: keep them all.
                 "--storage.tsdb.retention.time=36500d", f"--query.lookback-delta={lookback}"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        try:
            if _wait_ready(url, proc, timeout_s):
                yield url, proc
                return
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    raise RuntimeError(f"prometheus did not become ready; log:\n{log_path.read_text()[-3000:]}")


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    return False


FAULTS = ("5xx", "reset", "stall", "truncate", "badjson", "partial")


class FaultProxy:
    """A loopback HTTP proxy in front of ``upstream`` that misbehaves on request.

    Set the attributes between requests: ``fail_next`` (answer that many requests with
    ``fail_status``), ``stall_s`` (sleep before answering), ``delay_s`` (slow every
    request down), ``content_type`` / ``body`` (replace the answer's).

    ``schedule(path)`` (optional) picks a fault for one request, one of :data:`FAULTS`:

    * ``5xx``: ``fail_status`` with a Prometheus-style JSON error body;
    * ``reset``: the connection is reset (RST) before any answer;
    * ``stall``: nothing for ``stall_fault_s`` seconds (beyond the client's timeout), then
      the real answer, by which time the client has given up;
    * ``truncate``: the real status and ``Content-Length``, half the body, then the
      connection closes (the client sees ``IncompleteRead``);
    * ``badjson``: 200 with a short invalid JSON body (a correct ``Content-Length``);
    * ``partial``: the real answer with Thanos/Mimir-style ``"warnings"`` added.

    ``injected`` counts the faults dealt, by kind.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.fail_next = 0
        self.fail_status = 503
        self.stall_s = 0.0
        self.delay_s = 0.0
        self.content_type: str | None = None
        self.body: bytes | None = None
        self.only_path: str | None = None  # faults apply only to requests under this path
        self.schedule: Callable[[str], str | None] | None = None
        self.stall_fault_s = 2.0
        self.warning = "partial response: store gateway 10.0.3.7:10901 unavailable"
        self.requests: list[str] = []
        self.injected: Counter[str] = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy._handle(self)

            def do_POST(self) -> None:
                proxy._handle(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        faulty = self.only_path is None or h.path.startswith(self.only_path)
        with self._lock:
            self.requests.append(h.path)
            fail = faulty and self.fail_next > 0
            if fail:
                self.fail_next -= 1
            kind = self.schedule(h.path) if faulty and self.schedule is not None else None
            if kind:
                self.injected[kind] += 1
        if fail:
            kind = "5xx"
        if self.stall_s and faulty:
            time.sleep(self.stall_s)
        if kind == "stall":
            time.sleep(self.stall_fault_s)
        if self.delay_s:
            time.sleep(self.delay_s)
        if kind == "5xx":
            self._send(h, self.fail_status, "application/json",
                       b'{"status":"error","errorType":"unavailable","error":"upstream unavailable"}')
            return
        if kind == "reset":
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            h.connection.close()
            return
        length = int(h.headers.get("Content-Length") or 0)
        data = h.rfile.read(length) if length else None
        req = urllib.request.Request(self.upstream + h.path, data=data, method=h.command)
        for k in ("Content-Type", "Authorization"):
            if h.headers.get(k):
                req.add_header(k, h.headers[k])
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                status, ctype, body = r.status, r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            status, ctype, body = e.code, e.headers.get("Content-Type", ""), e.read()
        if faulty and kind is None:
            ctype = self.content_type or ctype
            body = self.body if self.body is not None else body
        if kind == "truncate":
            self._send(h, status, ctype, body, cut=max(1, len(body) // 2))
            return
        if kind == "badjson":
            body = body[:max(1, min(len(body) - 1, 40))]
        if kind == "partial" and body.rstrip().endswith(b"}"):
            extra = b',"warnings":[' + json.dumps(self.warning).encode() + b"]}"
            body = body.rstrip()[:-1] + extra
        self._send(h, status, ctype, body)

    @staticmethod
    def _send(h: http.server.BaseHTTPRequestHandler, status: int, ctype: str, body: bytes,
              cut: int | None = None) -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body if cut is None else body[:cut])
            if cut is not None:
                h.wfile.flush()
                h.close_connection = True
                h.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- a small fleet with every variation the collectors must handle ---------------------------
T0 = 1793491200  # 2026-11-01T00:00:00Z, where the sample fleet starts too
SCRAPE_S = 30


@dataclass
class SmallFleet:
    series: list[Series]
    # (namespace, pod) -> raw sample timestamps attributed to it (one per GPU entity per scrape)
    alloc: dict[tuple[str, str], list[float]]
    nan_samples: int
    end: float

    def gpu_hours(self, step_s: int) -> dict[tuple[str, str], float]:
        """What a reduction at ``step_s`` must yield: one step per window holding a sample."""
        out = {}
        for key, times in self.alloc.items():
            windows = {int(t) // step_s for t in times}
            out[key] = len(windows) * step_s / 3600.0
        return out


def build_small_fleet(hours: float = 6.0) -> SmallFleet:
    n = int(hours * 3600 / SCRAPE_S)
    times = [T0 + SCRAPE_S * i for i in range(n)]
    series: list[Series] = []
    alloc: dict[tuple[str, str], list[float]] = {}

    def gpu(ident: dict[str, str], metrics: dict[str, float], ts: list[float], pod: tuple[str, str] | None,
            nan_at: frozenset[int] = frozenset()) -> None:
        for name, value in metrics.items():
            pts = [(t, float("nan") if (i in nan_at and name.endswith("GPU_UTIL")) else value) for i, t in enumerate(ts)]
            series.append(Series(name, dict(ident), pts))
        if pod is not None:
            alloc.setdefault(pod, []).extend(ts)

    full = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.7, "DCGM_FI_PROF_SM_ACTIVE": 0.6, "DCGM_FI_DEV_GPU_UTIL": 80.0,
            "DCGM_FI_DEV_FB_USED": 30000.0, "DCGM_FI_DEV_FB_FREE": 51920.0, "DCGM_FI_DEV_POWER_USAGE": 300.0}
    exporter = {"pod": "dcgm-exporter-x7k2p", "namespace": "gpu-operator", "container": "exporter"}
    a100 = {"modelName": "NVIDIA A100-SXM4-80GB", "Hostname": "gpu-a100-1", "DCGM_FI_DRIVER_VERSION": "535.154.05"}
    # n1: scraped without honor_labels; GPU 0 busy with a one-hour gap and NaNs, GPU 1 idle.
    gap = [t for t in times if not (T0 + 3600 <= t < T0 + 5400)]
    gpu({"gpu": "0", "UUID": "GPU-aaaa0000-0000-0000-0000-000000000000", "device": "nvidia0", **a100, **exporter,
         "exported_pod": "train-abc-0", "exported_namespace": "ml", "exported_container": "trainer"},
        full, gap, ("ml", "train-abc-0"), nan_at=frozenset({10, 11, 12}))
    gpu({"gpu": "1", "UUID": "GPU-aaaa1111-0000-0000-0000-000000000000", "device": "nvidia1", **a100, **exporter},
        {k: 0.0 for k in full}, times, None)
    # n2: MIG (no GPU_UTIL on instances), new `hostname` spelling, honor_labels on.
    mig = {"gpu": "0", "UUID": "GPU-cccc0000-0000-0000-0000-000000000000", "modelName": "NVIDIA H100 80GB HBM3",
           "GPU_I_PROFILE": "3g.40gb", "hostname": "gpu-h100-1"}
    mig_metrics = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.2, "DCGM_FI_PROF_SM_ACTIVE": 0.15,
                   "DCGM_FI_DEV_FB_USED": 9000.0, "DCGM_FI_DEV_FB_FREE": 31000.0}
    gpu({**mig, "GPU_I_ID": "1", "pod": "infer-7d9f-xyz", "namespace": "prod", "container": "server"},
        mig_metrics, times, ("prod", "infer-7d9f-xyz"))
    gpu({**mig, "GPU_I_ID": "2"}, {k: 0.0 for k in mig_metrics}, times, None)
    # n3: no profiling fields; relabelled `node` beats Hostname (the exporter's pod name here);
    # pod job-0 runs, stops, and a retry with the same name (new uid) runs again.
    l4 = {"gpu": "0", "UUID": "GPU-dddd0000-0000-0000-0000-000000000000", "modelName": "NVIDIA L4",
          "Hostname": "dcgm-exporter-abcde", "node": "gpu-l4-1"}
    basic = {"DCGM_FI_DEV_GPU_UTIL": 50.0, "DCGM_FI_DEV_FB_USED": 12000.0, "DCGM_FI_DEV_FB_FREE": 10000.0,
             "DCGM_FI_DEV_POWER_USAGE": 60.0}
    first, idle, second = ([t for t in times if lo <= t - T0 < hi] for lo, hi in ((0, 10800), (10800, 12600), (12600, 1e9)))
    job = {"pod": "job-0", "namespace": "batch", "container": "worker"}
    gpu({**l4, **job}, basic, first + second, ("batch", "job-0"))
    gpu(l4, {k: 0.0 for k in basic}, idle, None)
    # n4: old namespace (uuid, pod_name...) and lower-case metric names; the node goes away at 4h.
    early = [t for t in times if t - T0 < 14400]
    gpu({"gpu": "0", "uuid": "GPU-eeee0000-0000-0000-0000-000000000000", "modelName": "NVIDIA A10G",
         "Hostname": "gpu-a10g-1", "pod_name": "notebook-0", "pod_namespace": "dev", "container_name": "jupyter"},
        {"dcgm_fi_dev_gpu_util": 3.0, "dcgm_fi_dev_fb_used": 2000.0, "dcgm_fi_dev_fb_free": 20000.0},
        early, ("dev", "notebook-0"))
    series += _ksm_series(times)
    return SmallFleet(series, alloc, nan_samples=3, end=times[-1])


def _ksm_series(times: list[float]) -> list[Series]:
    out: list[Series] = []
    ksm = {"namespace": "monitoring", "pod": "kube-state-metrics-0", "container": "kube-state-metrics"}

    def emit(name: str, labels: dict[str, str], ts: list[float], value: float | list[float] = 1.0) -> None:
        vals = value if isinstance(value, list) else [value] * len(ts)
        out.append(Series(name, labels, list(zip(ts, vals, strict=True))))

    def pod(ns: str, name: str, uid: str, ts: list[float], node: str, owner: tuple[str, str], gpus: dict[str, float],
            extra_labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
            phase: str = "Running", end_phase: str | None = None, prio: str = "") -> None:
        who = {**ksm, "exported_namespace": ns, "exported_pod": name, "uid": uid}
        emit("kube_pod_info", {**who, "node": node, "created_by_kind": owner[0], "created_by_name": owner[1],
                               "priority_class": prio, "host_network": "false"}, ts)
        emit("kube_pod_owner", {**who, "owner_kind": owner[0], "owner_name": owner[1],
                                "owner_is_controller": "true" if owner[0] else ""}, ts)
        emit("kube_pod_labels", {**who, **{f"label_{k}": v for k, v in (extra_labels or {}).items()}}, ts)
        if annotations:
            emit("kube_pod_annotations", {**who, **{f"annotation_{k}": v for k, v in annotations.items()}}, ts)
        emit("kube_pod_created", who, ts, ts[0] - 600)
        if node:
            emit("kube_pod_status_scheduled_time", who, ts, ts[0] - 300)
            emit("kube_pod_start_time", who, ts, ts[0] - 240)
        for ph in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            vals = [1.0 if ph == phase else 0.0] * len(ts)
            if end_phase:
                vals[-2:] = [1.0 if ph == end_phase else 0.0] * 2
            emit("kube_pod_status_phase", {**who, "phase": ph}, ts, vals)
        if end_phase:
            emit("kube_pod_completion_time", who, ts[-2:], ts[-1])
        for res, qty in {**gpus, "cpu": 4.0}.items():
            emit("kube_pod_container_resource_requests", {**who, "exported_container": "main", "node": node,
                 "resource": res, "unit": "core" if res == "cpu" else "integer"}, ts, qty)

    rel = [t - T0 for t in times]
    span = {k: [t for t, r in zip(times, rel, strict=True) if lo <= r < hi] for k, (lo, hi) in
            {"all": (0, 1e9), "a": (0, 10800), "b": (12600, 1e9), "nb": (0, 14400)}.items()}
    pod("ml", "train-abc-0", "uid-train-0", span["all"], "gpu-a100-1", ("ReplicaSet", "train-abc"), {"nvidia_com_gpu": 1})
    emit("kube_replicaset_owner", {**ksm, "exported_namespace": "ml", "replicaset": "train-abc",
                                   "owner_kind": "Deployment", "owner_name": "train", "owner_is_controller": "true"},
         span["all"])
    pod("prod", "infer-7d9f-xyz", "uid-infer", span["all"], "gpu-h100-1", ("ReplicaSet", "infer-7d9f"),
        {"nvidia_com_mig_3g_40gb": 1}, prio="prod-critical")
    emit("kube_replicaset_owner", {**ksm, "exported_namespace": "prod", "replicaset": "infer-7d9f",
                                   "owner_kind": "Deployment", "owner_name": "infer", "owner_is_controller": "true"},
         span["all"])
    vc = {"volcano_sh_job_name": "vj", "volcano_sh_queue_name": "research"}
    pod("batch", "job-0", "uid-job0-a", span["a"], "gpu-l4-1", ("Job", "vj"), {"nvidia_com_gpu": 1}, vc,
        {"scheduling_k8s_io_group_name": "vj-pg"}, end_phase="Failed")
    pod("batch", "job-0", "uid-job0-b", span["b"], "gpu-l4-1", ("Job", "vj"), {"nvidia_com_gpu": 1}, vc,
        {"scheduling_k8s_io_group_name": "vj-pg"})
    pod("dev", "notebook-0", "uid-nb", span["nb"], "gpu-a10g-1", ("StatefulSet", "notebook"), {"nvidia_com_gpu": 1})
    pod("batch", "pending-0", "uid-pend", span["all"], "", ("", ""), {"nvidia_com_gpu": 8}, phase="Pending")
    pod("web", "cpu-0", "uid-cpu", span["all"], "gpu-a100-1", ("", ""), {})

    def node(name: str, ts: list[float], labels: dict[str, str], capacity: dict[str, float], provider: str) -> None:
        emit("kube_node_info", {"node": name, "provider_id": provider, "kernel_version": "6.1"}, ts)
        emit("kube_node_labels", {"node": name, **{f"label_{k}": v for k, v in labels.items()}}, ts)
        for res, qty in {**capacity, "cpu": 96.0}.items():
            emit("kube_node_status_capacity", {"node": name, "resource": res,
                                               "unit": "core" if res == "cpu" else "integer"}, ts, qty)

    node("gpu-a100-1", span["all"], {"karpenter_sh_nodepool": "a100", "karpenter_sh_capacity_type": "on-demand",
         "node_kubernetes_io_instance_type": "p4de.24xlarge", "nvidia_com_gpu_product": "NVIDIA-A100-SXM4-80GB",
         "topology_kubernetes_io_zone": "us-east-1a"}, {"nvidia_com_gpu": 8}, "aws:///us-east-1a/i-0aaa")
    node("gpu-h100-1", span["all"], {"eks_amazonaws_com_nodegroup": "h100-ng", "eks_amazonaws_com_capacity_type": "SPOT",
         "node_kubernetes_io_instance_type": "p5.48xlarge", "nvidia_com_gpu_product": "NVIDIA-H100-80GB-HBM3",
         "nvidia_com_mig_config": "all-3g.40gb", "nvidia_com_gpu_count": "8"},
         {"nvidia_com_mig_3g_40gb": 16}, "aws:///us-east-1b/i-0bbb")
    node("gpu-l4-1", span["all"], {"karpenter_sh_nodepool": "l4", "karpenter_sh_capacity_type": "spot",
         "node_kubernetes_io_instance_type": "g6.xlarge", "nvidia_com_gpu_product": "NVIDIA-L4"},
         {"nvidia_com_gpu": 1}, "aws:///us-east-1a/i-0ccc")
    node("gpu-a10g-1", span["nb"], {"eks_amazonaws_com_nodegroup": "a10g-ng", "eks_amazonaws_com_capacity_type": "ON_DEMAND",
         "node_kubernetes_io_instance_type": "g5.xlarge", "nvidia_com_gpu_product": "NVIDIA-A10G"},
         {"nvidia_com_gpu": 1}, "aws:///us-east-1a/i-0ddd")
    return out

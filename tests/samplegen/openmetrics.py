"""Write the fleet's dcgm-exporter and kube-state-metrics history as OpenMetrics text.

The file is what `promtool tsdb create-blocks-from openmetrics` takes: one `# HELP`/`# TYPE`
per family, each family contiguous, each series' samples in time order, timestamps in
seconds, `# EOF` at the end.  Series carry the `instance`/`job` labels Prometheus adds.
It is streamed family by family (device blocks are recomputed per family), never built
as one string.
"""

from __future__ import annotations

import contextlib
import gzip as gz
import io
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from . import k8s
from .fleet import Fleet
from .signals import cell_blocks, cell_values
from .spec import WORKLOADS

KSM_INSTANCE = "10.0.4.17:8080"
DCGM_PORT = 9400
NODE_INFO = {"container_runtime_version": "containerd://1.7.22",
             "kernel_version": "6.1.112-124.190.amzn2023.x86_64", "kubelet_version": "v1.31.2-eks-7f9249a",
             "kubeproxy_version": "deprecated", "os_image": "Amazon Linux 2023.6.20241031"}

DCGM_FAMILIES = (  # name, help (from dcgm-exporter's counters CSV), Values attribute, integer
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util", True),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "fb_free", True),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb", True),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power", False),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", "gr", False),
    ("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", "sm", False),
    # dcgm-exporter's default counters since PR #357; only the training pool's exporter has them
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus - including both protocol "
     "headers and data payloads - in bytes per second.", "pcie_tx", True),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - including both protocol "
     "headers and data payloads - in bytes per second.", "pcie_rx", True),
)
KUBELET_PORT = 10250


def _esc(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def fmt_labels(labels: dict[str, Any]) -> str:
    return ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())


class _Writer:
    def __init__(self, out: IO[str], fleet: Fleet, first_step: int = 0) -> None:
        self.out = out
        self.fleet = fleet
        self.ts = [str(t) for t in fleet.times.tolist()]
        self.first_step = first_step  # samples before this step are left out

    def family(self, name: str, help_: str) -> None:
        self.out.write(f"# HELP {name} {help_}\n# TYPE {name} gauge\n")

    def const(self, name: str, labels: dict[str, Any], value: object, k0: int, k1: int) -> None:
        k0 = max(k0, self.first_step)
        if k1 > k0:
            head = f"{name}{{{fmt_labels(labels)}}} {value} "
            self.out.write("".join(f"{head}{t}\n" for t in self.ts[k0:k1]))

    def series(self, name: str, labels: str, values: list[str], ks: np.ndarray) -> None:
        if self.first_step and ks.size and ks[0] < self.first_step:
            keep = ks >= self.first_step
            values, ks = [v for v, k in zip(values, keep.tolist(), strict=True) if k], ks[keep]
        head = f"{name}{{{labels}}} "
        ts = self.ts
        self.out.write("".join(f"{head}{v} {ts[k]}\n" for v, k in zip(values, ks.tolist(), strict=True)))


class _Tee:
    """Text written to every chunk of a split exposition (the families' HELP/TYPE, the EOF)."""

    def __init__(self, outs: list[IO[str]]) -> None:
        self.outs = outs

    def write(self, text: str) -> int:
        for out in self.outs:
            out.write(text)
        return len(text)


class _SplitWriter(_Writer):
    """A :class:`_Writer` whose samples go to one exposition per range of steps
    ``[bounds[j], bounds[j + 1])``, each complete (every family's header, ``# EOF``)."""

    def __init__(self, outs: list[IO[str]], fleet: Fleet, bounds: list[int]) -> None:
        super().__init__(_Tee(outs), fleet, bounds[0])
        self.outs, self.bounds = outs, bounds

    def const(self, name: str, labels: dict[str, Any], value: object, k0: int, k1: int) -> None:
        head = None
        for out, lo, hi in zip(self.outs, self.bounds, self.bounds[1:], strict=False):
            a, b = max(k0, lo), min(k1, hi)
            if b > a:
                head = head or f"{name}{{{fmt_labels(labels)}}} {value} "
                out.write("".join(f"{head}{t}\n" for t in self.ts[a:b]))

    def series(self, name: str, labels: str, values: list[str], ks: np.ndarray) -> None:
        cuts = np.searchsorted(ks, self.bounds).tolist()  # ks ascending: each chunk's slice
        head, ts = f"{name}{{{labels}}} ", self.ts
        for j, out in enumerate(self.outs):
            a, b = cuts[j], cuts[j + 1]
            if b > a:
                out.write("".join(f"{head}{v} {ts[k]}\n" for v, k in zip(values[a:b], ks[a:b].tolist(), strict=True)))


# ----------------------------------------------------------------------------- DCGM


def _device_labels(fleet: Fleet) -> list[str]:
    nodes = fleet.nodes.to_dicts()
    out = []
    for d in fleet.devices.iter_rows(named=True):
        n = nodes[d["node_row"]]
        lab = {"gpu": d["gpu_index"], "UUID": d["uuid"], "pci_bus_id": d["pci_bus_id"], "device": d["device"],
               "modelName": d["model_name"]}
        if d["mig_instance"] >= 0:
            lab.update(GPU_I_PROFILE=d["mig_profile"], GPU_I_ID=d["mig_instance"])
        lab[n["hostname_label"]] = n["name"]
        lab["DCGM_FI_DRIVER_VERSION"] = n["driver"]
        out.append(fmt_labels(lab))
    return out


def _attribution(fleet: Fleet) -> tuple[list[str], list[str]]:
    """k8s attribute labels per DCGM series key (+1 shifted, 0 = unallocated), honored / exported."""
    keys = fleet.pods.select("key", "namespace", "name", "container").unique("key").sort("key")
    honored, exported = ['container="",namespace="",pod=""'], ['exported_container="",exported_namespace="",exported_pod=""']
    for _, ns, pod, ctr in keys.iter_rows():
        honored.append(f'container="{ctr}",namespace="{ns}",pod="{pod}"')
        exported.append(f'exported_container="{ctr}",exported_namespace="{ns}",exported_pod="{pod}"')
    return honored, exported


def _write_dcgm(w: _Writer) -> None:
    fleet = w.fleet
    steps = fleet.spec.steps
    dev_labels = _device_labels(fleet)
    honored, exported = _attribution(fleet)
    nodes = fleet.nodes.to_dicts()
    node_row = fleet.devices["node_row"].to_list()
    scrape = []
    for n in nodes:
        tail = f'instance="{n["exporter_ip"]}:{DCGM_PORT}",job="dcgm-exporter"'
        if not n["honor_labels"]:
            tail = f'container="exporter",namespace="gpu-operator",pod="{n["exporter_pod"]}",{tail}'
        scrape.append(tail)
    mig = (fleet.devices["mig_instance"] >= 0).to_numpy()
    pcie_node = fleet.nodes["pcie"].to_list()
    for name, help_, attr, integer in DCGM_FAMILIES:
        w.family(name, help_)
        k_from = w.first_step  # values are computed for the steps written only
        for c0, c1 in cell_blocks(fleet, steps - k_from, budget=1_000_000):
            v = cell_values(fleet, c0, c1, k_from, steps)
            arr = getattr(v, attr)
            keys = np.where(v.holder >= 0, fleet.pod_key[np.maximum(v.holder, 0)] + 1, 0)
            for i in range(arr.shape[0]):
                d = v.d0 + i
                if attr == "util" and mig[d] or attr.startswith("pcie") and not pcie_node[node_row[d]]:
                    continue
                n = nodes[node_row[d]]
                attrs = honored if n["honor_labels"] else exported
                row = arr[i].astype(np.int64) if integer else arr[i]
                strs = row.astype(str)
                present = ~v.gap[i]
                uniq, first = np.unique(keys[i], return_index=True)
                for key in uniq[np.argsort(first)]:
                    ks = np.flatnonzero((keys[i] == key) & present)
                    labels = f"{dev_labels[d]},{attrs[key]},{scrape[node_row[d]]}"
                    w.series(name, labels, strs[ks].tolist(), ks + k_from)


# ----------------------------------------------------------------------------- kube-state-metrics


def _ksm(labels: dict[str, Any]) -> dict[str, Any]:
    return {**labels, "instance": KSM_INSTANCE, "job": "kube-state-metrics"}


def _node_series(fleet: Fleet) -> Iterator[tuple[str, str, list[tuple[dict[str, Any], object]]]]:
    nodes = fleet.nodes.to_dicts()
    info, labels, created, cap, alloc = [], [], [], [], []
    for n in nodes:
        nl = k8s.node_labels(n)
        info.append((_ksm({"node": n["name"], **NODE_INFO, "pod_cidr": "", "internal_ip": n["internal_ip"],
                           "provider_id": f"aws:///{n['zone']}/{n['instance_id']}",
                           "system_uuid": "ec2" + n["uid"].replace("-", "")[3:]}), 1))
        labels.append((_ksm({"node": n["name"], **{k8s.ksm_name("label", k): nl[k]
                                                   for k in k8s.KSM_NODE_LABELS if k in nl}}), 1))
        created.append((_ksm({"node": n["name"]}), n["created_s"]))
        c, a = k8s.node_resources(n)
        for res, target in ((c, cap), (a, alloc)):
            for r in ("cpu", "memory", "pods", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"):
                if r in res:
                    unit = {"cpu": "core", "memory": "byte"}.get(r, "integer")
                    q = k8s.quantity(res[r])
                    val = int(q) if q == int(q) else round(q, 3)
                    target.append((_ksm({"node": n["name"], "resource": k8s.ksm_resource(r), "unit": unit}), val))
    yield "kube_node_info", "[STABLE] Information about a cluster node.", info
    yield "kube_node_labels", "[STABLE] Kubernetes labels converted to Prometheus labels.", labels
    yield "kube_node_created", "[STABLE] Unix creation timestamp", created
    yield "kube_node_status_capacity", "[STABLE] The capacity for different resources of a node.", cap
    yield ("kube_node_status_allocatable",
           "[STABLE] The allocatable for different resources of a node that are available for scheduling.", alloc)


POD_FAMILIES = (
    ("kube_pod_info", "[STABLE] Information about pod."),
    ("kube_pod_owner", "[STABLE] Information about the Pod's owner."),
    ("kube_pod_labels", "[STABLE] Kubernetes labels converted to Prometheus labels."),
    ("kube_pod_annotations", "Kubernetes annotations converted to Prometheus labels."),
    ("kube_pod_container_resource_requests", "The number of requested request resource by a container. "
     "It is recommended to use the kube_pod_resource_requests metric exposed by kube-scheduler instead, "
     "as it is more precise."),
    ("kube_pod_created", "[STABLE] Unix creation timestamp"),
    ("kube_pod_status_scheduled_time", "[STABLE] Unix timestamp when pod moved into scheduled status"),
    ("kube_pod_start_time", "[STABLE] Start time in unix timestamp for a pod."),
    ("kube_pod_completion_time", "[STABLE] Completion time in unix timestamp for a pod."),
    ("kube_pod_status_phase", "[STABLE] The pods current phase."),
)
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def _write_pods(w: _Writer) -> None:
    fleet = w.fleet
    sp = fleet.spec
    wls = fleet.workloads.to_dicts()
    pods = fleet.pods.to_dicts()
    node_ip = fleet.nodes["internal_ip"].to_list()
    ke0, ke1 = fleet.k_exist
    kr0, kr1 = fleet.k_run

    def k_of(ts: int | None) -> int:
        return sp.steps if ts is None else int(min(sp.steps, max(0, -((sp.start_s - ts) // sp.interval_s))))

    for name, help_ in POD_FAMILIES:
        w.family(name, help_)
        for i, p in enumerate(pods):
            a, b = int(ke0[i]), int(ke1[i])
            if b <= a:
                continue
            wl = wls[p["workload"]]
            wd = k8s.wdef(p)
            base = {"namespace": p["namespace"], "pod": p["name"], "uid": p["uid"]}
            if name == "kube_pod_info":
                w.const(name, _ksm({**base, "host_ip": node_ip[p["node_row"]], "pod_ip": p["pod_ip"],
                                    "node": p["node"], "created_by_kind": wl["owner_kind"],
                                    "created_by_name": wl["owner_name"], "priority_class": wd.priority_class,
                                    "host_network": "false"}), 1, a, b)
            elif name == "kube_pod_owner":
                w.const(name, _ksm({**base, "owner_kind": wl["owner_kind"], "owner_name": wl["owner_name"],
                                    "owner_is_controller": "true"}), 1, a, b)
            elif name == "kube_pod_labels":
                pl_ = k8s.pod_labels(p, wl)
                w.const(name, _ksm({**base, **{k8s.ksm_name("label", k): pl_[k]
                                               for k in k8s.KSM_POD_LABELS if k in pl_}}), 1, a, b)
            elif name == "kube_pod_annotations":
                an = k8s.pod_annotations(p, wl)
                w.const(name, _ksm({**base, **{k8s.ksm_name("annotation", k): an[k]
                                               for k in k8s.KSM_POD_ANNOTATIONS if k in an}}), 1, a, b)
            elif name == "kube_pod_container_resource_requests":
                req, _ = k8s.pod_resources(wd)
                for r, q in req.items():
                    unit = {"cpu": "core", "memory": "byte"}.get(r, "integer")
                    val = k8s.quantity(q)
                    w.const(name, _ksm({**base, "container": p["container"], "node": p["node"],
                                        "resource": k8s.ksm_resource(r), "unit": unit}),
                            int(val) if val == int(val) else val, a, b)
            elif name == "kube_pod_created":
                w.const(name, _ksm(base), p["created_s"], a, b)
            elif name == "kube_pod_status_scheduled_time":
                w.const(name, _ksm(base), p["scheduled_s"], max(a, k_of(p["scheduled_s"])), b)
            elif name == "kube_pod_start_time":
                w.const(name, _ksm(base), p["started_s"], max(a, int(kr0[i])), b)
            elif name == "kube_pod_completion_time":
                if p["completed_s"] is not None:
                    w.const(name, _ksm(base), p["completed_s"], max(a, int(kr1[i])), b)
            else:
                run_lo = max(a, min(b, int(kr0[i])))
                run_hi = max(run_lo, min(b, int(kr1[i])))
                bounds = {"Pending": (a, run_lo), "Running": (run_lo, run_hi)}
                if p["phase"] != "Running":
                    bounds[p["phase"]] = (run_hi, b)
                ks = np.arange(a, b)
                for ph in PHASES:
                    lo, hi = bounds.get(ph, (0, 0))
                    vals = np.where((ks >= lo) & (ks < hi), "1", "0").tolist()
                    w.series(name, fmt_labels(_ksm({**base, "phase": ph})), vals, ks)
    w.family("kube_replicaset_owner", "[STABLE] Information about the ReplicaSet's owner.")
    for wl in wls:
        if wl["kind"] == "Deployment":
            w.const("kube_replicaset_owner", _ksm({"namespace": wl["namespace"], "replicaset": wl["owner_name"],
                                                   "owner_kind": "Deployment", "owner_name": wl["name"],
                                                   "owner_is_controller": "true"}), 1, 0, sp.steps)


def _write_cadvisor(w: _Writer) -> None:
    """cAdvisor's CPU-seconds counter (through the kubelet) for the pods on nodes it is scraped
    on: one series per container and one for the pod's own cgroup (``container=""``), as the
    kubelet's /metrics/cadvisor publishes them; counters start at a pod's start."""
    fleet = w.fleet
    sp = fleet.spec
    nodes = fleet.nodes.to_dicts()
    pods = fleet.pods.to_dicts()
    first_dev = fleet.first_devices()
    w.out.write("# HELP container_cpu_usage_seconds Cumulative cpu time consumed in seconds.\n"
                "# TYPE container_cpu_usage_seconds counter\n")
    kr0, kr1 = fleet.k_run
    for c0, c1 in cell_blocks(fleet, sp.steps, budget=1_000_000):
        v = cell_values(fleet, c0, c1, 0, sp.steps)
        for i, p in enumerate(pods):
            n = nodes[p["node_row"]]
            a, b = int(kr0[i]), int(kr1[i])
            if not n["cadvisor"] or b <= a or i not in first_dev or not c0 <= p["cell"] < c1:
                continue
            cores = v.cpu[first_dev[i] - v.d0, a:b]
            used = np.round(np.cumsum(cores * sp.interval_s) - cores * sp.interval_s, 3)  # used before each sample
            wd = WORKLOADS[p["template"]]
            slice_ = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{p['uid'].replace('-', '_')}.slice"
            common = {"instance": f"{n['internal_ip']}:{KUBELET_PORT}", "job": "kubelet",
                      "metrics_path": "/metrics/cadvisor", "namespace": p["namespace"], "node": p["node"],
                      "pod": p["name"]}
            ks = np.arange(a, b)
            if w.first_step > a:  # the counter counts from the pod's start; earlier samples are left out
                ks, used = ks[w.first_step - a:], used[w.first_step - a:]
            for labels, values in (
                ({"container": p["container"], "cpu": "total", "id": f"{slice_}/cri-containerd-{p['container_id']}.scope",
                  "image": wd.image, "name": p["container_id"], **common}, used),
                ({"container": "", "cpu": "total", "id": slice_, "image": "", "name": "", **common},
                 np.round(used * 1.002 + 0.5, 3)),  # the pod cgroup: its containers plus the pause container
            ):
                w.series("container_cpu_usage_seconds_total", fmt_labels(dict(sorted(labels.items()))),
                         [f"{x:.3f}" for x in values.tolist()], ks)


# vLLM's time-to-first-token buckets (vllm/engine/metrics.py)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
SERVING_PORT = 8000
# dcgm-exporter's default counters publish the energy counter; the EKS group's exporter runs an
# older counters file without it (its energy comes from the power readings)
NO_ENERGY_POOLS = frozenset({"gpu-l4-od"})


def serving_values(fleet: Fleet, k_all: np.ndarray, gr: np.ndarray, sd: Any) -> dict[str, np.ndarray]:
    """Per sample of one serving pod (its first GPU's GR activity ``gr``): the tokens, requests and
    KV-cache use of the interval that starts at the sample, and the median time to first token."""
    iv = fleet.spec.interval_s
    tokens = sd.peak_tps * gr * iv
    prompt = np.floor(tokens * sd.prompt_share)
    generated = np.floor(tokens) - prompt
    requests = np.floor(np.floor(tokens) / sd.tokens_per_request)
    return {"prompt": prompt, "generated": generated, "requests": requests,
            "ttft_median": sd.ttft_s * (1.0 + 2.0 * gr), "kv": np.round(np.clip(sd.kv_usage * gr, 0.0, 1.0), 4)}


def _write_serving(w: _Writer) -> None:
    """The inference servers' metrics as the Prometheus Operator scrapes them from the pod
    (``namespace``/``pod``/``container`` target labels): counters that start at the pod's start,
    the time-to-first-token histogram (each interval's requests spread as an exponential
    distribution with the interval's median) and the KV-cache gauge."""
    fleet = w.fleet
    sp = fleet.spec
    pods = fleet.pods.to_dicts()
    first_dev = fleet.first_devices()
    kr0, kr1 = fleet.k_run
    series: dict[str, list[tuple[str, list[str], np.ndarray]]] = {}
    for c0, c1 in cell_blocks(fleet, sp.steps, budget=1_000_000):
        v = cell_values(fleet, c0, c1, 0, sp.steps)
        for i, p in enumerate(pods):
            sd = WORKLOADS[p["template"]].serving
            a, b = int(kr0[i]), int(kr1[i])
            if sd is None or b <= a or i not in first_dev or not c0 <= p["cell"] < c1:
                continue
            gr = v.gr[first_dev[i] - v.d0, a:b]
            ks = np.arange(a, b)
            x = serving_values(fleet, ks, gr, sd)
            base = (f'container="{p["container"]}",endpoint="http",instance="{p["pod_ip"]}:{SERVING_PORT}",'
                    f'job="{p["namespace"]}/{WORKLOADS[p["template"]].name}",model_name="{sd.model}",'
                    f'namespace="{p["namespace"]}",pod="{p["name"]}"')
            for name, key in (("vllm:prompt_tokens_total", "prompt"), ("vllm:generation_tokens_total", "generated"),
                              ("vllm:request_success_total", "requests")):
                before = np.cumsum(x[key]) - x[key]  # counted before each sample
                extra = ',finished_reason="stop"' if key == "requests" else ""
                series.setdefault(name, []).append((base + extra, [f"{y:.1f}" for y in before.tolist()], ks))
            cum = np.zeros(len(TTFT_BUCKETS) + 1)
            rows = []
            for j in range(len(ks)):
                rows.append(np.floor(cum))
                frac = 1.0 - np.exp(-np.log(2.0) * np.array(TTFT_BUCKETS) / x["ttft_median"][j])
                cum = cum + x["requests"][j] * np.append(frac, 1.0)
            counts = np.array(rows)
            for bi, le in enumerate([*map(repr, TTFT_BUCKETS), "+Inf"]):
                series.setdefault("vllm:time_to_first_token_seconds_bucket", []).append(
                    (f'{base},le="{le}"', [f"{y:.1f}" for y in counts[:, bi].tolist()], ks))
            series.setdefault("vllm:kv_cache_usage_perc", []).append((base, [f"{y:g}" for y in x["kv"].tolist()], ks))
            if sd.server == "vllm":  # vLLM 0.6's CacheConfig as its info gauge labels it
                info = (f'block_size="16",cache_dtype="auto",cpu_offload_gb="0",{base},enable_prefix_caching="False",'
                        f'gpu_memory_utilization="{sd.memory_fraction}",is_attention_free="False",num_cpu_blocks="2048",'
                        f'num_gpu_blocks="{sd.kv_blocks}",num_gpu_blocks_override="None",sliding_window="None",'
                        f'swap_space_bytes="4294967296"')
                series.setdefault("vllm:cache_config_info", []).append((info, ["1.0"] * len(ks), ks))
    helps = {"vllm:prompt_tokens_total": ("vllm:prompt_tokens", "counter", "Number of prefill tokens processed."),
             "vllm:generation_tokens_total": ("vllm:generation_tokens", "counter",
                                              "Number of generation tokens processed."),
             "vllm:request_success_total": ("vllm:request_success", "counter",
                                            "Count of successfully processed requests."),
             "vllm:time_to_first_token_seconds_bucket": ("vllm:time_to_first_token_seconds_bucket", "gauge",
                                                         "Histogram of time to first token in seconds (buckets)."),
             "vllm:kv_cache_usage_perc": ("vllm:kv_cache_usage_perc", "gauge",
                                          "KV-cache usage. 1 means 100 percent usage."),
             "vllm:cache_config_info": ("vllm:cache_config_info", "gauge", "information of cache_config")}
    for name, members in series.items():
        family, kind, help_ = helps[name]
        w.out.write(f"# HELP {family} {help_}\n# TYPE {family} {kind}\n")
        for labels, values, ks in members:
            w.series(name, labels, values, ks)


def _write_energy(w: _Writer) -> None:
    """DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ since the driver loaded) on every node whose exporter
    publishes it: each reading adds the interval's power x time, so the counter and the power readings
    agree; MIG instances repeat their GPU's counter."""
    fleet = w.fleet
    steps = fleet.spec.steps
    iv = fleet.spec.interval_s
    dev_labels = _device_labels(fleet)
    nodes = fleet.nodes.to_dicts()
    node_row = fleet.devices["node_row"].to_list()
    hash_id = fleet.devices["hash_id"].to_list()
    w.family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).")
    for c0, c1 in cell_blocks(fleet, steps, budget=1_000_000):
        v = cell_values(fleet, c0, c1, 0, steps)
        for i in range(v.power.shape[0]):
            d = v.d0 + i
            n = nodes[node_row[d]]
            if n["pool"] in NO_ENERGY_POOLS:
                continue
            used = np.cumsum(v.power[i] * iv * 1000.0) - v.power[i] * iv * 1000.0 + (hash_id[d] % 997) * 1e9
            present = np.flatnonzero(~v.gap[i])
            scrape = f'instance="{n["exporter_ip"]}:{DCGM_PORT}",job="dcgm-exporter"'
            w.series("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", f"{dev_labels[d]},{scrape}",
                     [f"{y:.0f}" for y in used[present].tolist()], present)


def _write_all(w: _Writer) -> None:
    fleet = w.fleet
    _write_dcgm(w)
    for name, help_, series in _node_series(fleet):
        w.family(name, help_)
        for labels, value in series:
            w.const(name, labels, value, 0, fleet.spec.steps)
    _write_pods(w)
    _write_cadvisor(w)
    _write_energy(w)
    _write_serving(w)
    w.out.write("# EOF\n")


def write_openmetrics(fleet: Fleet, path: str | Path, *, gzip: bool | None = None, first_step: int = 0) -> Path:
    """Stream the fleet's metrics to `path` (gzip when `gzip` is true, or by default for *.gz);
    with `first_step`, only the samples from that step on (what a Prometheus holding the last
    days of the window would hold; benchmarks of a daily collection)."""
    path = Path(path)
    use_gzip = path.suffix == ".gz" if gzip is None else gzip
    with open(path, "wb") as raw:
        stream: IO[bytes] = gz.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) \
            if use_gzip else raw
        with io.TextIOWrapper(stream, encoding="utf-8", newline="\n", write_through=False) as out:
            _write_all(_Writer(out, fleet, first_step))
        if use_gzip:
            stream.close()
    return path


def write_openmetrics_split(fleet: Fleet, paths: list[Path], bounds: list[int], *, compresslevel: int = 1) -> list[Path]:
    """The exposition of the steps ``[bounds[0], bounds[-1])`` in one pass, split by time: gzip file
    ``paths[j]`` holds the steps ``[bounds[j], bounds[j + 1])``, each a complete exposition that
    ``promtool tsdb create-blocks-from openmetrics`` takes (after gunzip) on its own. A large
    fleet's days never sit on disk uncompressed at once (10,000 GPUs: about 15 GB a day)."""
    if len(paths) != len(bounds) - 1 or sorted(bounds) != bounds:
        raise ValueError("one path per range of steps, bounds ascending")
    with contextlib.ExitStack() as stack:
        outs: list[IO[str]] = []
        for path in paths:
            raw = stack.enter_context(open(path, "wb"))
            stream = stack.enter_context(gz.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                     compresslevel=compresslevel))
            outs.append(stack.enter_context(io.TextIOWrapper(stream, encoding="utf-8", newline="\n")))
        _write_all(_SplitWriter(outs, fleet, bounds))
    return paths

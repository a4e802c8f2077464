"""The Alibaba GenAI serving trace (GenTD26; the two archives vendored in ``tests/fixtures/traces``)
as a warehouse the rules read.

The trace gives, per pod (``container_ip``), GPU duty cycle (%) and GPU memory used (bytes)
about every 57 s for ~23 h; it gives no GPU model, nodes or owners. Assumed here, and stated
wherever a figure is printed: each pod is a single-replica production Deployment holding one
H100-80GB (1-GPU p5.4xlarge nodes, or packed 8 to a p5.48xlarge); duty cycle stands in for GR
engine activity. Samples are rolled up to ``step_s`` steps the way the Prometheus collector
does with the max pushed down: the step's mean, and its max (``max_over_time``).
"""

from __future__ import annotations

import csv
import io
import math
import tarfile
from collections import Counter
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl

from gpuinsight.rules.common import compute_peak_of
from gpuinsight.warehouse import Warehouse
from gpuinsight.warehouse.rollup import rebuild_rollups
from gpuinsight.warehouse.samples import store_sample_rows

TRACE = Path(__file__).resolve().parent / "fixtures" / "traces" / "alibaba-v2026-genai-serving"
MEMORY_MIB = 81559.0
CLUSTER = "genai"
SHAPES = {1: ("p5.4xlarge", 6.88), 8: ("p5.48xlarge", 55.04)}


def _csv(archive: str) -> pl.DataFrame:
    with tarfile.open(TRACE / archive) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".csv"))
        data = tar.extractfile(member)
        assert data is not None
        return pl.read_csv(io.BytesIO(data.read()))


@cache
def raw_samples() -> pl.DataFrame:
    """One row per pod and sample time: duty cycle (0..1) and memory used (MiB)."""
    duty = _csv("pod_gpu_duty_cycle_anon.tar.gz").select(
        pl.col("container_ip").alias("ip"), pl.col("timestamp_anon").cast(pl.Int64).alias("t"),
        (pl.col("value") / 100.0).clip(0.0, 1.0).alias("duty"))
    mem = _csv("pod_gpu_memory_used_bytes_anon.tar.gz").select(
        pl.col("container_ip").alias("ip"), pl.col("timestamp_anon").cast(pl.Int64).alias("t"),
        (pl.col("value") / 2**20).alias("mib"))
    return duty.join(mem, on=["ip", "t"], how="inner").sort(["ip", "t"])


def steps(step_s: int) -> pl.DataFrame:
    """Per pod and step: mean and max of duty cycle and memory (the max pushed down)."""
    return raw_samples().with_columns((pl.col("t") // step_s * step_s).alias("step")).group_by(["ip", "step"]).agg(
        pl.col("duty").mean().alias("gr"), pl.col("duty").max().alias("gr_max"),
        pl.col("mib").mean().alias("fb"), pl.col("mib").max().alias("fb_max")).sort(["ip", "step"])


def load_trace(wh: Warehouse, *, gpus_per_node: int = 1, step_s: int = 300, production: bool = True) -> dict[str, int]:
    """Fill ``wh`` with the trace: nodes, pods (one Deployment each), 5-minute samples, prices."""
    s = steps(step_s)
    pods = s.group_by("ip").agg(pl.col("step").min().alias("t0"), pl.col("step").max().alias("t1")).sort("ip")
    instance, price = SHAPES[gpus_per_node]
    node_of = {ip: (f"gpu-node-{i // gpus_per_node:03d}", i % gpus_per_node) for i, ip in enumerate(pods["ip"])}
    ts = pl.from_epoch(pl.col("step"), time_unit="s")
    namespace = "sd-serving" if production else "sd-lab"
    labels = '{"app": "sd-serving", "env": "production"}' if production else '{"app": "sd-lab"}'
    t0, t1 = int(pods["t0"].min()), int(pods["t1"].max()) + step_s
    nodes = pl.DataFrame([{
        "cluster": CLUSTER, "node": n, "instance_type": instance, "capacity_type": "on-demand",
        "node_pool": "sd-h100", "node_pool_kind": "karpenter", "gpu_model": "H100-80GB", "gpu_count": gpus_per_node,
        "mig_config": "all-disabled", "zone": "z1", "first_seen": datetime.fromtimestamp(t0, UTC).replace(tzinfo=None),
        "last_seen": datetime.fromtimestamp(t1 - step_s, UTC).replace(tzinfo=None)}
        for n in sorted({v[0] for v in node_of.values()})])
    pod_rows = pods.with_columns(
        pl.lit(CLUSTER).alias("cluster"), ("uid-" + pl.col("ip")).alias("uid"), pl.lit(namespace).alias("namespace"),
        ("sd-" + pl.col("ip").str.slice(0, 10)).alias("name"), pl.lit("Deployment").alias("workload_kind"),
        ("sd-" + pl.col("ip").str.slice(0, 10)).alias("workload"),
        pl.col("ip").replace_strict({k: v[0] for k, v in node_of.items()}).alias("node"),
        pl.lit(1.0).alias("gpu_request"), pl.lit(0.0).alias("mig_request"),
        pl.from_epoch("t0", time_unit="s").alias("created"), pl.from_epoch("t0", time_unit="s").alias("scheduled"),
        pl.from_epoch("t0", time_unit="s").alias("started"),
        pl.when(pl.col("t1") + step_s < t1).then(pl.from_epoch(pl.col("t1") + step_s, time_unit="s"))
        .otherwise(None).alias("finished"),
        pl.from_epoch("t1", time_unit="s").alias("last_seen"),
        pl.lit("Running").alias("phase"), pl.lit(labels).alias("labels"), pl.lit("trace").alias("source"),
    ).drop("ip", "t0", "t1")
    samples = s.with_columns(
        pl.lit(CLUSTER).alias("cluster"), ts.alias("ts"), ("GPU-" + pl.col("ip")).alias("gpu_uuid"),
        pl.lit(-1).alias("mig_instance"), pl.lit("").alias("mig_profile"),
        pl.col("ip").replace_strict({k: v[0] for k, v in node_of.items()}).alias("node"),
        pl.col("ip").replace_strict({k: v[1] for k, v in node_of.items()}).cast(pl.Int32).alias("gpu_index"),
        pl.lit("NVIDIA H100 80GB HBM3").alias("model_name"), pl.lit(namespace).alias("namespace"),
        ("sd-" + pl.col("ip").str.slice(0, 10)).alias("pod"), pl.lit("server").alias("container"),
        pl.col("gr").alias("gr_active"), pl.col("gr_max").alias("gr_active_max"),
        pl.col("gr").alias("sm_active"), pl.col("gr_max").alias("sm_active_max"), (pl.col("gr") * 100).alias("gpu_util"),
        pl.col("fb").alias("fb_used_mib"), pl.col("fb_max").alias("fb_used_max_mib"),
        (MEMORY_MIB - pl.col("fb")).alias("fb_free_mib"), pl.lit(None, pl.Float64).alias("power_w"),
        pl.lit(step_s).cast(pl.Int32).alias("step_s"),
    ).select("cluster", "ts", "gpu_uuid", "mig_instance", "mig_profile", "node", "gpu_index", "model_name",
             "namespace", "pod", "container", "gr_active", "gr_active_max", "sm_active", "sm_active_max",
             "gpu_util", "fb_used_mib", "fb_used_max_mib", "fb_free_mib", "power_w", "step_s")
    prices = pl.DataFrame([{"catalog": "genai-trace", "instance_type": it, "gpu_model": "H100-80GB", "gpu_count": g,
                            "on_demand_usd_per_hour": usd, "spot_usd_per_hour": None, "region": "assumed",
                            "source": "reference catalog p5 prices", "as_of": datetime(2026, 7, 20).date(),
                            "loaded_at": datetime(2026, 7, 20)} for g, (it, usd) in SHAPES.items()])
    with wh.transaction() as con:
        wh.merge("nodes", nodes, ["cluster", "node"], con=con)
        wh.merge("pods", pod_rows, ["cluster", "uid"], con=con)
        wh.merge("prices", prices, ["catalog", "instance_type", "gpu_model"], con=con)
        store_sample_rows(con, samples, replace=False)
        rebuild_rollups(con, samples.select("ts"))
    return {"pods": pods.height, "nodes": nodes.height, "samples": samples.height}


def memory_violations(recs: list[Any], profile: pl.DataFrame, memory_mib: float = MEMORY_MIB,
                      factor: float = 1.05) -> list[str]:
    """Findings that would give a workload less framebuffer than ``factor`` x its observed max."""
    fb = {(r["namespace"], r["workload"]): r["fb_max_mib"] for r in profile.to_dicts()}
    bad = []
    groups: dict[str, list[Any]] = {}
    for r in recs:
        if r.rule == "mig" and r.evidence["slice_usable_mib"] < factor * fb[(r.namespace, r.workload)]:
            bad.append(f"{r.workload}: {r.proposed['mig_profile']} below its max {fb[(r.namespace, r.workload)]:.0f} MiB")
        if r.rule == "mps" and memory_mib / r.proposed["replicas"] < factor * fb[(r.namespace, r.workload)]:
            bad.append(f"{r.workload}: MPS share below its max")
        if r.rule == "timeslice":
            groups.setdefault(r.proposed["node"], []).append(r)
    for node, members in groups.items():
        replicas = members[0].proposed["replicas"]
        top = sorted((fb[(m.namespace, m.workload)] for m in members), reverse=True)[:replicas]
        if factor * sum(top) > memory_mib:
            bad.append(f"time-sliced {node}: {sum(top):.0f} MiB of {memory_mib:.0f}")
    return bad


def compute_peak(r: dict[str, Any]) -> float:
    """The rule's compute figure (:func:`gpuinsight.rules.common.compute_peak_of`) of a
    ``workload_gpu_profile`` row as a dict."""
    return compute_peak_of(r["peak_p95"], r["gr_p95"], r["sm_p95"])


def ffd_gpus(demands: list[tuple[float, float]], memory_mib: float = MEMORY_MIB, target: float = 0.8) -> int:
    """First-fit decreasing of (memory MiB, peak compute) demands onto GPUs, with no isolation
    and no MIG granularity: the relaxed yardstick the planner's GPUs are compared with."""
    bins: list[list[float]] = []
    for mem, cpu in sorted(demands, key=lambda d: -max(d[0] / memory_mib, d[1] / target)):
        for b in bins:
            if b[0] + mem <= memory_mib and b[1] + cpu <= target:
                b[0] += mem
                b[1] += cpu
                break
        else:
            bins.append([mem, cpu])
    return len(bins)


def mig_reference(model: str = "H100-80GB") -> tuple[list[tuple[str, int, float, str]], list[Counter[str]]]:
    """The model's MIG instances (profile, compute slices, usable MiB, slice class) and its valid
    layouts (slice-class multisets), read from the vendored reference tables (not the planner's)."""
    ref = Path(__file__).resolve().parent / "fixtures" / "reference" / "mig"
    profiles = []
    with open(ref / "mig-profiles.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            g, mem = int(r["compute_slices"]), int(r["memory_slices"])
            if r["gpu_model"] == model and g < 7 and "+me" not in r["profile"]:
                cls = "1g.2x" if g == 1 and mem == 2 else f"{g}g"
                profiles.append((r["profile"], g, float(r["memory_gb"]) * 998.0, cls))
    with open(ref / "mig-valid-layouts.csv", newline="") as fh:
        layouts = [Counter(r["slice_classes"].split("+")) for r in csv.DictReader(fh)]
    return sorted(profiles, key=lambda p: (p[1], p[2])), layouts


def isolation_ffd_gpus(demands: list[tuple[float, float, bool]], memory_mib: float = MEMORY_MIB, *,
                       target: float = 0.8, fill: float = 0.9, max_clients: int = 8, model: str = "H100-80GB") -> int:
    """First-fit decreasing of (memory MiB, peak compute, production) demands onto GPUs with the
    planner's sizing and isolation rules but no node structure (every GPU its own configuration):
    a GPU is MIG-partitioned (each demand the smallest instance that holds it at ``target`` of its
    compute, the instances within a valid layout; production and other work together), or shared
    by MPS (production only, each client within 1/R of memory and of ``target``), or time-sliced
    (other work only, summed memory within ``fill``, summed compute within ``target``), at most
    ``max_clients`` per GPU. Both ways of opening a GPU (MIG first, sharing first) are tried and
    the fewer GPUs kept: the yardstick with isolation the planner is compared with."""
    profiles, layouts = mig_reference(model)

    def instance(mem: float, cpu: float) -> list[tuple[str, int, float, str]]:
        need = max(1, math.ceil(cpu * 7 / target - 1e-9))
        return [p for p in profiles if p[2] >= mem and p[1] >= need]

    def pack(mig_first: bool) -> int:
        bins: list[dict[str, Any]] = []
        for mem, cpu, prod in sorted(demands, key=lambda d: -max(d[0] / memory_mib, d[1] / target)):
            fits = instance(mem, cpu)
            placed = False
            for b in bins:
                if b["mode"] == "mig":
                    for p in fits:
                        classes = b["classes"] + Counter([p[3]])
                        if any(all(lay[c] >= n for c, n in classes.items()) for lay in layouts):
                            b["classes"] = classes
                            placed = True
                            break
                elif b["mode"] == ("mps" if prod else "ts") and len(b["items"]) < max_clients:
                    items = [*b["items"], (mem, cpu)]
                    r = len(items)
                    ok = (all(m <= memory_mib / r and c <= target / r for m, c in items) if prod else
                          sum(m for m, _ in items) <= memory_mib * fill and sum(c for _, c in items) <= target)
                    if ok:
                        b["items"] = items
                        placed = True
                if placed:
                    break
            if not placed:
                if fits and (mig_first or not (mem <= memory_mib / 2 and cpu <= target / 2)):
                    bins.append({"mode": "mig", "classes": Counter([fits[0][3]])})
                else:
                    bins.append({"mode": "mps" if prod else "ts", "items": [(mem, cpu)]})
        return len(bins)

    return min(pack(True), pack(False))

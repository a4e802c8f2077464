"""The refresh after a load rebuilds only the hours it changed (sql/incremental.py), and its models
equal a build from scratch: random fleets loaded in random chunks, with late data, re-collections
that change values and hand GPU steps to other pods, pods that finish, vanish without a word
(and are later said to have finished), restart or get new labels, HAMi vGPU pods moved to another
device, time-sliced nodes, MIG nodes (pods on 3g instances, two to a GPU), GPUs whose DCGM energy
counter is scraped (the rest integrate power), inference servers' tokens (on GPU pods and on a
pod that holds none), nodes that come and go, and a new price catalog;
after every load every model is compared with a full rebuild of the same data."""

from __future__ import annotations

import json
import math
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import gpuinsight as gi
from gpuinsight.sources.energy import KEY as ENERGY_KEY
from gpuinsight.sources.prom.store import merge_spans
from gpuinsight.sources.serving import COLUMNS as SERVING_COLUMNS
from gpuinsight.sources.serving import KEY as SERVING_KEY
from gpuinsight.warehouse.rollup import rebuild_rollups
from gpuinsight.warehouse.samples import store_sample_rows

T0 = datetime(2026, 11, 1)
STEP = 300
HOURS = 24
TYPES = {1: ("g5.xlarge", "A10G", 1.01), 4: ("g5.12xlarge", "A10G", 5.67), 8: ("p5.48xlarge", "H100-80GB", 55.04)}


class World:
    """A random fleet over HOURS hours: what a collector sees of it, range by range."""

    def __init__(self, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.seed = seed
        self.nodes: list[dict[str, Any]] = []
        self.pods: list[dict[str, Any]] = []
        self.labels: dict[str, str] = {}  # uid -> labels JSON (a dump may change them)
        self.device: dict[str, int] = {}  # uid of a HAMi vGPU pod -> the GPU index it holds a share of
        self.told: set[str] = set()       # uids of vanished pods a dump later said finished
        for cluster in ["a", "b"][: rng.choice([1, 2])]:
            for n in range(rng.randint(2, 4)):
                # in each fleet: H100s in two 3g MIG instances each, a time-sliced node (two replicas per GPU)
                mig = n == 0 and cluster == "a"
                gpus = 8 if mig else 4 if n == 1 else rng.choice([1, 4, 8])
                shared = not mig and gpus > 1 and (n == 1 or rng.random() < 0.3)
                first = T0 + timedelta(hours=rng.choice([0, 0, rng.randint(1, 10)]))
                gone = rng.random() < 0.2
                last = first + timedelta(hours=rng.randint(4, 12)) if gone else None
                node = dict(cluster=cluster, node=f"n{n}", gpus=gpus, shared=shared, first=first, last=last,
                            capacity_type=rng.choice(["on-demand", "spot"]), mig=mig,
                            counter=n % 2 == 1)  # its GPUs' energy counter is scraped (others: power)
                self.nodes.append(node)
                end_of_node = last or T0 + timedelta(hours=HOURS)
                for p in range(rng.randint(1, 4)):
                    start = first + timedelta(minutes=5 * rng.randint(0, 60))
                    if start >= end_of_node:
                        continue
                    end = start + timedelta(minutes=5 * rng.randint(6, 200))
                    end = None if end >= end_of_node and last is None else min(end, end_of_node)
                    # the devices it holds: GPUs, or on a MIG node instances (2 x GPU + 0 or 1)
                    held = rng.sample(range(2 * gpus if mig else gpus), k=rng.randint(1, min(gpus, 3)))
                    name = f"w{p % 2}-{n}-{p}" if rng.random() < 0.6 else f"w{p % 2}-{n}-0"  # restarts reuse a name
                    uid = f"uid-{cluster}-{n}-{p}"
                    self.pods.append(dict(cluster=cluster, uid=uid, namespace=["ml", "web"][p % 2], name=name,
                                          node=f"n{n}", gpus=held, start=start, end=end, shared=shared, mig=mig,
                                          workload=f"wl{p % 3}", kind=rng.choice(["Job", "Deployment"]),
                                          vanish=end is not None and rng.random() < 0.5))
                    self.labels[uid] = json.dumps({"team": rng.choice(["x", "y"])})
                if gpus >= 4 and not shared and not mig:  # HAMi vGPU pods: a share of one device each
                    for v in range(rng.randint(1, 3)):
                        uid = f"uid-{cluster}-{n}-v{v}"
                        start = first + timedelta(minutes=5 * rng.randint(0, 60))
                        self.pods.append(dict(cluster=cluster, uid=uid, namespace="ml", name=f"vgpu-{n}-{v}",
                                              node=f"n{n}", gpus=[], start=start, end=None, shared=False, mig=False,
                                              workload="vgpu", kind="Deployment", vanish=False))
                        self.labels[uid] = "{}"
                        self.device[uid] = rng.randrange(gpus)

    # -- what a collection of [t0, t1) reads ------------------------------------------------------
    def samples(self, t0: datetime, t1: datetime, variant: int) -> pl.DataFrame:
        rows = []
        vr = random.Random(hash((self.seed, t0, variant)))
        for node in self.nodes:
            alive_to = node["last"] or T0 + timedelta(hours=HOURS)
            t = max(t0, node["first"])
            t = T0 + timedelta(seconds=math.ceil((t - T0).total_seconds() / STEP) * STEP)
            while t < min(t1, alive_to):
                for dev in range(2 * node["gpus"] if node["mig"] else node["gpus"]):
                    gpu, instance = (dev // 2, dev % 2) if node["mig"] else (dev, -1)
                    holders = [p for p in self.pods if p["cluster"] == node["cluster"] and p["node"] == node["node"]
                               and dev in p["gpus"] and p["start"] <= t and (p["end"] is None or t < p["end"])]
                    if variant and vr.random() < 0.1:  # a re-collection hands the GPU step to another pod
                        holders = [dict(namespace="ml", name="ghost")]
                    if vr.random() < 0.03:  # a step DCGM missed
                        continue
                    for p in holders or [dict(namespace="", name="")]:
                        gr = round(vr.random() if p["name"] else vr.random() * 0.02, 4)
                        rows.append(dict(cluster=node["cluster"], ts=t, gpu_uuid=f"GPU-{node['cluster']}-{node['node']}-{gpu}",
                                         mig_instance=instance, mig_profile="3g.40gb" if instance >= 0 else "",
                                         node=node["node"], gpu_index=gpu,
                                         model_name="NVIDIA GPU", namespace=p["namespace"], pod=p["name"],
                                         container="c" if p["name"] else "", gr_active=gr,
                                         gr_active_max=min(1.0, gr + 0.1), sm_active=gr / 2, sm_active_max=gr,
                                         gpu_util=gr * 100, fb_used_mib=1000.0 + 100 * gr, fb_used_max_mib=2000.0,
                                         fb_free_mib=20000.0, power_w=round(60 + 300 * gr, 1), step_s=STEP))
                t += timedelta(seconds=STEP)
        return pl.DataFrame(rows, schema_overrides={"mig_instance": pl.Int32, "gpu_index": pl.Int32,
                                                    "step_s": pl.Int32}, infer_schema_length=None)

    def energy(self, t0: datetime, t1: datetime, variant: int) -> pl.DataFrame:
        """DCGM's energy counter of the GPUs of nodes that scrape it, joules per step (a
        re-collection reads other values; a step here and there is missing)."""
        rows = []
        vr = random.Random(hash((self.seed, t0, variant, 1)))
        for node in self.nodes:
            if not node["counter"]:
                continue
            alive_to = node["last"] or T0 + timedelta(hours=HOURS)
            t = max(t0, node["first"])
            t = T0 + timedelta(seconds=math.ceil((t - T0).total_seconds() / STEP) * STEP)
            while t < min(t1, alive_to):
                for gpu in range(node["gpus"]):
                    if vr.random() >= 0.05:
                        rows.append(dict(cluster=node["cluster"], gpu_uuid=f"GPU-{node['cluster']}-{node['node']}-{gpu}",
                                         ts=t, energy_j=round(STEP * vr.uniform(50, 400), 1), step_s=STEP))
                t += timedelta(seconds=STEP)
        return pl.DataFrame(rows, schema={"cluster": pl.Utf8, "gpu_uuid": pl.Utf8, "ts": pl.Datetime("us"),
                                          "energy_j": pl.Float64, "step_s": pl.Int32})

    def serving(self, t0: datetime, t1: datetime, variant: int) -> pl.DataFrame:
        """Tokens served per step by the pods of workload wl0 while they run, and by a CPU proxy
        pod all along (a re-collection reads other counts)."""
        rows = []
        vr = random.Random(hash((self.seed, t0, variant, 2)))
        servers = [(p["cluster"], p["namespace"], p["name"], p["start"], p["end"])
                   for p in self.pods if p["workload"] == "wl0"] + [("a", "ml", "proxy", T0, None)]
        for cluster, namespace, pod, start, end in servers:
            t = T0 + timedelta(seconds=math.ceil((max(t0, start) - T0).total_seconds() / STEP) * STEP)
            while t < t1 and (end is None or t < end):
                rows.append(dict(cluster=cluster, ts=t, namespace=namespace, pod=pod, model_name="m", server="vllm",
                                 prompt_tokens=float(vr.randint(0, 5000)), generation_tokens=float(vr.randint(0, 2000)),
                                 requests=float(vr.randint(0, 20)), ttft_p95_s=vr.uniform(0.1, 2), kv_cache_usage=0.5,
                                 kv_cache_usage_max=0.7, step_s=STEP))
                t += timedelta(seconds=STEP)
        return pl.DataFrame(rows, schema_overrides=SERVING_COLUMNS, infer_schema_length=None) \
            .with_columns(*(pl.lit(None, dtype).alias(c) for c, dtype in SERVING_COLUMNS.items()
                            if not rows or c not in rows[0])).select(list(SERVING_COLUMNS))

    def pod_rows(self, t0: datetime, t1: datetime) -> pl.DataFrame:
        """The pods alive in [t0, t1) as seen at t1 (finished once it was seen to end)."""
        rows = []
        for p in self.pods:
            if p["start"] >= t1 or (p["end"] is not None and p["end"] <= t0):
                continue
            ended = p["end"] is not None and p["end"] <= t1
            said = ended and (not p["vanish"] or p["uid"] in self.told)  # a vanished pod's end is not reported
            vgpu = p["uid"] in self.device
            mig = p["mig"] and bool(p["gpus"])
            # 60 % of the cores each: two on one device hold more than it (their shares are cut)
            claim = [{"kind": "vgpu", "device": f"GPU-{p['cluster']}-{p['node']}-{self.device[p['uid']]}",
                      "cores": 60, "mem_mib": 6000}] if vgpu else None
            rows.append(dict(cluster=p["cluster"], uid=p["uid"], namespace=p["namespace"], name=p["name"],
                             workload_kind=p["kind"], workload=p["workload"], node=p["node"],
                             gpu_request=1.0 if vgpu else 0.0 if mig else float(len(p["gpus"])),
                             mig_profile="3g.40gb" if mig else None, mig_request=float(len(p["gpus"])) if mig else 0.0,
                             created=p["start"], scheduled=p["start"], started=p["start"],
                             finished=p["end"] if said else None, last_seen=min(p["end"], t1) if p["end"] else t1,
                             phase="Succeeded" if said else "Running", labels=self.labels[p["uid"]],
                             gpu_shares=json.dumps(claim) if claim else None, source="test"))
        return pl.DataFrame(rows, infer_schema_length=None)

    def node_rows(self, t0: datetime, t1: datetime) -> pl.DataFrame:
        rows = []
        for n in self.nodes:
            alive_to = n["last"] or T0 + timedelta(hours=HOURS)
            if n["first"] >= t1 or alive_to <= t0:
                continue
            it, model, usd = TYPES[n["gpus"]]
            rows.append(dict(cluster=n["cluster"], node=n["node"], instance_type=it, capacity_type=n["capacity_type"],
                             node_pool="pool", node_pool_kind="karpenter", gpu_model=model, gpu_count=n["gpus"],
                             mig_config="all-3g.40gb" if n["mig"] else None, zone="z1",
                             gpu_replicas=2.0 if n["shared"] else None,
                             sharing_strategy="time-slicing" if n["shared"] else None,
                             first_seen=max(t0, n["first"]), last_seen=min(t1, alive_to) - timedelta(seconds=STEP)))
        return pl.DataFrame(rows, infer_schema_length=None)


def prices(catalog: str, factor: float, loaded_at: datetime) -> pl.DataFrame:
    return pl.DataFrame([dict(catalog=catalog, instance_type=it, gpu_model=model, gpu_count=g,
                              on_demand_usd_per_hour=usd * factor, spot_usd_per_hour=usd * factor * 0.4, region="r",
                              source="test", as_of=T0.date(), loaded_at=loaded_at)
                         for g, (it, model, usd) in TYPES.items()])


def collect(g: gi.GpuInsight, world: World, t0: datetime, t1: datetime, variant: int) -> None:
    """What a collection of [t0, t1) does: samples, pods and nodes in one transaction, rollups."""
    samples = world.samples(t0, t1, variant)
    with g.writing(), g.wh.transaction() as con:
        store_sample_rows(con, samples)
        energy = world.energy(t0, t1, variant)
        if energy.height:
            g.wh.merge("gpu_energy_samples", energy, ENERGY_KEY, con=con)
        serving = world.serving(t0, t1, variant)
        if serving.height:
            g.wh.merge("serving_samples", serving, SERVING_KEY, con=con)
        merge_spans(g.wh, con, "pods", world.pod_rows(t0, t1), ["cluster", "uid"])
        merge_spans(g.wh, con, "nodes", world.node_rows(t0, t1), ["cluster", "node"])
        if samples.height:
            rebuild_rollups(con, samples)


def model_rows(g: gi.GpuInsight) -> dict[str, list[tuple]]:
    out = {}
    for table in g.registry.model_tables():
        frame = g.wh.sql(f'SELECT * FROM "{table}"')
        out[table] = sorted(frame.rows(), key=lambda row: repr(tuple(_rounded(v) for v in row)))
    return out


def _rounded(v: Any) -> Any:
    """A value with floats rounded, for sorting (sums in parallel differ in their last bits)."""
    if isinstance(v, float):
        return v if math.isnan(v) or v == 0 else float(f"{v:.6g}")
    if isinstance(v, list):
        return tuple(_rounded(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _rounded(x)) for k, x in v.items())
    return v


def _same(a: Any, b: Any) -> bool:
    """Equal, floats up to their last bits (the order of a parallel sum)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def from_scratch(g: gi.GpuInsight) -> dict[str, list[tuple]]:
    """Every model built from scratch on the same data (rolled back after)."""
    con = g.wh.con
    con.execute("BEGIN TRANSACTION")
    try:
        g.registry.refresh(con)
        g.wh.schema_changed()
        return model_rows(g)
    finally:
        con.execute("ROLLBACK")
        g.wh.schema_changed()


def assert_same(inc: dict[str, list[tuple]], full: dict[str, list[tuple]], what: str) -> None:
    for table in full:
        assert len(inc[table]) == len(full[table]), (what, table, len(inc[table]), len(full[table]))
        for a, b in zip(inc[table], full[table], strict=True):
            assert _same(a, b), (what, table, a, b)


@pytest.mark.parametrize("seed", range(2))
def test_incremental_refresh_equals_a_build_from_scratch(tmp_path: Path, seed: int) -> None:
    world = World(seed)
    rng = random.Random(seed + 100)
    incremental = 0
    # every kind of load in a random order after a first collection (each load costs a full
    # rebuild to compare with, so their number is fixed)
    loads = ["collect", *rng.sample(["collect", "collect", "late", "late", "dump", "catalog"], k=6)]
    with gi.open(tmp_path / "w.duckdb") as g:
        with g.writing(), g.wh.transaction() as con:
            g.wh.merge("prices", prices("cat-1", 1.0, T0), ["catalog", "instance_type", "gpu_model"], con=con)
        frontier, variant = T0, 0
        for load in loads:
            if load == "late" and frontier > T0 + timedelta(hours=1):
                # late data or a re-collection of an earlier range (values and holders change)
                back = T0 + timedelta(minutes=5 * rng.randrange(int((frontier - T0).total_seconds() // STEP)))
                variant += 1
                collect(g, world, back, back + timedelta(minutes=5 * rng.randint(6, 30)), variant)
                what = f"re-collected from {back}"
            elif load == "dump":
                # a dump: some pods' labels change (every hour of theirs may change), a vGPU pod holds
                # a share of another device, pods that vanished are said to have finished
                for uid in rng.sample(sorted(world.labels), k=max(1, len(world.labels) // 4)):
                    world.labels[uid] = json.dumps({"team": rng.choice(["x", "y", "z"])})
                for uid in world.device:
                    if rng.random() < 0.5:
                        world.device[uid] = (world.device[uid] + 1) % 4
                world.told |= {p["uid"] for p in world.pods if p["vanish"] and rng.random() < 0.5}
                with g.writing(), g.wh.transaction() as con:
                    merge_spans(g.wh, con, "pods", world.pod_rows(T0, frontier), ["cluster", "uid"])
                what = "a dump"
            elif load == "catalog":
                with g.writing(), g.wh.transaction() as con:  # a newer catalog prices everything anew
                    g.wh.merge("prices", prices(f"cat-{variant}", 1.1, frontier),
                               ["catalog", "instance_type", "gpu_model"], con=con)
                what = "new catalog"
            else:
                step = timedelta(minutes=5 * rng.randint(12, 60))
                collect(g, world, frontier, frontier + step, 0)
                frontier += step
                what = f"collected up to {frontier}"
            incremental += not g.models.last.full
            assert_same(model_rows(g), from_scratch(g), what)
        assert incremental >= 5  # the incremental path was taken, not only full rebuilds
        # energy from the counter and from power, and held on the MIG node (n0 of cluster a)
        counter, total, on_mig = g.sql("SELECT sum(energy_kwh_from_counter), sum(energy_kwh), sum(energy_kwh) FILTER "
                                       "(WHERE cluster = 'a' AND node = 'n0' AND workload IS NOT NULL) "
                                       "FROM energy_hourly").row(0)
        assert 0 < counter < total and on_mig > 0
        priced, unheld = g.sql("SELECT count(*) FILTER (WHERE held_gpu AND cost_usd > 0), count(*) FILTER (WHERE NOT "
                               "held_gpu) FROM serving_hourly").row(0)
        assert priced and unheld
        # a refresh with nothing loaded rebuilds no hour; a full one on demand changes nothing
        before = model_rows(g)
        g.refresh()
        assert not g.models.last.full and all(not r for r in g.models.last.hours.values())
        g.refresh(full=True)
        assert g.models.last.full and g.models.last.why == "asked"
        assert_same(model_rows(g), before, "full refresh on demand")


def test_a_day_appended_rebuilds_only_its_hours_and_the_hour_before(tmp_path: Path) -> None:
    world = World(7)
    with gi.open(tmp_path / "w.duckdb") as g:
        with g.writing(), g.wh.transaction() as con:
            g.wh.merge("prices", prices("cat-1", 1.0, T0), ["catalog", "instance_type", "gpu_model"], con=con)
        collect(g, world, T0, T0 + timedelta(hours=12), 0)
        collect(g, world, T0 + timedelta(hours=12), T0 + timedelta(hours=18), 0)
        hours = g.models.last.hours
        assert not g.models.last.full
        for name in ("node_hours", "allocation_hourly", "waste_hourly", "energy_hourly"):
            lo = min(a for a, _ in hours[name])
            # the new hours, and those where a pod or node still running at the old end ran on
            assert lo >= T0 + timedelta(hours=11), (name, hours[name])
        assert_same(model_rows(g), from_scratch(g), "appended")


def test_a_vgpu_pod_moved_to_another_device_rebuilds_the_hours_it_shared(tmp_path: Path) -> None:
    """Two HAMi vGPU pods on one device hold more than it (their shares are cut); a dump that only
    says one of them holds another device changes no pod's span, only pod_gpu_shares: the hours
    both ran are rebuilt (the other pod's share is whole again)."""
    world = World(0)
    first = T0 + timedelta(hours=1)
    world.nodes = [dict(cluster="a", node="n0", gpus=4, shared=False, first=T0, last=None, capacity_type="on-demand",
                        mig=False, counter=False)]
    world.pods = [dict(cluster="a", uid=f"uid-v{v}", namespace="ml", name=f"vgpu-{v}", node="n0", gpus=[],
                       start=first, end=None, shared=False, mig=False, workload="vgpu", kind="Deployment",
                       vanish=False)
                  for v in range(2)]
    world.labels = {"uid-v0": "{}", "uid-v1": "{}"}
    world.device = {"uid-v0": 0, "uid-v1": 0}
    with gi.open(tmp_path / "w.duckdb") as g:
        with g.writing(), g.wh.transaction() as con:
            g.wh.merge("prices", prices("cat-1", 1.0, T0), ["catalog", "instance_type", "gpu_model"], con=con)
        collect(g, world, T0, T0 + timedelta(hours=6), 0)
        cut = g.sql("SELECT sum(gpu_hours) FROM allocation_hourly WHERE uid = 'uid-v0'").item()
        world.device["uid-v1"] = 1
        with g.writing(), g.wh.transaction() as con:
            merge_spans(g.wh, con, "pods", world.pod_rows(T0, T0 + timedelta(hours=6)), ["cluster", "uid"])
        assert not g.models.last.full
        assert g.sql("SELECT sum(gpu_hours) FROM allocation_hourly WHERE uid = 'uid-v0'").item() > cut
        assert_same(model_rows(g), from_scratch(g), "a vGPU pod moved")


def _spread_over_clusters(seed: int) -> World:
    """A World of ``seed`` or a later one with both clusters (the same namespace names in each)."""
    world = World(seed)
    while len({n["cluster"] for n in world.nodes}) < 2:
        seed += 1
        world = World(seed)
    return world


@pytest.mark.parametrize("seed", range(3))
def test_a_build_in_slices_of_hours_equals_one_statement(tmp_path: Path, seed: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A partitioned model built from scratch a slice of hours at a time (registry.hour_slices)
    has the rows of one statement over every hour: random fleets in two clusters with MIG,
    time-sliced and vGPU nodes, energy counters and servers, pods and nodes known before the first
    sample and after the last (a cluster whose DCGM is not scraped; the first slice is unbounded
    below, the last above); and an
    incremental refresh of a long re-collected range, in slices too, equals both."""
    from gpuinsight.sql import registry

    world = _spread_over_clusters(seed * 10)
    rng = random.Random(seed)
    first = T0 + timedelta(hours=rng.randint(6, 8))
    last = first + timedelta(hours=rng.randint(6, 8))
    # cluster b's DCGM is not scraped: its window is its GPU pods' lifetimes, beyond a's samples
    samples = world.samples
    world.samples = lambda t0, t1, variant: samples(t0, t1, variant).filter(pl.col("cluster") == "a")  # type: ignore[method-assign]
    with gi.open(tmp_path / "w.duckdb") as g:
        with g.writing(), g.wh.transaction() as con:
            g.wh.merge("prices", prices("cat-1", 1.0, T0), ["catalog", "instance_type", "gpu_model"], con=con)
        collect(g, world, first, last, 0)
        with g.writing(), g.wh.transaction() as con:  # what the pods and nodes did outside the samples' span
            merge_spans(g.wh, con, "pods", world.pod_rows(T0, T0 + timedelta(hours=HOURS)), ["cluster", "uid"])
            merge_spans(g.wh, con, "nodes", world.node_rows(T0, T0 + timedelta(hours=HOURS)), ["cluster", "node"])
        counts = registry.hour_counts(g.wh.con)
        total = sum(n for _, n in counts)
        # slices of one to a few hours, cut wherever the random limit falls
        monkeypatch.setattr(registry, "SLICE_SAMPLES", rng.randint(1, 2 * total // len(counts)))
        slices = registry.hour_slices(counts)
        assert len(slices) >= 3 and slices[0][0] is None and slices[-1][1] is None
        sliced = from_scratch(g)
        monkeypatch.setattr(registry, "SLICE_SAMPLES", total)
        assert registry.hour_slices(counts) == [(None, None)]
        whole = from_scratch(g)
        assert_same(sliced, whole, "built in slices")
        assert any(row[2] < first for row in whole["node_hours"])  # hours before the first sample count
        assert any(row[2] >= last for row in whole["node_hours"])
        # a re-collection of most of the window: rebuilt in slices (incrementally), the same rows
        monkeypatch.setattr(registry, "SLICE_SAMPLES", rng.randint(1, 2 * total // len(counts)))
        collect(g, world, first + timedelta(hours=1), last, 1)
        assert not g.models.last.full
        ranges = g.models.last.hours["energy_hourly"]
        assert any(len(registry.hour_slices(registry.hour_counts(g.wh.con, lo, hi), lo, hi)) > 1 for lo, hi in ranges)
        assert_same(model_rows(g), from_scratch(g), "re-collected, rebuilt in slices")


def test_a_slice_that_fails_names_the_file_and_line_and_leaves_the_transaction_to_its_caller(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error in a later slice (a value of a later hour that does not convert) is reported at
    the model's file and line, and nothing of the build is committed: the caller rolls back."""
    import duckdb

    from gpuinsight.errors import RuntimeFailure
    from gpuinsight.sql import load_registry, registry

    (tmp_path / "m.sql").write_text(
        "-- name: m\n-- grain: one row per hour\n"
        "-- param: hour_from TIMESTAMP = NULL -- the first hour\n-- param: hour_to TIMESTAMP = NULL -- the hour after\n"
        "-- materialize: table\n-- partition: hour\n-- columns: hour, n\n-- description: a test model\n"
        "SELECT date_trunc('hour', ts) AS hour,\n"
        "       v::INTEGER AS n\n"  # line 10
        "FROM t WHERE ts >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND ts < coalesce($hour_to, 'infinity'::TIMESTAMP)\n")
    q = load_registry(tmp_path).get("m")
    con = duckdb.connect()
    con.execute("CREATE TABLE gpu_hourly_facts (hour TIMESTAMP, samples INTEGER)")
    con.execute("CREATE TABLE t (ts TIMESTAMP, v VARCHAR)")
    for h in range(6):
        con.execute("INSERT INTO gpu_hourly_facts VALUES (?, 1)", [T0 + timedelta(hours=h)])
        con.execute("INSERT INTO t VALUES (?, ?)", [T0 + timedelta(hours=h, minutes=30), str(h)])
    monkeypatch.setattr(registry, "SLICE_SAMPLES", 2)
    assert len(registry.hour_slices(registry.hour_counts(con))) == 3
    load_registry(tmp_path).build(con, q)
    assert con.execute("SELECT list(n ORDER BY hour) FROM m").fetchone() == ([0, 1, 2, 3, 4, 5],)
    con.execute("UPDATE t SET v = 'x' WHERE ts > ?", [T0 + timedelta(hours=5)])
    con.execute("BEGIN TRANSACTION")
    with pytest.raises(RuntimeFailure, match=r"^m\.sql:10: Conversion Error"):
        load_registry(tmp_path).build(con, q)
    con.execute("ROLLBACK")
    assert con.execute("SELECT list(n ORDER BY hour) FROM m").fetchone() == ([0, 1, 2, 3, 4, 5],)


# energy_hourly's holder of a pod name's hour as it was first written: each allocation of the name
# matched against each of its hours by range (the model spreads allocations over their hours)
HELD_BY_BY_RANGE = """held_by AS MATERIALIZED (
    SELECT ph.pod_key, ph.hour, a.cluster, a.uid, a.workload_kind, a.workload, a.queue, a.cluster_queue, a.team
    FROM pod_hours ph
    JOIN pod_keys k USING (pod_key)
    JOIN pod_gpu_allocations a
      ON a.cluster = k.cluster AND a.namespace = k.namespace AND a.pod = k.pod
     AND a.start_ts < ph.hour + INTERVAL 1 HOUR AND coalesce(a.end_ts, 'infinity'::TIMESTAMP) > ph.hour
    QUALIFY row_number() OVER (
        PARTITION BY ph.pod_key, ph.hour
        ORDER BY least(coalesce(a.end_ts, 'infinity'::TIMESTAMP), ph.hour + INTERVAL 1 HOUR)
                     - greatest(a.start_ts, ph.hour) DESC,
                 least(coalesce(a.end_ts, 'infinity'::TIMESTAMP), ph.hour + INTERVAL 1 HOUR) DESC,
                 greatest(a.start_ts, ph.hour) DESC, a.uid DESC) = 1
),
"""


@pytest.mark.parametrize("seed", range(3))
def test_energy_of_gpu_hours_with_one_row_per_step_equals_the_step_by_step_split(tmp_path: Path, seed: int) -> None:
    """energy_hourly sums a GPU-hour whose samples are of one GPU key and one holder per hour,
    and splits the others step by step (a GPU-step's rows partitioned); it finds each pod name's
    holder by spreading allocations over their hours. Taking every GPU-hour step by step and
    matching every allocation of a name against its hours by range gives the same rows (doubles
    to 1e-9 relative), on random fleets whose GPU-hours are of both kinds (MIG instances,
    time-sliced and vGPU GPUs, holders changing within an hour, names reused by restarts,
    re-collections handing steps to other pods, energy counters and power)."""
    world = _spread_over_clusters(seed * 10 + 5)
    with gi.open(tmp_path / "w.duckdb") as g:
        with g.writing(), g.wh.transaction() as con:
            g.wh.merge("prices", prices("cat-1", 1.0, T0), ["catalog", "instance_type", "gpu_model"], con=con)
        collect(g, world, T0, T0 + timedelta(hours=HOURS // 2), 0)
        collect(g, world, T0 + timedelta(hours=2), T0 + timedelta(hours=HOURS), 1)
        q = g.registry.get("energy_hourly")
        one_per_step = "min(gpu_key) = max(gpu_key) AND min(pod_key) = max(pod_key) AS single"
        assert one_per_step in q.text
        kinds = g.sql(q.text.split("pod_hours AS MATERIALIZED")[0].rstrip().rstrip(",")
                      + "\nSELECT single, count(*) AS n FROM gpu_hours GROUP BY single", q.bind({}))
        assert set(kinds["single"]) == {True, False}
        held_by = q.text[q.text.index("held_by AS MATERIALIZED ("):q.text.index("fractional AS (")]
        summed = g.sql(q.text, q.bind({}))
        split = g.sql(q.text.replace(one_per_step, "false AS single").replace(held_by, HELD_BY_BY_RANGE), q.bind({}))
        key = [c for c, t in summed.schema.items() if t != pl.Float64]
        summed, split = summed.sort(key, nulls_last=True), split.sort(key, nulls_last=True)
        assert summed.height == split.height > 0
        assert summed.select(key).equals(split.select(key))
        for c in ("energy_kwh", "energy_kwh_from_counter"):
            for a, b in zip(summed[c], split[c], strict=True):
                assert (a is None and b is None) or _same(a, b), (c, a, b)
        assert summed["energy_kwh_from_counter"].drop_nulls().len() > 0
        assert summed["workload"].n_unique() > 3  # holders named

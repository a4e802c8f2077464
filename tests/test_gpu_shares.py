"""One GPU share per pod, whatever granted it (docs/models.md, "GPU shares"): real published HAMi,
Kueue, KAI and device-plugin objects through the dump and the live path, the share of each, and
on random fleets the two invariants: the shares of one GPU never hold more than it, and never
cost more than it."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import gpuinsight as gi
from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.sources.k8s import MapContext, node_row, pod_row
from gpuinsight.sources.k8s.common import MapError
from gpuinsight.sources.k8s.shares import node_devices, parse_allocated
from gpuinsight.sources.kubernetes import collect_live, load_dump_dir
from gpuinsight.sources.prices import load_catalog
from tests.k8s_server import FakeKubeAPI
from tests.sharing_objects import (
    T0,
    docs,
    hami_node,
    iso,
    kueue_hami_cluster,
    protocol_lines,
    running_pod,
    uid,
    v100_catalog,
    write_dump,
)

CTX = MapContext(cluster="real", source="dump")
CFG = Config(cluster="real")
AS_OF = T0 + timedelta(hours=2)
GPU0 = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
GPU1 = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"


def open_fleet(tmp_path: Path, objs: dict[str, list[dict[str, Any]]], *, live: bool = False) -> gi.GpuInsight:
    g = gi.open(tmp_path / "w.duckdb")
    load_catalog(g.wh, CFG, v100_catalog(tmp_path))
    if live:
        with FakeKubeAPI().load(**objs) as api:
            collect_live(g.wh, CFG, kubeconfig=api.write_kubeconfig(tmp_path))
    else:
        load_dump_dir(g.wh, CFG, write_dump(tmp_path / "dump", objs), observed_at=AS_OF)
    g.refresh()
    return g


# -- the objects as published ---------------------------------------------------------------------

def test_hami_protocol_annotations_parse_as_devices() -> None:
    lines = protocol_lines()
    devices = node_devices({"hami.io/node-nvidia-register": lines["hami.io/node-nvidia-register"]})
    assert [(d["id"], d["split"], d["memory_mib"], d["cores"], d["type"]) for d in devices] == [
        (GPU0, 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB"), (GPU1, 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB")]
    # two containers on one GPU, 3000 and 5000 MiB: one device claim of 8000 MiB
    assert parse_allocated(lines["hami.io/vgpu-devices-to-allocate"], "x") == [
        {"kind": "vgpu", "device": GPU1, "count": 1, "mem_mib": 8000.0, "cores": 0.0}]
    # HAMi's JSON register (MarshalNodeDevices) reads the same
    json_register = ('[{"id":"' + GPU0 + '","count":10,"devmem":32768,"devcore":100,'
                     '"type":"NVIDIA-Tesla V100-PCIE-32GB","health":true}]')
    assert node_devices({"hami.io/node-nvidia-register": json_register})[0]["memory_mib"] == 32768
    with pytest.raises(MapError, match="is not 'UUID,type,memory,cores'"):
        parse_allocated("GPU-1,NVIDIA:;", "metadata.annotations.hami.io/vgpu-devices-allocated")
    with pytest.raises(MapError, match="not a device entry"):
        node_devices({"hami.io/node-nvidia-register": "GPU-1,10,32768:"})


def test_hami_node_counts_registered_gpus_not_advertised_vgpus() -> None:
    row = node_row(hami_node(), CTX)
    assert (row["gpu_count"], row["gpu_model"], row["sharing_strategy"], row["gpu_memory_mib"]) == (
        2, "V100", "hami", 32768)


def test_real_hami_pods_claim_their_device_share() -> None:
    daocloud = docs("daocloud-hami-pod.yaml")[0]  # a DaoCloud install names the count nvidia.com/vgpu
    row = pod_row(daocloud, CTX)
    assert row["gpu_request"] == 0 and '"device":"GPU-29d5fa0d-935b-2966-aff8-483a174d61d1"' in row["gpu_shares"]
    # HAMi's own example pod, before the scheduler annotated it: 1 vGPU, 3000 MiB, 30 % cores
    example = docs("hami-default-use.yaml")[0]
    pod = running_pod("gpu-pod", "default", example["spec"], "node67-4v100")
    claims = pod_row(pod, CTX)["gpu_shares"]
    assert claims == '[{"cores":30.0,"count":1.0,"device":null,"kind":"vgpu","mem_mib":3000.0}]'


@pytest.mark.parametrize("live", [False, True], ids=["dump", "live"])
def test_kai_fraction_pods_are_billed_and_their_reservation_pod_is_not(tmp_path: Path, live: bool) -> None:
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "a100-1", "uid": "n-a100", "creationTimestamp": iso(T0 - timedelta(days=1)),
                         "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "1"}},
            "status": {"capacity": {"nvidia.com/gpu": "1"}}}
    half, memory = docs("kai-gpu-sharing.yaml")[0], docs("kai-gpu-memory.yaml")[0]
    group = {"runai-gpu-group": "3b0c5f4e-7c1d-4a55-9d7e-1f2a3b4c5d6e"}
    pods = [running_pod(f"gpu-sharing-{i}", "default", half["spec"], "a100-1",
                        labels={**half["metadata"]["labels"], **group}, annotations=half["metadata"]["annotations"])
            for i in range(2)]
    # what KAI's binder creates to hold the device (pkg/binder/binding/resourcereservation)
    reservation = running_pod("gpu-reservation-a100-1-x7k2p", "kai-resource-reservation",
                              {"containers": [{"name": "resource-reservation", "image": "kai/reservation",
                                               "resources": {"limits": {"nvidia.com/gpu": 1},
                                                             "requests": {"nvidia.com/gpu": 1}}}]},
                              "a100-1", labels={"app": "kai-resource-reservation", **group},
                              annotations={"run.ai/reserve_for_gpu_index": "GPU-4ab2c6e1"})
    g = open_fleet(tmp_path, {"nodes": [node], "pods": [*pods, reservation]}, live=live)
    with g:
        alloc = dict(g.sql("SELECT pod, gpus FROM pod_gpu_allocations").rows())
        assert alloc == {"gpu-sharing-0": 0.5, "gpu-sharing-1": 0.5}  # the reservation holds nothing itself
        keys = g.sql("SELECT DISTINCT device_key FROM pod_gpu_shares").rows()
        assert keys == [("kai:a100-1:3b0c5f4e-7c1d-4a55-9d7e-1f2a3b4c5d6e",)]
    # gpu-memory: 2000 MiB of the node's 40 GB A100
    mem_pod = running_pod("gpu-memory", "default", memory["spec"], "a100-1", annotations=memory["metadata"]["annotations"])
    g = open_fleet(tmp_path / "m", {"nodes": [node], "pods": [mem_pod]})
    with g:
        assert g.sql("SELECT gpus FROM pod_gpu_allocations").item() == pytest.approx(2000 / 40960)


# -- Kueue's HAMi example on HAMi's node, through both paths ---------------------------------------

@pytest.fixture(scope="module", params=["dump", "live"])
def kueue_hami(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[gi.GpuInsight]:
    g = open_fleet(tmp_path_factory.mktemp(request.param), kueue_hami_cluster(), live=request.param == "live")
    yield g
    g.close()


def test_three_hami_replicas_cost_less_than_one_gpu(kueue_hami: gi.GpuInsight) -> None:
    shares = kueue_hami.sql("SELECT kind, device_key, share, basis FROM pod_gpu_shares").rows()
    assert shares == [("vgpu", GPU0, 0.3, "cores")] * 3  # 30 % cores > 1024 of 32768 MiB
    s = kueue_hami.query("fleet_summary").row(0, named=True)
    hours = s["hours"]
    assert s["gpus"] == 2  # two registered V100s, not the 20 nvidia.com/gpu the node advertises
    assert s["allocated_gpu_hours"] == pytest.approx(0.9 * hours)
    cb = {r["group"]: r for r in kueue_hami.query("chargeback", by="namespace").to_dicts()}
    per_gpu_hour = 2.0
    assert cb["kueue-test"]["total_usd"] == pytest.approx(0.9 * hours * per_gpu_hour)
    assert cb["kueue-test"]["total_usd"] < hours * per_gpu_hour  # less than one GPU between them
    assert cb["(unallocated)"]["total_usd"] == pytest.approx(1.1 * hours * per_gpu_hour)


def test_shares_of_one_gpu_never_cost_more_than_it(tmp_path: Path) -> None:
    """Two pods asking 60 % of the cores of the same device: 1.2 of a GPU between them, billed as 1."""
    objs = kueue_hami_cluster()
    for p in objs["pods"][:2]:
        p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = f"{GPU1},NVIDIA,1024,60:;"
    g = open_fleet(tmp_path, objs)
    with g:
        per_device = g.sql("""SELECT s.device_key, sum(a.gpu_hours) / max(a.hour_count) FROM
            (SELECT uid, sum(gpu_hours) AS gpu_hours, count(DISTINCT hour) AS hour_count FROM allocation_hourly
             GROUP BY uid) a JOIN pod_gpu_shares s USING (uid) GROUP BY 1 ORDER BY 1""").rows()
        assert per_device == [(GPU0, pytest.approx(0.3)), (GPU1, pytest.approx(1.0))]
        node = g.query("waste_breakdown", by="node").row(0, named=True)
        assert node["total_usd"] == pytest.approx(g.sql("SELECT sum(cost_usd) FROM node_hours").item())


@pytest.mark.parametrize("live", [False, True], ids=["dump", "live"])
def test_gpu_shared_pods_are_allocated(tmp_path: Path, live: bool) -> None:
    """The device plugin's renameByDefault: nvidia.com/gpu.shared, 10 replicas per GPU."""
    node = docs("device-plugin-gpu-shared-node.yaml")[0]
    spec = {"containers": [{"name": "cuda", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                            "resources": {"limits": {"nvidia.com/gpu.shared": 1}}}]}
    pods = [running_pod(f"shared-{i}", "team", spec, node["metadata"]["name"]) for i in range(3)]
    row = node_row(node, CTX)
    assert (row["gpu_count"], row["gpu_replicas"], row["gpu_model"]) == (8, 10, "A100-40GB")
    g = open_fleet(tmp_path, {"nodes": [node], "pods": pods}, live=live)
    with g:
        rows = g.sql("SELECT pod, gpus, alloc_kind, fractional FROM pod_gpu_allocations ORDER BY pod").rows()
        assert rows == [(f"shared-{i}", pytest.approx(0.1), "timeslice", True) for i in range(3)]
        cb = {r["group"]: r for r in g.query("chargeback", by="namespace").to_dicts()}
        hours = g.query("fleet_summary").row(0, named=True)["hours"]
        assert cb["team"]["gpu_hours"] == pytest.approx(0.3 * hours)


def test_dra_claim_shared_by_two_pods(tmp_path: Path) -> None:
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gh200-0", "uid": "n-gh", "creationTimestamp": iso(T0 - timedelta(days=1)),
                         "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "1"}},
            "status": {"capacity": {"cpu": "72"}}}
    spec = {"containers": [{"name": "ctr", "image": "ubuntu:22.04", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "single-gpu"}]}
    pods = [running_pod(f"pod{i}", "gpu-test3", spec, "gh200-0") for i in (1, 2)]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "single-gpu", "namespace": "gpu-test3", "uid": "rc-1",
                          "creationTimestamp": iso(T0)},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gh200-0", "device": "gpu-0"}]}},
                 "reservedFor": [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
                                 for p in pods]}}
    for live in (False, True):
        g = open_fleet(tmp_path / str(live), {"nodes": [node], "pods": pods, "resourceclaims": [claim]}, live=live)
        with g:
            rows = g.sql("SELECT pod, gpus, alloc_kind, fractional FROM pod_gpu_allocations ORDER BY pod").rows()
            assert rows == [("pod1", 0.5, "dra", True), ("pod2", 0.5, "dra", True)]


def test_volcano_vgpu_and_gke_sharing(tmp_path: Path) -> None:
    """Volcano vGPU (HAMi's format under volcano.sh names) and GKE's time-sharing and MIG partitions."""
    vc_node = {"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "a30-1", "uid": "n-a30", "creationTimestamp": iso(T0 - timedelta(days=1)),
                            "annotations": {"volcano.sh/node-vgpu-register":
                                            "GPU-76f93f2b-8cd8-4dd0-e555-56418bde1457,10,24576,NVIDIA-A30,true:"}},
               "status": {"capacity": {"volcano.sh/vgpu-number": "10"}}}
    spec = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {
        "volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 6144, "volcano.sh/vgpu-cores": 10}}}]}
    decided = running_pod("vgpu-0", "ml", spec, "a30-1", annotations={
        "volcano.sh/vgpu-ids-new": "GPU-76f93f2b-8cd8-4dd0-e555-56418bde1457,NVIDIA,6144,10:"})
    pending = running_pod("vgpu-1", "ml", spec, "a30-1")  # no decision recorded: its requests say it
    gke = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4", "cloud.google.com/gke-nodepool": "shared",
           "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
           "cloud.google.com/gke-max-shared-clients-per-gpu": "2"}
    ts_node = {"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "gke-ts", "uid": "n-ts", "creationTimestamp": iso(T0 - timedelta(days=1)),
                            "labels": gke}, "status": {"capacity": {"nvidia.com/gpu": "4"}}}
    mig_node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "gke-mig", "uid": "n-mig", "creationTimestamp": iso(T0 - timedelta(days=1)),
                             "labels": {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
                                        "cloud.google.com/gke-gpu-partition-size": "1g.5gb"}},
                "status": {"capacity": {"nvidia.com/gpu": "7"}}}
    one = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    pods = [decided, pending, running_pod("ts-0", "web", one, "gke-ts"), running_pod("mig-0", "web", one, "gke-mig")]
    assert (node_row(ts_node, CTX)["gpu_count"], node_row(mig_node, CTX)["gpu_count"]) == (2, 1)
    assert node_row(vc_node, CTX)["gpu_count"] == 1 and node_row(vc_node, CTX)["sharing_strategy"] == "volcano-vgpu"
    g = open_fleet(tmp_path, {"nodes": [vc_node, ts_node, mig_node], "pods": pods})
    with g:
        rows = dict((r[0], r[1:]) for r in g.sql(
            "SELECT pod, gpus, alloc_kind FROM pod_gpu_allocations ORDER BY pod").rows())
    assert rows == {"vgpu-0": (0.25, "vgpu"), "vgpu-1": (0.25, "vgpu"),  # 6 of 24 GiB > 10 % of the cores
                    "ts-0": (0.5, "timeslice"), "mig-0": (pytest.approx(1 / 7), "mig")}


def test_a_malformed_share_annotation_is_bad_input(tmp_path: Path) -> None:
    objs = kueue_hami_cluster()
    objs["pods"][1]["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "GPU-1,NVIDIA,lots,30:;"
    with gi.open(tmp_path / "w.duckdb") as g, pytest.raises(
            BadInput, match=r"pods\.json: item 1 \(kueue-test/gpu-burn-\w+-cx2k1\): metadata\.annotations\."
                            r"hami\.io/vgpu-devices-allocated: container 0: memory and cores"):
        load_dump_dir(g.wh, CFG, write_dump(tmp_path / "dump", objs))


# -- random fleets: the shares of a GPU never exceed it ----------------------------------------------

def random_sharing_fleet(seed: int) -> dict[str, list[dict[str, Any]]]:
    """HAMi nodes, time-sliced nodes, whole-GPU nodes and KAI groups, with random pods on them."""
    rng = random.Random(seed)
    nodes, pods = [], []
    for n in range(rng.randint(2, 4)):
        kind = rng.choice(["hami", "timeslice", "whole", "kai"])
        name = f"n{n}-{kind}"
        gpus = rng.choice([1, 2, 4])
        labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": str(gpus),
                  "nvidia.com/gpu.memory": "40960"}
        node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                                "metadata": {"name": name, "uid": uid("n", name), "labels": labels,
                                             "creationTimestamp": iso(T0 - timedelta(hours=rng.choice([0, 3])))},
                                "status": {"capacity": {"nvidia.com/gpu": str(gpus)}}}
        devices = [uid("gpu", name, str(i)).upper() for i in range(gpus)]
        if kind == "hami":
            node["metadata"]["annotations"] = {"hami.io/node-nvidia-register": "".join(
                f"GPU-{d},10,40960,100,NVIDIA-A100-SXM4-40GB,0,true:" for d in devices)}
            node["status"]["capacity"]["nvidia.com/gpu"] = str(10 * gpus)
        if kind == "timeslice":
            labels.update({"nvidia.com/gpu.replicas": str(rng.choice([2, 4])),
                           "nvidia.com/gpu.sharing-strategy": "time-slicing"})
        nodes.append(node)
        for p in range(rng.randint(1, 6)):
            start = T0 + timedelta(minutes=rng.choice([0, 0, 20, 70]))
            res: dict[str, Any] = {"nvidia.com/gpu": 1}
            ann: dict[str, str] = {}
            lbl: dict[str, str] = {}
            if kind == "hami":
                d = rng.choice(devices)
                ann["hami.io/vgpu-devices-allocated"] = f"GPU-{d},NVIDIA,{rng.randint(0, 40960)},{rng.randint(0, 100)}:;"
            elif kind == "kai":
                res = {}
                ann["gpu-fraction"] = str(rng.choice([0.25, 0.5, 0.75, 1.0]))
                lbl["runai-gpu-group"] = f"g{rng.randrange(gpus)}"
            elif kind == "timeslice":
                res = {"nvidia.com/gpu": rng.choice([1, 1, 2])}
            spec = {"containers": [{"name": "c", "image": "x", "resources": {"limits": res}}]}
            pods.append(running_pod(f"p{n}-{p}", rng.choice(["a", "b"]), spec, name, annotations=ann, labels=lbl,
                                    start=start))
    return {"nodes": nodes, "pods": pods}


@pytest.mark.parametrize("seed", range(6))
def test_random_fleets_shares_never_exceed_a_gpu_nor_its_price(tmp_path: Path, seed: int) -> None:
    g = open_fleet(tmp_path, random_sharing_fleet(seed))
    with g:
        # per known device and hour: the GPU-hours its shares are billed <= the hours it existed
        over = g.sql("""
            WITH k AS (SELECT cluster, uid, device_key, gpus / sum(gpus) OVER (PARTITION BY cluster, uid) AS part
                       FROM pod_gpu_shares WHERE device_key IS NOT NULL)
            SELECT a.node, k.device_key, a.hour, sum(a.gpu_hours * k.part) AS held, any_value(nh.covered_s) / 3600 AS cap
            FROM allocation_hourly a JOIN k ON k.cluster = a.cluster AND k.uid = a.uid
            JOIN node_hours nh ON nh.cluster = a.cluster AND nh.node = a.node AND nh.hour = a.hour
            GROUP BY ALL HAVING held > cap + 1e-9""").rows()
        assert over == [], f"seed {seed}: a GPU's shares hold more than the GPU"
        # per node-hour: the buckets add up to its cost, what the pods hold never more than it
        check = g.sql("""
            SELECT w.node, w.hour, sum(w.usd) AS usd, any_value(nh.cost_usd) AS cost,
                   sum(w.usd) FILTER (WHERE w.bucket <> 'unallocated') AS held_usd
            FROM waste_hourly w JOIN node_hours nh USING (cluster, node, hour) GROUP BY ALL""").rows()
        assert check, f"seed {seed}: nothing priced"
        for node, hour, usd, cost, held in check:
            assert usd == pytest.approx(cost), (seed, node, hour)
            assert (held or 0) <= cost + 1e-9, (seed, node, hour)
        per_pod = g.sql("""SELECT a.uid, a.hour, a.list_usd, a.usd_per_gpu_hour * a.covered_s / 3600 * a.gpus
                           FROM allocation_hourly a""").rows()
        for _, _, billed, share_price in per_pod:  # a pod never pays more than its share of a GPU's price
            assert billed <= share_price + 1e-9


# -- HAMi's per-container metrics: per-pod activity on GPUs dcgm-exporter sees without pods ------------

HAMI_METRICS = Path(__file__).parent / "fixtures" / "real" / "hami"


def test_hami_container_metrics_measure_the_pods(tmp_path: Path) -> None:
    from gpuinsight.sources.openmetrics import load_openmetrics

    g = open_fleet(tmp_path, kueue_hami_cluster())
    with g:
        for minute in range(0, 120, 5):  # a scrape every 5 minutes over the two hours
            path = tmp_path / f"s{minute}.prom"
            path.write_text((HAMI_METRICS / "vgpumonitor-2.9-constructed.prom").read_text())
            load_openmetrics(g.wh, CFG, path, default_ts=T0 + timedelta(minutes=minute))
        g.refresh()
        rows = g.sql("SELECT pod, avg(gr_active), max(fb_used_mib), any_value(node) FROM gpu_samples "
                     "WHERE gpu_uuid = ? GROUP BY pod ORDER BY pod", [GPU0]).rows()
        assert rows == [("gpu-burn-6d4f9c7b8d-bx2k0", pytest.approx(0.4), 600.0, "node67-4v100"),
                        ("gpu-burn-6d4f9c7b8d-cx2k1", pytest.approx(0.1), 300.0, "node67-4v100"),
                        ("gpu-burn-6d4f9c7b8d-dx2k2", 0.0, 0.0, "node67-4v100")]
        buckets = dict(g.sql("SELECT bucket, sum(gpu_hours) FROM waste_hourly WHERE namespace = 'kueue-test' "
                             "GROUP BY 1").rows())
        # each replica's 0.3 GPU share is measured now: used / underused by its own activity, idle at 0 %
        assert buckets["used"] == pytest.approx(0.3 * 2 * (0.4 + 0.1), rel=0.05)
        assert buckets["idle"] == pytest.approx(0.3 * 2, rel=0.05) and "unmeasured" not in buckets


def test_hami_legacy_metrics_read_like_the_new_ones(tmp_path: Path) -> None:
    """A real vGPUmonitor scrape (legacy names; w7panel-server's test data): one idle container."""
    from gpuinsight.sources.openmetrics import load_openmetrics

    with gi.open(tmp_path / "w.duckdb") as g:
        report = load_openmetrics(g.wh, CFG, HAMI_METRICS / "vgpumonitor-legacy.prom", default_ts=T0)
        assert report.rows["gpu_samples"] == 1
        assert g.sql("SELECT gpu_uuid, namespace, pod, gr_active, fb_used_mib FROM gpu_samples").row(0) == (
            "GPU-59ab1128-3130-b95a-9870-4bd748926e97", "default", "gpu-cxeyttpu-5bc96fc469-8q2zb", 0.0, 0.0)


def test_kube_state_metrics_hami_requests_are_shares_not_devices() -> None:
    """HAMi's gpumem (MiB) and gpucores (%) as kube-state-metrics publishes them: quantities, not
    device counts (20000 MiB is no 20000 GPUs), read into a share claim; a negative one refused."""
    import polars as pl

    from gpuinsight.sources.prom.ksm import check_ksm_values, ksm_pods

    def series(gpumem: float) -> pl.DataFrame:
        base = {"namespace": "ml", "pod": "vgpu-0", "uid": "u-1", "container": "c"}
        rows = [{"metric": "kube_pod_info", "ts": T0, "value": 1.0, **base, "node": "n1"}]
        for res, v in (("nvidia_com_gpu", 1.0), ("nvidia_com_gpumem", gpumem), ("nvidia_com_gpucores", 30.0),
                       ("nvidia_com_gpumem_percentage", 50.0)):
            rows.append({"metric": "kube_pod_container_resource_requests", "ts": T0, "value": v, **base,
                         "resource": res, "unit": "integer"})
        return pl.DataFrame(rows)

    good = series(20000.0)
    check_ksm_values(good, "scrape")
    pods = ksm_pods(good, "real")
    row = pods.row(0, named=True)
    assert row["gpu_request"] == 1.0
    assert row["gpu_shares"] == '[{"cores":30.0,"count":1.0,"device":null,"kind":"vgpu","mem_mib":20000.0}]'
    assert '"nvidia.com/gpumem-percentage":50.0' in row["gpu_requests"]
    with pytest.raises(BadInput, match="GPU memory or core share is not a finite quantity"):
        check_ksm_values(series(-5.0), "scrape")

"""Real published exporter, kube-state-metrics and Kubernetes output (tests/fixtures/real/SOURCES.md)
through the file path, the kubectl-dump path and a real Prometheus (promtool backfill)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from gpuinsight.cli import main
from gpuinsight.config import Config, PrometheusConfig
from gpuinsight.errors import BadInput
from gpuinsight.sources.k8s.nodes import KNOWN_NODE_LABELS
from gpuinsight.sources.kubernetes import load_dump_dir
from gpuinsight.sources.openmetrics import load_openmetrics, parse_exposition
from gpuinsight.sources.prices import load_catalog
from gpuinsight.sources.prom.ksm import ksm_nodes, sanitized_label
from gpuinsight.sources.prometheus import PrometheusSource
from gpuinsight.sql import load_registry
from gpuinsight.warehouse import Warehouse
from tests.prom_server import Series, backfill, prometheus_server, write_openmetrics

REAL = Path(__file__).parent / "fixtures" / "real"
T = datetime(2026, 11, 1)
T_S = 1793491200  # T as unix seconds
# fixture sets: the files one collection reads together (a scrape and the KSM lines placing it)
SETS: dict[str, tuple[str, ...]] = {
    "t4": ("dcgm/gpu-operator-340.prom", "ksm/exporter-pods-constructed.prom"),
    "t4-alone": ("dcgm/gpu-operator-340.prom",),
    "aks": ("dcgm/gpu-operator-472.prom",),
    "v1x": ("dcgm/dcgm-exporter-188.prom",),
    "v1x-pod": ("dcgm/gpu-monitoring-tools-pod.prom",),
    "mixed": ("dcgm/dcgm-exporter-736.prom", "ksm/exporter-pods-constructed.prom"),
    "mig": ("dcgm/dcgm-exporter-512-mig.prom",),
    "mps": ("dcgm/dcgm-exporter-432-mps.prom",),
    "entities": ("dcgm/render-metrics-entities.prom",),
    "sentinels": ("dcgm/sentinels.om",),
    "ksm198": ("ksm/v1.9.8.prom",),
    "ksm200": ("ksm/v2.0.0.prom",),
    "ksm2100": ("ksm/v2.10.0.prom",),
    # PCIe receive/transmit (issue 14): an idle L40S, a DRA-shared GH200, and 10 minutes of stalls
    "pcie": ("dcgm/k8s-ai-conformance-upcloud-l40s.prom",),
    "dra": ("dcgm/k8s-website-dra-pcie-rx.prom",),
    "stalls": ("dcgm/pcie-stalls.om",),
}


def combined(name: str, folder: Path) -> Path:
    """One exposition file holding a set's files (blank lines between them)."""
    text = "\n".join((REAL / f).read_text(encoding="utf-8").replace("# EOF\n", "") for f in SETS[name])
    path = folder / f"{name}.prom"
    path.write_text(text, encoding="utf-8")
    return path


def load(tmp_path: Path, name: str, *, prices: bool = False) -> tuple[Warehouse, list[str]]:
    cfg = Config(db_path=tmp_path / f"{name}.duckdb", cluster="real")
    wh = Warehouse(cfg.db_path)
    if prices:
        load_catalog(wh, cfg)
    report = load_openmetrics(wh, cfg, combined(name, tmp_path), default_ts=T)
    return wh, report.notes


def gpus(wh: Warehouse) -> dict[str, tuple[object, ...]]:
    return {r[0]: r[1:] for r in wh.sql("SELECT gpu_uuid, node, node_hint, gpu_model FROM gpus").rows()}


def query(wh: Warehouse, name: str) -> pl.DataFrame:
    registry = load_registry()
    with wh.transaction() as con:
        registry.refresh(con)
    return registry.run(wh.con, name)


# -- exporter generations -------------------------------------------------------------------------

def test_dcgm_exporter_1x_names_are_mapped_and_counted(tmp_path: Path) -> None:
    wh, notes = load(tmp_path, "v1x")
    with wh:
        row = wh.sql("SELECT gpu_util, power_w, gr_active, pod FROM gpu_samples").row(0)
        assert row == (0.0, 30.982, 0.0, "")  # dcgm_gpu_utilization / dcgm_power_usage, an idle GPU
    assert ("DCGM-like metrics: 7 seen, 2 mapped (7 series, 2 mapped); not read: dcgm_gpu_temp, dcgm_memory_clock, "
            "dcgm_pcie_replay_counter, dcgm_sm_clock, dcgm_total_energy_consumption") in notes
    wh, notes = load(tmp_path, "v1x-pod")
    with wh:
        assert sorted(wh.sql("SELECT gpu_uuid, namespace, pod, container, gpu_util FROM gpu_samples").rows()) == [
            ("GPU-2b399198-c670-a848-173b-d3400051a200", "default", "pod1", "pod1-ctr", 0.0),
            ("GPU-9567a9e7-341e-bb7e-fcf5-788d8caa50f9", "default", "pod1", "pod1-ctr", 0.0)]
    assert any(n.startswith("DCGM-like metrics: 5 seen, 1 mapped (10 series, 2 mapped)") for n in notes)


def test_a_generation_gpuinsight_cannot_map_is_refused_not_an_empty_success(tmp_path: Path) -> None:
    cfg = Config(db_path=tmp_path / "w.duckdb")
    with Warehouse(cfg.db_path) as wh:
        with pytest.raises(BadInput, match=r"dcgm-exporter-readme\.prom: 3 DCGM-like metric\(s\) \(DCGM_FI_DEV_MEMORY_TEMP,"
                                           r" DCGM_FI_DEV_MEM_CLOCK, DCGM_FI_DEV_SM_CLOCK\) but none gpuinsight reads"):
            load_openmetrics(wh, cfg, REAL / "dcgm" / "dcgm-exporter-readme.prom", default_ts=T)
        assert wh.count("ingest_state") == 0 and wh.count("gpu_samples") == 0


# -- node identity and fleet totals ----------------------------------------------------------------

def test_exporter_pod_hostname_resolves_through_kube_pod_info(tmp_path: Path) -> None:
    wh, _ = load(tmp_path, "t4")
    with wh:
        assert gpus(wh) == {"GPU-e1200d64-e918-4277-cad9-75da90b9f618": ("gpu-node-t4", None, "T4")}
        assert wh.sql("SELECT node FROM gpu_samples").item() == "gpu-node-t4"
    wh, _ = load(tmp_path, "mixed")  # the 2026 `hostname` spelling, two GPU models on one node
    with wh:
        assert {u: g[0] for u, g in gpus(wh).items()} == {
            "GPU-fc60126e-514d-3522-2828-c5daa8e99d85": "gpu-node-mixed",
            "GPU-63bc0b91-2265-1b94-831c-15c41fe92675": "gpu-node-mixed"}
    wh, _ = load(tmp_path, "aks")  # relabelled `node` wins over the exporter-pod Hostname
    with wh:
        assert gpus(wh) == {"GPU-c89b14a3-ce7c-6725-8424-b55d37d9c332": (
            "aks-gpunp-66230965-vmss000000", None, "A100-80GB")}


def test_unmatched_gpus_are_listed_and_counted_in_the_fleet_totals(tmp_path: Path) -> None:
    wh, notes = load(tmp_path, "t4-alone", prices=True)
    with wh:
        assert gpus(wh) == {"GPU-e1200d64-e918-4277-cad9-75da90b9f618": (None, "nvidia-dcgm-exporter-ml2wh", "T4")}
        assert any(n.startswith("1 GPU(s) measured but not matched to a known node (exporter said: "
                                "nvidia-dcgm-exporter-ml2wh)") for n in notes)
        u = query(wh, "unmatched_gpus").row(0, named=True)
        assert (u["reason"], u["gpu_model"], u["gpu_hours"]) == ("no known node", "T4", pytest.approx(30 / 3600))
        assert u["usd_per_gpu_hour"] is None  # the shipped AWS catalog has no T4 instance type
        s = query(wh, "fleet_summary").row(0, named=True)
        assert (s["gpus"], s["nodes"], s["unmatched_gpus"], s["unmatched_unpriced_gpus"], s["unmatched_usd"]) == (
            1, 0, 1, 1, None)


def test_a_hostname_node_loaded_later_places_the_gpus_without_double_counting(tmp_path: Path) -> None:
    cfg = Config(db_path=tmp_path / "w.duckdb", cluster="real")
    host = "computeinstance-e00c1p6dpy98xytphp"
    with Warehouse(cfg.db_path) as wh:
        load_catalog(wh, cfg)
        load_openmetrics(wh, cfg, REAL / "dcgm" / "dcgm-exporter-490.prom", default_ts=T)
        # before any node is known: 3 H100s, priced at the cheapest H100 instance's per-GPU rate
        per_gpu = wh.sql("SELECT min(on_demand_usd_per_hour / gpu_count) FROM prices WHERE gpu_model = 'H100-80GB'").item()
        u = query(wh, "unmatched_gpus")
        assert u["price_basis"].to_list() == ["cheapest instance type with this GPU"] * 3
        s = query(wh, "fleet_summary").row(0, named=True)
        assert (s["gpus"], s["unmatched_gpus"]) == (3, 3)
        assert s["unmatched_usd"] == pytest.approx(3 * per_gpu * 30 / 3600)
        dump = tmp_path / "dump"
        dump.mkdir()
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": host, "uid": "n-1", "creationTimestamp": "2026-10-01T00:00:00Z",
                             "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
                "status": {"capacity": {"nvidia.com/gpu": "8"}}}
        (dump / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [node]}))
        load_dump_dir(wh, cfg, dump, observed_at=T + timedelta(minutes=5))
        assert query(wh, "unmatched_gpus").height == 0  # the Hostname named it: placed now, counted once
        s = query(wh, "fleet_summary").row(0, named=True)
        assert (s["gpus"], s["unmatched_gpus"]) == (8, 0)


# -- readings that are not measurements, and series without a GPU identity -------------------------

SENTINEL_NOTES = [
    "DCGM_FI_DEV_GPU_UTIL: dropped 2 reading(s) that are not measurements (1 DCGM blank sentinel (>= 2147483632), "
    "1 outside 0..100 % or the GPU's physical maximum)",
    "DCGM_FI_DEV_POWER_USAGE: dropped 1 reading(s) that are not measurements (1 DCGM blank sentinel (>= 2147483632))",
    "DCGM_FI_PROF_SM_ACTIVE: dropped 1 reading(s) that are not measurements (1 DCGM blank sentinel (>= 2147483632))",
]


def test_blank_sentinels_are_dropped_one_by_one_and_the_idle_gpu_stays_idle(tmp_path: Path) -> None:
    wh, notes = load(tmp_path, "sentinels")
    with wh:
        rtx = wh.sql("SELECT count(*), max(gr_active), max(sm_active), max(gpu_util) FROM gpu_samples "
                     "WHERE gpu_uuid = 'GPU-7ad09335-aadb-19c3-e3a8'").row(0)
        assert rtx == (20, 0.0, 0.0, 0.0)  # 20 scrapes; the sentinel ones lose only that field
        assert wh.sql("SELECT count(*), min(power_w), max(power_w) FROM gpu_samples WHERE power_w IS NOT NULL "
                      "AND gpu_uuid LIKE 'GPU-c1f3%'").row(0) == (19, 30.982, 30.982)
    assert all(n in notes for n in SENTINEL_NOTES), notes


def test_series_without_gpu_identity_are_skipped_with_file_and_line(tmp_path: Path) -> None:
    wh, notes = load(tmp_path, "entities")
    with wh:
        assert list(gpus(wh)) == ["GPU-00000000-0000-0000-0000-000000000000"]
        assert wh.sql("SELECT status FROM ingest_state").item() == "complete"
    assert ('skipped 4 DCGM series without a usable GPU identity (`gpu` and `UUID`/`uuid` labels), e.g. '
            'entities.prom:1: DCGM_FI_DEV_POWER_USAGE{hostname="testhost",nvswitch="0"}') in notes


@pytest.mark.parametrize("name", ["ksm198", "ksm200", "ksm2100"])
def test_the_cpu_request_of_gpu_pods_is_read_in_every_generation(tmp_path: Path, name: str) -> None:
    wh, _ = load(tmp_path, name)
    with wh:
        assert {r[0] for r in wh.sql("SELECT cpu_request FROM pods WHERE gpu_request > 0").rows()} == {0.2}


def test_container_cpu_rate_from_the_kubelets_counter() -> None:
    """kubernetes/kubernetes resource_metrics_test.go lines, scraped twice a minute apart: the
    rate per container, summed per pod, in the step the interval starts in."""
    from gpuinsight.sources.cadvisor import pod_cpu_samples

    series = parse_exposition((REAL / "kubelet/resource-metrics-two-scrapes.prom").read_bytes())
    dropped: dict[str, int] = {}
    rows = pod_cpu_samples(series, "real", 60, dropped).select("namespace", "pod", "ts", "cpu_cores").rows()
    assert rows == [("namespace_a", "pod_a", datetime(2021, 6, 22, 21, 11), 1.5),  # 30/60 + 60/60 cores
                    ("namespace_b", "pod_b", datetime(2021, 6, 22, 21, 11), 0.25)]
    assert not any(dropped.values())


def test_pcie_rates_load_from_real_scrapes(tmp_path: Path) -> None:
    wh, notes = load(tmp_path, "pcie")
    with wh:
        row = wh.sql("SELECT pcie_rx_bps, pcie_tx_bps, pcie_tx_max_bps, gr_active, gr_active_min, pod "
                     "FROM gpu_samples").rows()
    assert row == [(19831.0, 175084.0, 175084.0, 0.0, 0.0, "")]  # an idle GPU: bytes/s, not counters
    assert any("not read: DCGM_FI_DEV_PCIE_REPLAY_COUNTER" in n for n in notes), notes
    wh, _ = load(tmp_path, "dra")
    with wh:  # two pods share one GH200 through DRA: each keeps its row with the GPU's rate
        rows = wh.sql("SELECT namespace, pod, pcie_rx_bps, gr_active FROM gpu_samples ORDER BY pod").rows()
    assert rows == [("gpu-test3", "pod1", 23792.0, None), ("gpu-test3", "pod2", 23792.0, None)]


def test_pcie_blank_is_dropped_and_a_fast_transfer_is_kept(tmp_path: Path) -> None:
    wh, notes = load(tmp_path, "stalls")
    with wh:
        rx = wh.sql("SELECT pcie_rx_bps FROM gpu_samples WHERE pcie_rx_bps IS NOT NULL ORDER BY ts").rows()
    assert len(rx) == 19 and (3.25e9,) in rx  # 3.25 GB/s passes BLANK_FLOOR: a real PCIe rate
    assert any(n.startswith("DCGM_FI_PROF_PCIE_RX_BYTES: dropped 1 reading(s)") and "blank" in n for n in notes)


def test_a_file_malformed_as_text_is_still_refused_with_its_line(tmp_path: Path) -> None:
    cfg = Config(db_path=tmp_path / "w.duckdb")
    with Warehouse(cfg.db_path) as wh, pytest.raises(BadInput, match=r"render-metrics-gpu\.prom:3: malformed label set"):
        load_openmetrics(wh, cfg, REAL / "dcgm" / "render-metrics-gpu.prom", default_ts=T)


def test_mig_and_mps_scrapes(tmp_path: Path) -> None:
    wh, _ = load(tmp_path, "mig")
    with wh:
        assert wh.sql("SELECT mig_instance, mig_profile, pod FROM gpu_samples ORDER BY 1").rows() == [
            (7, "1g.10gb", "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl"), (8, "1g.10gb", ""),
            (9, "1g.10gb", "tts-predictor-00011-deployment-5554f75554-8j8pl")]
        assert wh.sql("SELECT mig_mode, gpu_model FROM gpus").row(0) == (True, "H100-80GB")
    wh, _ = load(tmp_path, "mps")
    with wh:
        assert sorted(wh.sql("SELECT namespace, pod, fb_used_mib FROM gpu_samples").rows()) == [
            ("default", "gpu-burn-deployment-1-85dc8ff699-clvh5", 15866.0),
            ("vllm-inference", "vllm-medgemma-4b-it-d599b4c99-f95nk", 15866.0)]


# -- kube-state-metrics generations ----------------------------------------------------------------

@pytest.mark.parametrize(("name", "pods", "labels_note"), [
    ("ksm198", [("abc-123-xxx", "pod1", "Pod", 1.0, "node1", "system-node-critical")], False),
    ("ksm200", [("abc-123-xxx", "pod1", "Pod", 1.0, "node1", "system-node-critical")], True),
    # from v2.1 every series has its uid (the upstream test cases use two)
    ("ksm2100", [("abc-123-xxx", "pod1", "Pod", None, "node1", "system-node-critical"),
                 ("uid1", "pod1", "Pod", 1.0, None, None)], True),
])
def test_kube_state_metrics_generations(tmp_path: Path, name: str, pods: list[tuple[object, ...]],
                                        labels_note: bool) -> None:
    wh, notes = load(tmp_path, name)
    with wh:
        assert wh.sql("SELECT uid, name, workload_kind, gpu_request, node, priority_class FROM pods "
                      "ORDER BY uid").rows() == pods
        assert wh.sql("SELECT node, gpu_count FROM nodes").rows() == [("127.0.0.1", 4)]
    joined = "pod series without `uid` (kube-state-metrics before v2.1) were joined to kube_pod_info by namespace + pod"
    assert (joined in notes) == (name != "ksm2100")
    assert any(n.startswith("kube_pod_labels carries no labels") for n in notes) == labels_note
    node_note = [n for n in notes if n.startswith("kube_node_labels carries none of the node labels")]
    if name != "ksm2100":  # the v2.10 lines hold no kube_node_labels at all
        assert "--metric-labels-allowlist=nodes=[node.kubernetes.io/instance-type," in node_note[0]


# -- Kubernetes objects: both paths read node pools alike ------------------------------------------

NODE_FACTS = {  # node -> (instance type, capacity type, pool, pool kind, GPU model, GPU count)
    "gke-my-gpu-cluster-default-pool-4d0fa82d-ttxh": ("n1-standard-2", None, "default-pool", "gke-nodepool", "K80", None),
    "ip-10-32-136-67.eu-west-1.compute.internal": ("g5.xlarge", "spot", "gpu-triton", "karpenter", "A10G", 1),
    "aks-newpool-20956280-vmss000000": ("Standard_DS2_v2", None, "newpool", "aks-agentpool", None, 0),
    "ip-10-42-100-65.us-west-2.compute.internal": ("m5.large", "on-demand", "default", "eks-nodegroup", None, 0),
}


def real_dump(folder: Path) -> Path:
    """nodes.yaml: the GKE `kind: List` and three more nodes as extra YAML documents."""
    k8s = REAL / "k8s"
    docs = [(k8s / "gke-nodes.yaml").read_text()] + [(k8s / f).read_text() for f in
                                                     ("karpenter-v0-node.json", "aks-node.json", "eks-node.json")]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nodes.yaml").write_text("\n---\n".join(docs))
    shutil.copy(k8s / "volcano-queues.yaml", folder / "queues.yaml")
    shutil.copy(k8s / "volcano-podgroup-v1alpha1.yaml", folder / "podgroups.yaml")
    shutil.copy(k8s / "volcano-tf-example-gpu.yaml", folder / "vcjobs.yaml")
    return folder


def test_real_kubernetes_objects_load_and_both_paths_agree_on_pools(tmp_path: Path) -> None:
    cfg = Config(db_path=tmp_path / "w.duckdb", cluster="real")
    with Warehouse(cfg.db_path) as wh:
        report = load_dump_dir(wh, cfg, real_dump(tmp_path / "dump"))
        assert report.rows == {"nodes": 4, "queues": 4, "podgroups": 1, "vcjobs": 1, "node_pools": 1}
        dump = {r[0]: r[1:] for r in wh.sql("SELECT node, instance_type, capacity_type, node_pool, node_pool_kind, "
                                            "gpu_model, gpu_count FROM nodes").rows()}
        assert dump == NODE_FACTS
        assert wh.sql("SELECT namespace, name, queue, min_member, phase FROM podgroups").row(0) == (
            "test", "q1-qj-1", "q1", 1, "Running")
        tasks = json.loads(wh.sql("SELECT tasks FROM vcjobs").item())
        assert [(t["name"], t["replicas"], t["gpus_per_pod"]) for t in tasks] == [("ps", 1, 0.0), ("worker", 3, 1.0)]
        labels = {r[0]: json.loads(r[1]) for r in wh.sql("SELECT node, labels FROM nodes").rows()}
    # the same labels as kube-state-metrics publishes them (sanitised names, allow-listed keys)
    rows = []
    for node, lbl in labels.items():
        rows.append({"metric": "kube_node_labels", "ts": T, "value": 1.0, "node": node,
                     **{f"label_{sanitized_label(k)[0]}": v for k, v in lbl.items() if k in KNOWN_NODE_LABELS}})
    ksm = ksm_nodes(pl.DataFrame(rows, infer_schema_length=None), "real")
    via_ksm = {r[0]: r[1:] for r in ksm.select("node", "instance_type", "capacity_type", "node_pool",
                                                 "node_pool_kind", "gpu_model", "gpu_count").rows()}
    assert via_ksm == NODE_FACTS


def test_dump_items_need_a_kind_unless_their_list_is_typed(tmp_path: Path) -> None:
    cfg = Config(db_path=tmp_path / "w.duckdb", cluster="real")
    node = json.loads((REAL / "k8s" / "eks-node.json").read_text())
    node.pop("kind")
    with Warehouse(cfg.db_path) as wh:
        (tmp_path / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [node]}))
        with pytest.raises(BadInput, match=r"nodes\.json: item 0 \(ip-10-42-100-65\.us-west-2\.compute\.internal\): "
                                           r"kind: missing \(expected Node\)"):
            load_dump_dir(wh, cfg, tmp_path)
        assert wh.count("nodes") == 0 and wh.count("ingest_state") == 0
        (tmp_path / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": [node]}))
        assert load_dump_dir(wh, cfg, tmp_path).rows["nodes"] == 1


def test_db_option_before_the_sub_command(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    res = CliRunner().invoke(main, ["--db", str(db), "collect", "kubernetes", "--from-dir",
                                    str(real_dump(tmp_path / "dump"))])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["--db", str(db), "query", "nodes_current", "--format", "json"])
    assert res.exit_code == 0 and db.exists()


# -- the same files through a real Prometheus ------------------------------------------------------

PROM_SETS = ("t4", "aks", "v1x", "mixed", "mig", "entities", "sentinels", "ksm198", "ksm200", "pcie", "dra", "stalls")


def _as_series(name: str) -> list[Series]:
    """Every line of a set as a series labelled fixture=NAME; scrapes without timestamps repeat
    every 30 s for an hour (the sentinel file has its own 20 readings)."""
    frame = parse_exposition((REAL / SETS[name][0]).read_bytes() if len(SETS[name]) == 1 else
                             "\n".join((REAL / f).read_text() for f in SETS[name]), default_ts=T)
    out: dict[tuple[object, ...], Series] = {}
    labels = [c for c in frame.columns if c not in ("metric", "ts", "value", "@line")]
    for r in frame.iter_rows(named=True):
        lbl = {k: r[k] for k in labels if r[k] is not None}
        key = (r["metric"], *sorted(lbl.items()))
        s = out.setdefault(key, Series(r["metric"], {**lbl, "fixture": name}))
        s.points.append((r["ts"].timestamp() if r["ts"].tzinfo else (r["ts"] - datetime(1970, 1, 1)).total_seconds(),
                         r["value"]))
    for s in out.values():
        if len(s.points) == 1:
            s.points = [(T_S + 30 * i, s.points[0][1]) for i in range(120)]
    return list(out.values())


@pytest.fixture(scope="module")
def prom_real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("real-prom")
    om = write_openmetrics([s for n in PROM_SETS for s in _as_series(n)], folder / "real.om")
    with prometheus_server(backfill(om, folder / "tsdb")) as url:
        yield url


@pytest.mark.parametrize("name", PROM_SETS)
def test_real_fixture_through_prometheus_matches_the_file_path(prom_real: str, tmp_path: Path, name: str) -> None:
    file_wh, file_notes = load(tmp_path, name)
    cfg = Config(db_path=tmp_path / "prom.duckdb", cluster="real", prometheus=PrometheusConfig(url=prom_real))
    with file_wh, Warehouse(cfg.db_path) as wh:
        report = PrometheusSource(cfg, matchers={"fixture": name}).collect(wh, T, T + timedelta(hours=1), 300)
        assert gpus(wh) == gpus(file_wh)
        pods = ("SELECT uid, namespace, name, gpu_request, mig_profile, cpu_request FROM pods WHERE gpu_request > 0 "
                "ORDER BY uid")
        assert wh.sql(pods).rows() == file_wh.sql(pods).rows()
        samples = "SELECT DISTINCT gpu_uuid, mig_instance, namespace, pod FROM gpu_samples ORDER BY ALL"
        assert wh.sql(samples).rows() == file_wh.sql(samples).rows()
    notes = " | ".join(report.notes)
    if name == "sentinels":  # the same readings dropped, on the server this time
        assert "DCGM_FI_DEV_GPU_UTIL: dropped 2 reading(s)" in notes and "dropped on the server" in notes
        assert "DCGM_FI_PROF_SM_ACTIVE: dropped 1 reading(s)" in notes
        assert "DCGM_FI_DEV_POWER_USAGE: dropped 1 reading(s)" in notes
    if name == "entities":
        assert "skipped 4 DCGM series without a usable GPU identity" in notes
    if name in ("ksm198", "ksm200"):
        assert "pods joined to kube_pod_info by namespace + pod" in notes
    if name == "v1x":
        assert "DCGM-like metrics: 7 seen, 2 mapped" in notes
    if "DCGM-like metrics" in " ".join(file_notes):
        assert "DCGM-like metrics" in notes


def test_stalls_within_a_step_are_pushed_down_as_its_minimum(prom_real: str, tmp_path: Path) -> None:
    """Bursts and stalls every minute: at a 300 s step the server's min_over_time/max_over_time
    keep both (the average alone would look like a GPU half busy); the PCIe blank is filtered on
    the server and the 3.25 GB/s reading kept."""
    cfg = Config(db_path=tmp_path / "prom.duckdb", cluster="real", prometheus=PrometheusConfig(url=prom_real))
    with Warehouse(cfg.db_path) as wh:
        report = PrometheusSource(cfg, matchers={"fixture": "stalls"}).collect(wh, T, T + timedelta(hours=1), 300)
        rows = wh.sql("SELECT gr_active, gr_active_min, gr_active_max, pcie_rx_bps, step_s FROM gpu_samples "
                      "WHERE gr_active IS NOT NULL ORDER BY ts").rows()
    assert [r[4] for r in rows] == [300, 300]
    for gr, lo, hi, _, _ in rows:
        assert lo == 0.0 and hi == pytest.approx(0.92) and 0.3 < gr < 0.6
    kept = [19831.0] * 8 + [3.25e9]  # the second step: readings 10..19 hold no blank
    assert rows[0][3] == pytest.approx(sum(kept) / len(kept))  # readings 0..9: one blank dropped
    notes = " | ".join(report.notes)
    assert "DCGM_FI_PROF_PCIE_RX_BYTES: dropped 1 reading(s)" in notes and "dropped on the server" in notes

"""The shared series transform on small literal frames (no server, no files)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import orjson
import polars as pl

from gpuinsight.config import Config
from gpuinsight.sources.series import (
    SeriesBatch,
    TransformStats,
    dcgm_samples,
    gpu_inventory,
    ksm_nodes,
    ksm_pods,
    load_series,
)
from gpuinsight.warehouse import Warehouse

T = datetime(2026, 11, 1)


def frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    """Series frame from dicts with metric, ts (minutes after T), value and labels."""
    out = [{**r, "ts": T + timedelta(minutes=float(r["ts"]))} for r in rows]  # type: ignore[arg-type]
    df = pl.DataFrame(out, infer_schema_length=None)
    return df.with_columns(pl.col("value").cast(pl.Float64), pl.col("ts").cast(pl.Datetime("us")))


GPU = {"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA A100-SXM4-80GB"}


def test_attribution_coalesces_exported_old_and_plain_labels() -> None:
    s = frame([
        # honor_labels off: exported_* wins over the exporter's own pod
        {"metric": "DCGM_FI_DEV_GPU_UTIL", "ts": 0, "value": 50, **GPU, "Hostname": "n1", "pod": "dcgm-exporter-abc",
         "namespace": "gpu-operator", "exported_pod": "train-0", "exported_namespace": "ml", "exported_container": "c"},
        # idle GPU scraped without honor_labels: only the exporter's pod -> unallocated
        {"metric": "DCGM_FI_DEV_GPU_UTIL", "ts": 0, "value": 0, "gpu": "1", "UUID": "GPU-2", "hostname": "n1",
         "pod": "nvidia-dcgm-exporter-x", "namespace": "gpu-operator", "container": "exporter"},
        # old namespace labels, lower-case metric name, relabelled node beats Hostname
        {"metric": "dcgm_fi_dev_gpu_util", "ts": 0, "value": 10, "gpu": "0", "uuid": "GPU-3", "node": "n3",
         "Hostname": "dcgm-exporter-pod", "pod_name": "nb-0", "pod_namespace": "dev", "container_name": "j"},
        {"metric": "kube_node_info", "ts": 0, "value": 1, "node": "n1"},  # Hostname counts: it names a known node
    ])
    out = dcgm_samples(s, "c1", 300).sort("gpu_uuid")
    assert out.select("gpu_uuid", "node", "namespace", "pod", "container").rows() == [
        ("GPU-1", "n1", "ml", "train-0", "c"), ("GPU-2", "n1", "", "", ""), ("GPU-3", "n3", "dev", "nb-0", "j")]
    assert out["gr_active"].to_list() == [0.5, 0.0, 0.1]  # no profiling: gpu_util / 100
    assert out["step_s"].unique().to_list() == [300] and out["cluster"].unique().to_list() == ["c1"]


def test_mig_instances_max_columns_and_nan() -> None:
    mig = {**GPU, "GPU_I_PROFILE": "1g.10gb", "Hostname": "n"}
    s = frame([
        {"metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ts": 0, "value": 0.2, **mig, "GPU_I_ID": "7"},
        {"metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE:max", "ts": 0, "value": 0.9, **mig, "GPU_I_ID": "7"},
        {"metric": "DCGM_FI_DEV_FB_USED", "ts": 0, "value": 900, **mig, "GPU_I_ID": "7"},
        {"metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ts": 0, "value": float("nan"), **mig, "GPU_I_ID": "8"},
        {"metric": "DCGM_FI_DEV_FB_USED", "ts": 0, "value": 100, **mig, "GPU_I_ID": "8"},
        {"metric": "DCGM_FI_DEV_FB_USED", "ts": 5, "value": float("inf"), **mig, "GPU_I_ID": "8"},
    ])
    stats = TransformStats()
    out = dcgm_samples(s, "c", 300, stats=stats).sort("mig_instance")
    assert stats.dropped.counts == {("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "nonfinite"): 1,
                                    ("DCGM_FI_DEV_FB_USED", "nonfinite"): 1}
    assert out.select("mig_instance", "mig_profile", "gr_active", "gr_active_max", "fb_used_mib", "fb_used_max_mib",
                      "gpu_util").rows() == [(7, "1g.10gb", 0.2, 0.9, 900.0, 900.0, None),
                                             (8, "1g.10gb", None, None, 100.0, 100.0, None)]
    inv = gpu_inventory(out)
    assert inv.select("gpu_uuid", "gpu_model", "mig_mode", "memory_mib").rows() == [("GPU-1", "A100-80GB", True, 81920.0)]


def test_series_without_gpu_identity_is_skipped_and_counted() -> None:
    s = frame([{"metric": "DCGM_FI_DEV_GPU_UTIL", "ts": 0, "value": 1, "gpu": "0", "Hostname": "n7"},
               {"metric": "DCGM_FI_DEV_GPU_UTIL", "ts": 1, "value": 1, "gpu": "0", "Hostname": "n7"},
               {"metric": "DCGM_FI_DEV_GPU_UTIL", "ts": 0, "value": 7, **GPU, "Hostname": "n7"}])
    stats = TransformStats()
    out = dcgm_samples(s, "c", 60, stats=stats)
    assert out["gpu_uuid"].to_list() == ["GPU-1"] and len(stats.unidentified_series) == 1
    assert "DCGM_FI_DEV_GPU_UTIL{Hostname=\"n7\",gpu=\"0\"}" in stats.notes()[0]
    assert dcgm_samples(frame([{"metric": "up", "ts": 0, "value": 1}]), "c", 60).height == 0


def ksm(metric: str, ts: float, uid: str, value: float = 1, **labels: str) -> dict[str, object]:
    return {"metric": metric, "ts": ts, "value": value, "namespace": "ns", "uid": uid, **labels}


def test_ksm_pods_owners_requests_phase_and_name_reuse() -> None:
    t_created = (T - datetime(1970, 1, 1)).total_seconds()
    s = frame([
        ksm("kube_pod_info", 0, "u1", pod="job-0", node="n1", priority_class="prod"),
        ksm("kube_pod_info", 5, "u1", pod="job-0", node="n1"),
        ksm("kube_pod_owner", 5, "u1", pod="job-0", owner_kind="Job", owner_name="vj", owner_is_controller="true"),
        ksm("kube_pod_labels", 5, "u1", pod="job-0", label_volcano_sh_job_name="vj", label_volcano_sh_queue_name="q1"),
        ksm("kube_pod_annotations", 5, "u1", pod="job-0", annotation_scheduling_k8s_io_group_name="pg"),
        ksm("kube_pod_created", 5, "u1", t_created, pod="job-0"),
        ksm("kube_pod_status_phase", 5, "u1", 0, pod="job-0", phase="Running"),
        ksm("kube_pod_status_phase", 5, "u1", 1, pod="job-0", phase="Failed"),
        ksm("kube_pod_status_phase", 0, "u1", 1, pod="job-0", phase="Running"),
        # the same request seen while pending (node="") and once scheduled: counted once
        ksm("kube_pod_container_resource_requests", 0, "u1", 2, pod="job-0", container="a", node="",
            resource="nvidia_com_gpu"),
        ksm("kube_pod_container_resource_requests", 5, "u1", 2, pod="job-0", container="a", node="n1",
            resource="nvidia_com_gpu"),
        ksm("kube_pod_container_resource_requests", 5, "u1", 8, pod="job-0", container="a", resource="cpu"),
        # a retry: same name, new uid
        ksm("kube_pod_info", 10, "u2", pod="job-0", node="n2"),
        ksm("kube_pod_owner", 10, "u2", pod="job-0", owner_kind="ReplicaSet", owner_name="web-7f"),
        # a MIG pod scraped without honor_labels
        ksm("kube_pod_info", 10, "u3", pod="kube-state-metrics-0", exported_pod="inf-0", exported_namespace="prod"),
        ksm("kube_pod_container_resource_requests", 10, "u3", 1, pod="kube-state-metrics-0", exported_pod="inf-0",
            exported_namespace="prod", resource="nvidia_com_mig_1g_10gb"),
        {"metric": "kube_replicaset_owner", "ts": 10, "value": 1, "namespace": "ns", "replicaset": "web-7f",
         "owner_kind": "Deployment", "owner_name": "web"},
    ])
    pods = {r["uid"]: r for r in ksm_pods(s, "c").iter_rows(named=True)}
    assert set(pods) == {"u1", "u2", "u3"}
    u1 = pods["u1"]
    assert (u1["workload_kind"], u1["workload"], u1["vcjob"], u1["queue"], u1["podgroup"]) == (
        "VolcanoJob", "vj", "vj", "q1", "pg")
    assert (u1["gpu_request"], u1["phase"], u1["node"], u1["created"]) == (2.0, "Failed", "n1", T)
    assert u1["last_seen"] == T + timedelta(minutes=5) and u1["priority_class"] == "prod"
    assert orjson.loads(u1["gpu_requests"]) == {"nvidia.com/gpu": 2.0}
    assert orjson.loads(u1["labels"]) == {"volcano_sh_job_name": "vj", "volcano_sh_queue_name": "q1"}
    assert (pods["u2"]["name"], pods["u2"]["workload_kind"], pods["u2"]["workload"]) == ("job-0", "Deployment", "web")
    u3 = pods["u3"]
    assert (u3["namespace"], u3["name"], u3["mig_profile"], u3["mig_request"], u3["gpu_request"]) == (
        "prod", "inf-0", "1g.10gb", 1.0, 0.0)
    assert orjson.loads(u3["gpu_requests"]) == {"nvidia.com/mig-1g.10gb": 1.0}


def test_ksm_nodes_labels_capacity_and_mig_count() -> None:
    def node(metric: str, ts: float, name: str, value: float = 1, **labels: str) -> dict[str, object]:
        return {"metric": metric, "ts": ts, "value": value, "node": name, **labels}

    s = frame([
        node("kube_node_info", 0, "a", provider_id="aws:///us-east-1a/i-1"),
        node("kube_node_info", 30, "a", provider_id="aws:///us-east-1a/i-1"),
        node("kube_node_labels", 30, "a", label_eks_amazonaws_com_capacity_type="ON_DEMAND",
             label_eks_amazonaws_com_nodegroup="ng", label_nvidia_com_gpu_product="NVIDIA-H100-80GB-HBM3",
             label_nvidia_com_gpu_count="8", label_nvidia_com_mig_config="all-1g.10gb",
             label_topology_kubernetes_io_zone="z1", label_node_kubernetes_io_instance_type="p5.48xlarge"),
        node("kube_node_status_capacity", 30, "a", 56, resource="nvidia_com_mig_1g_10gb"),
        node("kube_node_labels", 30, "b", label_karpenter_sh_capacity_type="spot", label_karpenter_sh_nodepool="p",
             label_nvidia_com_gpu_product="NVIDIA-L4"),
        node("kube_node_status_capacity", 30, "b", 1, resource="nvidia_com_gpu"),
        node("kube_node_status_capacity", 30, "b", 4, resource="cpu"),
    ])
    rows = {r["node"]: r for r in ksm_nodes(s, "c").iter_rows(named=True)}
    a, b = rows["a"], rows["b"]
    assert (a["capacity_type"], a["node_pool"], a["node_pool_kind"], a["gpu_model"], a["gpu_count"]) == (
        "on-demand", "ng", "eks-nodegroup", "H100-80GB", 8)
    assert (a["mig_config"], a["zone"], a["instance_type"], a["provider_id"]) == (
        "all-1g.10gb", "z1", "p5.48xlarge", "aws:///us-east-1a/i-1")
    assert orjson.loads(a["capacity"]) == {"nvidia.com/mig-1g.10gb": 56.0}
    assert (a["first_seen"], a["last_seen"]) == (T, T + timedelta(minutes=30))
    assert (b["capacity_type"], b["node_pool_kind"], b["gpu_model"], b["gpu_count"]) == ("spot", "karpenter", "L4", 1)


def test_load_series_is_idempotent_and_keeps_dimension_history(tmp_path: Path) -> None:
    cfg = Config(db_path=tmp_path / "w.duckdb", cluster="c")

    def batch(t0: float, n: int) -> SeriesBatch:
        rows = [{"metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ts": t0 + 5 * i, "value": 0.5, **GPU, "Hostname": "n",
                 "pod": "p", "namespace": "ns"} for i in range(n)]
        rows += [ksm("kube_pod_info", t0 + 5 * i, "u1", pod="p", node="n") for i in range(n)]
        return SeriesBatch(frame(rows), 300, end=T + timedelta(minutes=t0 + 5 * n))

    with Warehouse(cfg.db_path) as wh:
        for _ in range(2):  # same window twice: same rows
            load_series(wh, cfg, [batch(0, 24), batch(120, 24)], source="test", scope="s", window=None)
            assert (wh.count("gpu_samples"), wh.count("gpus"), wh.count("pods"), wh.count("gpu_hourly")) == (48, 1, 1, 4)
        load_series(wh, cfg, [batch(60, 6)], source="test", scope="s", window=None)  # an older chunk again
        gpu = wh.con.execute("SELECT first_seen, last_seen FROM gpus").fetchone()
        pod = wh.con.execute("SELECT last_seen, node FROM pods").fetchone()
        state = wh.con.execute("SELECT cursor, status, rows_loaded FROM ingest_state").fetchone()
        hourly = wh.con.execute("SELECT sum(covered_s), count(*) FROM gpu_hourly").fetchone()
    assert gpu == (T, T + timedelta(minutes=235)) and pod == (T + timedelta(minutes=235), "n")
    assert state[0] == T + timedelta(minutes=240) and state[1] == "complete"  # the cursor never moves back
    assert hourly == (48 * 300, 4)


def test_pods_sharing_a_gpu_each_keep_a_row_and_reloads_replace_the_gpu_step(tmp_path: Path) -> None:
    cfg = Config(db_path=tmp_path / "w.duckdb", cluster="c")

    def step(pods: list[str]) -> SeriesBatch:
        rows = [{"metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ts": 0, "value": 0.3, **GPU, "Hostname": "n",
                 "pod": p, "namespace": "dev"} for p in pods]
        return SeriesBatch(frame(rows), 300, end=T + timedelta(minutes=5))

    with Warehouse(cfg.db_path) as wh:
        load_series(wh, cfg, [step(["a", "b"])], source="test", scope="s", window=None)  # time-sliced GPU
        assert sorted(wh.sql("SELECT pod FROM gpu_samples")["pod"].to_list()) == ["a", "b"]
        assert sorted(wh.sql("SELECT pod FROM gpu_hourly")["pod"].to_list()) == ["a", "b"]
        load_series(wh, cfg, [step(["a"])], source="test", scope="s", window=None)  # the same step, re-read
        assert wh.sql("SELECT pod FROM gpu_samples")["pod"].to_list() == ["a"]
        assert wh.sql("SELECT pod FROM gpu_hourly")["pod"].to_list() == ["a"]


def test_node_resolution_order_and_evidence() -> None:
    """Relabelled labels first, Hostname only when it names a known node, then the pods the
    series names (namespaced workload pod, exporter pod by name, scrape address), else a hint."""
    from gpuinsight.sources.gpu_nodes import NodeDirectory, resolve_nodes

    info = [
        {"metric": "kube_pod_info", "ts": 0, "value": 1, "namespace": "ml", "pod": "train-0", "node": "n-train",
         "pod_ip": "10.1.0.5"},
        {"metric": "kube_pod_info", "ts": 0, "value": 1, "namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x",
         "node": "n-exp", "pod_ip": "10.2.0.7"},
        {"metric": "kube_pod_info", "ts": 0, "value": 1, "namespace": "gpu-operator", "pod": "dcgm-hostnet",
         "node": "n-host", "pod_ip": "10.0.0.9", "host_ip": "10.0.0.9", "host_network": "true"},
        {"metric": "kube_node_info", "ts": 0, "value": 1, "node": "n-known"},
    ]
    series = [
        {"metric": "m", "ts": 0, "value": 1, "my_node": "n-relabel", "Hostname": "n-known"},   # configured label
        {"metric": "m", "ts": 0, "value": 1, "Hostname": "n-known"},                           # a known node
        {"metric": "m", "ts": 0, "value": 1, "Hostname": "whatever", "namespace": "ml", "pod": "train-0"},
        {"metric": "m", "ts": 0, "value": 1, "hostname": "nvidia-dcgm-exporter-x"},            # the exporter pod
        {"metric": "m", "ts": 0, "value": 1, "instance": "10.2.0.7:9400"},                     # its address
        {"metric": "m", "ts": 0, "value": 1, "instance": "10.0.0.9:9400"},                     # hostNetwork
        {"metric": "m", "ts": 0, "value": 1, "Hostname": "r6i3n0"},                            # nothing knows it
        {"metric": "m", "ts": 0, "value": 1},
    ]
    d = NodeDirectory.from_series(frame(info))
    out = resolve_nodes(frame(series), d, ("my_node", "node", "Hostname", "hostname"))
    assert out.rows() == [("n-relabel", None), ("n-known", None), ("n-train", None), ("n-exp", None),
                          ("n-exp", None), ("n-host", None), (None, "r6i3n0"), (None, None)]


def test_provider_ids_and_ksm_label_names() -> None:
    from gpuinsight.sources.k8s.nodes import zone_of_provider
    from gpuinsight.sources.prom.ksm import sanitized_label

    assert zone_of_provider("aws:///us-east-1a/i-0abc") == "us-east-1a"
    assert zone_of_provider("gce://fathom-containers/us-east1-c/gke-node") == "us-east1-c"
    assert zone_of_provider("azure:///subscriptions/x/vm") is None and zone_of_provider(None) is None
    assert sanitized_label("eks.amazonaws.com/capacityType") == ("eks_amazonaws_com_capacity_type",
                                                                  "eks_amazonaws_com_capacityType")
    assert sanitized_label("karpenter.sh/nodepool") == ("karpenter_sh_nodepool",)


def test_every_dcgm_sentinel_is_classified_blank_and_ranges_hold() -> None:
    from gpuinsight.sources.dcgm import BLANK_FLOOR, FP64_BLANK, INT32_BLANK, INT64_BLANK, reading_class

    sentinels = [float(b + k) for b in (INT32_BLANK, INT64_BLANK) for k in range(4)]
    sentinels += [FP64_BLANK + k for k in range(4)] + [4294967295.0]
    values = [*sentinels, float("nan"), float("inf"), -3.0, 101.0, 100.0, 0.0]
    why = pl.DataFrame({"v": values}).select(reading_class(pl.col("v"), pl.lit(0.0), pl.lit(100.0)).alias("why"))["why"].to_list()
    assert why == ["blank"] * len(sentinels) + ["nonfinite", "nonfinite", "range", "range", None, None]
    assert min(sentinels) == BLANK_FLOOR

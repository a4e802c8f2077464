"""kube-state-metrics series -> ``pods`` and ``nodes`` rows.

Pods are keyed by ``uid``, so a pod name reused by a StatefulSet or a Volcano job retry is
a separate row. Labels come as ``exported_*`` when the scrape did not honor labels; the
exported value wins over the plain one, which then names the kube-state-metrics pod.
"""

from __future__ import annotations

from typing import Any

import orjson
import polars as pl

from gpuinsight.gpumodels import canonical_gpu_model
from gpuinsight.sources.prom.frames import TS, first_label, lab, mig_profile_of, unsanitize_resource

POD_TIMES = {
    "kube_pod_created": "created",
    "kube_pod_status_scheduled_time": "scheduled",
    "kube_pod_start_time": "started",
    "kube_pod_completion_time": "finished",
}
POD_COLUMNS: dict[str, pl.DataType] = {
    "cluster": pl.Utf8(), "uid": pl.Utf8(), "namespace": pl.Utf8(), "name": pl.Utf8(),
    "owner_kind": pl.Utf8(), "owner_name": pl.Utf8(), "workload_kind": pl.Utf8(), "workload": pl.Utf8(),
    "node": pl.Utf8(), "gpu_request": pl.Float64(), "mig_profile": pl.Utf8(), "mig_request": pl.Float64(),
    "gpu_requests": pl.Utf8(), "queue": pl.Utf8(), "podgroup": pl.Utf8(), "vcjob": pl.Utf8(),
    "priority_class": pl.Utf8(), "scheduler": pl.Utf8(), "created": TS, "scheduled": TS, "started": TS,
    "finished": TS, "last_seen": TS, "phase": pl.Utf8(), "labels": pl.Utf8(), "annotations": pl.Utf8(),
    "source": pl.Utf8(),
}
NODE_COLUMNS: dict[str, pl.DataType] = {
    "cluster": pl.Utf8(), "node": pl.Utf8(), "instance_type": pl.Utf8(), "capacity_type": pl.Utf8(),
    "node_pool": pl.Utf8(), "node_pool_kind": pl.Utf8(), "gpu_model": pl.Utf8(), "gpu_product": pl.Utf8(),
    "gpu_count": pl.Int32(), "mig_config": pl.Utf8(), "sharing_strategy": pl.Utf8(), "zone": pl.Utf8(),
    "provider_id": pl.Utf8(), "labels": pl.Utf8(), "capacity": pl.Utf8(), "first_seen": TS, "last_seen": TS,
}
_EKS_CAPACITY = {"ON_DEMAND": "on-demand", "SPOT": "spot", "CAPACITY_BLOCK": "reserved"}


def _latest_by(frame: pl.DataFrame, key: str | list[str], cols: list[str]) -> pl.DataFrame:
    """Per key, the last non-null value of each column in time order."""
    return frame.group_by(key).agg([pl.col(c).sort_by("ts").drop_nulls().last() for c in cols])


def _prefixed(frame: pl.DataFrame, key: str, prefix: str) -> dict[str, dict[str, str]]:
    """``{key: {name-without-prefix: value}}`` from the newest row per key of ``prefix*`` labels."""
    cols = [c for c in frame.columns if c.startswith(prefix)]
    if frame.height == 0 or not cols:
        return {}
    latest = _latest_by(frame, key, cols)
    return {
        row[key]: {c[len(prefix):]: v for c, v in row.items() if c != key and v not in (None, "")}
        for row in latest.iter_rows(named=True)
    }


def _json(obj: dict[str, Any] | None) -> str | None:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode() if obj else None


def ksm_pods(series: pl.DataFrame, cluster: str, *, source: str = "prometheus") -> pl.DataFrame:
    """kube-state-metrics pod series (+ ``kube_replicaset_owner``/``kube_job_owner``) -> ``pods`` rows."""
    empty = pl.DataFrame(schema=POD_COLUMNS)
    s = series.filter(pl.col("metric").str.starts_with("kube_pod_"))
    if s.height == 0:
        return empty
    s = s.with_columns(
        lab(s, "uid").alias("_uid"),
        first_label(s, "exported_namespace", "namespace").alias("_ns"),
        first_label(s, "exported_pod", "pod").alias("_name"),
    ).filter(pl.col("_uid").is_not_null())
    if s.height == 0:
        return empty
    metric = pl.col("metric")
    ident = _latest_by(s, "_uid", ["_ns", "_name"])
    info = s.filter(metric == "kube_pod_info")
    info = info.with_columns(first_label(info, "exported_node", "node").alias("_node"),
                             lab(info, "priority_class").alias("_prio"))
    facts = _latest_by(info, "_uid", ["_node", "_prio"]).join(
        info.group_by("_uid").agg(pl.col("ts").max().alias("_last_seen")), on="_uid")
    owners = s.filter(metric == "kube_pod_owner")
    owners = owners.with_columns(lab(owners, "owner_kind").alias("_ok"), lab(owners, "owner_name").alias("_on"),
                                 (lab(owners, "owner_is_controller") == "true").fill_null(False).alias("_ctl"))
    owner = owners.filter(pl.col("_ok").is_not_null()).sort(["_ctl", "ts"]).group_by("_uid").agg(
        pl.col("_ok").last(), pl.col("_on").last())
    sched = s.filter(metric == "kube_pod_scheduler")
    sched = _latest_by(sched.with_columns(lab(sched, "name").alias("_sched")), "_uid", ["_sched"])
    times = s.filter(metric.is_in(list(POD_TIMES)) & (pl.col("value") > 0)).sort("ts").group_by(
        ["_uid", "metric"]).agg(pl.col("value").last())
    phases = s.filter(metric == "kube_pod_status_phase")
    phases = phases.with_columns(lab(phases, "phase").alias("_phase"))
    phase = phases.filter(pl.col("ts") == pl.col("ts").max().over("_uid")).filter(pl.col("value") >= 0.5) \
        .sort("_phase").group_by("_uid").agg(pl.col("_phase").last())
    reqs = s.filter(metric == "kube_pod_container_resource_requests")
    reqs = reqs.with_columns(lab(reqs, "resource").alias("_res"), first_label(reqs, "exported_container", "container").fill_null("").alias("_c"))
    # A pending pod's series has node="" and the scheduled one node="x": the same request twice.
    reqs = reqs.filter(pl.col("_res").str.starts_with("nvidia_com_")).sort(["ts", "value"]) \
        .group_by(["_uid", "_c", "_res"]).agg(pl.col("value").last()) \
        .group_by(["_uid", "_res"]).agg(pl.col("value").sum())

    by_uid: dict[str, dict[str, Any]] = {r["_uid"]: {"namespace": r["_ns"], "name": r["_name"]}
                                         for r in ident.iter_rows(named=True)}
    for frame, mapping in ((facts, {"_node": "node", "_prio": "priority_class", "_last_seen": "last_seen"}),
                           (owner, {"_ok": "owner_kind", "_on": "owner_name"}),
                           (sched, {"_sched": "scheduler"}), (phase, {"_phase": "phase"})):
        for r in frame.iter_rows(named=True):
            by_uid[r["_uid"]].update({new: r[old] for old, new in mapping.items()})
    for r in times.iter_rows(named=True):
        by_uid[r["_uid"]][POD_TIMES[r["metric"]]] = r["value"]
    gpu_reqs: dict[str, dict[str, float]] = {}
    for r in reqs.iter_rows(named=True):
        gpu_reqs.setdefault(r["_uid"], {})[r["_res"]] = r["value"]
    labels = _prefixed(s.filter(metric == "kube_pod_labels"), "_uid", "label_")
    annotations = _prefixed(s.filter(metric == "kube_pod_annotations"), "_uid", "annotation_")
    rs_owner = _owner_map(series, "kube_replicaset_owner", "replicaset")
    job_owner = _owner_map(series, "kube_job_owner", "job_name")

    rows = []
    for uid, p in by_uid.items():
        lbl, ann = labels.get(uid, {}), annotations.get(uid, {})
        p.update(uid=uid, cluster=cluster, source=source, labels=_json(lbl), annotations=_json(ann))
        p["queue"] = lbl.get("volcano_sh_queue_name") or ann.get("scheduling_volcano_sh_queue_name")
        p["podgroup"] = ann.get("scheduling_k8s_io_group_name")
        p["vcjob"] = lbl.get("volcano_sh_job_name") or ann.get("volcano_sh_job_name")
        _requests(p, gpu_reqs.get(uid))
        p["workload_kind"], p["workload"] = _workload(p, rs_owner, job_owner)
        rows.append(p)
    out = pl.DataFrame(rows, schema_overrides={"created": pl.Float64, "scheduled": pl.Float64,
                                               "started": pl.Float64, "finished": pl.Float64},
                       infer_schema_length=None)
    for c in POD_TIMES.values():
        out = out.with_columns((pl.col(c) * 1e6).cast(pl.Int64).cast(TS).alias(c)) if c in out.columns else \
            out.with_columns(pl.lit(None, dtype=TS).alias(c))
    return out.select([(pl.col(c) if c in out.columns else pl.lit(None)).cast(t).alias(c)
                       for c, t in POD_COLUMNS.items()]).sort("uid")


def _requests(p: dict[str, Any], reqs: dict[str, float] | None) -> None:
    """GPU requests: whole GPUs, and the MIG profile most requested (a pod asks for one kind)."""
    if not reqs:
        return
    p["gpu_request"] = float(reqs.get("nvidia_com_gpu", 0.0))
    p["gpu_requests"] = _json({unsanitize_resource(k): v for k, v in reqs.items()})
    mig = {k: v for k, v in reqs.items() if k.startswith("nvidia_com_mig_") and v > 0}
    if mig:
        top = max(sorted(mig), key=lambda k: mig[k])
        p["mig_profile"], p["mig_request"] = mig_profile_of(top), float(mig[top])


def _workload(p: dict[str, Any], rs_owner: dict[tuple[str, str], tuple[str, str]],
              job_owner: dict[tuple[str, str], tuple[str, str]]) -> tuple[str, str | None]:
    kind, name, ns = p.get("owner_kind"), p.get("owner_name"), p.get("namespace") or ""
    # Volcano's batch.volcano.sh Job shows as owner_kind "Job"; its pods carry the job-name label.
    if p.get("vcjob") and kind in (None, "Job"):
        return "VolcanoJob", p["vcjob"]
    if kind == "ReplicaSet" and name:
        return rs_owner.get((ns, name), ("ReplicaSet", name))
    if kind == "Job" and name:
        return job_owner.get((ns, name), ("Job", name))
    if kind and name:
        return kind, name
    return "Pod", p.get("name")


def _owner_map(series: pl.DataFrame, metric: str, name_label: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(namespace, child name) -> (owner kind, owner name) from ``kube_*_owner`` series."""
    s = series.filter(pl.col("metric") == metric)
    if s.height == 0:
        return {}
    s = s.select(first_label(s, "exported_namespace", "namespace").alias("ns"), lab(s, name_label).alias("child"),
                 lab(s, "owner_kind").alias("kind"), lab(s, "owner_name").alias("owner"), "ts")
    s = s.drop_nulls(["child", "kind", "owner"]).sort("ts")
    return {(r["ns"] or "", r["child"]): (r["kind"], r["owner"]) for r in s.iter_rows(named=True)}


def ksm_nodes(series: pl.DataFrame, cluster: str) -> pl.DataFrame:
    """kube-state-metrics node series -> ``nodes`` rows (labels, GPU capacity, provider id)."""
    s = series.filter(pl.col("metric").str.starts_with("kube_node_"))
    if s.height == 0:
        return pl.DataFrame(schema=NODE_COLUMNS)
    s = s.with_columns(first_label(s, "exported_node", "node").alias("_node")).filter(pl.col("_node").is_not_null())
    metric = pl.col("metric")
    # kube_node_info is pulled at the sample step; the other node series once per chunk,
    # so only kube_node_info timestamps say when a node was alive.
    info = s.filter(metric == "kube_node_info")
    span = s.group_by("_node").agg(pl.col("ts").min().alias("first_seen"), pl.col("ts").max().alias("last_seen"))
    span_info = info.group_by("_node").agg(pl.col("ts").min().alias("f"), pl.col("ts").max().alias("l"))
    span = span.join(span_info, on="_node", how="left").select(
        "_node", pl.coalesce("f", "first_seen").alias("first_seen"), pl.coalesce("l", "last_seen").alias("last_seen"))
    provider = _latest_by(info.with_columns(lab(info, "provider_id").alias("_pid")), "_node", ["_pid"])
    labels = _prefixed(s.filter(metric == "kube_node_labels"), "_node", "label_")
    cap = s.filter(metric == "kube_node_status_capacity")
    cap = cap.with_columns(lab(cap, "resource").alias("_res")).filter(pl.col("_res").str.starts_with("nvidia_com_"))
    capacity: dict[str, dict[str, float]] = {}
    for r in cap.sort("ts").group_by(["_node", "_res"]).agg(pl.col("value").last()).iter_rows(named=True):
        capacity.setdefault(r["_node"], {})[r["_res"]] = r["value"]
    providers = {r["_node"]: r["_pid"] for r in provider.iter_rows(named=True)}
    rows = []
    for r in span.iter_rows(named=True):
        node, lbl, capa = r["_node"], labels.get(r["_node"], {}), capacity.get(r["_node"], {})
        rows.append({"cluster": cluster, "node": node, "first_seen": r["first_seen"], "last_seen": r["last_seen"],
                     "provider_id": providers.get(node), "labels": _json(lbl),
                     "capacity": _json({unsanitize_resource(k): v for k, v in capa.items()}),
                     **_node_facts(lbl, capa)})
    out = pl.DataFrame(rows, infer_schema_length=None)
    return out.select([(pl.col(c) if c in out.columns else pl.lit(None)).cast(t).alias(c)
                       for c, t in NODE_COLUMNS.items()]).sort("node")


def _node_facts(lbl: dict[str, str], capa: dict[str, float]) -> dict[str, Any]:
    capacity_type = lbl.get("karpenter_sh_capacity_type")
    if capacity_type is None and lbl.get("eks_amazonaws_com_capacity_type"):
        eks = lbl["eks_amazonaws_com_capacity_type"]
        capacity_type = _EKS_CAPACITY.get(eks.upper(), eks.lower())
    pool, kind = lbl.get("karpenter_sh_nodepool") or lbl.get("karpenter_sh_provisioner_name"), "karpenter"
    if pool is None and lbl.get("eks_amazonaws_com_nodegroup"):
        pool, kind = lbl["eks_amazonaws_com_nodegroup"], "eks-nodegroup"
    product = lbl.get("nvidia_com_gpu_product")
    memory = _num(lbl.get("nvidia_com_gpu_memory"))
    mig_config = lbl.get("nvidia_com_mig_config")
    label_count = _num(lbl.get("nvidia_com_gpu_count"))
    # With MIG the device plugin advertises slices, not GPUs (nvidia.com/gpu counts
    # instances under the "single" strategy): the physical count is GFD's gpu.count label.
    mig_node = any(k.startswith("nvidia_com_mig_") for k in capa) or (
        mig_config not in (None, "", "all-disabled") and lbl.get("nvidia_com_mig_strategy") == "single")
    count = label_count if mig_node else capa.get("nvidia_com_gpu", label_count)
    if count is not None and count <= 0 and label_count:
        count = label_count
    return {
        "instance_type": lbl.get("node_kubernetes_io_instance_type") or lbl.get("beta_kubernetes_io_instance_type"),
        "capacity_type": capacity_type,
        "node_pool": pool,
        "node_pool_kind": kind if pool else None,
        "gpu_product": product,
        "gpu_model": canonical_gpu_model(product, memory),
        "gpu_count": int(count) if count is not None else None,
        "mig_config": mig_config,
        "sharing_strategy": lbl.get("nvidia_com_gpu_sharing_strategy"),
        "zone": lbl.get("topology_kubernetes_io_zone") or lbl.get("failure_domain_beta_kubernetes_io_zone"),
    }


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None

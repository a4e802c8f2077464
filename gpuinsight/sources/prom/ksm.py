"""kube-state-metrics series -> ``pods`` and ``nodes`` rows.

Pods are keyed by ``uid``, so a pod name reused by a StatefulSet or a Volcano job retry is
a separate row. Labels come as ``exported_*`` when the scrape did not honor labels; the
exported value wins over the plain one, which then names the kube-state-metrics pod.

Generations (docs/collectors.md has the table): before v2.1 only ``kube_pod_info`` carries
``uid``, so the other pod series are joined to it by namespace + pod (and time, for reused
names); up to v2.0 missing values are written ``<none>``; since v2.0 ``kube_*_labels`` are empty
unless kube-state-metrics runs with ``--metric-labels-allowlist``, which is detected and said.
Node facts are read with the same rules as the Kubernetes objects (:mod:`gpuinsight.sources.k8s.nodes`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import orjson
import polars as pl

from gpuinsight.errors import BadInput
from gpuinsight.sources.k8s.common import SHARE_RESOURCES
from gpuinsight.sources.k8s.nodes import KNOWN_NODE_LABELS, node_facts, zone_of_provider
from gpuinsight.sources.k8s.shares import HAMI_ALLOCATED, KAI_FRACTION, KAI_GROUP, KAI_MEMORY, pod_claims
from gpuinsight.sources.plausible import EARLIEST_S, MAX_DEVICES_PER_OBJECT, latest_s
from gpuinsight.sources.prom.frames import (
    TS,
    describe_series,
    first_label,
    lab,
    mig_profile_of,
    sanitized_resource,
    unsanitize_resource,
)

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
    "source": pl.Utf8(), "cpu_request": pl.Float64(), "gpu_shares": pl.Utf8(),
}
NODE_COLUMNS: dict[str, pl.DataType] = {
    "cluster": pl.Utf8(), "node": pl.Utf8(), "instance_type": pl.Utf8(), "capacity_type": pl.Utf8(),
    "node_pool": pl.Utf8(), "node_pool_kind": pl.Utf8(), "gpu_model": pl.Utf8(), "gpu_product": pl.Utf8(),
    "gpu_count": pl.Int32(), "mig_config": pl.Utf8(), "sharing_strategy": pl.Utf8(), "zone": pl.Utf8(),
    "provider_id": pl.Utf8(), "labels": pl.Utf8(), "capacity": pl.Utf8(), "first_seen": TS, "last_seen": TS,
    "gpu_replicas": pl.Float64(), "gpu_partition": pl.Utf8(), "gpu_memory_mib": pl.Float64(),
}
NONE = "<none>"  # how kube-state-metrics up to v2.0 wrote an unset value (created_by_kind, owner_kind ...)
# The flag that makes kube-state-metrics >= 2.0 publish the labels gpuinsight reads.
ALLOWLIST_FLAG = ("--metric-labels-allowlist=nodes=[node.kubernetes.io/instance-type,karpenter.sh/capacity-type,"
                  "karpenter.sh/nodepool,eks.amazonaws.com/capacityType,eks.amazonaws.com/nodegroup,"
                  "cloud.google.com/gke-nodepool,kubernetes.azure.com/agentpool,nvidia.com/gpu.product,"
                  "nvidia.com/gpu.count,nvidia.com/mig.config,topology.kubernetes.io/zone],"
                  "pods=[volcano.sh/job-name,volcano.sh/queue-name]")


# Series whose values are declarations, with what a real kube-state-metrics can publish.
_TIME_SERIES = ("kube_pod_created", "kube_pod_start_time", "kube_pod_status_scheduled_time",
                "kube_pod_completion_time", "kube_node_created")
_DEVICE_SERIES = ("kube_pod_container_resource_requests", "kube_pod_container_resource_limits",
                  "kube_pod_init_container_resource_requests", "kube_node_status_capacity",
                  "kube_node_status_allocatable")
# What check_ksm_values reads.
CHECKED_SERIES = (*_TIME_SERIES, *_DEVICE_SERIES)
# What ksm_pods reads besides the kube_pod_* series.
POD_OWNER_SERIES = ("kube_replicaset_owner", "kube_job_owner")
# Info series (value 1) the transforms here and the node directory read only for their labels and
# the first and last time each series is seen (a pod's or node's span, the newest labels); the
# Prometheus path reads them at every step and the other pod series once, at the chunk's end,
# so the pod a name meant then (_uid_by_name) is also the newest point's. Of an info series'
# points, its first and last say all the transforms read.
SPAN_SERIES = frozenset({"kube_pod_info", "kube_node_info"})


def check_ksm_values(series: pl.DataFrame, where: str, line_column: str | None = None) -> None:
    """Refuse kube-state-metrics values no real cluster produces: a GPU request or capacity that
    is negative, fractional, not finite or beyond what a node can hold (-4, NaN, 1e23, 8Ei), a
    pod or node time before 2000 or in the future (0 means unset). Names the first offender."""
    metric = pl.col("metric")
    gpu = series.filter(metric.is_in(_DEVICE_SERIES))
    if gpu.height:
        res = lab(gpu, "resource")
        shares = res.is_in([sanitized_resource(r) for r in SHARE_RESOURCES]).fill_null(False)
        v = pl.col("value")
        # HAMi's memory (MiB) and percentages count no devices: finite and not negative
        _refuse(gpu.filter(shares & ~(v.is_finite() & (v >= 0))), where, line_column,
                "GPU memory or core share is not a finite quantity >= 0")
        gpu = gpu.filter(res.str.starts_with("nvidia_com_").fill_null(False) & ~shares)
        bad = gpu.filter(~(v.is_finite() & (v >= 0) & (v <= MAX_DEVICES_PER_OBJECT) & (v == v.floor())))
        _refuse(bad, where, line_column, f"GPU resource value is not a whole number of devices 0..{MAX_DEVICES_PER_OBJECT}")
    times = series.filter(metric.is_in(_TIME_SERIES))
    if times.height:
        v = pl.col("value")
        bad = times.filter(~(v == 0) & ~v.is_between(EARLIEST_S, latest_s()).fill_null(False))
        _refuse(bad, where, line_column, "time is not a plausible unix time (before 2000, in the future, or not finite)")


def _refuse(bad: pl.DataFrame, where: str, line_column: str | None, what: str) -> None:
    if bad.height == 0:
        return
    row = bad.row(0, named=True)
    at = f"{where}:{row[line_column]}" if line_column and row.get(line_column) is not None else where
    series = describe_series({k: v for k, v in row.items() if k != line_column})
    raise BadInput(f"{at}: {series} {row['value']!r}: {what}")


def _val(s: pl.DataFrame, name: str) -> pl.Expr:
    """A label where ``<none>`` (kube-state-metrics <= 2.0) also means absent."""
    v = lab(s, name)
    return pl.when(v == NONE).then(None).otherwise(v)


@lru_cache(maxsize=1024)  # a handful of keys, asked for every pod
def sanitized_label(key: str) -> tuple[str, ...]:
    """kube-state-metrics' label name(s) for a Kubernetes label key: invalid characters become
    ``_``; since v2.0 camelCase also becomes snake_case (``capacityType`` -> ``capacity_type``)."""
    plain = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", plain).lower()
    return tuple(dict.fromkeys((snake, plain)))


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


def ksm_pods(series: pl.DataFrame, cluster: str, *, source: str = "prometheus",
             notes: dict[str, str] | None = None) -> pl.DataFrame:
    """kube-state-metrics pod series (+ ``kube_replicaset_owner``/``kube_job_owner``) -> ``pods`` rows.

    ``notes`` (optional) receives what the series could not say (keyed, so repeated batches say it once)."""
    empty = pl.DataFrame(schema=POD_COLUMNS)
    notes = notes if notes is not None else {}
    s = series.filter(pl.col("metric").str.starts_with("kube_pod_"))
    if s.height == 0:
        return empty
    s = s.with_columns(
        lab(s, "uid").cast(pl.Categorical).alias("_uid"),
        first_label(s, "exported_namespace", "namespace").cast(pl.Categorical).alias("_ns"),
        first_label(s, "exported_pod", "pod").cast(pl.Categorical).alias("_name"),
    )
    s = _uid_by_name(s, notes)
    if s.height == 0:
        return empty
    metric = pl.col("metric")
    ident = _latest_by(s, "_uid", ["_ns", "_name"])
    info = s.filter(metric == "kube_pod_info")
    info = info.with_columns(first_label(info, "exported_node", "node").alias("_node"),
                             _val(info, "priority_class").alias("_prio"))
    facts = _latest_by(info, "_uid", ["_node", "_prio"]).join(
        info.group_by("_uid").agg(pl.col("ts").max().alias("_last_seen")), on="_uid")
    owners = s.filter(metric == "kube_pod_owner")
    owners = owners.with_columns(_val(owners, "owner_kind").alias("_ok"), _val(owners, "owner_name").alias("_on"),
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
    reqs = reqs.filter(pl.col("_res").str.starts_with("nvidia_com_") | (pl.col("_res") == "cpu")) \
        .sort(["ts", "value"]).group_by(["_uid", "_c", "_res"]).agg(pl.col("value").last()) \
        .group_by(["_uid", "_res"]).agg(pl.col("value").sum())
    cpu_reqs = reqs.filter(pl.col("_res") == "cpu")
    reqs = reqs.filter(pl.col("_res") != "cpu")

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
    for r in cpu_reqs.iter_rows(named=True):  # cores, summed over the pod's containers
        if r["_uid"] in by_uid:
            by_uid[r["_uid"]]["cpu_request"] = r["value"]
    labels = _prefixed(s.filter(metric == "kube_pod_labels"), "_uid", "label_")
    annotations = _prefixed(s.filter(metric == "kube_pod_annotations"), "_uid", "annotation_")
    if s.filter(metric == "kube_pod_labels").height and not labels:
        notes["pod_labels"] = (
            "kube_pod_labels carries no labels (kube-state-metrics >= 2.0 publishes pod labels only with "
            "--metric-labels-allowlist): Volcano queue and job names of pods are unknown from metrics; they are "
            "filled from PodGroups/Jobs of a kubectl dump or the API (collect kubernetes), or run "
            f"kube-state-metrics with {ALLOWLIST_FLAG}")
    rs_owner = _owner_map(series, POD_OWNER_SERIES[0], "replicaset")
    job_owner = _owner_map(series, POD_OWNER_SERIES[1], "job_name")

    rows = []
    for uid, p in by_uid.items():
        lbl, ann = labels.get(uid, {}), annotations.get(uid, {})
        p.update(uid=uid, cluster=cluster, source=source, labels=_json(lbl), annotations=_json(ann))
        p["queue"] = lbl.get("volcano_sh_queue_name") or ann.get("scheduling_volcano_sh_queue_name")
        p["podgroup"] = ann.get("scheduling_k8s_io_group_name")
        p["vcjob"] = lbl.get("volcano_sh_job_name") or ann.get("volcano_sh_job_name")
        _requests(p, gpu_reqs.get(uid), ann, lbl)
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


def _uid_by_name(s: pl.DataFrame, notes: dict[str, str]) -> pl.DataFrame:
    """Before kube-state-metrics v2.1 only ``kube_pod_info`` has ``uid``: give every other pod
    series the uid of the ``kube_pod_info`` with the same namespace + pod seen last at or before
    it (a reused name gets the newer pod's uid from then on), else the first one after it."""
    missing = s.filter(pl.col("_uid").is_null())
    if missing.height == 0:
        return s
    info = s.filter((pl.col("metric") == "kube_pod_info") & pl.col("_uid").is_not_null()) \
        .select("_ns", "_name", pl.col("ts").alias("_t"), pl.col("_uid").alias("_u")).unique().sort("_t")
    keyed = missing.drop("_uid").with_row_index("_i").sort("ts")
    # both sides are sorted by time, hence within each (namespace, pod) group too
    back = keyed.join_asof(info, left_on="ts", right_on="_t", by=["_ns", "_name"], strategy="backward",
                           check_sortedness=False).sort("_i")
    fwd = keyed.join_asof(info, left_on="ts", right_on="_t", by=["_ns", "_name"], strategy="forward",
                          check_sortedness=False).sort("_i")
    filled = back.with_columns(pl.coalesce(pl.col("_u"), fwd["_u"]).alias("_uid")).drop("_i", "_t", "_u")
    unjoined = filled.filter(pl.col("_uid").is_null()).select("_ns", "_name").unique().height
    notes["pod_uid"] = ("pod series without `uid` (kube-state-metrics before v2.1) were joined to kube_pod_info "
                        "by namespace + pod" + (f"; {unjoined} pod(s) had no kube_pod_info and were skipped"
                                                if unjoined else ""))
    return pl.concat([s.filter(pl.col("_uid").is_not_null()), filled.filter(pl.col("_uid").is_not_null())],
                     how="diagonal_relaxed")


def _requests(p: dict[str, Any], reqs: dict[str, float] | None, ann: dict[str, str], lbl: dict[str, str]) -> None:
    """GPU requests: whole GPUs, and the MIG profile most requested (a pod asks for one kind);
    HAMi's memory and core shares as one container (the series are summed over containers)."""
    if not reqs:
        return
    p["gpu_request"] = float(reqs.get("nvidia_com_gpu", 0.0))
    named = {unsanitize_resource(k): v for k, v in reqs.items()}
    p["gpu_requests"] = _json(named)
    # the allow-listed annotations and labels the share claims read, under their Kubernetes names
    annotations = {k: ann[s] for k in (HAMI_ALLOCATED, KAI_FRACTION, KAI_MEMORY) if (s := sanitized_label(k)[0]) in ann}
    labels = {k: lbl[s] for k in ("app", KAI_GROUP) if (s := sanitized_label(k)[0]) in lbl}
    claims = pod_claims([named], annotations, labels, p.get("namespace") or "")
    p["gpu_shares"] = _json(claims) if claims else None
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


def ksm_nodes(series: pl.DataFrame, cluster: str, *, notes: dict[str, str] | None = None,
              facts: dict[str, tuple[str, int]] | None = None) -> pl.DataFrame:
    """kube-state-metrics node series -> ``nodes`` rows (labels, GPU capacity, provider id)."""
    notes = notes if notes is not None else {}
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
    label_rows = s.filter(metric == "kube_node_labels")
    labels = _prefixed(label_rows, "_node", "label_")
    cap = s.filter(metric == "kube_node_status_capacity")
    cap = cap.with_columns(lab(cap, "resource").alias("_res")).filter(pl.col("_res").str.starts_with("nvidia_com_"))
    capacity: dict[str, dict[str, float]] = {}
    for r in cap.sort("ts").group_by(["_node", "_res"]).agg(pl.col("value").last()).iter_rows(named=True):
        capacity.setdefault(r["_node"], {})[unsanitize_resource(r["_res"])] = r["value"]
    providers = {r["_node"]: r["_pid"] for r in provider.iter_rows(named=True)}
    known = {name: key for key in KNOWN_NODE_LABELS for name in sanitized_label(key)}
    rows = []
    for r in span.iter_rows(named=True):
        node, lbl, capa = r["_node"], labels.get(r["_node"], {}), capacity.get(r["_node"], {})
        facts_row = node_facts({known[k]: v for k, v in lbl.items() if k in known}, capa, facts)
        rows.append({"cluster": cluster, "node": node, "first_seen": r["first_seen"], "last_seen": r["last_seen"],
                     "provider_id": providers.get(node), "labels": _json(lbl), "capacity": _json(capa),
                     **facts_row, "zone": facts_row["zone"] or zone_of_provider(providers.get(node))})
    if label_rows.height and not any(k in known for lbl in labels.values() for k in lbl):
        notes["node_labels"] = (
            "kube_node_labels carries none of the node labels gpuinsight reads (since v2.0 kube-state-metrics "
            "publishes labels only with --metric-labels-allowlist): instance type, capacity type, node pool and GPU "
            f"product of {len(rows)} node(s) are unknown from metrics (zone is taken from the provider ID, the GPU "
            "model from DCGM's modelName); load a kubectl dump (collect kubernetes) to fill them, or run "
            f"kube-state-metrics with {ALLOWLIST_FLAG}")
    out = pl.DataFrame(rows, infer_schema_length=None)
    return out.select([(pl.col(c) if c in out.columns else pl.lit(None)).cast(t).alias(c)
                       for c, t in NODE_COLUMNS.items()]).sort("node")


def fill_node_models(nodes: pl.DataFrame, gpus: pl.DataFrame) -> pl.DataFrame:
    """A node whose labels do not say its GPU model gets the model DCGM measured on it."""
    if nodes.height == 0 or gpus.height == 0 or "gpu_model" not in gpus.columns:
        return nodes
    measured = gpus.filter(pl.col("node").is_not_null() & pl.col("gpu_model").is_not_null()) \
        .group_by("node").agg(pl.col("gpu_model").mode().sort().first().alias("_measured"))
    if measured.height == 0:
        return nodes
    return nodes.join(measured, on="node", how="left").with_columns(
        pl.coalesce("gpu_model", "_measured").alias("gpu_model")).drop("_measured")

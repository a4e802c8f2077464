"""The one transform every metrics path shares: series frames -> warehouse rows.

Prometheus range queries, OpenMetrics files and the sample fleet all produce *series frames*
(see :mod:`gpuinsight.sources.prom.frames`); this module turns them into ``gpu_samples``,
``gpus``, ``pods``, ``nodes`` and ``clusters`` rows and loads them, one transaction per batch,
with the hourly rollup and the ingest cursor in the same transaction.

A ``metric`` ending in ``:max`` is the per-step maximum of a server-side reduction
(``max_over_time(M[step])``); the plain name is the per-step average (or the raw sample).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.gpumodels import MEMORY_MIB, canonical_gpu_model
from gpuinsight.sources.base import LoadReport
from gpuinsight.sources.prom.frames import TS, describe_series, first_label, lab
from gpuinsight.sources.prom.ksm import ksm_nodes, ksm_pods
from gpuinsight.sources.prom.store import merge_spans, set_state
from gpuinsight.warehouse.db import Warehouse
from gpuinsight.warehouse.rollup import rebuild_gpu_hourly

__all__ = [
    "DCGM_METRICS",
    "SeriesBatch",
    "dcgm_samples",
    "gpu_inventory",
    "ksm_nodes",
    "ksm_pods",
    "load_series",
]

# dcgm-exporter field -> gpu_samples column. Lower-case spellings (issue #272 setups) map too.
DCGM_METRICS: dict[str, str] = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_active",
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active",
    "DCGM_FI_DEV_GPU_UTIL": "gpu_util",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
}
# The fields whose per-step max the rules need (peak activity, peak memory).
MAX_METRICS = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_FB_USED")
_MAX_COLUMN = {"gr_active": "gr_active_max", "sm_active": "sm_active_max", "fb_used_mib": "fb_used_max_mib"}


def _metric_map() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, col in DCGM_METRICS.items():
        for spelling in (name, name.lower()):
            out[spelling] = col
            if col in _MAX_COLUMN:
                out[spelling + ":max"] = _MAX_COLUMN[col]
    return out


_METRIC_TO_COLUMN = _metric_map()
_VALUE_COLUMNS = ("gr_active", "gr_active_max", "sm_active", "sm_active_max", "gpu_util",
                  "fb_used_mib", "fb_used_max_mib", "fb_free_mib", "power_w")
# natural key of gpu_samples: a GPU (or MIG instance) step per holder pod; loads replace whole
# GPU steps (the first four columns)
SAMPLE_KEY = ["cluster", "gpu_uuid", "mig_instance", "ts", "namespace", "pod"]
SAMPLE_COLUMNS: dict[str, pl.DataType] = {
    "cluster": pl.Utf8(), "ts": TS, "gpu_uuid": pl.Utf8(), "mig_instance": pl.Int32(),
    "mig_profile": pl.Utf8(), "node": pl.Utf8(), "gpu_index": pl.Int32(), "model_name": pl.Utf8(),
    "namespace": pl.Utf8(), "pod": pl.Utf8(), "container": pl.Utf8(),
    **{c: pl.Float64() for c in _VALUE_COLUMNS}, "step_s": pl.Int32(),
}
# With honor_labels off and an idle GPU there is no exported_pod, and the plain pod label is
# the target's own pod: the exporter. That GPU is unallocated, not "used by dcgm-exporter".
_EXPORTER_POD = r"^(nvidia-)?dcgm-exporter"


def dcgm_samples(
    series: pl.DataFrame, cluster: str, step_s: int, *, stats: dict[str, int] | None = None
) -> pl.DataFrame:
    """dcgm-exporter series -> ``gpu_samples`` rows (one per GPU or MIG instance per ts).

    ``stats`` (optional) receives ``nonfinite_dropped``: NaN/Inf samples that were skipped.
    """
    col = pl.col("metric").replace_strict(_METRIC_TO_COLUMN, default=None, return_dtype=pl.Utf8)
    s = series.with_columns(col.alias("_col")).filter(pl.col("_col").is_not_null())
    if s.height == 0:
        return pl.DataFrame(schema=SAMPLE_COLUMNS)
    plain_pod = lab(s, "pod")
    via_plain = first_label(s, "exported_pod", "pod_name").is_null() & plain_pod.is_not_null()
    exporter = via_plain & plain_pod.str.contains(_EXPORTER_POD)

    def attributed(exported: str, old: str, plain: str) -> pl.Expr:
        value = first_label(s, exported, old, plain)
        return pl.when(exporter).then(pl.lit("")).otherwise(value.fill_null(""))

    unidentified = first_label(s, "UUID", "uuid").is_null() | lab(s, "gpu").is_null()
    bad = s.filter(unidentified)
    if bad.height:
        row = bad.select([c for c in series.columns if c not in ("ts", "value")]).row(0, named=True)
        raise BadInput(f"DCGM series {describe_series(row)}: no `gpu` or `UUID`/`uuid` label, cannot tell which GPU it is")
    s = s.with_columns(
        first_label(s, "UUID", "uuid").alias("gpu_uuid"),
        lab(s, "gpu").alias("_gpu"),
        first_label(s, "node", "Hostname", "hostname").alias("node"),
        attributed("exported_pod", "pod_name", "pod").alias("pod"),
        attributed("exported_namespace", "pod_namespace", "namespace").alias("namespace"),
        attributed("exported_container", "container_name", "container").alias("container"),
        lab(s, "GPU_I_ID").alias("_gi"),
        lab(s, "GPU_I_PROFILE").fill_null("").alias("mig_profile"),
        lab(s, "modelName").alias("model_name"),
    )
    try:
        s = s.with_columns(
            pl.col("_gi").cast(pl.Int32).fill_null(-1).alias("mig_instance"),
            pl.col("_gpu").cast(pl.Int32).alias("gpu_index"),
        )
    except pl.exceptions.InvalidOperationError as exc:
        raise BadInput(f"DCGM series: `gpu` or `GPU_I_ID` label is not an integer ({exc})") from exc
    finite = pl.col("value").is_finite()
    if stats is not None:
        stats["nonfinite_dropped"] = stats.get("nonfinite_dropped", 0) + int(s.select((~finite).sum()).item())
    s = s.filter(finite)
    # Several pods on one GPU (time-slicing/MPS) give one series each per GPU and step: each
    # keeps its row (the GPU's figures, attributed to every pod sharing it).
    key = ["gpu_uuid", "mig_instance", "ts", "namespace", "pod"]
    aggs = [pl.col("container").sort_by("container").last()]
    aggs += [pl.col(c).drop_nulls().last() for c in ("node", "gpu_index", "model_name", "mig_profile")]
    for c in _VALUE_COLUMNS:
        vals = pl.col("value").filter(pl.col("_col") == c)
        aggs.append((vals.max() if c in _MAX_COLUMN.values() else vals.mean()).alias(c))
    return finish_samples(s.group_by(key).agg(aggs), cluster, step_s)


def sample_column(metric: str) -> str | None:
    """The ``gpu_samples`` column a series frame's ``metric`` feeds (None: not a DCGM field)."""
    return _METRIC_TO_COLUMN.get(metric)


MAX_COLUMNS = frozenset(_MAX_COLUMN.values())


def finish_samples(out: pl.DataFrame, cluster: str, step_s: int) -> pl.DataFrame:
    """Per-key reduced fields -> ``gpu_samples`` rows (fallbacks, constants, column order)."""
    gr = pl.coalesce(pl.col("gr_active"), pl.col("gpu_util") / 100.0)
    out = out.with_columns(gr.alias("gr_active")).with_columns(
        pl.coalesce("gr_active_max", "gr_active").alias("gr_active_max"),
        pl.coalesce("sm_active_max", "sm_active").alias("sm_active_max"),
        pl.coalesce("fb_used_max_mib", "fb_used_mib").alias("fb_used_max_mib"),
        pl.lit(cluster, dtype=pl.Utf8).alias("cluster"),
        pl.lit(int(step_s), dtype=pl.Int32).alias("step_s"),
    )
    return out.select([pl.col(c).cast(t) for c, t in SAMPLE_COLUMNS.items()]).sort(["ts", "gpu_uuid", "mig_instance"])


def gpu_inventory(samples: pl.DataFrame) -> pl.DataFrame:
    """``gpus`` rows from samples: one per physical GPU (MIG instances fold into their parent)."""
    if samples.height == 0:
        return pl.DataFrame()
    whole = pl.col("mig_instance") < 0
    inv = samples.group_by(["cluster", "gpu_uuid"]).agg(
        pl.col("node").sort_by("ts").drop_nulls().last(),
        pl.col("gpu_index").sort_by("ts").drop_nulls().last(),
        pl.col("model_name").sort_by("ts").drop_nulls().last(),
        (pl.col("fb_used_mib") + pl.col("fb_free_mib")).filter(whole).max().alias("memory_mib"),
        (pl.col("mig_instance") >= 0).any().alias("mig_mode"),
        pl.col("ts").min().alias("first_seen"),
        pl.col("ts").max().alias("last_seen"),
    )
    models = [canonical_gpu_model(n, m) for n, m in zip(inv["model_name"], inv["memory_mib"], strict=True)]
    memory = [m if m is not None and not math.isnan(m) and m > 0 else MEMORY_MIB.get(g or "") for m, g in
              zip(inv["memory_mib"], models, strict=True)]
    return inv.with_columns(
        pl.Series("gpu_model", models, dtype=pl.Utf8), pl.Series("memory_mib", memory, dtype=pl.Float64)
    ).sort("gpu_uuid")


@dataclass
class SeriesBatch:
    """One unit of loading: everything collected for one time chunk (all shards, all metrics).

    ``end`` is the last evaluation timestamp the batch is complete up to: the cursor moves
    there when the batch commits.
    """

    series: pl.DataFrame
    step_s: int
    start: datetime | None = None
    end: datetime | None = None
    notes: list[str] = field(default_factory=list)
    # gpu_samples rows built by the caller (the Prometheus path decodes DCGM answers straight
    # into rows); ``series`` then holds only what the other tables need
    samples: pl.DataFrame | None = None
    nonfinite_dropped: int = 0
    pods: pl.DataFrame | None = None  # likewise ksm_rows(series), if the caller made them
    nodes: pl.DataFrame | None = None
    # False: the batch is not known complete (a partial answer), so the cursor stays put
    advance_cursor: bool = True


def ksm_rows(series: pl.DataFrame, cluster: str, source: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``pods`` and ``nodes`` rows from a batch's kube-state-metrics series."""
    return ksm_pods(series, cluster, source=source.split(":")[0]), ksm_nodes(series, cluster)


def load_series(
    wh: Warehouse,
    cfg: Config,
    series_batches: Iterable[SeriesBatch | pl.DataFrame],
    *,
    source: str,
    scope: str,
    window: tuple[datetime, datetime] | None,
    step_s: int | None = None,
    details: dict[str, object] | None = None,
    on_commit: Callable[[SeriesBatch, dict[str, int]], None] | None = None,
) -> LoadReport:
    """Transform and load batches; each batch is one transaction (data, rollup and cursor).

    A crash between batches leaves every committed batch and its cursor; a crash inside one
    leaves nothing of it. ``ingest_state`` says ``running`` until the last batch commits.
    """
    report = LoadReport(source=source, window=window)
    run_id = uuid.uuid4().hex[:12]
    info = {"window": [t.isoformat() if t else None for t in window] if window else None, **(details or {})}
    set_state(wh, source, scope, status="running", details=info, run_id=run_id)
    nonfinite = 0
    total = 0
    held = False
    try:
        for item in series_batches:
            batch = item if isinstance(item, SeriesBatch) else SeriesBatch(item, int(step_s or 60))
            report.notes.extend(batch.notes)
            held = held or not batch.advance_cursor
            stats: dict[str, int] = {}
            rows = _load_one(wh, cfg, batch, source=source, scope=scope, stats=stats, info=info,
                             rows_before=total)
            nonfinite += stats.get("nonfinite_dropped", 0)
            for table, n in rows.items():
                report.add(table, n)
            total += rows.get("gpu_samples", 0)
            if on_commit is not None:
                on_commit(batch, rows)
    except BaseException as exc:
        set_state(wh, source, scope, status="failed", details={**info, "error": type(exc).__name__})
        raise
    if nonfinite:
        report.notes.append(f"skipped {nonfinite:,} NaN/Inf samples")
    set_state(wh, source, scope, status="partial" if held else "complete",
              details={**info, "notes": report.notes} if report.notes else info, rows_loaded=total)
    return report


def _load_one(
    wh: Warehouse, cfg: Config, batch: SeriesBatch, *, source: str, scope: str,
    stats: dict[str, int], info: dict[str, object], rows_before: int,
) -> dict[str, int]:
    cluster = cfg.cluster
    if batch.samples is None:
        samples = dcgm_samples(batch.series, cluster, batch.step_s, stats=stats)
    else:
        samples = batch.samples
        stats["nonfinite_dropped"] = batch.nonfinite_dropped
    gpus = gpu_inventory(samples)
    pods, nodes = (batch.pods, batch.nodes) if batch.pods is not None and batch.nodes is not None else \
        ksm_rows(batch.series, cluster, source)
    seen = [f for f in (samples.select("ts"), pods.select(pl.col("last_seen").alias("ts")) if pods.height else None,
                        nodes.select(pl.col("last_seen").alias("ts")) if nodes.height else None) if f is not None]
    ts_all = pl.concat(seen)["ts"].drop_nulls() if seen else pl.Series("ts", [], dtype=TS)
    rows: dict[str, int] = {}
    with wh.transaction() as con:
        rows["gpu_samples"] = wh.merge("gpu_samples", samples, SAMPLE_KEY, con=con, replace_on=SAMPLE_KEY[:4])
        rows["gpus"] = merge_spans(wh, con, "gpus", gpus, ["cluster", "gpu_uuid"])
        rows["pods"] = merge_spans(wh, con, "pods", pods, ["cluster", "uid"])
        rows["nodes"] = merge_spans(wh, con, "nodes", nodes, ["cluster", "node"])
        if ts_all.len():
            clusters = pl.DataFrame({"cluster": [cluster], "first_seen": [ts_all.min()], "last_seen": [ts_all.max()]},
                                    schema={"cluster": pl.Utf8, "first_seen": TS, "last_seen": TS})
            merge_spans(wh, con, "clusters", clusters, ["cluster"])
        if samples.height:
            rows["gpu_hourly"] = rebuild_gpu_hourly(con, samples)
        cursor = (batch.end or (ts_all.max() if ts_all.len() else None)) if batch.advance_cursor else None
        set_state(wh, source, scope, status="running", cursor=cursor, details=info,
                  rows_loaded=rows_before + rows["gpu_samples"], con=con)
    return rows

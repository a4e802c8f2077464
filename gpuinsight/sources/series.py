"""The one transform every metrics path shares: series frames -> warehouse rows.

Prometheus range queries, OpenMetrics files and the sample fleet all produce *series frames*
(see :mod:`gpuinsight.sources.prom.frames`); this module turns them into ``gpu_samples``,
``gpus``, ``pods``, ``nodes`` and ``clusters`` rows and loads them, one transaction per batch,
with the hourly rollup and the ingest cursor in the same transaction.

A ``metric`` ending in ``:max`` (``:min``) is the per-step maximum (minimum) of a server-side
reduction (``max_over_time(M[step])``); the plain name is the per-step average (or the raw sample).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.gpumodels import MEMORY_MIB, canonical_gpu_model
from gpuinsight.sources.base import LoadReport
from gpuinsight.sources.cadvisor import KEY as CPU_KEY
from gpuinsight.sources.cadvisor import pod_cpu_samples
from gpuinsight.sources.dcgm import (
    BY_SPELLING,
    DCGM_LIKE_PATTERN,
    DROPPED_SUFFIX,
    FIELDS,
    MAX_FB_MIB,
    MAX_POWER_W,
    MAX_SUFFIX,
    MIN_SUFFIX,
    POWER_LIMIT_W,
    Dropped,
    base_name,
    column_bounds,
    column_map,
    field_of,
    is_dcgm_like,
    memory_ceiling,
    power_ceiling,
    reading_class,
)
from gpuinsight.sources.energy import KEY as ENERGY_KEY
from gpuinsight.sources.energy import SPELLINGS as ENERGY_SPELLINGS
from gpuinsight.sources.energy import gpu_energy_samples
from gpuinsight.sources.gpu_nodes import DEFAULT_NODE_LABELS, EXPORTER_POD_INFO, NodeDirectory, resolve_nodes
from gpuinsight.sources.hami_metrics import METRICS as HAMI_METRICS
from gpuinsight.sources.hami_metrics import hami_samples
from gpuinsight.sources.kueue_metrics import KEY as KUEUE_KEY
from gpuinsight.sources.kueue_metrics import METRICS as KUEUE_METRICS
from gpuinsight.sources.kueue_metrics import kueue_quota_samples
from gpuinsight.sources.prices import catalog_gpu_facts
from gpuinsight.sources.prom.frames import TS, describe_series, first_label, lab
from gpuinsight.sources.prom.ksm import (
    CHECKED_SERIES,
    POD_OWNER_SERIES,
    check_ksm_values,
    fill_node_models,
    ksm_nodes,
    ksm_pods,
)
from gpuinsight.sources.prom.store import merge_spans, set_state
from gpuinsight.sources.serving import CONFIG_KEY as SERVING_CONFIG_KEY
from gpuinsight.sources.serving import KEY as SERVING_KEY
from gpuinsight.sources.serving import is_serving, serving_config, serving_samples
from gpuinsight.warehouse.db import Warehouse
from gpuinsight.warehouse.pending import note_hours
from gpuinsight.warehouse.rollup import rebuild_rollups, rollup_scope
from gpuinsight.warehouse.samples import (
    LABEL_ID,
    LABEL_TYPES,
    MEASURE_TYPES,
    NATURAL_KEY,
    SampleRows,
    store_sample_rows,
)

__all__ = [
    "DCGM_METRICS",
    "LINE",
    "SeriesBatch",
    "TransformStats",
    "dcgm_samples",
    "gpu_inventory",
    "ksm_nodes",
    "ksm_pods",
    "load_series",
]

# dcgm-exporter field -> gpu_samples column, every generation's spelling (see sources/dcgm.py).
DCGM_METRICS: dict[str, str] = {f.name: f.column for f in FIELDS}
# The fields whose per-step max the rules need (peak activity, peak memory).
MAX_METRICS = tuple(f.name for f in FIELDS if f.max_column)
_METRIC_TO_COLUMN = column_map()
MAX_COLUMNS = frozenset(f.max_column for f in FIELDS if f.max_column)
MIN_COLUMNS = frozenset(f.min_column for f in FIELDS if f.min_column)
_VALUE_COLUMNS = ("gr_active", "gr_active_max", "sm_active", "sm_active_max", "gpu_util",
                  "fb_used_mib", "fb_used_max_mib", "fb_free_mib", "power_w",
                  # migration 013: the input-starved and checkpoint signals
                  "gr_active_min", "pcie_rx_bps", "pcie_tx_bps", "pcie_tx_max_bps", "nvlink_rx_bps")
# natural key of gpu_samples: a GPU (or MIG instance) step per holder pod; loads replace whole
# GPU steps (the first four columns)
SAMPLE_KEY = list(NATURAL_KEY)
SAMPLE_COLUMNS: dict[str, pl.DataType] = {
    "cluster": pl.Utf8(), "ts": TS, "gpu_uuid": pl.Utf8(), "mig_instance": pl.Int32(),
    "mig_profile": pl.Utf8(), "node": pl.Utf8(), "gpu_index": pl.Int32(), "model_name": pl.Utf8(),
    "namespace": pl.Utf8(), "pod": pl.Utf8(), "container": pl.Utf8(),
    **{c: pl.Float64() for c in _VALUE_COLUMNS}, "step_s": pl.Int32(),
}
# dcgm_samples() also returns what the exporter said about the node of a GPU it could not place
# (not a gpu_samples column; it goes to gpus.node_hint).
HINT = "node_hint"
# Row attributes taken from the last series (in input order) that has them.
LAST_NON_NULL = ("node", HINT, "gpu_index", "model_name", "mig_profile")
_IDENTITY_TYPES: dict[str, pl.DataType] = {
    "gpu_uuid": pl.Utf8(), "mig_instance": pl.Int32(), "namespace": pl.Utf8(), "pod": pl.Utf8(),
    "container": pl.Utf8(), "node": pl.Utf8(), HINT: pl.Utf8(), "gpu_index": pl.Int32(), "model_name": pl.Utf8(),
    "mig_profile": pl.Utf8(),
}
IDENTITY_COLUMNS = tuple(_IDENTITY_TYPES)
# With honor_labels off and an idle GPU there is no exported_pod, and the plain pod label is
# the target's own pod: the exporter. That GPU is unallocated, not "used by dcgm-exporter".
_EXPORTER_POD = r"^(nvidia-)?dcgm-exporter"
_INT = r"^[0-9]{1,6}$"
LINE = "@line"  # source line of a sample, kept by the file parser for messages (never a label)


@dataclass
class TransformStats:
    """What the transform dropped or could not place, for the load notes (summed over batches)."""

    dropped: Dropped = field(default_factory=lambda: Dropped({}))
    unidentified_series: set[tuple[object, ...]] = field(default_factory=set)  # skipped: no usable GPU identity
    unidentified_example: str | None = None
    unidentified_line: int | None = None  # the example's line in a file: the earliest one is kept
    dcgm_like: set[str] = field(default_factory=set)   # DCGM-family metric names seen
    mapped: set[str] = field(default_factory=set)      # ... of which gpuinsight reads these
    dcgm_like_series: int = 0
    mapped_series: int = 0
    unmatched: dict[str, str | None] = field(default_factory=dict)  # GPU UUID -> what the exporter said
    matched: set[str] = field(default_factory=set)
    ksm_notes: dict[str, str] = field(default_factory=dict)  # what kube-state-metrics could not say, by topic
    cpu_dropped: dict[str, int] = field(default_factory=dict)  # cAdvisor readings that are not CPU use
    serving_notes: dict[str, int] = field(default_factory=dict)  # serving series skipped or readings dropped
    energy_dropped: dict[str, int] = field(default_factory=dict)  # energy counter resets and glitches
    origin: str | None = None   # the file the series came from, for locations in notes

    def notes(self) -> list[str]:
        out = self.dropped.notes() + list(self.ksm_notes.values())
        if any(self.cpu_dropped.values()):
            out.append("cAdvisor container CPU: dropped " + ", ".join(
                f"{n:,} {what}" for what, n in sorted(self.cpu_dropped.items()) if n)
                + " (negative, not finite or above any machine's cores; a reset restarts the count)")
        if any(self.serving_notes.values()):
            out.append("serving metrics: " + ", ".join(f"{n:,} {what}" for what, n in sorted(self.serving_notes.items())
                                                       if n))
        if any(self.energy_dropped.values()):
            out.append("DCGM energy counter: " + ", ".join(f"{n:,} {what}" for what, n in
                                                          sorted(self.energy_dropped.items()) if n)
                       + " (a step above the GPU's power ceiling is dropped; a reset restarts the count)")
        if self.unidentified_series:
            where = f"{self.origin}:" if self.origin else ""
            example = (self.unidentified_example or "").replace("line ", where, 1) if where else \
                self.unidentified_example
            out.append(f"skipped {len(self.unidentified_series):,} DCGM series without a usable GPU identity (`gpu` and "
                       f"`UUID`/`uuid` labels), e.g. {example}")
        unread = sorted(self.dcgm_like - self.mapped)
        if self.dcgm_like_series:  # files; a server is asked for its names instead (prom/generations.py)
            series = f" ({self.dcgm_like_series:,} series, {self.mapped_series:,} mapped)"
            out.append(f"DCGM-like metrics: {len(self.dcgm_like)} seen, {len(self.mapped)} mapped{series}"
                       + (f"; not read: {', '.join(unread[:12])}" + (" ..." if len(unread) > 12 else "")
                          if unread else ""))
        if self.unmatched:
            hints = sorted({h or "(no node label)" for h in self.unmatched.values()})
            out.append(f"{len(self.unmatched)} GPU(s) measured but not matched to a known node (exporter said: "
                       f"{', '.join(hints[:8])}{' ...' if len(hints) > 8 else ''}); they are listed by "
                       "`gpuinsight query unmatched_gpus` and counted in fleet_summary")
        return out


def _location(row: dict[str, object]) -> str:
    where = f"line {row[LINE]}: " if row.get(LINE) is not None else ""
    labels = {k: row[k] for k in sorted(row) if k not in (LINE, "_col", "_field", "metric")}
    return where + describe_series({"metric": row.get("metric"), **labels})


def dcgm_samples(
    series: pl.DataFrame, cluster: str, step_s: int, *, stats: TransformStats | None = None,
    nodes: NodeDirectory | None = None, node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS,
) -> pl.DataFrame:
    """dcgm-exporter series -> ``gpu_samples`` rows (one per GPU or MIG instance per ts), plus
    :data:`HINT`. Readings that are not measurements and series without a GPU identity are
    dropped and counted in ``stats``; ``nodes`` is the evidence for node resolution (default:
    the kube-state-metrics series in ``series`` itself)."""
    stats = stats if stats is not None else TransformStats()
    s = dcgm_identified(series, stats, nodes if nodes is not None else NodeDirectory.from_series(series), node_labels)
    s = _drop_non_readings(s, stats)
    # Several pods on one GPU (time-slicing/MPS) give one series each per GPU and step: each
    # keeps its row (the GPU's figures, attributed to every pod sharing it).
    key = ["gpu_uuid", "mig_instance", "ts", "namespace", "pod"]
    aggs = [pl.col("container").sort_by("container").last()]
    aggs += [pl.col(c).drop_nulls().last() for c in LAST_NON_NULL]
    for c in _VALUE_COLUMNS:
        vals = pl.col("value").filter(pl.col("_col") == c)
        aggs.append(getattr(vals, reduction(c))().alias(c))
    return finish_samples(s.group_by(key).agg(aggs), cluster, step_s, stats)


def dcgm_identified(series: pl.DataFrame, stats: TransformStats, nodes: NodeDirectory,
                    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS) -> pl.DataFrame:
    """The mapped DCGM rows of ``series`` with their identity (:data:`IDENTITY_COLUMNS`) and
    ``_col`` (the ``gpu_samples`` column they feed), in input order; series without a usable
    GPU identity are dropped and counted. The columnar Prometheus path calls it with one row
    per series (``prom/columnar.py``)."""
    names = series.get_column("metric").unique().to_list() if series.height else []
    stats.dcgm_like |= {base_name(n) for n in names if is_dcgm_like(n) and DROPPED_SUFFIX not in n}
    col = pl.col("metric").replace_strict(_METRIC_TO_COLUMN, default=None, return_dtype=pl.Utf8)
    s = series.with_columns(col.alias("_col")).filter(pl.col("_col").is_not_null())
    stats.mapped |= {base_name(n) for n in names if n in _METRIC_TO_COLUMN or n in ENERGY_SPELLINGS}
    _count_series(series, s, stats)
    if s.height:
        s = _drop_unidentified(s, stats)
    if s.height == 0:
        return s.select("ts", "value", "metric", "_col").with_columns(
            [pl.lit(None, dtype=t).alias(c) for c, t in _IDENTITY_TYPES.items()])
    placed = resolve_nodes(s, nodes, node_labels)
    plain_pod = lab(s, "pod")
    via_plain = first_label(s, "exported_pod", "pod_name").is_null() & plain_pod.is_not_null()
    exporter = via_plain & plain_pod.str.contains(_EXPORTER_POD)

    def attributed(exported: str, old: str, plain: str) -> pl.Expr:
        value = first_label(s, exported, old, plain)
        return pl.when(exporter).then(pl.lit("")).otherwise(value.fill_null(""))

    return s.with_columns(
        first_label(s, "UUID", "uuid").alias("gpu_uuid"),
        placed["node"].alias("node"), placed["node_hint"].alias(HINT),
        attributed("exported_pod", "pod_name", "pod").alias("pod"),
        attributed("exported_namespace", "pod_namespace", "namespace").alias("namespace"),
        attributed("exported_container", "container_name", "container").alias("container"),
        lab(s, "GPU_I_ID").cast(pl.Int32).fill_null(-1).alias("mig_instance"),
        lab(s, "gpu").cast(pl.Int32).alias("gpu_index"),
        lab(s, "GPU_I_PROFILE").fill_null("").alias("mig_profile"),
        lab(s, "modelName").alias("model_name"),
    )


def sample_column(metric: str) -> str | None:
    """The ``gpu_samples`` column a series frame's ``metric`` feeds (None: not a DCGM field)."""
    return _METRIC_TO_COLUMN.get(metric)


def reduction(column: str) -> str:
    """How the readings of one key and step make a ``gpu_samples`` column: max, min or mean."""
    return "max" if column in MAX_COLUMNS else "min" if column in MIN_COLUMNS else "mean"


def _measure_fallbacks(frame: pl.DataFrame, step_s: int) -> pl.DataFrame:
    """A field a generation does not publish, from the one that stands for it (``gpu_util`` for
    GR activity, a per-step average for its missing extremes), and the step."""
    gr = pl.coalesce(pl.col("gr_active"), pl.col("gpu_util") / 100.0)
    return frame.with_columns(gr.alias("gr_active")).with_columns(
        pl.coalesce("gr_active_max", "gr_active").alias("gr_active_max"),
        pl.coalesce("gr_active_min", "gr_active").alias("gr_active_min"),
        pl.coalesce("pcie_tx_max_bps", "pcie_tx_bps").alias("pcie_tx_max_bps"),
        pl.coalesce("sm_active_max", "sm_active").alias("sm_active_max"),
        pl.coalesce("fb_used_max_mib", "fb_used_mib").alias("fb_used_max_mib"),
        pl.lit(int(step_s), dtype=pl.Int32).alias("step_s"),
    )


def _note_placements(labels: pl.DataFrame, stats: TransformStats) -> None:
    """GPUs placed on a node or not (``gpu_uuid``, ``node``, :data:`HINT` of rows or label sets)."""
    placed_gpus = labels.group_by("gpu_uuid").agg(pl.col("node").is_not_null().any().alias("placed"),
                                                  pl.col(HINT).drop_nulls().last())
    for uuid_, is_placed, hint in placed_gpus.iter_rows():
        if is_placed:
            stats.matched.add(uuid_)
            stats.unmatched.pop(uuid_, None)
        elif uuid_ not in stats.matched:
            stats.unmatched[uuid_] = hint


def finish_samples(out: pl.DataFrame, cluster: str, step_s: int, stats: TransformStats) -> pl.DataFrame:
    """Per-key reduced fields -> ``gpu_samples`` rows plus :data:`HINT` (fallbacks, constants,
    column order); GPUs placed on a node or not are recorded in ``stats``."""
    out = _measure_fallbacks(out, step_s).with_columns(pl.lit(cluster, dtype=pl.Utf8).alias("cluster"))
    out = out.select([pl.col(c).cast(t) for c, t in {**SAMPLE_COLUMNS, HINT: pl.Utf8()}.items()])
    _note_placements(out, stats)
    return out.sort(["ts", "gpu_uuid", "mig_instance"])


def finish_sample_rows(samples: SampleRows, cluster: str, step_s: int, stats: TransformStats) -> SampleRows:
    """:func:`finish_samples` for a batch kept as label sets and rows (:class:`SampleRows`: the
    columnar Prometheus path): the same measures, the labels (with :data:`HINT`) once per set."""
    rows = _measure_fallbacks(samples.rows, step_s).select(
        pl.col(LABEL_ID).cast(pl.UInt32), pl.col("ts").cast(TS), *[pl.col(c).cast(t) for c, t in MEASURE_TYPES.items()])
    labels = samples.labels.with_columns(pl.lit(cluster, dtype=pl.Utf8).alias("cluster")).select(
        [pl.col(c).cast(t) for c, t in {**LABEL_TYPES, HINT: pl.Utf8()}.items()])
    _note_placements(labels, stats)
    return SampleRows(labels, rows)


def _count_series(series: pl.DataFrame, mapped: pl.DataFrame, stats: TransformStats) -> None:
    """Distinct DCGM-like and mapped series (label sets), for files that hold raw scrapes."""
    if LINE not in series.columns:
        return
    labels = [c for c in series.columns if c not in ("ts", "value", LINE)]
    like = series.filter(pl.col("metric").str.contains(DCGM_LIKE_PATTERN))
    stats.dcgm_like_series += like.select(labels).unique().height
    stats.mapped_series += mapped.select(labels).unique().height


def _drop_unidentified(s: pl.DataFrame, stats: TransformStats) -> pl.DataFrame:
    """A DCGM series needs ``gpu`` (an integer index) and a UUID; a MIG ``GPU_I_ID`` must be an
    integer. Other series (NVSwitch, CPU, link entities share the names) are skipped and counted."""
    ok = (first_label(s, "UUID", "uuid").is_not_null() & lab(s, "gpu").str.contains(_INT).fill_null(False)
          & (lab(s, "GPU_I_ID").is_null() | lab(s, "GPU_I_ID").str.contains(_INT).fill_null(False)))
    bad = s.filter(~ok)
    if bad.height == 0:
        return s
    labels = [c for c in s.columns if c not in ("ts", "value", "_col", LINE)]
    first = bad.sort(LINE if LINE in bad.columns else "ts").unique(labels, keep="first", maintain_order=True)
    # a series once, whatever the batches and their columns
    stats.unidentified_series.update(tuple(sorted((k, v) for k, v in r.items() if v is not None))
                                     for r in first.select(labels).iter_rows(named=True))
    row = first.row(0, named=True)
    line = row.get(LINE)
    earlier = line is not None and stats.unidentified_line is not None and line < stats.unidentified_line
    if stats.unidentified_example is None or earlier:  # a file's series come in several parts
        stats.unidentified_example = _location({k: v for k, v in row.items() if k != "ts" and k != "value"})
        stats.unidentified_line = line
    return s.filter(ok)


def _drop_non_readings(s: pl.DataFrame, stats: TransformStats) -> pl.DataFrame:
    """Drop NaN/Inf, DCGM blank sentinels and readings outside the field's physical range."""
    lo, hi = reading_bounds(s)
    s = s.with_columns(reading_class(pl.col("value"), lo, hi).alias("_why"))
    count_dropped(s.filter(pl.col("_why").is_not_null()), stats)
    return s.filter(pl.col("_why").is_null()).drop("_why")


def reading_bounds(s: pl.DataFrame) -> tuple[pl.Expr, pl.Expr]:
    """The valid range of each row's reading: the field's (``_col``), memory and power capped
    by the GPU model's (``model_name``, as dcgm-exporter spells it)."""
    models = {m: canonical_gpu_model(m) for m in s.get_column("model_name").unique().to_list() if m}
    model = pl.col("model_name").replace_strict(models, default=None, return_dtype=pl.Utf8)
    bounds = column_bounds()
    lo = pl.col("_col").replace_strict({c: b[0] for c, b in bounds.items()}, default=None, return_dtype=pl.Float64)
    hi = pl.col("_col").replace_strict({c: b[1] for c, b in bounds.items()}, default=None, return_dtype=pl.Float64)
    mem = model.replace_strict({m: memory_ceiling(m) for m in POWER_LIMIT_W.keys() | set(models.values())
                                if m}, default=MAX_FB_MIB, return_dtype=pl.Float64)
    power = model.replace_strict({m: power_ceiling(m) for m in POWER_LIMIT_W.keys() | set(models.values())
                                  if m}, default=MAX_POWER_W, return_dtype=pl.Float64)
    hi = (pl.when(pl.col("_col").is_in(["fb_used_mib", "fb_used_max_mib", "fb_free_mib"])).then(pl.min_horizontal(hi, mem))
          .when(pl.col("_col") == "power_w").then(pl.min_horizontal(hi, power)).otherwise(hi))
    return lo, hi


def count_dropped(bad: pl.DataFrame, stats: TransformStats) -> None:
    """Count dropped readings (``metric``, ``_why``) per field under its canonical name."""
    if bad.height == 0:
        return
    canon = {spelling: f.name for spelling, f in BY_SPELLING.items()}
    counts = bad.group_by(pl.col("metric").str.strip_suffix(MAX_SUFFIX).str.strip_suffix(MIN_SUFFIX), "_why").len()
    for name, why, n in counts.iter_rows():
        key = (canon.get(name, name), why)
        stats.dropped.counts[key] = stats.dropped.counts.get(key, 0) + int(n)


def server_dropped(series: pl.DataFrame, stats: TransformStats) -> None:
    """Counts of readings the Prometheus server dropped (``NAME:dropped`` rows, see promql)."""
    rows = series.filter(pl.col("metric").str.ends_with(DROPPED_SUFFIX))
    for name, n in rows.group_by("metric").agg(pl.col("value").sum()).iter_rows():
        f = field_of(name.removesuffix(DROPPED_SUFFIX))
        if f is not None and n:
            key = (f.name, "server")
            stats.dropped.counts[key] = stats.dropped.counts.get(key, 0) + int(n)


def gpu_inventory(samples: pl.DataFrame | SampleRows) -> pl.DataFrame:
    """``gpus`` rows from samples: one per physical GPU (MIG instances fold into their parent).

    Of :class:`SampleRows`, each label set's rows are reduced first (their first and last time,
    the greatest memory), then the label sets: the same figures, a row per label set."""
    if samples.height == 0:
        return pl.DataFrame()
    if isinstance(samples, SampleRows):
        per_set = samples.rows.group_by(LABEL_ID).agg(
            pl.col("ts").min().alias("_first"), pl.col("ts").max().alias("ts"),
            (pl.col("fb_used_mib") + pl.col("fb_free_mib")).max().alias("_memory"))
        frame = samples.labels.with_row_index(LABEL_ID).join(per_set, on=LABEL_ID)
    else:
        frame = samples.with_columns(pl.col("ts").alias("_first"),
                                     (pl.col("fb_used_mib") + pl.col("fb_free_mib")).alias("_memory"))
    whole = pl.col("mig_instance") < 0
    hint = [pl.col(HINT).sort_by("ts").drop_nulls().last()] if HINT in frame.columns else []
    inv = frame.group_by(["cluster", "gpu_uuid"]).agg(
        pl.col("node").sort_by("ts").drop_nulls().last(),
        *hint,
        pl.col("gpu_index").sort_by("ts").drop_nulls().last(),
        pl.col("model_name").sort_by("ts").drop_nulls().last(),
        pl.col("_memory").filter(whole).max().alias("memory_mib"),
        (pl.col("mig_instance") >= 0).any().alias("mig_mode"),
        pl.col("_first").min().alias("first_seen"),
        pl.col("ts").max().alias("last_seen"),
    )
    if hint:  # a GPU placed on a node needs no hint (a later chunk may have placed it)
        inv = inv.with_columns(pl.when(pl.col("node").is_null()).then(pl.col(HINT)).alias(HINT))
    models = [canonical_gpu_model(n, m) for n, m in zip(inv["model_name"], inv["memory_mib"], strict=True)]
    memory = [m if m is not None and not math.isnan(m) and m > 0 else MEMORY_MIB.get(g or "") for m, g in
              zip(inv["memory_mib"], models, strict=True)]
    return inv.with_columns(
        pl.Series("gpu_model", models, dtype=pl.Utf8), pl.Series("memory_mib", memory, dtype=pl.Float64)
    ).sort("gpu_uuid")


def transform_groups(names: Iterable[str]) -> dict[str, frozenset[str]]:
    """The metric names of ``names`` each transform reads (a name may be in several groups), so
    that every path hands each transform a frame of only its own series:

    * ``checked``: the declarations :func:`check_ksm_values` checks;
    * ``placements``: what :meth:`NodeDirectory.add_series` reads (nodes, pod placements);
    * ``server_dropped``: the counts of readings a server dropped (:func:`server_dropped`);
    * ``dcgm``: what :func:`dcgm_samples` counts and makes rows of;
    * ``pods`` / ``nodes``: what :func:`ksm_pods` / :func:`ksm_nodes` read;
    * ``rest``: neither DCGM fields nor kube-state-metrics (cAdvisor, Kueue, HAMi, serving,
      DCGM energy), read by the transforms of :func:`_load_one`.
    """
    names = list(dict.fromkeys(names))
    mapped = {n for n in names if sample_column(n) is not None}
    kube = {n for n in names if n.startswith("kube_")}
    where: dict[str, Callable[[str], bool]] = {
        "checked": lambda n: n in CHECKED_SERIES,
        "placements": lambda n: n.startswith("kube_node_") or n in ("kube_pod_info", EXPORTER_POD_INFO),
        "server_dropped": lambda n: n.endswith(DROPPED_SUFFIX),
        "dcgm": lambda n: is_dcgm_like(n) or n in mapped,
        "pods": lambda n: n.startswith("kube_pod_") or n in POD_OWNER_SERIES,
        "nodes": lambda n: n.startswith("kube_node_"),
        "rest": lambda n: n not in mapped and n not in kube,
    }
    return {group: frozenset(filter(pred, names)) for group, pred in where.items()}


def validate_series(series: pl.DataFrame, where: str) -> None:
    """Everything that refuses a whole input, checked before any of it is written: declarations
    out of bounds (:func:`check_ksm_values`) and input gpuinsight would load nothing from."""
    check_ksm_values(series, where, LINE if LINE in series.columns else None)
    check_maps_something(series, where)


def check_maps_something(series: pl.DataFrame, where: str) -> None:
    """Refuse input gpuinsight would load nothing from (e.g. an exporter generation it cannot
    map): an empty success hides the problem."""
    names = set(series.get_column("metric").unique().to_list()) if series.height else set()
    dcgm_like = sorted(n for n in names if is_dcgm_like(n))
    mapped = [n for n in dcgm_like if n in _METRIC_TO_COLUMN]
    if dcgm_like and not mapped:
        supported = ", ".join(f.name for f in FIELDS)
        raise BadInput(f"{where}: {len(dcgm_like)} DCGM-like metric(s) ({', '.join(dcgm_like[:6])}"
                       f"{' ...' if len(dcgm_like) > 6 else ''}) but none gpuinsight reads; it maps {supported} "
                       "and their lower-case and dcgm-exporter 1.x names")
    if not mapped and not any(n.startswith(("kube_pod_", "kube_node_")) or n in KUEUE_METRICS or n in HAMI_METRICS
                              or is_serving(n) for n in names):
        raise BadInput(f"{where}: no dcgm-exporter, kube-state-metrics or inference-server series gpuinsight reads "
                       f"({len(names)} metric name(s) seen)")


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
    # gpu_samples rows (with HINT) built by the caller (the Prometheus path decodes DCGM answers
    # straight into label sets and rows); ``series`` then holds only what the other tables need
    samples: pl.DataFrame | SampleRows | None = None
    pods: pl.DataFrame | None = None  # likewise ksm_rows(series), if the caller made them
    nodes: pl.DataFrame | None = None
    # False: the batch is not known complete (a partial answer), so the cursor stays put
    advance_cursor: bool = True


def with_hami_rows(samples: pl.DataFrame | SampleRows, batch: SeriesBatch, cluster: str,
                   directory: NodeDirectory) -> SampleRows:
    """``samples`` plus the rows HAMi's per-container series give (sources/hami_metrics.py) for the
    GPU, pod and time dcgm-exporter gave none (it sees HAMi's shared devices without pods); the
    node of a HAMi row is its pod's, else the one dcgm-exporter placed the GPU on."""
    hami = hami_samples(batch.series, cluster, batch.step_s, {**SAMPLE_COLUMNS, HINT: pl.Utf8()},
                        directory.pod_node)
    if hami.height == 0:
        return samples if isinstance(samples, SampleRows) else SampleRows.from_wide(samples)
    if isinstance(samples, SampleRows):  # rare (HAMi's series): the rows in the wide shape
        samples = samples.wide().select([pl.col(c).cast(t) for c, t in {**SAMPLE_COLUMNS, HINT: pl.Utf8()}.items()])
    key = ["gpu_uuid", "ts", "namespace", "pod"]
    hami = hami.join(samples.select(key), on=key, how="anti")
    placed = samples.filter(pl.col("node").is_not_null()).group_by("gpu_uuid").agg(pl.col("node").last().alias("_n"))
    hami = hami.join(placed, on="gpu_uuid", how="left").with_columns(
        pl.coalesce("node", "_n").alias("node")).drop("_n")
    return SampleRows.from_wide(pl.concat([samples, hami.select(samples.columns)], how="vertical_relaxed")
                                .sort(["ts", "gpu_uuid", "mig_instance"]))


def ksm_rows(series: pl.DataFrame, cluster: str, source: str, stats: TransformStats,
             facts: dict[str, tuple[str, int]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``pods`` and ``nodes`` rows from a batch's kube-state-metrics series (``facts``: the price
    catalog's GPU facts, :func:`gpu_facts`); node models still to fill from the GPUs."""
    return (ksm_pods(series, cluster, source=source.split(":")[0], notes=stats.ksm_notes),
            ksm_nodes(series, cluster, notes=stats.ksm_notes, facts=facts))


def gpu_facts(wh: Warehouse) -> dict[str, tuple[str, int]]:
    with wh._lock:
        return catalog_gpu_facts(wh.con)


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
    origin: str | None = None,
    stats: TransformStats | None = None,
    directory: NodeDirectory | None = None,
) -> LoadReport:
    """Transform and load batches; each batch is one transaction (data, rollup and cursor).

    ``stats`` and ``directory``: given by a caller that makes ``gpu_samples`` rows itself
    (:attr:`SeriesBatch.samples`) with the same counts and node evidence; ``directory`` gets
    the warehouse's nodes and pods before the first batch is asked for.

    A crash between batches leaves every committed batch and its cursor; a crash inside one
    leaves nothing of it. ``ingest_state`` says ``running`` until the last batch commits. In a
    write session (:mod:`gpuinsight.warehouse.writes`) the batches share its transaction; each
    one before the last is committed when the next arrives (:meth:`Warehouse.commit_so_far`), so
    a single-batch load is one transaction with the model rebuild.
    """
    report = LoadReport(source=source, window=window)
    run_id = uuid.uuid4().hex[:12]
    info = {"window": [t.isoformat() if t else None for t in window] if window else None, **(details or {})}
    set_state(wh, source, scope, status="running", details=info, run_id=run_id)
    stats = stats if stats is not None else TransformStats(origin=origin)
    # what the warehouse knows of nodes and pod placements, read once; each batch adds its own
    directory = directory if directory is not None else NodeDirectory()
    with wh._lock:
        directory.extend_from_warehouse(wh.con, cfg.cluster)
    total = 0
    held = False
    entities: dict[str, list[pl.DataFrame]] = {}  # each batch's keys of the span tables' rows
    try:
        for i, item in enumerate(_keeping_whole_batches(wh, series_batches)):
            if i:  # in a write session: the chunks before this one are committed, each whole
                wh.commit_so_far()
            batch = item if isinstance(item, SeriesBatch) else SeriesBatch(item, int(step_s or 60))
            report.notes.extend(batch.notes)
            held = held or not batch.advance_cursor
            rows, keys = _load_one(wh, cfg, batch, source=source, scope=scope, stats=stats, info=info,
                                   rows_before=total, directory=directory)
            for table, n in rows.items():
                if table not in keys:
                    report.add(table, n)
                    continue
                seen_keys = entities.setdefault(table, [])
                if keys[table] is not None:
                    seen_keys.append(keys[table])
            total += rows.get("gpu_samples", 0)
            if on_commit is not None:
                on_commit(batch, rows)
    except BaseException as exc:
        error = type(exc).__name__

        def failed() -> None:
            set_state(wh, source, scope, status="failed", details={**info, "error": error})

        # in a write session the state is recorded once the session has rolled back to the last
        # whole chunk: a statement in the failed transaction would only fail again, hiding the error
        if wh.session is not None:
            wh.session.after_rollback.append(failed)
        elif not wh.in_transaction:
            failed()
        raise
    for table, frames in entities.items():  # a GPU, pod or node seen in every batch is one row
        report.rows[table] = pl.concat(frames).unique().height if frames else 0
    report.notes.extend(stats.notes())
    info["dropped_readings"] = stats.dropped.total()
    info["unmatched_gpus"] = len(stats.unmatched)
    set_state(wh, source, scope, status="partial" if held else "complete",
              details={**info, "notes": report.notes} if report.notes else info, rows_loaded=total)
    return report


def _keeping_whole_batches(wh: Warehouse, batches: Iterable[SeriesBatch | pl.DataFrame]
                           ) -> Iterator[SeriesBatch | pl.DataFrame]:
    """``batches``; when making the next one fails (a fetch that gave up, an interrupt), the ones
    loaded before it are whole: in a write session they are committed before the error goes on."""
    it = iter(batches)
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        except BaseException as exc:
            try:
                wh.commit_so_far()
            except Exception as failed:  # noqa: BLE001 - the fetch error is the one to report
                exc.add_note(f"(the chunks loaded before it could not be committed: {failed})")
            raise
        yield item


def _load_one(
    wh: Warehouse, cfg: Config, batch: SeriesBatch, *, source: str, scope: str,
    stats: TransformStats, info: dict[str, object], rows_before: int, directory: NodeDirectory,
) -> tuple[dict[str, int], dict[str, pl.DataFrame | None]]:
    """Load one batch in one transaction: the rows merged per table, and for the span tables
    (GPUs, pods, nodes, serving configurations: one row per key, widened by every batch that
    sees it) the keys merged, so a load of many batches counts each GPU, pod or node once."""
    cluster = cfg.cluster
    check_ksm_values(batch.series, source, LINE if LINE in batch.series.columns else None)
    if batch.samples is None:
        directory.add_series(batch.series)
        server_dropped(batch.series, stats)
        samples = dcgm_samples(batch.series, cluster, batch.step_s, stats=stats, nodes=directory,
                               node_labels=cfg.node_labels)
    else:
        samples = batch.samples
    samples = with_hami_rows(samples, batch, cluster, directory)  # label sets (HINT not stored) and rows
    gpus = gpu_inventory(samples)
    if batch.pods is None or batch.nodes is None:
        pods, nodes = ksm_rows(batch.series, cluster, source, stats, gpu_facts(wh))
    else:
        pods, nodes = batch.pods, batch.nodes
    nodes = fill_node_models(nodes, gpus)
    cpu = pod_cpu_samples(batch.series, cluster, batch.step_s, stats.cpu_dropped)
    serving = serving_samples(batch.series, cluster, batch.step_s, stats.serving_notes)
    server_config = serving_config(batch.series, cluster)
    energy = gpu_energy_samples(batch.series, cluster, batch.step_s, stats.energy_dropped)
    kueue = kueue_quota_samples(batch.series, cluster, batch.step_s)
    seen = [f for f in (samples.rows.select("ts"), pods.select(pl.col("last_seen").alias("ts")) if pods.height else None,
                        nodes.select(pl.col("last_seen").alias("ts")) if nodes.height else None) if f is not None]
    ts_all = pl.concat(seen)["ts"].drop_nulls() if seen else pl.Series("ts", [], dtype=TS)
    # the span tables: one row per key, widened by every batch that sees it
    spans = {"gpus": (gpus, ["cluster", "gpu_uuid"]), "pods": (pods, ["cluster", "uid"]),
             "nodes": (nodes, ["cluster", "node"])}
    if server_config.height:
        spans["serving_config"] = (server_config, SERVING_CONFIG_KEY)
    rows: dict[str, int] = {}
    with wh.transaction() as con:
        rows["gpu_samples"] = store_sample_rows(con, samples)
        for table, (frame, key) in spans.items():
            rows[table] = merge_spans(wh, con, table, frame, key)
        if cpu.height:
            rows["pod_cpu_samples"] = wh.merge("pod_cpu_samples", cpu, CPU_KEY, con=con)
        if serving.height:
            rows["serving_samples"] = wh.merge("serving_samples", serving, SERVING_KEY, con=con)
            note_hours(con, *rollup_scope(serving)[0])  # serving_hourly's hours
        if energy.height:
            rows["gpu_energy_samples"] = wh.merge("gpu_energy_samples", energy, ENERGY_KEY, con=con)
            note_hours(con, *rollup_scope(energy)[0])  # energy_hourly's hours, whatever samples came with them
        if kueue.height:
            rows["kueue_quota_samples"] = wh.merge("kueue_quota_samples", kueue, KUEUE_KEY, con=con)
        if ts_all.len():
            clusters = pl.DataFrame({"cluster": [cluster], "first_seen": [ts_all.min()], "last_seen": [ts_all.max()]},
                                    schema={"cluster": pl.Utf8, "first_seen": TS, "last_seen": TS})
            merge_spans(wh, con, "clusters", clusters, ["cluster"])
        if samples.height:
            rows.update(rebuild_rollups(con, samples.spans()))
        cursor = (batch.end or (ts_all.max() if ts_all.len() else None)) if batch.advance_cursor else None
        set_state(wh, source, scope, status="running", cursor=cursor, details=info,
                  rows_loaded=rows_before + rows["gpu_samples"], con=con)
    return rows, {table: frame.select(key).unique() if frame.height else None for table, (frame, key) in spans.items()}

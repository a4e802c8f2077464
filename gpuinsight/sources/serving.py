"""Inference servers' token, request, latency and KV-cache metrics -> ``serving_samples``.

vLLM, Hugging Face TGI, NVIDIA Triton (TensorRT-LLM backend) and SGLang publish Prometheus
metrics from the serving pod; a scrape through the Prometheus Operator (ServiceMonitor /
PodMonitor) or the classic ``kubernetes-pods`` job labels each series with the pod and
namespace it came from. gpuinsight reads, per pod, model and step (docs/collectors.md,
"Serving metrics"):

* **tokens and requests in the step**, from counters (a TGI histogram's ``_sum`` is one too);
* **time to first token and inter-token latency**, p50 and p95 of the step's requests, from the
  histograms' buckets (what ``histogram_quantile`` does: linear within the bucket);
* **the KV cache's use**, 0..1, mean and maximum over the step;
* **vLLM's cache configuration** (``vllm:cache_config_info``, an info gauge whose labels are the
  engine's ``CacheConfig``): the ``gpu_memory_utilization`` it started with, ``num_gpu_blocks`` and
  ``block_size`` (KV capacity in tokens), ``cache_dtype`` and ``kv_cache_memory_bytes`` (the KV
  cache's size in bytes when ``--kv-cache-memory-bytes`` set it, else ``None``): one
  ``serving_config`` row per pod, what the rules size a serving workload's memory from
  (``rules/serving.py``).

Two shapes arrive, as for cAdvisor (``sources/cadvisor.py``):

* **files** hold the raw series: a counter's increase between consecutive samples of one series
  (a decrease is a restarted server: the new value is what it counted since, as Prometheus'
  ``rate`` takes it) is given to the step the interval starts in; a histogram's buckets the same,
  then the quantile of the step's increases; a gauge's mean and maximum per step;
* **Prometheus** computes them (:func:`serving_queries`): metrics named ``serving:SERVER:FIELD:R``
  already hold the step's rate, quantile, mean or maximum.

Every spelling comes from the servers' own documentation and published scrapes
(``tests/fixtures/real/SOURCES.md``). A series that names no pod cannot be attributed to a
workload: it is skipped and counted in the load notes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from gpuinsight.sources.prom.frames import TS, first_label, without_absent_labels

KEY = ["cluster", "namespace", "pod", "model_name", "server", "ts"]
COLUMNS: dict[str, pl.DataType] = {
    "cluster": pl.Utf8(), "ts": TS, "namespace": pl.Utf8(), "pod": pl.Utf8(), "model_name": pl.Utf8(),
    "server": pl.Utf8(), "prompt_tokens": pl.Float64(), "generation_tokens": pl.Float64(),
    "requests": pl.Float64(), "ttft_p50_s": pl.Float64(), "ttft_p95_s": pl.Float64(), "itl_p50_s": pl.Float64(),
    "itl_p95_s": pl.Float64(), "kv_cache_usage": pl.Float64(), "kv_cache_usage_max": pl.Float64(),
    "step_s": pl.Int32(),
}
COUNTERS = ("prompt_tokens", "generation_tokens", "requests")
HISTOGRAMS = ("ttft", "itl")
QUANTILES = (0.5, 0.95)
# where a scrape put the pod it came from: the Prometheus Operator's target labels, the classic
# kubernetes-pods job's relabelling, older setups
POD_LABELS = ("pod", "kubernetes_pod_name", "pod_name")
NAMESPACE_LABELS = ("namespace", "kubernetes_namespace", "pod_namespace")
# the model: vLLM and SGLang `model_name` (SGLang before 0.4 `name`), Triton `model`; TGI has none
MODEL_LABELS = ("model_name", "model", "name")
KEEP_LABELS = frozenset({*POD_LABELS, *NAMESPACE_LABELS, *MODEL_LABELS, "le", "kv_cache_block_type"})
PREFIX = "serving:"
# a step's token or request count above this per second is a glitch, not serving (the fastest
# published serving throughputs are in the tens of thousands of tokens/s per GPU)
MAX_PER_S = 1e7
# vLLM's cache configuration, an info metric (value 1): the labels gpuinsight keeps (vLLM
# vllm/config/cache.py CacheConfig.metrics_info, every field as a string; "None" when unset)
CONFIG_INFO = "vllm:cache_config_info"
CONFIG_METRIC = PREFIX + "vllm:cache_config:info"  # the Prometheus path's reduced series
CONFIG_LABELS = ("gpu_memory_utilization", "kv_cache_memory_bytes", "num_gpu_blocks", "block_size", "cache_dtype")
CONFIG_KEY = ["cluster", "namespace", "pod", "server"]
CONFIG_COLUMNS: dict[str, pl.DataType] = {
    "cluster": pl.Utf8(), "namespace": pl.Utf8(), "pod": pl.Utf8(), "server": pl.Utf8(),
    "gpu_memory_utilization": pl.Float64(), "kv_cache_memory_bytes": pl.Float64(), "num_gpu_blocks": pl.Float64(),
    "block_size": pl.Float64(), "cache_dtype": pl.Utf8(), "first_seen": TS, "last_seen": TS,
}


@dataclass(frozen=True)
class ServingMetric:
    """One series name a server publishes and what it gives."""

    name: str        # the series name as stored (a histogram's family, without _bucket)
    server: str      # vllm | tgi | triton | sglang
    field: str       # prompt_tokens | generation_tokens | requests | ttft | itl | kv_cache_usage | kv_used_blocks | kv_max_blocks
    kind: str        # counter | histogram | gauge
    match: tuple[tuple[str, str], ...] = ()  # label equalities that select the series (Triton's block types)

    @property
    def series(self) -> str:
        return self.name + "_bucket" if self.kind == "histogram" else self.name


METRICS: tuple[ServingMetric, ...] = (
    # vLLM (docs/design/metrics.md; V0 and V1 engines)
    ServingMetric("vllm:prompt_tokens_total", "vllm", "prompt_tokens", "counter"),
    ServingMetric("vllm:generation_tokens_total", "vllm", "generation_tokens", "counter"),
    ServingMetric("vllm:request_success_total", "vllm", "requests", "counter"),
    ServingMetric("vllm:time_to_first_token_seconds", "vllm", "ttft", "histogram"),
    ServingMetric("vllm:inter_token_latency_seconds", "vllm", "itl", "histogram"),       # V1
    ServingMetric("vllm:time_per_output_token_seconds", "vllm", "itl", "histogram"),     # V0
    ServingMetric("vllm:kv_cache_usage_perc", "vllm", "kv_cache_usage", "gauge"),          # V1
    ServingMetric("vllm:gpu_cache_usage_perc", "vllm", "kv_cache_usage", "gauge"),         # V0
    # SGLang (docs/references/production_metrics.md)
    ServingMetric("sglang:prompt_tokens_total", "sglang", "prompt_tokens", "counter"),
    ServingMetric("sglang:generation_tokens_total", "sglang", "generation_tokens", "counter"),
    ServingMetric("sglang:num_requests_total", "sglang", "requests", "counter"),
    ServingMetric("sglang:time_to_first_token_seconds", "sglang", "ttft", "histogram"),
    ServingMetric("sglang:inter_token_latency_seconds", "sglang", "itl", "histogram"),
    ServingMetric("sglang:time_per_output_token_seconds", "sglang", "itl", "histogram"),
    ServingMetric("sglang:token_usage", "sglang", "kv_cache_usage", "gauge"),
    # Hugging Face TGI (docs/source/reference/metrics.md): tokens per request are histograms whose
    # _sum counts every token; no time-to-first-token histogram (queue + prefill, not read)
    ServingMetric("tgi_request_input_length_sum", "tgi", "prompt_tokens", "counter"),
    ServingMetric("tgi_request_generated_tokens_sum", "tgi", "generation_tokens", "counter"),
    ServingMetric("tgi_request_success", "tgi", "requests", "counter"),
    ServingMetric("tgi_request_mean_time_per_token_duration", "tgi", "itl", "histogram"),
    # NVIDIA Triton (docs/user_guide/metrics.md) and its TensorRT-LLM backend's KV-cache blocks
    # (tensorrtllm_backend README, "Triton Metrics": *_metrics from 24.x, *_statistics in 23.11)
    ServingMetric("nv_inference_request_success", "triton", "requests", "counter"),
    *(ServingMetric(f"nv_trt_llm_kv_cache_block_{suffix}", "triton", field, "gauge",
                    (("kv_cache_block_type", block),))
      for suffix in ("metrics", "statistics") for field, block in (("kv_used_blocks", "used"),
                                                                   ("kv_max_blocks", "max"))),
)
BY_NAME: dict[str, list[ServingMetric]] = {}
for _m in METRICS:
    BY_NAME.setdefault(_m.series, []).append(_m)
SERIES_NAMES = frozenset(BY_NAME)
CONFIG_NAMES = frozenset({CONFIG_INFO, CONFIG_METRIC})


def is_serving(metric: str) -> bool:
    """A series frame ``metric`` this module reads (raw or already reduced by the server)."""
    return metric in SERIES_NAMES or metric == CONFIG_INFO or metric.startswith(PREFIX)


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=COLUMNS)


# -- the Prometheus path ---------------------------------------------------------------------------

def _by() -> str:
    return ", ".join(sorted((*POD_LABELS, *NAMESPACE_LABELS, *MODEL_LABELS)))


def serving_exprs(m: ServingMetric, step: int, resolution_s: int, matchers: Sequence[tuple[str, str, str]],
                  ) -> list[tuple[str, str, bool]]:
    """(expr, frame metric, evaluated late) for one series name: a counter's rate and a histogram's
    quantiles over the step and one scrape interval after it (a counter's increase over the step
    needs the sample at its end, as for cAdvisor), a gauge's mean and maximum over the step."""
    from gpuinsight.sources.prom.promql import dur, selector

    sel = selector(m.series, [*((k, "=", v) for k, v in m.match), *matchers])
    late = dur(step + resolution_s)
    tag = f"{PREFIX}{m.server}:{m.field}"
    if m.kind == "counter":
        return [(f"sum by ({_by()}) (rate({sel}[{late}]))", f"{tag}:rate", True)]
    if m.kind == "histogram":
        return [(f"histogram_quantile({q!r}, sum by (le, {_by()}) (rate({sel}[{late}])))", f"{tag}:q{q!r}", True)
                for q in QUANTILES]
    return [(f"avg_over_time({sel}[{dur(step)}])", f"{tag}:avg", False),
            (f"max_over_time({sel}[{dur(step)}])", f"{tag}:max", False)]


def config_expr(step: int, matchers: Sequence[tuple[str, str, str]]) -> tuple[str, str]:
    """(expr, frame metric) for vLLM's cache configuration: one series per pod and configuration
    seen in the step, its labels kept (``CONFIG_LABELS``)."""
    from gpuinsight.sources.prom.promql import dur, selector

    by = ", ".join(sorted((*POD_LABELS, *NAMESPACE_LABELS, *CONFIG_LABELS)))
    return f"max by ({by}) (max_over_time({selector(CONFIG_INFO, list(matchers))}[{dur(step)}]))", CONFIG_METRIC


# -- rows -----------------------------------------------------------------------------------------

def serving_samples(series: pl.DataFrame, cluster: str, step_s: int,
                    notes: dict[str, int] | None = None) -> pl.DataFrame:
    """``serving_samples`` rows from the serving series in ``series`` (either shape)."""
    if series.height == 0 or "metric" not in series.columns:
        return empty()
    names = set(series.get_column("metric").unique().to_list())
    wanted = [n for n in names if is_serving(n) and n not in CONFIG_NAMES]
    if not wanted:
        return empty()
    s = without_absent_labels(series.filter(pl.col("metric").is_in(wanted)))
    s = s.with_columns(first_label(s, *NAMESPACE_LABELS).alias("_ns"), first_label(s, *POD_LABELS).alias("_pod"),
                       first_label(s, *MODEL_LABELS).fill_null("").alias("_model"))
    unplaced = s.filter(pl.col("_pod").is_null() | pl.col("_ns").is_null())
    if notes is not None and unplaced.height:
        n = unplaced.select([c for c in unplaced.columns if c not in ("ts", "value", "@line")]).unique().height
        notes["serving series without a pod label (not attributed)"] = \
            notes.get("serving series without a pod label (not attributed)", 0) + n
    s = s.filter(pl.col("_pod").is_not_null() & pl.col("_ns").is_not_null())
    parts = [_reduced(s.filter(pl.col("metric").str.starts_with(PREFIX)), step_s),
             _raw(s.filter(~pl.col("metric").str.starts_with(PREFIX)), step_s, notes)]
    long = pl.concat([p for p in parts if p.height], how="vertical_relaxed") if any(p.height for p in parts) \
        else pl.DataFrame(schema={"_ns": pl.Utf8, "_pod": pl.Utf8, "_model": pl.Utf8, "server": pl.Utf8,
                                  "ts": TS, "col": pl.Utf8, "value": pl.Float64})
    return _finish(long, cluster, step_s, notes)


def serving_config(series: pl.DataFrame, cluster: str) -> pl.DataFrame:
    """``serving_config`` rows: per pod, the newest cache configuration vLLM reported (either shape);
    a label vLLM wrote as "None" (unset) or that does not parse is NULL."""
    if series.height == 0 or "metric" not in series.columns:
        return pl.DataFrame(schema=CONFIG_COLUMNS)
    s = series.filter(pl.col("metric").is_in(list(CONFIG_NAMES)))
    if s.height == 0:
        return pl.DataFrame(schema=CONFIG_COLUMNS)
    s = s.with_columns(first_label(s, *NAMESPACE_LABELS).alias("namespace"), first_label(s, *POD_LABELS).alias("pod"))
    s = s.filter(pl.col("pod").is_not_null() & pl.col("namespace").is_not_null())
    if s.height == 0:
        return pl.DataFrame(schema=CONFIG_COLUMNS)

    def label(name: str) -> pl.Expr:
        return pl.col(name) if name in s.columns else pl.lit(None, dtype=pl.Utf8)

    def number(name: str) -> pl.Expr:
        v = label(name).cast(pl.Utf8).str.strip_chars().cast(pl.Float64, strict=False)
        return pl.when(v.is_finite() & (v >= 0)).then(v)

    rows = s.select("namespace", "pod", "ts", *(number(c).alias(c) for c in CONFIG_LABELS if c != "cache_dtype"),
                    label("cache_dtype").cast(pl.Utf8).alias("cache_dtype"))
    out = rows.sort("ts").group_by("namespace", "pod").agg(
        *(pl.col(c).drop_nulls().last() for c in CONFIG_LABELS), pl.col("ts").min().alias("first_seen"),
        pl.col("ts").max().alias("last_seen"))
    out = out.with_columns(pl.lit(cluster, dtype=pl.Utf8).alias("cluster"), pl.lit("vllm").alias("server"),
                           # a fraction outside (0, 1] is not vLLM's setting
                           pl.when((pl.col("gpu_memory_utilization") > 0) & (pl.col("gpu_memory_utilization") <= 1))
                           .then(pl.col("gpu_memory_utilization")).alias("gpu_memory_utilization"))
    return out.select([pl.col(c).cast(t) for c, t in CONFIG_COLUMNS.items()]).sort("namespace", "pod")


def _reduced(s: pl.DataFrame, step_s: int) -> pl.DataFrame:
    """Rows the server reduced: ``serving:SERVER:FIELD:R``."""
    if s.height == 0:
        return pl.DataFrame()
    parts = s.get_column("metric").str.split(":")
    s = s.with_columns(parts.list.get(1).alias("server"), parts.list.get(2).alias("field"),
                       parts.list.get(3).alias("r"))
    col = (pl.when(pl.col("r") == "rate").then(pl.col("field"))
           .when(pl.col("r") == "avg").then(pl.col("field"))
           .when(pl.col("r") == "max").then(pl.col("field") + "_max")
           .when(pl.col("r") == "q0.5").then(pl.col("field") + "_p50_s")
           .when(pl.col("r") == "q0.95").then(pl.col("field") + "_p95_s"))
    value = pl.when(pl.col("r") == "rate").then(pl.col("value") * step_s).otherwise(pl.col("value"))
    return s.select("_ns", "_pod", "_model", "server", "ts", col.alias("col"), value.alias("value"))


def _step_of(ts: pl.Expr, step_s: int) -> pl.Expr:
    step_us = int(step_s) * 1_000_000
    return ((ts.dt.epoch("us") // step_us) * step_us).cast(TS)


def _series_keys(s: pl.DataFrame) -> list[str]:
    return [c for c in s.columns if c not in ("ts", "value", "@line", "_ns", "_pod", "_model")]


def _raw(s: pl.DataFrame, step_s: int, notes: dict[str, int] | None) -> pl.DataFrame:
    """Raw series (files): counters' and buckets' increases, gauges' mean and maximum, per step."""
    if s.height == 0:
        return pl.DataFrame()
    out = []
    for m in (m for ms in BY_NAME.values() for m in ms):
        rows = s.filter(pl.col("metric") == m.series)
        for k, v in m.match:
            rows = rows.filter(pl.col(k) == v) if k in rows.columns else rows.clear()
        if rows.height == 0:
            continue
        if m.kind == "histogram" and "le" not in rows.columns:
            continue  # buckets without an upper bound give no quantile (histogram_quantile ignores them)
        if m.kind == "gauge":
            g = rows.with_columns(_step_of(pl.col("ts"), step_s).alias("ts")).group_by(
                "_ns", "_pod", "_model", "ts").agg(pl.col("value").mean().alias("avg"), pl.col("value").max().alias("max"))
            out.append(g.select("_ns", "_pod", "_model", pl.lit(m.server).alias("server"), "ts",
                                pl.lit(m.field).alias("col"), pl.col("avg").alias("value")))
            out.append(g.select("_ns", "_pod", "_model", pl.lit(m.server).alias("server"), "ts",
                                pl.lit(m.field + "_max").alias("col"), pl.col("max").alias("value")))
            continue
        inc = _increases(rows, step_s, notes, m.series)
        if m.kind == "counter":
            c = inc.group_by("_ns", "_pod", "_model", "ts").agg(pl.col("inc").sum().alias("value"))
            out.append(c.select("_ns", "_pod", "_model", pl.lit(m.server).alias("server"), "ts",
                                pl.lit(m.field).alias("col"), "value"))
        else:
            out.append(_quantiles(inc, m))
    return pl.concat(out, how="vertical_relaxed") if out else pl.DataFrame()


def _increases(rows: pl.DataFrame, step_s: int, notes: dict[str, int] | None, name: str) -> pl.DataFrame:
    """Per series, the counter's increase over each interval between consecutive samples, given to
    the step the interval starts in; a decrease (a restart) counts the new value, as ``rate`` does."""
    keys = _series_keys(rows)
    r = rows.sort("ts").with_columns(pl.col("value").shift(1).over(keys).alias("_prev"),
                                     pl.col("ts").shift(1).over(keys).alias("_t0"))
    r = r.filter(pl.col("_prev").is_not_null())
    reset = pl.col("value") < pl.col("_prev")
    if notes is not None:
        n = r.filter(reset).height
        if n:
            notes[f"{name}: counter resets (a restarted server)"] = notes.get(
                f"{name}: counter resets (a restarted server)", 0) + n
    inc = pl.when(reset).then(pl.col("value")).otherwise(pl.col("value") - pl.col("_prev"))
    le = [pl.col("le")] if "le" in r.columns else []
    return r.select("_ns", "_pod", "_model", *le, _step_of(pl.col("_t0"), step_s).alias("ts"), inc.alias("inc"))


def _quantiles(inc: pl.DataFrame, m: ServingMetric) -> pl.DataFrame:
    """p50 and p95 of each step's bucket increases (Prometheus' histogram_quantile)."""
    b = inc.group_by("_ns", "_pod", "_model", "ts", "le").agg(pl.col("inc").sum())
    out = []
    for (ns, pod, model, ts), g in b.group_by("_ns", "_pod", "_model", "ts"):
        uppers = np.array([_le(x) for x in g.get_column("le").to_list()])
        counts = g.get_column("inc").to_numpy()
        order = np.argsort(uppers)
        for q in QUANTILES:
            v = bucket_quantile(q, uppers[order], counts[order])
            if v is not None:
                out.append({"_ns": ns, "_pod": pod, "_model": model, "server": m.server, "ts": ts,
                            "col": f"{m.field}_p{round(q * 100)}_s", "value": v})
    schema = {"_ns": pl.Utf8, "_pod": pl.Utf8, "_model": pl.Utf8, "server": pl.Utf8, "ts": TS, "col": pl.Utf8,
              "value": pl.Float64}
    return pl.DataFrame(out, schema=schema)


def _le(text: str | None) -> float:
    if text is None:
        return math.inf
    return math.inf if text.strip() in ("+Inf", "Inf", "inf") else float(text)


def bucket_quantile(q: float, uppers: np.ndarray, cumulative: np.ndarray) -> float | None:
    """The q-quantile of cumulative bucket counts, as Prometheus' ``histogram_quantile``: linear
    within the bucket holding the rank; the lowest bucket starts at 0; a rank in the +Inf bucket
    gives the highest finite bound. None when the step holds no observation."""
    if len(uppers) == 0 or not math.isinf(uppers[-1]):
        return None
    cum = np.maximum.accumulate(np.asarray(cumulative, dtype=float))  # a scrape mid-update is not monotone
    total = cum[-1]
    if not total > 0:
        return None
    rank = q * total
    i = int(np.searchsorted(cum, rank, side="left"))
    if i >= len(uppers) - 1:
        return float(uppers[-2]) if len(uppers) > 1 else None
    lo, lo_count = (0.0, 0.0) if i == 0 else (float(uppers[i - 1]), float(cum[i - 1]))
    hi = float(uppers[i])
    if i == 0 and hi <= 0:
        return hi
    span = cum[i] - lo_count
    return hi if span <= 0 else lo + (hi - lo) * (rank - lo_count) / span


def _finish(long: pl.DataFrame, cluster: str, step_s: int, notes: dict[str, int] | None) -> pl.DataFrame:
    if long.height == 0:
        return empty()
    # several spellings of one field (vLLM V0 and V1 names side by side) give one value: the larger
    wide = long.group_by("_ns", "_pod", "_model", "server", "ts", "col").agg(pl.col("value").max()).pivot(
        on="col", index=["_ns", "_pod", "_model", "server", "ts"], values="value")
    for c in ("prompt_tokens", "generation_tokens", "requests", "ttft_p50_s", "ttft_p95_s", "itl_p50_s", "itl_p95_s",
              "kv_cache_usage", "kv_cache_usage_max", "kv_used_blocks", "kv_used_blocks_max", "kv_max_blocks",
              "kv_max_blocks_max"):
        if c not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(c))
    # Triton's TensorRT-LLM backend counts KV blocks: usage = used / max
    blocks = pl.col("kv_max_blocks_max").fill_null(pl.col("kv_max_blocks"))
    wide = wide.with_columns(
        pl.coalesce("kv_cache_usage", pl.col("kv_used_blocks") / blocks).alias("kv_cache_usage"),
        pl.coalesce("kv_cache_usage_max", pl.col("kv_used_blocks_max") / blocks).alias("kv_cache_usage_max"))
    # readings that cannot be real: negative or absurd counts, usage outside 0..1, negative latency
    bad = {c: ~pl.col(c).is_finite() | (pl.col(c) < 0) | (pl.col(c) > MAX_PER_S * step_s) for c in COUNTERS}
    bad |= {c: ~pl.col(c).is_finite() | (pl.col(c) < 0) | (pl.col(c) > 1 + 1e-6)
            for c in ("kv_cache_usage", "kv_cache_usage_max")}
    bad |= {c: ~pl.col(c).is_finite() | (pl.col(c) < 0) for c in ("ttft_p50_s", "ttft_p95_s", "itl_p50_s", "itl_p95_s")}
    for c, expr in bad.items():
        n = wide.filter(pl.col(c).is_not_null() & expr).height
        if n and notes is not None:
            notes[f"serving {c}: not a measurement"] = notes.get(f"serving {c}: not a measurement", 0) + n
        wide = wide.with_columns(pl.when(pl.col(c).is_not_null() & expr).then(None).otherwise(pl.col(c)).alias(c))
    out = wide.rename({"_ns": "namespace", "_pod": "pod", "_model": "model_name"}).with_columns(
        pl.lit(cluster, dtype=pl.Utf8).alias("cluster"), pl.lit(int(step_s), dtype=pl.Int32).alias("step_s"))
    return out.select([pl.col(c).cast(t) for c, t in COLUMNS.items()]).sort("namespace", "pod", "model_name", "ts")

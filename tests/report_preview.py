"""A stand-in for :class:`gpuinsight.api.GpuInsight` that serves frames from memory.

``write_report`` only needs ``.query(name, **params)``, ``.recommend()`` and ``.config``;
:class:`FrameSource` provides them from literal frames, so a report can be previewed (and
tested) without a warehouse. :func:`synthetic_fleet` builds a deterministic fleet of any
size with the column contracts of the SQL models the report reads.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl

from gpuinsight.config import Config
from gpuinsight.errors import NotFound
from gpuinsight.plan import HOURS_PER_MONTH, Plan, Recommendation, kind_of

Frames = dict[str, pl.DataFrame | Callable[..., pl.DataFrame]]


class FrameSource:
    """``frames`` maps a model name to a frame, or to a function of the query parameters."""

    def __init__(self, frames: Frames, recommendations: list[Recommendation] | None = None,
                 *, config: Config | None = None, catalog: str | None = None) -> None:
        self.frames = frames
        self.recommendations = recommendations or []
        self.config = config or Config(cluster="preview")
        self.catalog = catalog

    def query(self, name: str, **params: Any) -> pl.DataFrame:
        if name not in self.frames:
            raise NotFound(f"no SQL model named {name!r}")
        f = self.frames[name]
        return f(**params) if callable(f) else f

    def recommend(self, settings: dict[str, dict[str, Any]] | None = None) -> Plan:
        return Plan(plan_id=Plan.new_id(datetime(2025, 1, 8, tzinfo=UTC)), created_at=datetime(2025, 1, 8, tzinfo=UTC),
                    catalog=self.catalog, window=(None, None), recommendations=list(self.recommendations))


def _u(expr: pl.Expr, seed: int) -> pl.Expr:
    """A deterministic pseudo-random number in [0, 1) per row."""
    return (expr.hash(seed) % 1_000_003).cast(pl.Float64) / 1_000_003


POOLS = (("h100-ondemand", "H100-80GB", 98.32 / 8), ("a100-ondemand", "A100-80GB", 40.97 / 8),
         ("l4-spot", "L4", 0.98), ("a10g-ondemand", "A10G", 1.21))
NAMESPACES = ("research", "prod-inference", "notebooks", "batch", "ml-platform", "recsys", "vision", "nlp",
              "speech", "ads", "search", "dev-sandbox")
QUEUES = ("research", "production", "batch", "default")
# The MIG profiles of the two MIG-capable models above (the warehouse's mig_catalog columns).
MIG_CATALOG = pl.DataFrame(
    [(m, f"{c}g.{mem}gb", float(mem), c, ms, n) for m in ("A100-80GB", "H100-80GB") for c, mem, ms, n in
     ((1, 10, 1, 7), (1, 20, 2, 4), (2, 20, 2, 3), (3, 40, 4, 2), (4, 40, 4, 1), (7, 80, 8, 1))],
    schema=["gpu_model", "profile", "memory_gb", "compute_slices", "memory_slices", "max_instances"], orient="row",
)
CATALOG = "aws-us-east-1-on-demand"
CATALOG_AS_OF = "2025-01-01"


def synthetic_fleet(gpus: int = 256, days: int = 7, *, seed: int = 1, queues: bool = True) -> FrameSource:
    """A fleet of ``gpus`` GPUs (8 per node) over ``days`` days, with typical (low) usage."""
    nodes_n = max(1, gpus // 8)
    hours_n = days * 24
    start = datetime(2025, 1, 1)
    nodes = pl.DataFrame({"i": list(range(nodes_n))}).with_columns(
        (pl.col("i") % len(POOLS)).alias("p"),
        pl.format("ip-10-{}-{}-{}.ec2.internal", pl.col("i") // 4096, (pl.col("i") // 64) % 64, pl.col("i") % 64).alias("node"),
    ).with_columns(pl.col("p").replace_strict({i: p[0] for i, p in enumerate(POOLS)}).alias("node_pool"),
                   (_u(pl.col("i"), seed) * 0.6).alias("busy"))
    hours = pl.DataFrame({"hour": pl.datetime_range(start, start + timedelta(hours=hours_n - 1), "1h", eager=True)})
    heat = nodes.join(hours, how="cross").with_columns(
        (pl.col("hour").dt.hour().cast(pl.Float64) - 12).abs().alias("_d"),
        _u(pl.col("i") * 100_000 + pl.col("hour").dt.epoch("s") // 3600, seed + 1).alias("_r"),
    ).with_columns(
        (pl.col("busy") * (1.2 - pl.col("_d") / 12) * (0.5 + pl.col("_r"))).clip(0, 1).round(3).alias("gr_active_avg"),
        (8 * (0.3 + pl.col("busy"))).clip(0, 8).floor().cast(pl.Int64).alias("allocated_gpus"),
    ).select("node", "node_pool", "hour", "gr_active_avg", "allocated_gpus")

    usd_per_gpu_h = sum(p[2] for p in POOLS) / len(POOLS)
    window_h = float(hours_n)
    # Cost per hour x namespace x bucket: every hour's GPU-hours add up to the fleet's GPUs, so
    # the summary, the breakdowns by namespace and by queue and the hourly series all agree.
    ns = pl.DataFrame({"namespace": list(NAMESPACES), "ni": list(range(len(NAMESPACES)))}).with_columns(
        pl.col("ni").map_elements(lambda i: QUEUES[i % len(QUEUES)] if queues else None,
                                  return_dtype=pl.Utf8).alias("queue"))
    b = pl.DataFrame({"bucket": ["used", "idle", "underused", "unallocated"], "bi": [0, 1, 2, 3]})
    cost = hours.join(ns, how="cross").join(b, how="cross").with_columns(
        (_u(pl.col("ni") * 7 + pl.col("bi") + pl.col("hour").dt.epoch("s"), seed + 2) / (1 + pl.col("ni"))
         * pl.when(pl.col("bucket") == "used").then(0.5).otherwise(1.0)).alias("w"))
    cost = cost.with_columns((pl.col("w") / pl.col("w").sum().over("hour") * gpus).alias("gpu_hours")).with_columns(
        (pl.col("gpu_hours") * usd_per_gpu_h).alias("usd"),
        pl.when(pl.col("bucket") == "unallocated").then(None).otherwise(pl.col("namespace")).alias("namespace"),
        pl.when(pl.col("bucket") == "unallocated").then(None).otherwise(pl.col("queue")).alias("queue"),
    ).select("hour", "namespace", "queue", "bucket", "gpu_hours", "usd")

    def bucket_sum(col: str, bucket: str | None = None) -> float:
        rows = cost if bucket is None else cost.filter(pl.col("bucket") == bucket)
        return float(rows.get_column(col).sum())

    total = bucket_sum("usd")
    waste = total - bucket_sum("usd", "used")
    summary = pl.DataFrame([{
        "gpus": gpus, "nodes": nodes_n, "window_start": start, "window_end": start + timedelta(hours=hours_n),
        "hours": window_h, "gpu_hours": bucket_sum("gpu_hours"),
        "allocated_gpu_hours": bucket_sum("gpu_hours") - bucket_sum("gpu_hours", "unallocated"),
        "used_gpu_hours": bucket_sum("gpu_hours", "used"), "total_usd": total,
        "used_usd": bucket_sum("usd", "used"), "idle_usd": bucket_sum("usd", "idle"),
        "underused_usd": bucket_sum("usd", "underused"), "unallocated_usd": bucket_sum("usd", "unallocated"),
        "unmeasured_usd": 0.0, "monthly_spend_usd": total / window_h * HOURS_PER_MONTH,
        "monthly_waste_usd": waste / window_h * HOURS_PER_MONTH,
        "unpriced_node_hours": 0.0, "catalog": CATALOG, "catalog_as_of": CATALOG_AS_OF,
    }])

    def by_group(by: str) -> pl.DataFrame:
        """The cost rows with the ``group`` the SQL models give (``cost_group``)."""
        holder = pl.col(by) if by in cost.columns else pl.lit(None, pl.Utf8)  # no Kueue in the preview
        none = "(no ClusterQueue)" if by == "cluster_queue" else f"(no {by})"
        return cost.with_columns(
            pl.when(pl.col("bucket") == "unallocated").then(pl.lit("(unallocated)"))
            .otherwise(holder.fill_null(none)).alias("group"))

    def waste_hourly_by(by: str = "namespace") -> pl.DataFrame:
        return (by_group(by).group_by("hour", "group", "bucket").agg(pl.col("gpu_hours", "usd").sum().round(3))
                .sort("hour", "group", "bucket").select("hour", "group", "bucket", "gpu_hours", "usd"))

    def waste_breakdown(by: str = "namespace") -> pl.DataFrame:
        buckets = ("used", "idle", "underused", "unallocated")
        return (by_group(by).group_by("group").agg(
            *[pl.col("usd").filter(pl.col("bucket") == bk).sum().alias(f"{bk}_usd") for bk in buckets],
            *[pl.col("gpu_hours").filter(pl.col("bucket") == bk).sum().alias(f"{bk}_gpu_hours") for bk in buckets],
            pl.lit(0.0).alias("unmeasured_usd"), pl.col("usd").sum().alias("total_usd"), pl.col("gpu_hours").sum(),
        ).sort("total_usd", "group", descending=[True, False]))

    n_wl = max(6, gpus // 4)
    wl = pl.DataFrame({"i": list(range(n_wl))}).with_columns(
        pl.col("i").map_elements(lambda i: NAMESPACES[i % len(NAMESPACES)], return_dtype=pl.Utf8).alias("namespace"),
        pl.format("svc-{}", pl.col("i")).alias("workload"),
        pl.when(pl.col("i") % 3 == 0).then(pl.lit("StatefulSet")).otherwise(pl.lit("Deployment")).alias("workload_kind"),
        pl.col("i").map_elements(lambda i: POOLS[i % 2][1], return_dtype=pl.Utf8).alias("gpu_model"),
        (pl.col("i") % 12 == 1).alias("production"),
        (_u(pl.col("i"), seed + 3) ** 2).round(3).alias("sm_p95"),
        (_u(pl.col("i"), seed + 4) ** 2 * 78_000 + 1500).round(0).alias("fb_max_mib"),
        (_u(pl.col("i"), seed + 5) * window_h * 4 + 10).round(1).alias("gpu_hours"),
    ).with_columns(
        (pl.col("sm_p95") * 0.6).round(3).alias("gr_mean"), (pl.col("sm_p95") * 1.1).clip(0, 1).alias("gr_p95"),
        (pl.col("fb_max_mib") * 0.9).round(0).alias("fb_p95_mib"),
        pl.when(pl.col("gpu_model") == "H100-80GB").then(81559.0).otherwise(81920.0).alias("gpu_memory_mib"),
        (pl.col("gpu_hours") * usd_per_gpu_h).round(2).alias("cost_usd"),
    ).drop("i")

    pool_df = pl.DataFrame({"node_pool": [p[0] for p in POOLS], "pi": list(range(len(POOLS)))})
    frag = hours.join(pool_df, how="cross").with_columns(
        _u(pl.col("pi") * 1000 + pl.col("hour").dt.epoch("s"), seed + 6).alias("_r")
    ).with_columns(
        (pl.col("_r") * nodes_n / len(POOLS) * 2).round(0).cast(pl.Int64).alias("free_gpus_partial_nodes"),
        ((1 - pl.col("_r")) * nodes_n / len(POOLS) * 0.8).round(0).cast(pl.Int64).alias("free_gpus_empty_nodes"),
    ).with_columns(
        (pl.col("free_gpus_partial_nodes") // 2).alias("partial_nodes"), (pl.col("free_gpus_empty_nodes") // 8).alias("empty_nodes")
    ).select("hour", "node_pool", "free_gpus_partial_nodes", "free_gpus_empty_nodes", "partial_nodes", "empty_nodes")

    q = gpus / 8
    queue_df = pl.DataFrame({
        "queue": list(QUEUES), "weight": [4, 3, 2, 1],
        "deserved_gpu": [q * 3, q * 2.5, q * 1.5, q], "capability_gpu": [q * 5, None, q * 3, 1e9],
        "guarantee_gpu": [q, q * 2, 0.0, 0.0], "allocated_gpu_avg": [q * 1.2, q * 2.2, q * 2.0, q * 0.3],
        "allocated_gpu_p95": [q * 2.5, q * 2.4, q * 3.0, q * 0.8], "used_gpu_avg": [q * 0.3, q * 1.1, q * 1.4, q * 0.05],
        "pending_p95_s": [30.0, 5.0, 1800.0, 60.0],
    })
    if not queues:
        queue_df = queue_df.clear()

    recs = _recommendations(wl, nodes, usd_per_gpu_h, queues)
    frames: Frames = {
        "fleet_summary": summary, "gpu_heatmap": heat, "waste_hourly_by": waste_hourly_by,
        "waste_breakdown": waste_breakdown, "workload_gpu_profile": wl, "fragmentation": frag,
        "queue_usage": queue_df, "mig_catalog": MIG_CATALOG,
    }
    return FrameSource(frames, recs, catalog=CATALOG)


def _basis(rule: str) -> dict[str, str]:
    """evidence.saving_basis of a synthetic finding: its kind's."""
    return {"saving_basis": kind_of(rule).saving_basis}


def _recommendations(wl: pl.DataFrame, nodes: pl.DataFrame, usd_h: float, queues: bool) -> list[Recommendation]:
    m = HOURS_PER_MONTH * usd_h
    recs: list[Recommendation] = []
    for i, r in enumerate(wl.head(40).iter_rows(named=True)):
        rule = ("idle", "mig", "mps", "timeslice", "spot")[i % 5]
        recs.append(Recommendation(
            rule=rule, namespace=r["namespace"], workload=r["workload"],
            title=f"{rule}: {r['namespace']}/{r['workload']} uses {r['sm_p95']:.0%} of its GPU at p95",
            monthly_savings_usd=m * (0.2 + (i * 37 % 11) / 10), confidence=0.5 + (i % 5) / 10,
            evidence=_basis(rule),
        ))
    for r in nodes.head(3).iter_rows(named=True):
        recs.append(Recommendation(rule="binpack", node=r["node"], title=f"drain and remove {r['node']}",
                                   monthly_savings_usd=m * 8, confidence=0.7,
                                   evidence={**_basis("binpack"), "pool": r["node_pool"]}))
    if queues:
        recs.append(Recommendation(rule="queue", queue="research", title="lower queue research deserved to match use",
                                   monthly_savings_usd=0.0, confidence=0.6,
                                   evidence=_basis("queue")))
    return recs

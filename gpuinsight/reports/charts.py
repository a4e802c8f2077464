"""Chart builders: one function per chart, a SQL-model frame (polars) in, an Altair chart out.

Every builder aggregates first (top-N groups, coarser time bins) so its inline data stays
under :data:`~gpuinsight.reports.frames.MAX_ROWS` rows for any fleet size, and returns a
placeholder chart that says why when its frame is empty. Times are UTC wall-clock times.
Builders return unconfigured charts (so they can be combined); apply
:func:`gpuinsight.reports.theme.themed` to show one in a notebook with the report's look.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from gpuinsight.plan import HOURS_PER_MONTH, steady_round_expr
from gpuinsight.reports import theme
from gpuinsight.reports.chartkit import USD, ChartLike, heading, padded, placeholder, time_axis
from gpuinsight.reports.frames import (
    ISO,
    bin_end_expr,
    bin_hours,
    bin_label,
    fold_other,
    label_groups,
    time_span,
    top_groups,
    with_time_bins,
)
from gpuinsight.reports.mig import mig_fit
from gpuinsight.reports.theme import OTHER, UNALLOCATED, WIDTH

__all__ = ["ChartLike", "fragmentation", "mig_fit", "placeholder", "queue_usage", "savings_by_rule", "top_findings",
           "heatmap", "heatmap_cells", "utilization_heatmap", "waste_breakdown", "waste_over_time"]

def heatmap_cells(df: pl.DataFrame, *, max_nodes: int = 200, max_cells: int = 4800) -> pl.DataFrame:
    """The heatmap's cells from ``gpu_heatmap``'s node-hours, with the columns of the
    ``gpu_heatmap_cells`` model, which makes the same cut in the warehouse (for a frame of one's
    own, e.g. in a notebook): the ``max_nodes`` nodes with the most idle allocated GPU-hours,
    numbered ``n`` in (pool, node) order, and time bins wide enough that nodes x bins stays
    within ``max_cells``; per node and bin the mean GR activity and allocated GPUs."""
    columns = ["n", "node", "pool", "t0", "gr_active_avg", "allocated_gpus", "nodes", "bin_hours", "first_hour",
               "last_hour"]
    df = df.drop_nulls("hour") if "hour" in df.columns else df.clear()
    if df.is_empty():
        return pl.DataFrame(schema=dict.fromkeys(columns, pl.Null))
    df = df.with_columns(
        pl.col("node").cast(pl.Utf8), pl.col("node_pool").cast(pl.Utf8).fill_null("(no pool)"),
        pl.col("gr_active_avg", "allocated_gpus").cast(pl.Float64),
    )
    per_node = df.group_by("node").agg(
        pl.col("node_pool").first().alias("pool"),
        (pl.col("allocated_gpus") * (1 - pl.col("gr_active_avg"))).fill_null(0).sum().alias("idle_alloc"),
    )
    n_all = per_node.height
    per_node = (per_node.sort(["idle_alloc", "node"], descending=[True, False]).head(max_nodes)
                .sort(["pool", "node"]).with_row_index("n"))
    start, end = time_span(df, "hour")
    hours = bin_hours(start, end, max(1, max_cells // per_node.height))
    return (
        df.join(per_node.select("node", "pool", "n"), on="node")
        .with_columns(pl.col("hour").dt.truncate(f"{hours}h").alias("t0"))
        .group_by("n", "node", "pool", "t0")
        .agg(pl.col("gr_active_avg").mean(), pl.col("allocated_gpus").mean())
        .with_columns(nodes=pl.lit(n_all), bin_hours=pl.lit(hours), first_hour=pl.lit(start), last_hour=pl.lit(end))
        .sort("n", "t0")
        .select(columns)
    )


def utilization_heatmap(df: pl.DataFrame, *, max_nodes: int = 200, max_cells: int = 4800) -> ChartLike:
    """GR engine activity per node and time bin (``gpu_heatmap`` model's node-hours).

    Large fleets show the ``max_nodes`` nodes with the most idle allocated GPU-hours; the
    time bins widen so that nodes x bins stays within ``max_cells``.
    """
    return heatmap(heatmap_cells(df, max_nodes=max_nodes, max_cells=max_cells))


def heatmap(cells: pl.DataFrame) -> ChartLike:
    """The utilization heatmap from its cells (the ``gpu_heatmap_cells`` model, or
    :func:`heatmap_cells` of ``gpu_heatmap``'s node-hours)."""
    title = "GPU activity by node over time"
    if cells.is_empty():
        return placeholder(title, "no GPU activity samples in the data")
    per_node = cells.group_by("n").agg(pl.col("node", "pool").first()).sort("n").select(
        pl.col("n").cast(pl.UInt32), pl.col("node").cast(pl.Utf8), pl.col("pool").cast(pl.Utf8))
    n_all, shown = int(cells.get_column("nodes")[0]), per_node.height
    note = (f"the {shown} of {n_all} nodes with the most idle allocated GPU-hours, by node pool" if shown < n_all
            else f"{n_all} nodes, sorted by node pool")
    start, end = cells.get_column("first_hour")[0], cells.get_column("last_hour")[0]
    hours = int(cells.get_column("bin_hours")[0])
    # rounded steadily: the order the means were summed in (DuckDB's parallel sums) does not decide
    # a mean that lies on a rounding boundary (0.0375 shown as 0.037 or 0.038)
    cells = cells.select(
        pl.col("t0").dt.strftime(ISO), steady_round_expr(pl.col("gr_active_avg").cast(pl.Float64), 3).alias("gr"),
        steady_round_expr(pl.col("allocated_gpus").cast(pl.Float64), 1).alias("alloc"), pl.col("n").cast(pl.UInt32),
    )
    order = per_node.get_column("node").to_list()
    labels = len(order) <= 60
    height = max(120, min(900, 14 * len(order)))
    y = alt.Y("node:N", sort=order, title="node" if labels else "node (hover for names)",
              axis=alt.Axis(labels=labels, ticks=labels, labelLimit=220))
    pools = sorted(set(per_node.get_column("pool").to_list()))
    strip = (
        alt.Chart(per_node.select("node", "pool"))
        .mark_rect()
        .encode(y=y, color=alt.Color("pool:N", title="node pool", scale=alt.Scale(scheme="set2", domain=pools),
                                     legend=alt.Legend(orient="left")),
                tooltip=[alt.Tooltip("node:N"), alt.Tooltip("pool:N", title="node pool")])
        .properties(width=10, height=height)
    )
    heat = (
        alt.Chart(cells)
        .transform_lookup(lookup="n", from_=alt.LookupData(per_node.select("n", "node", "pool"), "n", ["node", "pool"]))
        .transform_calculate(t1=bin_end_expr(hours))
        .mark_rect()
        .encode(
            x=alt.X("t0:T", title=f"time (UTC), {bin_label(hours)} bins", axis=time_axis(start, end)),
            x2="t1:T",
            y=alt.Y("node:N", sort=order, axis=None),
            color=alt.Color("gr:Q", title="GR engine active",
                            scale=alt.Scale(domain=[0, 1], scheme=theme.HEATMAP_SCHEME),
                            legend=alt.Legend(format=".0%")),
            tooltip=[alt.Tooltip("node:N"), alt.Tooltip("pool:N", title="node pool"),
                     alt.Tooltip("t0:T", title="from (UTC)", format="%Y-%m-%d %H:%M"),
                     alt.Tooltip("gr:Q", title="GR engine active", format=".0%"),
                     alt.Tooltip("alloc:Q", title="allocated GPUs (avg)")],
        )
        .properties(width=WIDTH - 40, height=height)
    )
    return (
        alt.hconcat(strip, heat, spacing=2)
        .resolve_scale(color="independent")
        .properties(title=heading(title, f"Mean graphics-engine (GR) activity of each node's GPUs; {note}."))
    )


def waste_over_time(df: pl.DataFrame, *, by: str = "namespace", price_note: str = "",
                    top_n: int = 8, max_bins: int = 120) -> ChartLike:
    """Idle, underused and unallocated GPU cost per time bin, stacked by group
    (``waste_hourly_by`` model)."""
    title = f"GPU waste over time, by {by}"
    none = f"(no {by})"
    groups = set(df.get_column("group").drop_nulls().to_list()) - {none, UNALLOCATED, ""} if df.height else set()
    if by == "queue" and not groups:
        return placeholder(title, "no Volcano queues in the data", price_note)
    waste = df.filter(pl.col("bucket").is_in(theme.WASTE_BUCKETS)) if not df.is_empty() else df
    if waste.is_empty() or waste.get_column("usd").fill_null(0).sum() == 0:
        return placeholder(title, f"no GPU waste by {by} in the data", price_note)
    waste = label_groups(waste, "group", none).with_columns(
        pl.when(pl.col("bucket") == "unallocated").then(pl.lit(UNALLOCATED)).otherwise(pl.col("group")).alias("group"),
        pl.col("usd").cast(pl.Float64).fill_null(0.0),
    )
    shown = top_groups(waste, "group", "usd", top_n, keep=[none, UNALLOCATED])
    start, end = time_span(waste, "hour")
    hours = bin_hours(start, end, max_bins)
    # Dollars per hour (the bin's sum over the hours of data in it), so the axis keeps its
    # unit whatever the bin width and a partial last bin is not drawn low.
    timed = with_time_bins(fold_other(waste, "group", shown), "hour", hours)
    per_bin = timed.group_by("t0").agg(pl.col("hour").n_unique().cast(pl.Float64).alias("_h"))
    binned = (
        timed.group_by("t0", "group")
        .agg(
            pl.col("usd").sum().alias("usd"),
            pl.col("usd").filter(pl.col("bucket") == "idle").sum().alias("idle_usd"),
            pl.col("usd").filter(pl.col("bucket") == "underused").sum().alias("underused_usd"),
        )
        .join(per_bin, on="t0")
        .with_columns((pl.col("usd", "idle_usd", "underused_usd") / pl.col("_h")).round(2))
        .drop("_h")
    )
    # Stack in polars (rank order, bottom up) so each bin is exactly one rect per group.
    rank = {g: i for i, g in enumerate(shown)}
    stacked = (
        binned.filter(pl.col("usd") > 0)
        .with_columns(pl.col("group").replace_strict(rank, default=len(rank)).alias("rank"))
        .sort("t0", "rank")
        .with_columns(pl.col("usd").cum_sum().over("t0").round(2).alias("y1"))
        .with_columns((pl.col("y1") - pl.col("usd")).round(2).alias("y0"))
    )
    return (
        alt.Chart(stacked.drop("rank"))
        .transform_calculate(t1=bin_end_expr(hours))
        .mark_rect()
        .encode(
            x=alt.X("t0:T", title=f"time (UTC), {bin_label(hours)} bins", axis=time_axis(start, end)),
            x2="t1:T",
            y=alt.Y("y0:Q", title="waste, $ per hour", axis=alt.Axis(format="$,.0f")),
            y2="y1:Q",
            color=alt.Color("group:N", title=by, scale=theme.group_scale(shown), sort=shown),
            tooltip=[alt.Tooltip("group:N", title=by),
                     alt.Tooltip("t0:T", title="from (UTC)", format="%Y-%m-%d %H:%M"),
                     alt.Tooltip("usd:Q", title="waste, $ per hour", format=USD),
                     alt.Tooltip("idle_usd:Q", title="of it idle, $ per hour", format=USD),
                     alt.Tooltip("underused_usd:Q", title="of it underused, $ per hour", format=USD)],
        )
        .properties(title=heading(title, "Idle + underused cost of allocated GPUs, and cost of unallocated GPUs, "
                                 "in $ per hour" + (f" ({bin_label(hours)} averages)." if hours > 1 else "."),
                                 price_note),
                    width=WIDTH, height=280)
    )


def waste_breakdown(df: pl.DataFrame, *, by: str = "namespace", price_note: str = "", top_n: int = 15,
                    window_hours: float | None = None) -> ChartLike:
    """Where the money goes per group: used / idle / underused / unallocated, in $ and
    GPU-hours side by side (``waste_breakdown`` model).

    With ``window_hours`` (the length of the window the frame covers) the panels show $ per
    730 h month and the average number of GPUs instead of the window's totals, the units of the
    report's headline.
    """
    title = f"Where GPU money goes, by {by}"
    if df.is_empty():
        return placeholder(title, f"no GPU cost by {by} in the data", price_note)
    df = label_groups(df, "group", f"(no {by})")
    usd_cols = [b for b in theme.BUCKETS if f"{b}_usd" in df.columns]
    gh_cols = [b for b in theme.BUCKETS if f"{b}_gpu_hours" in df.columns]
    df = df.with_columns(pl.col([f"{b}_usd" for b in usd_cols] + [f"{b}_gpu_hours" for b in gh_cols]).cast(pl.Float64))
    df = df.with_columns(pl.sum_horizontal([pl.col(f"{b}_usd").fill_null(0) for b in usd_cols]).alias("_total"))
    shown = top_groups(df, "group", "_total", top_n, keep=[f"(no {by})", UNALLOCATED])
    df = fold_other(df, "group", shown)
    usd_scale = HOURS_PER_MONTH / window_hours if window_hours else 1.0
    gh_scale = 1 / window_hours if window_hours else 1.0
    frames = []
    for unit, cols, suffix, scale in (("$", usd_cols, "_usd", usd_scale), ("GPUs", gh_cols, "_gpu_hours", gh_scale)):
        long = (
            df.group_by("group")
            .agg([(pl.col(f"{b}{suffix}").fill_null(0).sum() * scale).alias(b) for b in cols])
            .unpivot(index="group", variable_name="bucket", value_name="value")
            .with_columns(pl.col("value").round(2), pl.lit(unit).alias("unit"))
        )
        frames.append(long)
    long = pl.concat(frames)
    # a bucket with nothing in it gets no bars and no legend entry
    present = set(long.group_by("bucket").agg(pl.col("value").abs().sum()).filter(pl.col("value") > 0)
                  .get_column("bucket").to_list())
    if not present:
        return placeholder(title, f"no priced GPU cost by {by} in the data", price_note)
    buckets = [b for b in theme.BUCKETS if b in present]
    long = long.filter(pl.col("bucket").is_in(buckets) & (pl.col("value") != 0)).with_columns(
        pl.col("bucket").replace_strict({b: i for i, b in enumerate(theme.BUCKETS)}).alias("rank"),
        pl.col("bucket").replace_strict(theme.BUCKET_LABELS).alias("meaning"),
    )
    height = max(80, 24 * len(shown))
    if window_hours:
        usd_title, gh_title, gh_fmt = "$ per month", "GPUs (average over the window)", ",.1f"
    else:
        usd_title, gh_title, gh_fmt = "cost in the window ($)", "GPU-hours in the window", ",.0f"

    def panel(unit: str, fmt: str, axis_title: str) -> alt.Chart:
        return (
            alt.Chart(long)
            .transform_filter(alt.datum.unit == unit)
            .mark_bar()
            .encode(
                x=alt.X("value:Q", stack="zero", title=axis_title, axis=alt.Axis(format=fmt)),
                y=alt.Y("group:N", sort=shown, title=by),
                color=alt.Color("bucket:N", title="bucket", scale=theme.bucket_scale(buckets)),
                order=alt.Order("rank:Q"),
                tooltip=[alt.Tooltip("group:N", title=by), alt.Tooltip("bucket:N"),
                         alt.Tooltip("meaning:N", title="meaning"),
                         alt.Tooltip("value:Q", title=axis_title, format=fmt)],
            )
            .properties(width=WIDTH // 2 - 60, height=height)
        )

    return alt.hconcat(
        panel("$", "$,.0f", usd_title),
        panel("GPUs", gh_fmt, gh_title),
    ).properties(title=heading(title, f"Top {top_n} by cost; the rest summed as {OTHER}.", price_note))


def with_saving(recs: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The findings with a saving to draw (no $0 bars), and how many were left out."""
    priced = recs.filter(pl.col("monthly_savings_usd").round(0) > 0)
    return priced, recs.height - priced.height


def without_saving_note(unpriced: int) -> str:
    if not unpriced:
        return ""
    return (f"Not drawn: {unpriced} finding{'s' if unpriced != 1 else ''} without a direct monthly saving "
            "(listed in the findings table).")


def savings_by_rule(recs: pl.DataFrame, *, price_note: str = "") -> ChartLike:
    """Potential monthly saving per recommendation kind (frame from ``recommendations_frame``)."""
    title = "Potential monthly savings by kind of change"
    if recs.is_empty():
        return placeholder(title, "no recommendations: nothing to save that the rules can see", price_note)
    priced, unpriced = with_saving(recs)
    if priced.is_empty():
        return placeholder(title, f"no finding has a direct monthly saving ({unpriced} without one)", price_note)
    agg = (
        priced.group_by("rule")
        .agg(pl.col("monthly_savings_usd").sum().round(0).alias("usd"), pl.len().alias("findings"))
        .sort("usd", descending=True)
    )
    order = agg.get_column("rule").to_list()
    base = alt.Chart(agg).encode(
        y=alt.Y("rule:N", sort=order, title="rule"),
        x=alt.X("usd:Q", title="$ per month", axis=alt.Axis(format="$,.0f"), scale=padded(agg["usd"])),
        tooltip=[alt.Tooltip("rule:N"), alt.Tooltip("findings:Q"),
                 alt.Tooltip("usd:Q", title="$ per month", format=USD)],
    )
    bars = base.mark_bar().encode(color=alt.Color("rule:N", scale=theme.rule_scale(theme.present(theme.RULES, order)),
                                                  legend=None))
    labels = base.mark_text(align="left", dx=4, fontSize=11).encode(text=alt.Text("usd:Q", format=USD))
    return alt.layer(bars, labels).properties(
        title=heading(title, without_saving_note(unpriced), price_note), width=WIDTH - 120,
        height=max(60, 28 * len(order)),
    )


def top_findings(recs: pl.DataFrame, *, n: int = 15, price_note: str = "") -> ChartLike:
    """The ``n`` findings with the biggest monthly saving, coloured by rule."""
    title = "Findings by monthly saving"
    if recs.is_empty():
        return placeholder(title, "no recommendations", price_note)
    priced, unpriced = with_saving(recs)
    if priced.is_empty():
        return placeholder(title, f"no finding has a direct monthly saving ({unpriced} without one)", price_note)
    if priced.height > n:
        title = f"Top {n} findings by monthly saving"
    top = priced.head(n).with_row_index("rank", offset=1).with_columns(
        (pl.col("rank").cast(pl.Utf8) + ". " + pl.col("target")).str.slice(0, 60).alias("label"),
        pl.col("monthly_savings_usd").round(0),
    )
    order = top.get_column("label").to_list()
    base = alt.Chart(top).encode(
        y=alt.Y("label:N", sort=order, title=None, axis=alt.Axis(labelLimit=320)),
        x=alt.X("monthly_savings_usd:Q", title="$ per month", axis=alt.Axis(format="$,.0f"),
                scale=padded(top["monthly_savings_usd"])),
        tooltip=[alt.Tooltip("title:N"), alt.Tooltip("target:N"), alt.Tooltip("rule:N"),
                 alt.Tooltip("monthly_savings_usd:Q", title="$ per month", format=USD),
                 alt.Tooltip("confidence:Q", format=".0%")],
    )
    shown_rules = theme.present(theme.RULES, top.get_column("rule").to_list())
    bars = base.mark_bar().encode(color=alt.Color("rule:N", scale=theme.rule_scale(shown_rules), title="rule"))
    labels = base.mark_text(align="left", dx=4, fontSize=11).encode(
        text=alt.Text("monthly_savings_usd:Q", format=USD))
    return alt.layer(bars, labels).properties(
        title=heading(title, without_saving_note(unpriced), price_note), width=WIDTH - 260,
        height=max(60, 24 * len(order)),
    )


def fragmentation(df: pl.DataFrame, *, top_pools: int = 6, max_bins: int = 120) -> ChartLike:
    """Free GPUs stranded on partly-used nodes vs free GPUs on empty nodes, per node pool
    over time (``fragmentation`` model)."""
    title = "Fragmentation: where the free GPUs are, per node pool"
    if df.is_empty() or df.get_column("hour").drop_nulls().is_empty():
        return placeholder(title, "no node allocation history in the data")
    counts = ["free_gpus_partial_nodes", "free_gpus_empty_nodes", "partial_nodes", "empty_nodes"]
    df = label_groups(df.drop_nulls("hour"), "node_pool", "(no pool)").with_columns(pl.col(counts).cast(pl.Float64))
    # a pool with no free GPU in the whole window would be an empty panel: named in the subtitle instead
    free = df.group_by("node_pool").agg((pl.col("free_gpus_partial_nodes").fill_null(0)
                                         + pl.col("free_gpus_empty_nodes").fill_null(0)).sum().alias("free"))
    full = sorted(free.filter(pl.col("free") <= 0).get_column("node_pool").to_list())
    df = df.filter(~pl.col("node_pool").is_in(full))
    if df.is_empty():
        return placeholder(title, "no free GPUs in any node pool in the window")
    shown = top_groups(df, "node_pool", "free_gpus_partial_nodes", top_pools, keep=["(no pool)"])
    start, end = time_span(df, "hour")
    hours = bin_hours(start, end, max_bins)
    # Sum pools per hour first (levels), then average the hours within a bin.
    hourly = (fold_other(df, "node_pool", shown).group_by("hour", "node_pool")
              .agg(pl.col("free_gpus_partial_nodes", "free_gpus_empty_nodes", "partial_nodes", "empty_nodes")
                   .fill_null(0).sum()))
    binned = (
        with_time_bins(hourly, "hour", hours)
        .group_by("t0", "node_pool")
        .agg(pl.col("free_gpus_partial_nodes", "free_gpus_empty_nodes", "partial_nodes", "empty_nodes").mean().round(1))
    )
    long = pl.concat([
        binned.select("t0", "node_pool", pl.lit(theme.FRAGMENT_KINDS[0]).alias("kind"),
                      pl.col("free_gpus_partial_nodes").alias("free_gpus"), pl.col("partial_nodes").alias("nodes")),
        binned.select("t0", "node_pool", pl.lit(theme.FRAGMENT_KINDS[1]).alias("kind"),
                      pl.col("free_gpus_empty_nodes").alias("free_gpus"), pl.col("empty_nodes").alias("nodes")),
    ]).sort("node_pool", "t0", "kind")
    drawn = long.group_by("kind").agg(pl.col("free_gpus").sum()).filter(pl.col("free_gpus") > 0)
    kinds = theme.present(theme.FRAGMENT_KINDS, drawn.get_column("kind").to_list()) or list(theme.FRAGMENT_KINDS)
    return (
        alt.Chart(long)
        .mark_area(interpolate="step-after", opacity=0.85)
        .encode(
            x=alt.X("t0:T", title=f"time (UTC), {bin_label(hours)} average", axis=time_axis(start, end)),
            y=alt.Y("free_gpus:Q", stack="zero", title="free GPUs"),
            color=alt.Color("kind:N", title="free GPUs", scale=theme.scale_for(theme.FRAGMENT_COLORS, kinds)),
            order=alt.Order("kind:N", sort="descending"),
            tooltip=[alt.Tooltip("node_pool:N", title="node pool"),
                     alt.Tooltip("t0:T", title="from (UTC)", format="%Y-%m-%d %H:%M"),
                     alt.Tooltip("kind:N"), alt.Tooltip("free_gpus:Q", title="free GPUs"),
                     alt.Tooltip("nodes:Q", title="nodes of that kind")],
        )
        .properties(width=WIDTH - 60, height=90)
        .facet(row=alt.Row("node_pool:N", sort=shown, title=None,
                           header=alt.Header(labelAngle=0, labelAlign="left", labelFontWeight="bold")))
        .properties(title=heading(title, "Free GPUs on partly-used nodes cannot be scaled down and often cannot "
                                 "host multi-GPU pods; binpacking turns them into empty nodes.",
                                 f"Not drawn, no free GPU all window: {', '.join(full)}." if full else ""))
    )


def queue_usage(df: pl.DataFrame, *, top_n: int = 30) -> ChartLike:
    """Volcano queues: guarantee / deserved / capability against allocated and used GPUs
    (``queue_usage`` model)."""
    title = "Volcano queues: quota vs allocated vs used GPUs"
    if df.is_empty():
        return placeholder(title, "no Volcano queues in the data")
    nums = ["weight", "deserved_gpu", "capability_gpu", "guarantee_gpu", "allocated_gpu_avg", "allocated_gpu_p95",
            "used_gpu_avg", "pending_p95_s"]
    df = df.with_columns(pl.col("queue").cast(pl.Utf8).fill_null("(unnamed)"), pl.col(nums).cast(pl.Float64))
    cols = {"guarantee": "guarantee_gpu", "deserved": "deserved_gpu", "capability": "capability_gpu",
            "allocated (avg)": "allocated_gpu_avg", "used (avg)": "used_gpu_avg"}
    df = df.with_columns(pl.max_horizontal(pl.col("deserved_gpu", "allocated_gpu_avg").fill_null(0)).alias("_w"))
    df = df.sort(["_w", "queue"], descending=[True, False]).head(top_n)
    finite = [v for c in ("guarantee_gpu", "deserved_gpu", "allocated_gpu_avg", "allocated_gpu_p95", "used_gpu_avg")
              for v in df.get_column(c).drop_nulls().to_list()]
    cap_limit = 4 * max([1.0, *finite])
    stats = df.select(
        "queue", "weight", "deserved_gpu", "capability_gpu", "allocated_gpu_p95", "pending_p95_s"
    ).with_columns(
        pl.when(pl.col("capability_gpu").is_null() | ~pl.col("capability_gpu").is_finite()
                | (pl.col("capability_gpu") > cap_limit))
        .then(pl.lit("unlimited")).otherwise(pl.col("capability_gpu").round(2).cast(pl.Utf8)).alias("capability")
    )
    long = (
        df.select("queue", *[pl.col(c).alias(k) for k, c in cols.items()])
        .unpivot(index="queue", variable_name="measure", value_name="gpus")
        .filter(pl.col("gpus").is_not_null() & pl.col("gpus").is_finite() & (pl.col("gpus") <= cap_limit))
        .with_columns(pl.col("gpus").round(2))
        .join(stats.select("queue", "weight", "capability", "allocated_gpu_p95", "pending_p95_s"), on="queue")
    )
    # a measure no queue has (e.g. no guarantees) gets no legend entry; zeros draw nothing
    long = long.filter(pl.col("gpus") > 0)
    if long.is_empty():
        return placeholder(title, "the Volcano queues have no GPU quota or use in the data")
    measures = theme.present(theme.QUEUE_MEASURES, long.get_column("measure").to_list())
    order = df.get_column("queue").to_list()
    return (
        alt.Chart(long)
        .mark_bar()
        .encode(
            y=alt.Y("queue:N", sort=order, title="queue"),
            yOffset=alt.YOffset("measure:N", sort=measures, scale=alt.Scale(domain=measures)),
            x=alt.X("gpus:Q", title="GPUs"),
            color=alt.Color("measure:N", title="measure", scale=theme.scale_for(theme.QUEUE_COLORS, measures),
                            sort=measures),
            tooltip=[alt.Tooltip("queue:N"), alt.Tooltip("measure:N"), alt.Tooltip("gpus:Q", title="GPUs"),
                     alt.Tooltip("weight:Q"), alt.Tooltip("capability:N"),
                     alt.Tooltip("allocated_gpu_p95:Q", title="allocated p95"),
                     alt.Tooltip("pending_p95_s:Q", title="pending p95 (s)", format=",.0f")],
        )
        .properties(title=heading(title, "Deserved share vs what the queue held (allocated) and kept busy (used); "
                                 "capability bars omitted when unlimited."),
                    width=WIDTH - 120, height=max(80, 70 * len(order)))
    )

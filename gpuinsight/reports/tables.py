""""Who wastes it": spend and waste per namespace or queue, per month, as numbers.

The rows come from the ``waste_breakdown`` model (cost in the window per bucket); they are
turned into monthly run rates with the same 730 h month as the headline, so the totals row
equals the headline's monthly spend and waste.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from gpuinsight.plan import HOURS_PER_MONTH
from gpuinsight.reports.frames import clusters_in, fold_other, label_groups, top_groups
from gpuinsight.reports.theme import BUCKETS, OTHER, UNALLOCATED, WASTE_BUCKETS

# The money columns of a table row, in display order.
MONEY = ("spend", *BUCKETS, "waste")


@dataclass
class WasteTable:
    by: str
    rows: pl.DataFrame  # group, spend, used, idle, underused, unallocated, unmeasured, waste, groups
    totals: dict[str, float]  # the same money columns over every group (nothing folded away)
    folded: int  # how many groups the "(other)" row stands for
    cluster: str | None = None  # the one cluster of a fleet of several the rows are of

    @property
    def has_unmeasured(self) -> bool:
        return self.totals.get("unmeasured", 0.0) > 0


def monthly_factor(window_hours: float | None) -> float | None:
    """Dollars in the window -> dollars per 730 h month (``None`` without a window)."""
    return HOURS_PER_MONTH / window_hours if window_hours else None


def waste_tables(by_ns: pl.DataFrame, by_queue: pl.DataFrame, *, factor: float,
                 by_cluster_queue: pl.DataFrame | None = None) -> list[WasteTable]:
    """The "who wastes it" tables: per namespace, and per Volcano queue and per Kueue ClusterQueue
    when they are in use; with several clusters, one row per cluster first (the fleet) and then
    each cluster's own tables (a namespace of one cluster is not the namespace of the same name in
    another)."""
    others = [(by_queue, "queue")] + ([(by_cluster_queue, "ClusterQueue")] if by_cluster_queue is not None else [])
    clusters = sorted(set(clusters_in(by_ns)) | set(clusters_in(by_queue)))
    if len(clusters) <= 1:
        tables = [waste_table(by_ns, by="namespace", factor=factor),
                  *[waste_table(df, by=by, factor=factor) for df, by in others]]
        return [tables[0]] + [t for t in tables[1:] if has_groups(t)]
    fleet = (by_ns.with_columns(pl.col("cluster").alias("group"))
             .group_by("group").agg(pl.col([c for c in by_ns.columns if c.endswith("_usd")]).sum()))
    out = [waste_table(fleet, by="cluster", factor=factor, top_n=len(clusters))]
    for cluster in clusters:
        mine = [waste_table(df.filter(pl.col("cluster") == cluster), by=by, factor=factor, cluster=cluster)
                for df, by in ((by_ns, "namespace"), *others)]
        out += [mine[0]] + [t for t in mine[1:] if has_groups(t)]
    return out


def waste_table(df: pl.DataFrame, *, by: str, factor: float, top_n: int = 15,
                cluster: str | None = None) -> WasteTable:
    """The ``top_n`` groups with the most waste per month, the rest as one "(other)" row;
    "(no <by>)" and "(unallocated)" rows last. ``factor`` scales window dollars to a month."""
    none = f"(no {by})"
    if df.is_empty():
        empty = pl.DataFrame(schema={"group": pl.Utf8, **{c: pl.Float64 for c in MONEY}, "groups": pl.Int64})
        return WasteTable(by, empty, dict.fromkeys(MONEY, 0.0), 0, cluster)
    money = label_groups(df, "group", none).select(
        "group",
        *[(pl.col(f"{b}_usd").cast(pl.Float64).fill_null(0.0) * factor if f"{b}_usd" in df.columns
           else pl.lit(0.0)).alias(b) for b in BUCKETS],
    ).with_columns(
        pl.sum_horizontal(list(BUCKETS)).alias("spend"),
        pl.sum_horizontal(list(WASTE_BUCKETS)).alias("waste"),
        pl.lit(1, dtype=pl.Int64).alias("groups"),
    )
    shown = top_groups(money, "group", "waste", top_n, keep=[none, UNALLOCATED])
    rank = {g: i for i, g in enumerate(shown)}
    rows = (
        fold_other(money, "group", shown)
        .group_by("group").agg(pl.col(*MONEY, "groups").sum())
        .with_columns(pl.col("group").replace_strict(rank, default=len(rank)).alias("_rank"))
        .sort("_rank").drop("_rank")
        .select("group", *MONEY, "groups")
    )
    folded = int(rows.filter(pl.col("group") == OTHER).get_column("groups").sum() or 0)
    totals = {c: float(money.get_column(c).sum()) for c in MONEY}
    return WasteTable(by, rows, totals, folded, cluster)


def has_groups(table: WasteTable) -> bool:
    """Whether the table names any real group (not only "(no queue)" and "(unallocated)")."""
    return any(not g.startswith("(") or g == OTHER for g in table.rows.get_column("group").to_list())

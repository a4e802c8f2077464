"""The MIG fit chart: each workload's measured compute and memory need against the MIG
profiles of its GPU model (profile table: the ``mig_catalog`` SQL model), each point coloured
by the instance the ``mig`` rule's fit gives it (:func:`gpuinsight.rules.mig_packing.smallest_fit`,
on the rule's compute figure and usable memory per profile)."""

from __future__ import annotations

import math

import altair as alt
import polars as pl

from gpuinsight.reports import theme
from gpuinsight.reports.chartkit import USD, ChartLike, heading, placeholder
from gpuinsight.reports.theme import WIDTH
from gpuinsight.rules.common import compute_peak_of
from gpuinsight.rules.mig_packing import MigProfile, slices_for
from gpuinsight.rules.mig_packing import smallest_fit as smallest_instance
from gpuinsight.sql.rows import typed_rows


def smallest_fit(profiles: pl.DataFrame, model: str, compute: float | None, fb_mib: float | None, *,
                 memory_headroom: float = 0.0, compute_target: float = 1.0) -> str | None:
    """The smallest MIG instance of ``model`` the ``mig`` rule's fit gives a workload needing
    ``compute`` (a share of the GPU) and ``fb_mib``, with the rule's memory headroom and compute
    target (by default the bare need).

    ``None`` when nothing was measured, "whole GPU" when no instance short of the whole GPU fits.
    """
    if compute is None or fb_mib is None or any(isinstance(v, float) and math.isnan(v) for v in (compute, fb_mib)):
        return None
    catalog = [MigProfile.from_row(r) for r in typed_rows("mig_catalog", profiles.filter(pl.col("gpu_model") == model))]
    best = smallest_instance(catalog, fb_mib * (1 + memory_headroom), slices_for(compute, compute_target))
    return best.profile if best is not None else "whole GPU"


def fit_class(profile: str | None) -> str:
    if profile is None:
        return "not measured"
    if profile == "whole GPU":
        return profile
    return profile.split(".", 1)[0]  # "1g.10gb" -> "1g"


def mig_fit(df: pl.DataFrame, profiles: pl.DataFrame, *, max_points: int = 400, max_models: int = 4,
            max_labels: int = 12, memory_headroom: float = 0.0, compute_target: float = 1.0) -> ChartLike:
    """Peak GPU memory against compute need per workload, one panel per MIG-capable GPU
    model, with that model's MIG profile boundaries as rules (``workload_gpu_profile``); the
    compute need is the rule's (:func:`~gpuinsight.rules.common.compute_peak`), the colour the
    instance the rule's fit gives it with ``memory_headroom`` and ``compute_target`` (the
    ``consolidation`` settings).

    The ``max_labels`` costliest points of each panel are labelled with their workload."""
    title = "MIG fit: compute and memory need per workload"
    models = set(profiles.get_column("gpu_model").to_list())
    on_mig = df.filter(pl.col("gpu_model").is_in(list(models))) if not df.is_empty() else df
    if on_mig.is_empty():
        return placeholder(title, "no workloads on MIG-capable GPUs (A30, A100, H100, H200) in the data")
    from gpuinsight.rules.production import with_production  # production is a rule setting, not SQL

    on_mig = with_production(on_mig)
    on_mig = on_mig.with_columns(
        pl.col("sm_p95", "gr_p95", "fb_max_mib", "fb_p95_mib", "cost_usd", "gpu_hours").cast(pl.Float64),
        # the rule's compute figure; a workload with no activity sample has none
        pl.Series("sm", [compute_peak_of(r.get("peak_p95"), r.get("gr_p95"), r.get("sm_p95")) if any(r.get(k) is not None for k in ("peak_p95", "gr_p95", "sm_p95"))
                         else None for r in on_mig.iter_rows(named=True)], dtype=pl.Float64),
    ).with_columns(
        pl.coalesce("fb_max_mib", "fb_p95_mib").alias("fb"),
        pl.col("cost_usd").fill_null(0.0),
    )
    model_order = (on_mig.group_by("gpu_model").agg(pl.col("cost_usd").sum())
                   .sort(["cost_usd", "gpu_model"], descending=[True, False]).get_column("gpu_model").to_list())
    panels = []
    per_model = max(1, max_points // min(len(model_order), max_models))
    built = []
    for model in model_order[:max_models]:
        pts = on_mig.filter(pl.col("gpu_model") == model).sort("cost_usd", descending=True).head(per_model)
        fits = [smallest_fit(profiles, model, sm, fb, memory_headroom=memory_headroom, compute_target=compute_target)
                for sm, fb in zip(pts["sm"], pts["fb"], strict=True)]
        pts = pts.with_columns(
            pl.Series("fits", [f or "not measured" for f in fits], dtype=pl.Utf8),
            pl.Series("fit_class", [fit_class(f) for f in fits], dtype=pl.Utf8),
            (pl.col("sm") * 100).round(1).alias("sm_pct"),
            (pl.col("fb") / 1024).round(2).alias("fb_gib"),
            pl.when(pl.col("production")).then(pl.lit("production")).otherwise(pl.lit("other")).alias("tier"),
            pl.col("cost_usd").round(0),
            pl.col("gpu_hours").round(1),
        ).select("namespace", "workload", "workload_kind", "tier", "sm_pct", "fb_gib", "fits", "fit_class",
                 "gpu_hours", "cost_usd")
        built.append((model, pts))
    drawn = pl.concat([p for _, p in built])
    unmeasured = drawn.filter(pl.col("sm_pct").is_null() | pl.col("fb_gib").is_null()).height
    # legends list only what is drawn (a point without samples has no position)
    measured = drawn.drop_nulls(["sm_pct", "fb_gib"])
    if measured.is_empty():
        return placeholder(title, f"no compute or memory samples for the {unmeasured} workloads on MIG-capable GPUs")
    classes = theme.present(theme.FIT_CLASSES, measured.get_column("fit_class").to_list())
    tiers = theme.present(("production", "other"), measured.get_column("tier").to_list())
    all_labelled = all(p.drop_nulls(["sm_pct", "fb_gib"]).height <= max_labels for _, p in built)
    for model, pts in built:
        # the costliest measured points carry their workload's name (pts is sorted by cost)
        pts = pts.drop_nulls(["sm_pct", "fb_gib"])
        names = pts.head(max_labels).with_columns(pl.col("workload").str.slice(0, 28).alias("label"))
        prof = profiles.filter((pl.col("gpu_model") == model) & ~pl.col("profile").str.contains(r"\+"))
        mem_max = float(prof.get_column("memory_gb").max() or 80)
        vlines = (prof.group_by("compute_slices").agg(pl.col("profile").first())
                  .with_columns((pl.col("compute_slices") / 7 * 100).round(2).alias("x"),
                                (pl.col("compute_slices").cast(pl.Utf8) + "g").alias("label"),
                                pl.lit(mem_max).alias("y")))
        hlines = (prof.group_by("memory_gb").agg(pl.col("profile").sort_by("compute_slices").first())
                  .with_columns(pl.col("profile").str.split(".").list.last().alias("label"),
                                pl.lit(100.0).alias("x")))
        x = alt.X("sm_pct:Q", title="compute need: short-window p95 of GR/SM activity (% of GPU)", scale=alt.Scale(domain=[0, 100]),
                  axis=alt.Axis(values=list(range(0, 101, 10))))
        y = alt.Y("fb_gib:Q", title="peak GPU memory (GiB)", scale=alt.Scale(domain=[0, mem_max]))
        rule_style = {"color": "#90a4ae", "strokeDash": [4, 3], "strokeWidth": 1}
        layers = [
            alt.Chart(vlines).mark_rule(**rule_style).encode(x="x:Q"),
            alt.Chart(vlines).mark_text(dy=-6, fontSize=10, color="#546e7a", baseline="bottom")
            .encode(x="x:Q", y=alt.Y("y:Q"), text="label:N"),
            alt.Chart(hlines).mark_rule(**rule_style).encode(y="memory_gb:Q"),
            alt.Chart(hlines).mark_text(align="right", baseline="top", dx=-3, dy=3, fontSize=10, color="#546e7a")
            .encode(x="x:Q", y="memory_gb:Q", text="label:N"),
            alt.Chart(pts).mark_point(filled=True, opacity=0.75).encode(
                x=x, y=y,
                size=alt.Size("gpu_hours:Q", title="GPU-hours", scale=alt.Scale(range=[30, 600])),
                color=alt.Color("fit_class:N", title="fits in", scale=theme.scale_for(theme.FIT_COLORS, classes)),
                shape=alt.Shape("tier:N", title="tier", scale=alt.Scale(
                    domain=tiers, range=[{"production": "diamond", "other": "circle"}[t] for t in tiers])),
                tooltip=[alt.Tooltip("namespace:N"), alt.Tooltip("workload:N"), alt.Tooltip("workload_kind:N", title="kind"),
                         alt.Tooltip("tier:N"), alt.Tooltip("sm_pct:Q", title="compute p95 %"),
                         alt.Tooltip("fb_gib:Q", title="peak memory GiB"), alt.Tooltip("fits:N", title="smallest MIG profile"),
                         alt.Tooltip("gpu_hours:Q", title="GPU-hours"), alt.Tooltip("cost_usd:Q", title="cost in the window $", format=USD)],
            ),
            alt.Chart(names).mark_text(align="left", baseline="middle", dx=11, fontSize=10, color="#37474f")
            .encode(x="sm_pct:Q", y="fb_gib:Q", text="label:N"),
        ]
        panels.append(alt.layer(*layers).properties(title=model, width=WIDTH - 180, height=300))
    note = ("Dashed lines: MIG profile compute (1g = 1/7 of the SMs) and memory boundaries of that GPU model. "
            f"Colour: the smallest instance the mig rule would give (peak memory + {memory_headroom:.0%}, compute "
            f"at most {compute_target:.0%} of the instance).")
    where = ("Each point is labelled with its workload." if all_labelled
             else f"The {max_labels} costliest workloads of each GPU model are labelled; hover for the others.")
    missing = (f"{unmeasured} workload{'s' if unmeasured != 1 else ''} without compute or memory samples "
               "not drawn." if unmeasured else "")
    return alt.vconcat(*panels).properties(
        title=heading(title, note, "A point below and left of a profile's lines fits its bare need in that profile. " + where,
                      missing)
    )

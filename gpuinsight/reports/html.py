"""The waste & savings report: one self-contained HTML file (plus optional PNG/SVG charts).

Headline numbers first (monthly spend, waste, potential savings; the window and the price
catalog stated once under them), then who wastes it (per namespace, per queue, per Kueue ClusterQueue), the
charts, and the findings table. Vega, Vega-Lite and Vega-Embed are inlined, so the file
opens with no network and no CDN.

The findings are the plan it is given (``plan=``: the stored plan, one made with non-default
rule settings, a reviewed plan file; :meth:`gpuinsight.api.GpuInsight.report` passes the stored
plan when it judged the report's window); a source given no plan is asked to ``recommend()``.

A warehouse of several clusters gives one report for the whole fleet (its tables grouped by
cluster, the findings naming theirs, each chart's nodes, pools, queues and namespaces named with
their cluster) or, with ``cluster=``, the report of that one cluster: every model asked for it
and the plan's findings in it.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from datetime import date, datetime
from pathlib import Path
from typing import Any, Protocol

import polars as pl
import vl_convert as vlc

from gpuinsight.errors import BadInput, NotFound
from gpuinsight.plan.kinds import SCALE_TO_ZERO
from gpuinsight.reports import charts, ray_keda, theme, unit_economics
from gpuinsight.reports.assets import vegalite_version
from gpuinsight.reports.frames import cluster_scoped, recommendations_frame
from gpuinsight.reports.page import MAX_TABLE_ROWS, Report, price_note, render_html
from gpuinsight.reports.signals import input_starved_charts, signals_section
from gpuinsight.reports.tables import monthly_factor, waste_tables
from gpuinsight.reports.upload import upload_files
from gpuinsight.rules.engine import resolve_all
from gpuinsight.rules.production import with_production

__all__ = ["MAX_TABLE_ROWS", "Report", "ReportSource", "build_report", "chart_spec", "price_note", "render_html",
           "write_images", "write_report"]

# Charts whose marks are dollars: their PNG/SVG exports, which travel alone, name the prices.
DOLLAR_CHARTS = frozenset({"savings-by-rule", "top-findings", "waste-breakdown", "waste-by-namespace",
                           "waste-by-queue", "cost-per-token"})


class ReportSource(Protocol):
    """What the report needs: :class:`gpuinsight.api.GpuInsight` or a stand-in."""

    config: Any

    def query(self, name: str, **params: Any) -> pl.DataFrame: ...

    def recommend(self) -> Any: ...


class ClusterView:
    """A report source narrowed to one cluster: a model that takes ``cluster`` is asked for it,
    the rows of any other are kept when their ``cluster`` column names it; its plan is that
    cluster's findings."""

    def __init__(self, source: ReportSource, cluster: str) -> None:
        self.source, self.cluster = source, cluster
        self.config = source.config

    def takes_cluster(self, name: str) -> bool:
        registry = getattr(self.source, "registry", None)
        return registry is not None and any(p.name == "cluster" for p in registry.get(name).params)

    def query(self, name: str, **params: Any) -> pl.DataFrame:
        if self.takes_cluster(name):
            params["cluster"] = self.cluster
            return self.source.query(name, **params)
        frame = self.source.query(name, **params)
        return frame.filter(pl.col("cluster") == self.cluster) if "cluster" in frame.columns else frame

    def recommend(self) -> Any:
        return self.source.recommend().of_cluster(self.cluster)


def build_report(gi: ReportSource, plan: Any = None, *, cluster: str | None = None) -> Report:
    """Run the SQL models (and the rules, unless ``plan`` is given) and build every chart and
    table (no file is written): of the whole fleet, or of ``cluster`` alone. The rules and the
    charts read some models alike (the per-workload profile): a source that can keep answers
    (``reusing_answers``) runs them once."""
    reuse = getattr(gi, "reusing_answers", None)
    with reuse() if reuse is not None else contextlib.nullcontext():
        if cluster is None:
            return _build_report(gi, plan)
        known = [str(c) for c in gi.query("analysis_window").get_column("cluster").to_list()]
        if cluster not in known:
            raise BadInput(f"--cluster {cluster}: the warehouse holds no data of it (its clusters: "
                           f"{', '.join(sorted(known)) or 'none'})")
        return _build_report(ClusterView(gi, cluster), None if plan is None else plan.of_cluster(cluster),
                             cluster=cluster)


def _build_report(gi: ReportSource, plan: Any, *, cluster: str | None = None) -> Report:
    summary_df = gi.query("fleet_summary")
    summary = summary_df.row(0, named=True) if summary_df.height else {}
    if plan is None:
        plan = gi.recommend()
    catalog = summary.get("catalog") or getattr(plan, "catalog", None)
    note = price_note(catalog, summary.get("catalog_as_of"))
    recs = recommendations_frame(plan.recommendations)
    hours = summary.get("hours")
    by_ns, by_queue = gi.query("waste_breakdown", by="namespace"), gi.query("waste_breakdown", by="queue")
    factor = monthly_factor(hours)
    # Kueue: by the ClusterQueue the pods were admitted to, where Kueue is there
    tables = waste_tables(by_ns, by_queue, factor=factor,
                          by_cluster_queue=gi.query("waste_breakdown", by="cluster_queue")) if factor else []
    # the rules' settings as configured (the production classifier, the MIG fit's headroom)
    settings = resolve_all(getattr(getattr(gi, "config", None), "rule_settings", None) or {})
    # several clusters in one chart: each namespace, node, pool and queue named with its cluster
    built = [
        ("savings-by-rule", charts.savings_by_rule(recs)),
        ("top-findings", charts.top_findings(cluster_scoped(recs, "target"))),
        ("waste-breakdown", charts.waste_breakdown(cluster_scoped(by_ns, "group"), window_hours=hours)),
        ("waste-by-namespace", charts.waste_over_time(
            cluster_scoped(gi.query("waste_hourly_by", by="namespace"), "group"), by="namespace")),
        ("waste-by-queue", charts.waste_over_time(
            cluster_scoped(gi.query("waste_hourly_by", by="queue"), "group"), by="queue")),
        ("utilization-heatmap", charts.heatmap(_heatmap_cells(gi))),
        ("mig-fit", charts.mig_fit(with_production(gi.query("workload_gpu_profile"), settings["production"]),
                                   gi.query("mig_catalog"), memory_headroom=settings["consolidation"]["memory_headroom"],
                                   compute_target=settings["consolidation"]["compute_target"])),
        ("fragmentation", charts.fragmentation(cluster_scoped(gi.query("fragmentation"), "node_pool"))),
        ("queue-usage", charts.queue_usage(cluster_scoped(gi.query("queue_usage"), "queue"))),
        *input_starved_charts(gi.query, plan.recommendations),
    ]
    economics = _optional(gi, "unit_economics")
    if economics.height:
        built.append(("cost-per-token", unit_economics.cost_per_token_trend(_optional(gi, "unit_economics_daily"))))
    sleepy = SCALE_TO_ZERO.of(plan.recommendations)
    if sleepy:
        built.append(("scale-to-zero-week", ray_keda.scale_to_zero_week(sleepy)))
    # the title names the cluster viewed, else the clusters the data holds
    cluster = cluster or summary.get("clusters") or "cluster"
    total = getattr(plan, "total_monthly_savings_usd", None)
    if total is None:
        total = float(recs.get_column("monthly_savings_usd").sum())
    return Report(cluster=cluster, summary=summary, price_note=note, findings=recs, total_savings_usd=float(total),
                  charts=built, notes=list(getattr(plan, "notes", []) or []),
                  plan_id=getattr(plan, "plan_id", None), waste_tables=tables,
                  sections=[*ray_keda.sections(plan.recommendations), signals_section(plan.recommendations),
                            unit_economics.section(economics, _optional(gi, "energy_by", by="team"))])


def _heatmap_cells(gi: ReportSource) -> pl.DataFrame:
    """The heatmap's cells, cut in the warehouse (``gpu_heatmap_cells``: a few thousand rows, not
    every node-hour), or by the chart from ``gpu_heatmap`` for a source that holds only that."""
    try:
        return gi.query("gpu_heatmap_cells")
    except NotFound:
        return charts.heatmap_cells(cluster_scoped(gi.query("gpu_heatmap"), "node"))


def _optional(gi: ReportSource, name: str, **params: Any) -> pl.DataFrame:
    """A model a stand-in source (a notebook's frames, the preview) may not hold: empty then."""
    try:
        return gi.query(name, **params)
    except NotFound:
        return pl.DataFrame()


def write_report(gi: ReportSource, out: Path, *, plan: Any = None, png_dir: Path | None = None,
                 upload: str | None = None, s3_endpoint_url: str | None = None, cluster: str | None = None) -> Path:
    """Write the report to ``out``; optionally PNG + SVG per chart into ``png_dir`` and an
    upload of everything to ``upload`` (``s3://bucket/prefix``).

    ``plan`` is the plan to render (a :class:`~gpuinsight.rules.base.Plan`); by default the
    rules run with the configured settings. ``s3_endpoint_url`` (or ``config.s3_endpoint_url``)
    points at an S3-compatible store. ``cluster``: the report of that cluster alone (default:
    the whole fleet).
    """
    report = build_report(gi, plan, cluster=cluster)
    specs = {name: chart_spec(chart) for name, chart in report.charts}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(out, render_html(report, specs).encode("utf-8"))
    files: list[tuple[Path, str]] = [(out, out.name)]
    if png_dir is not None:
        files += [(p, f"{Path(png_dir).name}/{p.name}")
                  for p in write_images(specs, Path(png_dir), price_note=report.price_note)]
    if upload:
        endpoint = s3_endpoint_url or getattr(gi.config, "s3_endpoint_url", None)
        upload_files(files, upload, endpoint_url=endpoint)
    return out


def chart_spec(chart: charts.ChartLike) -> dict[str, Any]:
    """The Vega-Lite spec with the report theme and all data inline (JSON-safe)."""
    spec = chart.to_dict()
    spec.pop("$schema", None)
    spec["config"] = {**theme.CONFIG, **spec.get("config", {})}
    return _json_safe(spec)  # type: ignore[no-any-return]


def write_images(specs: dict[str, dict[str, Any]], folder: Path, *, price_note: str = "") -> list[Path]:
    """PNG (2x) and SVG of every chart, rendered by vl-convert; returns the files written.

    An image travels without the page that names the prices once, so the charts in dollars
    carry ``price_note`` as a last subtitle line."""
    folder.mkdir(parents=True, exist_ok=True)
    vl = vegalite_version()
    written: list[Path] = []
    for name, spec in specs.items():
        if price_note and name in DOLLAR_CHARTS:
            spec = _with_subtitle(spec, price_note)
        png = folder / f"{name}.png"
        svg = folder / f"{name}.svg"
        _atomic_write(png, vlc.vegalite_to_png(spec, vl_version=vl, scale=2))
        _atomic_write(svg, vlc.vegalite_to_svg(spec, vl_version=vl).encode("utf-8"))
        written += [png, svg]
    return written


def _with_subtitle(spec: dict[str, Any], line: str) -> dict[str, Any]:
    title = spec.get("title")
    if isinstance(title, dict):
        sub = title.get("subtitle") or []
        title = {**title, "subtitle": [*([sub] if isinstance(sub, str) else sub), line]}
    else:
        title = {"text": title or "", "subtitle": [line]}
    return {**spec, "title": title}


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, datetime | date):
        return obj.isoformat()
    return obj

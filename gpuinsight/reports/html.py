"""The waste & savings report: one self-contained HTML file (plus optional PNG/SVG charts).

Headline numbers first (monthly spend, waste, potential savings, each naming the price
catalog and its date), then the charts, then the findings table. Vega, Vega-Lite and
Vega-Embed are inlined, so the file opens with no network and no CDN.
"""

from __future__ import annotations

import html
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Protocol

import polars as pl
import vl_convert as vlc

from gpuinsight.reports import charts, theme
from gpuinsight.reports.assets import vega_bundle, vegalite_version, versions
from gpuinsight.reports.frames import recommendations_frame
from gpuinsight.reports.upload import upload_files
from gpuinsight.rules.production import with_production

MAX_TABLE_ROWS = 500


class ReportSource(Protocol):
    """What the report needs: :class:`gpuinsight.api.GpuInsight` or a stand-in."""

    config: Any

    def query(self, name: str, **params: Any) -> pl.DataFrame: ...

    def recommend(self) -> Any: ...


@dataclass
class Report:
    cluster: str
    summary: dict[str, Any]
    price_note: str
    findings: pl.DataFrame
    total_savings_usd: float
    charts: list[tuple[str, charts.ChartLike]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def price_note(catalog: str | None, as_of: Any) -> str:
    """Names the price catalog and its date; goes next to every dollar figure."""
    if isinstance(as_of, datetime | date):
        as_of = as_of.isoformat()[:10]
    name = catalog or "unknown catalog"
    return f"prices: {name}, as of {as_of}" if as_of else f"prices: {name}"


def build_report(gi: ReportSource) -> Report:
    """Run the SQL models and the rules, and build every chart (no file is written)."""
    summary_df = gi.query("fleet_summary")
    summary = summary_df.row(0, named=True) if summary_df.height else {}
    plan = gi.recommend()
    catalog = summary.get("catalog") or getattr(plan, "catalog", None)
    note = price_note(catalog, summary.get("catalog_as_of"))
    recs = recommendations_frame(plan.recommendations)
    built = [
        ("savings-by-rule", charts.savings_by_rule(recs, price_note=note)),
        ("top-findings", charts.top_findings(recs, price_note=note)),
        ("waste-breakdown", charts.waste_breakdown(gi.query("waste_breakdown", by="namespace"), price_note=note)),
        ("waste-by-namespace", charts.waste_over_time(gi.query("waste_hourly_by", by="namespace"),
                                                      by="namespace", price_note=note)),
        ("waste-by-queue", charts.waste_over_time(gi.query("waste_hourly_by", by="queue"), by="queue",
                                                  price_note=note)),
        ("utilization-heatmap", charts.utilization_heatmap(gi.query("gpu_heatmap"))),
        ("mig-fit", charts.mig_fit(with_production(gi.query("workload_gpu_profile"), (getattr(
            getattr(gi, "config", None), "rule_settings", None) or {}).get("production")), gi.query("mig_catalog"))),
        ("fragmentation", charts.fragmentation(gi.query("fragmentation"))),
        ("queue-usage", charts.queue_usage(gi.query("queue_usage"))),
    ]
    configured = getattr(gi.config, "cluster", "") or ""
    # the clusters the data holds, unless a specific (non-default) cluster was named
    cluster = configured if configured not in ("", "default") else (summary.get("clusters") or configured or "cluster")
    return Report(cluster=cluster, summary=summary, price_note=note, findings=recs,
                  total_savings_usd=float(recs.get_column("monthly_savings_usd").sum()), charts=built,
                  notes=list(getattr(plan, "notes", []) or []))


def write_report(gi: ReportSource, out: Path, *, png_dir: Path | None = None, upload: str | None = None,
                 s3_endpoint_url: str | None = None) -> Path:
    """Write the report to ``out``; optionally PNG + SVG per chart into ``png_dir`` and an
    upload of everything to ``upload`` (``s3://bucket/prefix``).

    ``s3_endpoint_url`` (or ``config.s3_endpoint_url``) points at an S3-compatible store.
    """
    report = build_report(gi)
    specs = {name: chart_spec(chart) for name, chart in report.charts}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(out, render_html(report, specs).encode("utf-8"))
    files: list[tuple[Path, str]] = [(out, out.name)]
    if png_dir is not None:
        files += [(p, f"{Path(png_dir).name}/{p.name}") for p in write_images(specs, Path(png_dir))]
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


def write_images(specs: dict[str, dict[str, Any]], folder: Path) -> list[Path]:
    """PNG (2x) and SVG of every chart, rendered by vl-convert; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    vl = vegalite_version()
    written: list[Path] = []
    for name, spec in specs.items():
        png = folder / f"{name}.png"
        svg = folder / f"{name}.svg"
        _atomic_write(png, vlc.vegalite_to_png(spec, vl_version=vl, scale=2))
        _atomic_write(svg, vlc.vegalite_to_svg(spec, vl_version=vl).encode("utf-8"))
        written += [png, svg]
    return written


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


def _script_json(obj: Any) -> str:
    """JSON that can sit inside a <script> element."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


# -- HTML ----------------------------------------------------------------------------------

def _name(cluster: str) -> str:
    """': prod-a' after the title; nothing for an unnamed ('default') cluster."""
    return "" if cluster in ("", "default", "cluster") else f": {cluster}"


def _usd(v: Any) -> str:
    return "—" if v is None else f"${float(v):,.0f}"


def _num(v: Any, fmt: str = ",.0f") -> str:
    return "—" if v is None else format(float(v), fmt)


def _when(v: Any) -> str:
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M UTC")
    return "—" if v is None else html.escape(str(v))


def _headline(r: Report) -> str:
    s = r.summary
    e = html.escape
    spend, waste = s.get("monthly_spend_usd"), s.get("monthly_waste_usd")
    waste_pct = f" ({waste / spend:.0%} of spend)" if spend and waste is not None else ""
    n = r.findings.height
    gpu_h, used_h, alloc_h = s.get("gpu_hours"), s.get("used_gpu_hours"), s.get("allocated_gpu_hours")
    used_pct = f"{used_h / gpu_h:.1%}" if gpu_h and used_h is not None else "—"
    alloc_pct = f"{alloc_h / gpu_h:.1%}" if gpu_h and alloc_h is not None else "—"
    note = f'<div class="price">{e(r.price_note)}</div>'
    cards = [
        ("Monthly GPU spend", _usd(spend) + " / month", "at the window's run rate, 730 h month"),
        ("Monthly waste", _usd(waste) + " / month", f"idle + underused + unallocated{waste_pct}"),
        ("Potential monthly savings", _usd(r.total_savings_usd) + " / month",
         f"from {n} finding{'s' if n != 1 else ''} below"),
    ]
    out = ['<section class="headline">']
    for label, value, sub in cards:
        out.append(f'<div class="card"><div class="label">{e(label)}</div><div class="value">{e(value)}</div>'
                   f'<div class="sub">{e(sub)}</div>{note}</div>')
    out.append("</section>")
    facts = [
        ("GPUs", _num(s.get("gpus"))), ("nodes", _num(s.get("nodes"))),
        ("window", f"{_when(s.get('window_start'))} → {_when(s.get('window_end'))} ({_num(s.get('hours'))} h)"),
        ("GPU-hours", _num(gpu_h)), ("allocated", alloc_pct), ("busy (used)", used_pct),
        ("cost in the window", f"{_usd(s.get('total_usd'))} ({e(r.price_note)})"),
    ]
    out.append('<p class="facts">' + " · ".join(f"<b>{e(k)}</b> {v}" for k, v in facts) + "</p>")
    unpriced = s.get("unpriced_node_hours")
    if unpriced:
        out.append(f'<p class="warn">{_num(unpriced)} node-hours ran on instance types the price catalog does not '
                   "list; their cost is missing from every dollar figure.</p>")
    if not s:
        out.append('<p class="empty">The warehouse holds no GPU data yet: run <code>gpuinsight collect</code> '
                   "first.</p>")
    return "\n".join(out)


def _findings_table(r: Report) -> str:
    e = html.escape
    rows = []
    for f in r.findings.head(MAX_TABLE_ROWS).iter_rows(named=True):
        color = theme.RULE_COLORS.get(f["rule"], theme.OTHER_COLOR)
        rows.append(
            f'<tr><td><span class="chip" style="background:{color}"></span>{e(f["rule"])}</td>'
            f'<td>{e(f["target"])}</td><td>{e(f["title"])}</td>'
            f'<td class="num">{_usd(f["monthly_savings_usd"])}</td>'
            f'<td class="num">{f["confidence"]:.0%}</td></tr>'
        )
    if not rows:
        rows.append('<tr><td colspan="5" class="empty">No findings: the rules found nothing to change.</td></tr>')
    more = r.findings.height - MAX_TABLE_ROWS
    tail = (f'<p class="sub">… and {more} more (smaller) findings: see <code>gpuinsight recommend</code>.</p>'
            if more > 0 else "")
    return (
        '<section id="findings"><h2>Findings</h2>'
        f'<p class="sub">Biggest saving first. Monthly saving per 730 h month, {e(r.price_note)}.</p>'
        '<table><thead><tr><th>rule</th><th>target</th><th>title</th>'
        f'<th class="num">monthly saving<br><span class="price">{e(r.price_note)}</span></th>'
        f'<th class="num">confidence</th></tr></thead><tbody>{"".join(rows)}</tbody></table>{tail}</section>'
    )


_CSS = """
body{font-family:'Liberation Sans',Helvetica,Arial,sans-serif;margin:0;color:#263238;background:#fafafa}
header{background:#263238;color:#fff;padding:18px 32px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#b0bec5;font-size:13px}main{padding:16px 32px;max-width:1300px}
.headline{display:flex;gap:16px;flex-wrap:wrap}.card{background:#fff;border:1px solid #e0e0e0;
border-radius:6px;padding:14px 18px;min-width:260px;flex:1}.card .label{font-size:13px;color:#546e7a}
.card .value{font-size:28px;font-weight:bold;margin:4px 0}.sub{font-size:12px;color:#607d8b}
.price{font-size:11px;color:#78909c;font-weight:normal}.facts{font-size:13px;color:#455a64}
.chart{background:#fff;border:1px solid #e0e0e0;border-radius:6px;padding:12px;margin:16px 0;overflow-x:auto}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{border-bottom:1px solid #eceff1;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#eceff1}.num{text-align:right;white-space:nowrap}
.chip{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px}
.empty{color:#78909c;font-style:italic}.warn{color:#e65100;font-size:13px}#gi-errors{color:#b71c1c}#gi-errors:empty{display:none}
footer{font-size:12px;color:#78909c;padding:16px 32px}
"""

# Renders every chart; records completion and any error in the DOM (for people and tests).
_RUNNER = """
(function () {
  var errs = document.getElementById("gi-errors");
  function fail(msg) {
    var li = document.createElement("li"); li.textContent = String(msg); errs.appendChild(li);
  }
  window.addEventListener("error", function (ev) { fail(ev.message || ev); });
  var origError = console.error, origWarn = console.warn, warns = document.getElementById("gi-warnings");
  console.error = function () { fail(Array.prototype.join.call(arguments, " ")); origError.apply(console, arguments); };
  console.warn = function () {
    var li = document.createElement("li"); li.textContent = Array.prototype.join.call(arguments, " ");
    warns.appendChild(li); origWarn.apply(console, arguments);
  };
  var specs = JSON.parse(document.getElementById("gi-specs").textContent);
  var opts = {renderer: "svg", actions: {export: true, source: false, compiled: false, editor: false}};
  var jobs = Object.keys(specs).map(function (id) {
    return vegaEmbed("#chart-" + id, specs[id], opts).catch(function (e) { fail(id + ": " + e); throw e; });
  });
  Promise.all(jobs).then(function () {
    document.body.setAttribute("data-gi-rendered", errs.children.length ? "error" : "true");
    window.__gi_rendered = true;
  }, function () { document.body.setAttribute("data-gi-rendered", "error"); });
})();
"""


def render_html(r: Report, specs: dict[str, dict[str, Any]]) -> str:
    e = html.escape
    s = r.summary
    window = f"{_when(s.get('window_start'))} → {_when(s.get('window_end'))}"
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    v = versions()
    chart_divs = "\n".join(f'<div class="chart" id="chart-{e(name)}"></div>' for name in specs)
    notes = "".join(f"<li>{e(n)}</li>" for n in r.notes)
    legend = "; ".join(f"<b>{e(b)}</b>: {e(theme.BUCKET_LABELS[b])}" for b in theme.BUCKETS)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GPU waste &amp; savings report{e(_name(r.cluster))}</title>
<style>{_CSS}</style>
</head>
<body data-gi-rendered="pending">
<header><h1>GPU waste &amp; savings report{e(_name(r.cluster))}</h1>
<p>window {window} · {e(r.price_note)} · generated {generated}</p></header>
<main>
<ul id="gi-errors"></ul>
<ul id="gi-warnings" hidden></ul>
{_headline(r)}
<h2>Charts</h2>
{chart_divs}
{_findings_table(r)}
{f'<section><h2>Notes</h2><ul>{notes}</ul></section>' if notes else ''}
</main>
<footer><p>Buckets: {legend}. Dollar figures are GPU-hours priced with the named catalog.</p>
<p>gpuinsight · Vega {e(v['vega'])}, Vega-Lite {e(v['vega-lite'])}, Vega-Embed {e(v['vega-embed'])}
(inlined; the file needs no network).</p></footer>
<script>{vega_bundle()}</script>
<script type="application/json" id="gi-specs">{_script_json(specs)}</script>
<script>{_RUNNER}</script>
</body></html>
"""

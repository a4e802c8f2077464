"""The report page: the headline, "who wastes it", the findings table, and the HTML around
the charts. Every dollar figure is per 730 h month, except where a label says otherwise; the
window, the price catalog and its date are stated once, under the headline."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import polars as pl

from gpuinsight.reports import theme
from gpuinsight.reports.assets import vega_bundle, versions
from gpuinsight.reports.chartkit import ChartLike
from gpuinsight.reports.frames import SAVING_BASES, clusters_in, savings_by_basis
from gpuinsight.reports.tables import WasteTable
from gpuinsight.sources.gpu_nodes import unmatched_note

MAX_TABLE_ROWS = 500
esc = html.escape


@dataclass
class Report:
    cluster: str
    summary: dict[str, Any]
    price_note: str
    findings: pl.DataFrame
    total_savings_usd: float
    charts: list[tuple[str, ChartLike]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plan_id: str | None = None
    waste_tables: list[WasteTable] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)  # HTML of more sections (KubeRay, scale to zero, signals), after the charts


def price_note(catalog: str | None, as_of: Any) -> str:
    """Names the price catalog and its date (said once in the report)."""
    if isinstance(as_of, datetime | date):
        as_of = as_of.isoformat()[:10]
    name = catalog or "unknown catalog"
    return f"prices: {name}, as of {as_of}" if as_of else f"prices: {name}"


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
    return "—" if v is None else esc(str(v))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# -- headline ------------------------------------------------------------------------------

def _savings_sub(r: Report) -> str:
    n = r.findings.height
    without = r.findings.filter(pl.col("monthly_savings_usd").round(0) == 0).height
    by_basis = savings_by_basis(r.findings)
    if not by_basis:
        more = f"; {without} more without a direct saving" if without else ""
        return f'<div class="sub">from {_plural(n - without, "finding")} below{more}</div>'
    rows = "".join(
        f'<tr><td class="num">{_usd(usd) if round(usd) else "—"}</td>'
        f'<td>{esc(basis)} ({_plural(count, "finding")}{"" if round(usd) else ", no direct saving"})</td></tr>'
        for basis, usd, count in by_basis
    )
    return (f'<div class="sub">from {_plural(n, "finding")} below, by where the saving comes from:</div>'
            f'<table class="basis">{rows}</table>')


def headline(r: Report) -> str:
    s = r.summary
    spend, waste = s.get("monthly_spend_usd"), s.get("monthly_waste_usd")
    waste_pct = f": {waste / spend:.0%} of spend" if spend and waste is not None else ""
    gpu_h, used_h, alloc_h = s.get("gpu_hours"), s.get("used_gpu_hours"), s.get("allocated_gpu_hours")
    used_pct = f"{used_h / gpu_h:.1%}" if gpu_h and used_h is not None else "—"
    alloc_pct = f"{alloc_h / gpu_h:.1%}" if gpu_h and alloc_h is not None else "—"
    cards = [
        ("Monthly GPU spend", spend, '<div class="sub">cost of the GPU nodes at the window\'s run rate</div>'),
        ("Monthly waste", waste, f'<div class="sub">idle + underused + unallocated{esc(waste_pct)}</div>'),
        ("Potential monthly savings", r.total_savings_usd, _savings_sub(r)),
    ]
    several = clusters_in(r.findings)
    if len(several) > 1:  # where the savings are: each cluster's share
        per = r.findings.group_by("cluster").agg(pl.col("monthly_savings_usd").sum()).sort("cluster")
        cards[2] = (cards[2][0], cards[2][1], cards[2][2] + '<div class="sub">per cluster: ' + ", ".join(
            f"{esc(str(c))} {_usd(v)}" for c, v in per.iter_rows()) + "</div>")
    out = ['<section class="headline">']
    for label, value, sub in cards:
        out.append(f'<div class="card"><div class="label">{esc(label)}</div>'
                   f'<div class="value">{esc(_usd(value))} / month</div>{sub}</div>')
    out.append("</section>")
    # the one place that states the window and the prices behind every dollar figure
    out.append(
        f'<p class="basis-note" id="basis">All dollar figures are per 730-hour month at the run rate of the window '
        f"{_when(s.get('window_start'))} → {_when(s.get('window_end'))} ({_num(s.get('hours'))} h; the window cost "
        f"{_usd(s.get('total_usd'))}), unless labelled otherwise; <b>{esc(r.price_note)}</b>.</p>")
    facts = [("GPUs", _num(s.get("gpus"))), ("nodes", _num(s.get("nodes"))), ("GPU-hours", _num(gpu_h)),
             ("allocated", alloc_pct), ("busy (used)", used_pct)]
    out.append('<p class="facts">' + " · ".join(f"<b>{esc(k)}</b> {v}" for k, v in facts) + "</p>")
    unmatched = unmatched_note(s) if s else None
    if unmatched:
        out.append(f'<p class="warn">{esc(unmatched)}</p>')
    unpriced = s.get("unpriced_node_hours")
    if unpriced:
        out.append(f'<p class="warn">{_num(unpriced)} node-hours ran on instance types the price catalog does not '
                   "list; their cost is missing from every dollar figure.</p>")
    if not s:
        out.append('<p class="empty">The warehouse holds no GPU data yet: run <code>gpuinsight collect</code> '
                   "first.</p>")
    return "\n".join(out)


# -- who wastes it -------------------------------------------------------------------------

def _money_cells(row: dict[str, Any], cols: list[str], tag: str = "td") -> str:
    cells = [f'<{tag} class="num" data-col="{c}" data-usd="{row[c]:.2f}">{_usd(row[c]) if round(row[c]) else "–"}'
             f"</{tag}>" for c in cols]
    share = f"{row['waste'] / row['spend']:.0%}" if row["spend"] else "—"
    return "".join(cells) + f'<{tag} class="num">{share}</{tag}>'


def _waste_table(t: WasteTable, summary: dict[str, Any]) -> str:
    cols = ["spend", "used", "idle", "underused", "unallocated"] + (["unmeasured"] if t.has_unmeasured else []) + [
        "waste"]
    head = "".join(f'<th class="num" title="{esc(theme.BUCKET_LABELS.get(c, ""))}">{esc(c)}</th>' for c in cols)
    rows = []
    for row in t.rows.iter_rows(named=True):
        label = row["group"]
        if label == theme.OTHER:
            label = f"(the other {row['groups']} {t.by}s)"
        rows.append(f"<tr><td>{esc(label)}</td>{_money_cells(row, cols)}</tr>")
    if not rows:
        rows.append(f'<tr><td colspan="{len(cols) + 2}" class="empty">no GPU cost by {esc(t.by)} in the data</td></tr>')
    total = f'<tr class="total"><th>total</th>{_money_cells(t.totals, cols, "th")}</tr>'
    of = f' data-cluster="{esc(t.cluster)}"' if t.cluster is not None else ""
    table = (f'<table class="waste" data-by="{esc(t.by)}"{of}><thead><tr><th>{esc(t.by)}</th>{head}'
             f'<th class="num">waste share</th></tr></thead><tbody>{"".join(rows)}</tbody>'
             f"<tfoot>{total}</tfoot></table>")
    # Multi-cluster warehouses whose clusters cover different spans: the headline sums each
    # cluster's run rate, the table scales the whole window; say so rather than hide it (a table
    # of one cluster of several adds up to that cluster, not to the headline).
    spend, waste = summary.get("monthly_spend_usd"), summary.get("monthly_waste_usd")
    differs = t.cluster is None and any(h is not None and abs(t.totals[k] - float(h)) >= 1
                                        for k, h in (("spend", spend), ("waste", waste)))
    note = (f'<p class="sub">These totals differ from the headline ({_usd(spend)} spend, {_usd(waste)} waste per '
            "month): the headline adds each cluster's own run rate, the rows scale the whole window, and the two "
            "differ when clusters cover different spans.</p>" if differs else "")
    where = f" in cluster {esc(t.cluster)}" if t.cluster is not None else ""
    return f'<div class="waste-block"><h3>By {esc(t.by)}{where}</h3>{table}{note}</div>'


def who_wastes(r: Report) -> str:
    if not r.waste_tables:
        return ""
    parts = "".join(_waste_table(t, r.summary) for t in r.waste_tables)
    per_cluster = (" With several clusters: the clusters first (they add up to the headline), then each cluster's "
                   "namespaces and queues (a namespace of one cluster is not its namesake in another)."
                   if any(t.cluster is not None for t in r.waste_tables) else "")
    return ('<section id="who-wastes"><h2>Who wastes it</h2>'
            '<p class="sub">$ per month. Waste = idle + underused + unallocated; the biggest waste first; '
            "the totals are the headline's spend and waste. Unallocated capacity belongs to no namespace or "
            f"queue.{per_cluster}</p>{parts}</section>")


# -- findings ------------------------------------------------------------------------------

def findings_table(r: Report) -> str:
    show_basis = not r.findings.is_empty() and r.findings.get_column("basis").drop_nulls().len() > 0
    show_cluster = len(clusters_in(r.findings)) > 1
    rows = []
    for f in r.findings.head(MAX_TABLE_ROWS).iter_rows(named=True):
        color = theme.RULE_COLORS.get(f["rule"], theme.OTHER_COLOR)
        saving = (_usd(f["monthly_savings_usd"]) if round(f["monthly_savings_usd"])
                  else '<span class="sub" title="no saving of its own">none directly</span>')
        basis = f'<td>{esc(SAVING_BASES.get(f["basis"] or "", ""))}</td>' if show_basis else ""
        cluster = f'<td>{esc(f["cluster"] or "")}</td>' if show_cluster else ""
        rows.append(
            f'<tr><td class="rule"><span class="chip" style="background:{color}"></span>{esc(f["rule"])}</td>'
            f'{cluster}<td>{esc(f["target"])}</td><td>{esc(f["title"])}</td>'
            f'<td class="num">{saving}</td>{basis}<td class="num">{f["confidence"]:.0%}</td></tr>'
        )
    ncols = 5 + show_basis + show_cluster
    if not rows:
        rows.append(f'<tr><td colspan="{ncols}" class="empty">No findings: the rules found nothing to change.</td></tr>')
    more = r.findings.height - MAX_TABLE_ROWS
    tail = (f'<p class="sub">… and {more} more (smaller) findings: see <code>gpuinsight recommend</code>.</p>'
            if more > 0 else "")
    plan = f" Plan <code>{esc(r.plan_id)}</code>." if r.plan_id else ""
    return (
        '<section id="findings"><h2>Findings</h2>'
        f'<p class="sub">Biggest saving first; $ per month.{plan}</p>'
        f'<table><thead><tr><th>rule</th>{"<th>cluster</th>" if show_cluster else ""}<th>target</th><th>title</th>'
        '<th class="num">monthly saving</th>'
        f'{"<th>saving from</th>" if show_basis else ""}<th class="num">confidence</th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table>{tail}</section>'
    )


# -- the page ------------------------------------------------------------------------------

_CSS = """
body{font-family:'Liberation Sans',Helvetica,Arial,sans-serif;margin:0;color:#263238;background:#fafafa}
header{background:#263238;color:#fff;padding:18px 32px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#b0bec5;font-size:13px}main{padding:16px 32px;max-width:1300px}
.headline{display:flex;gap:16px;flex-wrap:wrap}.card{background:#fff;border:1px solid #e0e0e0;
border-radius:6px;padding:14px 18px;min-width:260px;flex:1}.card .label{font-size:13px;color:#546e7a}
.card .value{font-size:28px;font-weight:bold;margin:4px 0}.sub{font-size:12px;color:#607d8b}
table.basis{width:auto;margin-top:4px;font-size:12px;color:#455a64}
table.basis td{border:0;padding:1px 8px 1px 0}table.basis td.num{font-weight:bold}
.basis-note{font-size:13px;color:#455a64;margin:12px 0 4px}.facts{font-size:13px;color:#455a64;margin:4px 0}
.chart{background:#fff;border:1px solid #e0e0e0;border-radius:6px;padding:12px;margin:16px 0;overflow-x:auto}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
table.waste{width:auto;margin-bottom:8px}
th,td{border-bottom:1px solid #eceff1;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#eceff1}.num{text-align:right;white-space:nowrap}tfoot th{background:#cfd8dc}
h3{font-size:15px;margin:16px 0 6px}
td.rule{white-space:nowrap}.chip{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px}
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


def _script_json(obj: Any) -> str:
    """JSON that can sit inside a <script> element."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render_html(r: Report, specs: dict[str, dict[str, Any]]) -> str:
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    v = versions()
    chart_divs = "\n".join(f'<div class="chart" id="chart-{esc(name)}"></div>' for name in specs)
    notes = "".join(f"<li>{esc(n)}</li>" for n in r.notes)
    legend = "; ".join(f"<b>{esc(b)}</b>: {esc(theme.BUCKET_LABELS[b])}" for b in theme.BUCKETS)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GPU waste &amp; savings report{esc(_name(r.cluster))}</title>
<style>{_CSS}</style>
</head>
<body data-gi-rendered="pending">
<header><h1>GPU waste &amp; savings report{esc(_name(r.cluster))}</h1>
<p>generated {generated}</p></header>
<main>
<ul id="gi-errors"></ul>
<ul id="gi-warnings" hidden></ul>
{headline(r)}
{who_wastes(r)}
<h2>Charts</h2>
{chart_divs}
{"".join(r.sections)}
{findings_table(r)}
{f'<section><h2>Notes</h2><ul>{notes}</ul></section>' if notes else ''}
</main>
<footer><p>Buckets: {legend}. Dollar figures are GPU node-hours priced with the catalog named under the
headline.</p>
<p>gpuinsight · Vega {esc(v['vega'])}, Vega-Lite {esc(v['vega-lite'])}, Vega-Embed {esc(v['vega-embed'])}
(inlined; the file needs no network).</p></footer>
<script>{vega_bundle()}</script>
<script type="application/json" id="gi-specs">{_script_json(specs)}</script>
<script>{_RUNNER}</script>
</body></html>
"""

"""Open the report in headless Chromium with the network off: every chart must draw marks.

The page records completion (``data-gi-rendered`` on <body>), any JavaScript or console
error (``#gi-errors``) and any Vega warning (``#gi-warnings``) in the DOM, which ``--dump-dom`` prints after a virtual-time budget.
A screenshot is kept under ``test-artifacts/`` for a person to look at.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from gpuinsight.reports.browser import dump_dom, find_chromium, screenshot
from gpuinsight.reports.html import write_report
from tests.report_preview import MIG_CATALOG, FrameSource, synthetic_fleet

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
# A data mark (not an axis, legend or title) with at least one drawn element.
MARK = re.compile(r'<g class="mark-(\w+) role-mark[^"]*"[^>]*>\s*<(path|line|text)\b')



@pytest.fixture(autouse=True, scope="module")
def _chromium() -> None:
    # .ci/system-packages installs Debian's chromium: without it this is a failure, not a skip
    assert find_chromium() is not None, "no Chromium binary: run bash .ci/system-packages (Debian's chromium)"


def chart_sections(dom: str) -> dict[str, str]:
    """The DOM of each chart container, keyed by chart id."""
    starts = [(m.group(1), m.start()) for m in re.finditer(r'<div class="chart[^"]*" id="chart-([\w-]+)"', dom)]
    end = dom.index('<section id="findings">')
    bounds = [s for _, s in starts[1:]] + [end]
    return {name: dom[start:stop] for (name, start), stop in zip(starts, bounds, strict=True)}


def check_rendered(html_file: Path, charts: int = 9) -> tuple[str, dict[str, str]]:
    """The rendered DOM and each chart's part of it, after checking that all drew cleanly."""
    html = html_file.read_text()
    assert not re.search(r"""<(script|link|img|iframe)[^>]+(src|href)\s*=\s*["']?(https?:)?//""", html, re.I)
    dom = dump_dom(html_file)
    errors = re.search(r'<ul id="gi-errors">(.*?)</ul>', dom, re.S)
    assert errors is not None and errors.group(1).strip() == "", errors.group(1) if errors else dom[:500]
    assert 'data-gi-rendered="true"' in dom
    warnings = re.search(r'<ul id="gi-warnings"[^>]*>(.*?)</ul>', dom, re.S)
    assert warnings is not None and warnings.group(1).strip() == "", warnings.group(1) if warnings else ""
    sections = chart_sections(dom)
    assert len(sections) == charts
    for name, part in sections.items():
        assert "<svg" in part, f"{name}: no svg"
        assert MARK.search(part), f"{name}: no marks drawn"
    return dom, sections


def test_report_renders_every_chart_offline(tmp_path: Path) -> None:
    out = write_report(synthetic_fleet(256), tmp_path / "report.html")
    dom, sections = check_rendered(out)
    # the data marks are the real ones, not placeholders
    kinds = {name: {m.group(1) for m in MARK.finditer(part)} for name, part in sections.items()}
    assert "rect" in kinds["utilization-heatmap"] and "symbol" in kinds["mig-fit"]
    assert "area" in kinds["fragmentation"] and "rect" in kinds["queue-usage"]
    # the "who wastes it" tables are there as numbers, with totals
    assert re.search(r'<table class="waste" data-by="namespace">.*?<tfoot><tr class="total">', dom, re.S)
    shot = screenshot(out, ARTIFACTS / "report.png", height=3000)
    assert shot.stat().st_size > 50_000


def test_empty_report_renders_placeholders_offline(tmp_path: Path) -> None:
    full = synthetic_fleet(16, queues=False)
    empty = {name: (f.clear() if isinstance(f, pl.DataFrame) else f(by="queue").clear())
             for name, f in full.frames.items()}
    empty["mig_catalog"] = MIG_CATALOG
    out = write_report(FrameSource(empty, []), tmp_path / "empty.html")
    _, sections = check_rendered(out)
    assert "no Volcano queues in the data" in sections["queue-usage"]


def test_kuberay_and_scale_to_zero_parts_render_offline(tmp_path: Path) -> None:
    from tests.test_reports import ray_keda_recs

    fleet = synthetic_fleet(16, queues=False)
    out = write_report(FrameSource(fleet.frames, ray_keda_recs(), catalog="cat"), tmp_path / "r.html")
    dom, sections = check_rendered(out, charts=10)
    assert {m.group(1) for m in MARK.finditer(sections["scale-to-zero-week"])} == {"rect"}
    assert '<section id="kuberay">' in dom and '<section id="scale-to-zero">' in dom

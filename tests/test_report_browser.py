"""Open the report in headless Chromium with the network off: every chart must draw marks.

The page records completion (``data-gi-rendered`` on <body>), any JavaScript or console
error (``#gi-errors``) and any Vega warning (``#gi-warnings``) in the DOM, which ``--dump-dom`` prints after a virtual-time budget.
A screenshot is kept under ``test-artifacts/`` for a person to look at.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from gpuinsight.reports.html import write_report
from gpuinsight.reports.preview import MIG_CATALOG, FrameSource, synthetic_fleet

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p and Path(p).exists()), None)
# A data mark (not an axis, legend or title) with at least one drawn element.
MARK = re.compile(r'<g class="mark-(\w+) role-mark[^"]*"[^>]*>\s*<(path|line|text)\b')

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs a Chromium binary")


def chromium(url: str, user_dir: Path, *extra: str) -> str:
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", f"--user-data-dir={user_dir}",
        # network off: every request goes to a closed port and no name resolves
        "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=10000", *extra, url,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def chart_sections(dom: str) -> dict[str, str]:
    """The DOM of each chart container, keyed by chart id."""
    starts = [(m.group(1), m.start()) for m in re.finditer(r'<div class="chart[^"]*" id="chart-([\w-]+)"', dom)]
    end = dom.index('<section id="findings">')
    bounds = [s for _, s in starts[1:]] + [end]
    return {name: dom[start:stop] for (name, start), stop in zip(starts, bounds, strict=True)}


def check_rendered(html_file: Path, tmp_path: Path) -> dict[str, str]:
    html = html_file.read_text()
    assert not re.search(r"""<(script|link|img|iframe)[^>]+(src|href)\s*=\s*["']?(https?:)?//""", html, re.I)
    dom = chromium(html_file.as_uri(), tmp_path / "profile", "--dump-dom")
    errors = re.search(r'<ul id="gi-errors">(.*?)</ul>', dom, re.S)
    assert errors is not None and errors.group(1).strip() == "", errors.group(1) if errors else dom[:500]
    assert 'data-gi-rendered="true"' in dom
    warnings = re.search(r'<ul id="gi-warnings"[^>]*>(.*?)</ul>', dom, re.S)
    assert warnings is not None and warnings.group(1).strip() == "", warnings.group(1) if warnings else ""
    sections = chart_sections(dom)
    assert len(sections) == 9
    for name, part in sections.items():
        assert "<svg" in part, f"{name}: no svg"
        assert MARK.search(part), f"{name}: no marks drawn"
    return sections


def test_report_renders_every_chart_offline(tmp_path: Path) -> None:
    out = write_report(synthetic_fleet(256), tmp_path / "report.html")
    sections = check_rendered(out, tmp_path)
    # the data marks are the real ones, not placeholders
    kinds = {name: {m.group(1) for m in MARK.finditer(part)} for name, part in sections.items()}
    assert "rect" in kinds["utilization-heatmap"] and "symbol" in kinds["mig-fit"]
    assert "area" in kinds["fragmentation"] and "rect" in kinds["queue-usage"]
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    chromium(out.as_uri(), tmp_path / "profile2", f"--screenshot={shot}", "--window-size=1400,3000",
             "--hide-scrollbars")
    assert shot.stat().st_size > 50_000


def test_empty_report_renders_placeholders_offline(tmp_path: Path) -> None:
    full = synthetic_fleet(16, queues=False)
    empty = {name: (f.clear() if isinstance(f, pl.DataFrame) else f(by="queue").clear())
             for name, f in full.frames.items()}
    empty["mig_catalog"] = MIG_CATALOG
    out = write_report(FrameSource(empty, []), tmp_path / "empty.html")
    sections = check_rendered(out, tmp_path)
    assert "no Volcano queues in the data" in sections["queue-usage"]

"""Regenerate docs/report.png, the README's screenshot of the report.

Runs the demo on the embedded sample fleet into a temporary folder and opens its report in
headless Chromium with the network cut off (as the browser tests do), keeping the top of the
page: the headline, "who wastes it" and the savings charts.

    .venv/bin/python docs/make_screenshot.py [--out docs/report.png] [--width 1400] [--height 1800]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from gpuinsight.config import Config
from gpuinsight.demo import run_demo
from gpuinsight.reports.browser import screenshot

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "report.png")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=1800)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gi-screenshot-") as tmp:
        out = Path(tmp)
        run_demo(Config.from_env(out / "demo.duckdb", progress=False), out)
        png = screenshot(out / "report.html", args.out, width=args.width, height=args.height)
    print(f"wrote {png} ({png.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()

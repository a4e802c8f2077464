"""Open a report in headless Chromium with the network cut off: the DOM once the charts have
drawn, or a screenshot. The browser tests and the README's screenshot script use it; the
report itself never needs a browser to be written."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from gpuinsight.errors import RuntimeFailure

_NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    """The Chromium (or Chrome) binary on PATH, if any."""
    return next((p for p in map(shutil.which, _NAMES) if p), None)


def run_chromium(url: str, *extra: str, user_dir: Path | None = None, budget_ms: int = 10_000,
                 timeout_s: float = 120) -> str:
    """Run headless Chromium on ``url`` with no network and return its stdout.

    Every request goes to a closed local port and no host name resolves, so a page that
    needed the network would fail to draw. ``budget_ms`` of virtual time lets the charts
    render before ``--dump-dom`` or ``--screenshot`` is taken.
    """
    binary = find_chromium()
    if binary is None:
        raise RuntimeFailure("no Chromium found on PATH (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="gi-chromium-") as tmp:
        cmd = [
            binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={user_dir or tmp}",
            "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--virtual-time-budget={budget_ms}", *extra, url,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeFailure(f"chromium exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def dump_dom(html_file: Path) -> str:
    """The page's DOM after its scripts ran (charts drawn as SVG)."""
    return run_chromium(Path(html_file).resolve().as_uri(), "--dump-dom")


def screenshot(html_file: Path, png: Path, *, width: int = 1400, height: int = 2000) -> Path:
    """A PNG of the top ``width`` x ``height`` pixels of the page, as a reader first sees it."""
    png = Path(png).resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    run_chromium(Path(html_file).resolve().as_uri(), f"--screenshot={png}", f"--window-size={width},{height}",
                 "--hide-scrollbars", "--force-device-scale-factor=1")
    if not png.exists():
        raise RuntimeFailure(f"chromium wrote no screenshot to {png}")
    return png

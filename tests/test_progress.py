"""Progress shows on a terminal only."""

from __future__ import annotations

import io
from datetime import datetime

from gpuinsight.progress import Progress


def test_silent_when_disabled() -> None:
    out = io.StringIO()
    p = Progress(False, stream=out).window(datetime(2026, 1, 1), datetime(2026, 1, 2))
    p.stage("loading")
    p.at(datetime(2026, 1, 1, 12))
    p.close()
    assert out.getvalue() == ""


def test_bar_tracks_the_window() -> None:
    out = io.StringIO()
    p = Progress(True, stream=out, width=10).window(datetime(2026, 1, 1), datetime(2026, 1, 2))
    p.at(datetime(2026, 1, 1, 12), rows=1234)
    assert "[#####     ]  50% up to 2026-01-01 12:00, 1,234 rows" in out.getvalue()
    p.close()
    assert out.getvalue().endswith("\n")

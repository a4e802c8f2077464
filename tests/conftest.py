"""Shared pytest fixtures. Append new fixtures; do not rewrite others'."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.prom_server import SmallFleet, backfill, build_small_fleet, prometheus_server, write_openmetrics


@pytest.fixture(scope="session")
def small_fleet() -> SmallFleet:
    """Six hours of a 4-node fleet with every DCGM/KSM variation the collectors handle."""
    return build_small_fleet()


@pytest.fixture(scope="session")
def small_fleet_om(small_fleet: SmallFleet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_openmetrics(small_fleet.series, tmp_path_factory.mktemp("small-fleet") / "metrics.om")


@pytest.fixture(scope="session")
def prom_small(small_fleet_om: Path) -> Iterator[str]:
    """A real Prometheus serving the small fleet (backfilled with promtool); yields its URL."""
    tsdb = backfill(small_fleet_om, small_fleet_om.parent / "tsdb")
    with prometheus_server(tsdb) as url:
        yield url


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under the README's test command (``GPUINSIGHT_NO_SKIPS=1``, set by .ci/test) a skipped test is a
    failure: the repository carries everything its tests read, so nothing may quietly not run."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and not hasattr(report, "wasxfail") and os.environ.get("GPUINSIGHT_NO_SKIPS") == "1":
        report.outcome = "failed"
        report.longrepr = f"skipped under GPUINSIGHT_NO_SKIPS=1 (the whole suite runs every test): {report.longrepr}"


@pytest.fixture(scope="session")
def genai8_frames(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The rules' frames of the GenAI serving trace on 8-GPU nodes (tests/genai_trace.py), built once."""
    import gpuinsight as gi
    from gpuinsight.rules.engine import frames_for, needed_frames
    from tests.genai_trace import load_trace

    with gi.open(tmp_path_factory.mktemp("genai8") / "genai.duckdb") as g:
        load_trace(g.wh, gpus_per_node=8)
        g.refresh()
        return frames_for(g, needed_frames())

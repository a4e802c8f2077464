"""Shared pytest fixtures. Append new fixtures; do not rewrite others'."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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

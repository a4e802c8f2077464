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


@pytest.fixture(scope="session", autouse=True)
def no_network_beyond_loopback() -> Iterator[list[str]]:
    """No code path of the suite reaches past the loopback interface (docs/warehouse.md, "No
    network at run time"): in this process a connection or name lookup elsewhere fails the test
    that made it, and the session if that test swallowed the error. DuckDB connections have
    extension fetching off (tests/test_write_path.py); subprocesses were traced once
    (docs/warehouse.md)."""
    import ipaddress
    import socket

    attempts: list[str] = []

    def local(host: object) -> bool:
        if host in (None, "", "localhost", b"localhost"):
            return True
        try:
            return ipaddress.ip_address(host.decode() if isinstance(host, bytes) else str(host)).is_loopback
        except ValueError:
            return False

    def refuse(what: str) -> OSError:
        attempts.append(f"{what} in {os.environ.get('PYTEST_CURRENT_TEST', '?')}")
        return OSError(f"network access outside the loopback interface in a test: {what}")

    real_connect, real_connect_ex, real_getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

    def connect(self: socket.socket, address: object) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not local(address[0]):  # type: ignore[index]
            raise refuse(f"connect {address!r}")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: object) -> int:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not local(address[0]):  # type: ignore[index]
            raise refuse(f"connect {address!r}")
        return real_connect_ex(self, address)

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        if not local(host):
            raise socket.gaierror(socket.EAI_NONAME, str(refuse(f"name lookup {host!r}")))
        return real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo  # type: ignore[method-assign,assignment]
    try:
        yield attempts
    finally:
        socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = (  # type: ignore[method-assign]
            real_connect, real_connect_ex, real_getaddrinfo)
    assert not attempts, f"network access outside the loopback interface: {attempts[:5]}"


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
def sample_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded sample fleet loaded into a fresh warehouse, models built (compact: a new file
    with no free blocks). Shared: copy it before writing to it."""
    import gpuinsight as gi

    db = tmp_path_factory.mktemp("sample-warehouse") / "fleet.duckdb"
    with gi.open(db) as g:
        g.load_sample()
    return db


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


@pytest.fixture(scope="session")
def genai8_plan(genai8_frames: dict[str, Any]) -> tuple[list[Any], Any]:
    """The rules' findings on those frames with the default settings, and the plan's context."""
    from gpuinsight.rules.engine import evaluate_plan

    return evaluate_plan(genai8_frames)

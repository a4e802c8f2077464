"""The Prometheus collector behind a fault-injecting proxy in front of the real Prometheus.

Every run must either give exactly the warehouse a clean run gives, or surface the fault: a
one-line runtime failure (exit 1) with the warehouse consistent and resumable, or, for a
partial answer, a note naming the window, the chunk left out and the cursor held before it.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner

from gpuinsight.cli import main
from gpuinsight.config import Config, PrometheusConfig
from gpuinsight.errors import RuntimeFailure
from gpuinsight.sources.prometheus import PrometheusSource
from gpuinsight.warehouse import Warehouse
from tests.prom_server import FaultProxy

T0 = datetime(2026, 11, 1)
T_END = datetime(2026, 11, 1, 6)
T0_S = 1793491200
TABLES = ("gpu_samples", "gpus", "pods", "nodes", "gpu_hourly", "clusters")
# 7 GPU series x 13 DCGM queries (9 spellings, 4 with a max) = 91 points per step:
# 24 steps (2 h) per chunk, 3 chunks
POINTS_PER_BATCH = 24 * 98  # 7 GPU series x 14 queries per step (avg, max, min)


def cfg_for(tmp_path: Path, url: str, name: str, **prom: object) -> Config:
    prom = {"retries": 3, "timeout_s": 1.5, "backoff_s": 0.01, **prom}
    return Config(db_path=tmp_path / f"{name}.duckdb", cluster="test",
                  prometheus=PrometheusConfig(url=url, **prom))  # type: ignore[arg-type]


def collect(cfg: Config, wh: Warehouse, since: datetime | None = T0):
    src = PrometheusSource(cfg, points_per_batch=POINTS_PER_BATCH)
    report = src.collect(wh, since, T_END, 300)
    assert since is None or src.last_plan["chunks"] == 3
    return report


def fingerprint(wh: Warehouse) -> dict[str, tuple[int, int]]:
    """Rows and an order-independent hash of their contents, per table."""
    out = {}
    for t in TABLES:
        frame = wh.sql(f"SELECT * FROM {t}")  # noqa: S608 (fixed table names)
        out[t] = (frame.height, int(frame.hash_rows(seed=1).sum()) if frame.height else 0)
    return out


def state(wh: Warehouse) -> tuple:
    return wh.sql("SELECT status, cursor, details FROM ingest_state").row(0)


@pytest.fixture
def proxy(prom_small: str) -> Iterator[FaultProxy]:
    p = FaultProxy(prom_small)
    p.stall_fault_s = 2.0  # beyond the 1.5 s client timeout
    yield p
    p.close()


@pytest.fixture(scope="module")
def clean(prom_small: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, int]]:
    cfg = cfg_for(tmp_path_factory.mktemp("clean"), prom_small, "clean")
    with Warehouse(cfg.db_path) as wh:
        collect(cfg, wh)
        assert state(wh)[:2] == ("complete", T_END)
        return fingerprint(wh)


def in_chunk(path: str, n: int) -> bool:
    """Whether a range query evaluates inside chunk ``n`` (1-based) of the three."""
    q = parse_qs(urlsplit(path).query)
    if "start" not in q or "step" not in q:
        return False
    start = float(q["start"][0])
    return T0_S + (n - 1) * 7200 < start < T0_S + n * 7200


def test_mixed_faults_give_clean_results_or_a_clear_failure(proxy: FaultProxy, clean: dict, tmp_path: Path) -> None:
    rng = random.Random(13)
    kinds = ("5xx", "reset", "stall", "truncate", "badjson")
    figures: Counter[str] = Counter()
    for run in range(6):
        last = run == 5  # the last run: chunk 2 never answers (no stalls: they only cost time here)
        proxy.schedule = lambda path, last=last: (
            rng.choice(kinds[:2] + kinds[3:]) if in_chunk(path, 2) else None) if last else (
            rng.choice(kinds) if rng.random() < 0.06 else None)
        cfg = cfg_for(tmp_path, proxy.url, f"run{run}")
        figures["runs"] += 1
        with Warehouse(cfg.db_path) as wh:
            try:
                collect(cfg, wh)
            except RuntimeFailure as exc:
                msg = str(exc)
                assert "\n" not in msg and "gave up after 4 attempts" in msg, msg
                status, cursor, _ = state(wh)
                assert status == "failed" and cursor == T0 + timedelta(hours=2)  # chunk 1 kept
                figures["surfaced (exit 1, one line)"] += 1
                proxy.schedule = None
                collect(cfg, wh, since=None)  # the next incremental run completes it
            else:
                figures["completed"] += 1
            assert state(wh)[:2] == ("complete", T_END)
            assert fingerprint(wh) == clean
            figures["identical to clean"] += 1
    injected = dict(proxy.injected)
    print(f"\nfault-proxy runs: {dict(figures)}; faults injected: {injected}")
    assert figures["completed"] == 5 and figures["surfaced (exit 1, one line)"] == 1
    assert figures["identical to clean"] == 6 and all(injected.get(k, 0) >= 2 for k in kinds), injected


def test_partial_answer_holds_the_cursor_and_is_reread(proxy: FaultProxy, clean: dict, tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, proxy.url, "partial")
    proxy.schedule = lambda path: "partial" if in_chunk(path, 2) else None
    with Warehouse(cfg.db_path) as wh:
        report = collect(cfg, wh)
        assert report.incomplete and "partial answers for 1 of 3 chunks" in report.incomplete
        assert "cursor stays at 2026-11-01T02:00:00" in report.incomplete and "\n" not in report.incomplete
        notes = [n for n in report.notes if n.startswith("partial answer for 2026-11-01T02:00:00..")]
        assert len(notes) == 1 and "store gateway 10.0.3.7:10901 unavailable" in notes[0]
        status, cursor, details = state(wh)
        assert (status, cursor) == ("partial", T0 + timedelta(hours=2)) and notes[0] in details
        hours = wh.sql("SELECT DISTINCT hour(ts) FROM gpu_samples ORDER BY 1").to_series().to_list()
        assert hours == [0, 1, 4, 5]  # the partial chunk is left out, the later one loaded
        proxy.schedule = None
        collect(cfg, wh, since=None)  # incremental: starts before the held cursor
        assert state(wh)[:2] == ("complete", T_END) and fingerprint(wh) == clean
    assert all("partial_response=false" in p and "deny_partial_response=1" in p
               for p in proxy.requests if "/api/v1/" in p)


def test_partial_answer_while_planning_stops_before_loading(proxy: FaultProxy, tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, proxy.url, "plan")
    proxy.schedule = lambda path: "partial" if path.startswith("/api/v1/label/") else None
    with Warehouse(cfg.db_path) as wh:
        with pytest.raises(RuntimeFailure, match=r"partial answer to which DCGM fields exist .*nothing loaded"):
            collect(cfg, wh)
        assert wh.count("gpu_samples") == 0


def test_cli_exits_1_on_partial_answers_and_allow_partial_accepts_them(proxy: FaultProxy, tmp_path: Path) -> None:
    proxy.schedule = lambda path: "partial" if in_chunk(path, 1) else None
    args = ["collect", "prometheus", "--url", proxy.url, "--since", T0.isoformat(), "--until", T_END.isoformat()]
    runner = CliRunner()
    res = runner.invoke(main, [*args, "--db", str(tmp_path / "a.duckdb")])
    assert res.exit_code == 1, res.output
    errors = [line for line in res.stderr.splitlines() if line]
    assert len(errors) == 1 and errors[0].startswith("gpuinsight: error: ") and "partial answers for 1 of 1" in errors[0]
    assert "note: partial answer for 2026-11-01T00:00:00..2026-11-01T06:00:00, not loaded" in res.stdout
    seen = len(proxy.requests)
    res = runner.invoke(main, [*args, "--db", str(tmp_path / "b.duckdb"), "--allow-partial"])
    assert res.exit_code == 0, res.output
    assert "note: accepted a partial answer for 2026-11-01T00:00:00..2026-11-01T06:00:00 (--allow-partial)" in res.stdout
    assert not any("partial_response" in p for p in proxy.requests[seen:])
    with Warehouse(tmp_path / "b.duckdb") as wh:
        assert state(wh)[:2] == ("complete", T_END) and wh.count("gpu_samples") > 0


def test_through_the_write_path_a_failed_collection_keeps_whole_chunks_and_its_models_are_rebuilt_after(
        proxy: FaultProxy, clean: dict, tmp_path: Path) -> None:
    """As the CLI runs it (docs/warehouse.md): the chunks before the fault stay committed with
    their cursor and the models are marked stale; a reader rebuilds them before answering, and
    the next run completes the window."""
    import gpuinsight as gi

    cfg = cfg_for(tmp_path, proxy.url, "session", retries=1, max_points_per_series=24)  # 3 chunks of 2 h
    proxy.schedule = lambda path: "5xx" if in_chunk(path, 2) else None
    with gi.GpuInsight(cfg) as g:
        with pytest.raises(RuntimeFailure, match="gave up after 2 attempts"):
            g.collect_prometheus(T0, T_END, 300)
        assert state(g.wh)[:2] == ("failed", T0 + timedelta(hours=2))  # chunk 1 kept
        assert g.registry.status(g.wh.con) == "stale"
    proxy.schedule = None
    with gi.GpuInsight(cfg, read_only=True, upgrade=True) as g:
        assert g.registry.status(g.wh.con) == "current" and g.query("fleet_summary").height == 1
    with gi.GpuInsight(cfg) as g:
        g.collect_prometheus(None, T_END, 300)  # type: ignore[arg-type]
        assert state(g.wh)[:2] == ("complete", T_END) and fingerprint(g.wh) == clean
        assert g.registry.status(g.wh.con) == "current"

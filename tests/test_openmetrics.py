"""OpenMetrics / Prometheus text files: parsing, errors with FILE:LINE, loading."""

from __future__ import annotations

import gzip
import time
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.sources.openmetrics import load_openmetrics, parse_exposition, read_exposition
from gpuinsight.warehouse import Warehouse
from tests.prom_server import SmallFleet

T = datetime(2026, 11, 1)


def test_parses_labels_escapes_units_and_special_values() -> None:
    text = "\n".join([
        "# HELP foo a gauge", "# TYPE foo gauge",
        'foo{a="1",b=""} 1 1793491200',                 # OpenMetrics: seconds; b="" means no label
        'foo{a="1",b="x\\"y,z} \\\\ \\n"} 2.5 1793491230000',  # Prometheus text: milliseconds
        "bar 3",                                        # no labels, no timestamp -> default ts
        '  # an indented comment', "",
        'baz{gpu="0"} NaN 1793491200 # {trace_id="abc"} 1 1793491200',  # exemplar
        'foo{ a = "2" , } +Inf 1793491200.5',
        "# EOF",
    ])
    df = parse_exposition(text, default_ts=datetime(2026, 11, 2))
    assert df.columns[:3] == ["metric", "ts", "value"]
    rows = {(r["metric"], r["a"], r["b"]): r for r in df.iter_rows(named=True)}
    assert rows[("foo", "1", None)]["ts"] == T
    assert rows[("foo", "1", 'x"y,z} \\ \n')]["ts"] == datetime(2026, 11, 1, 0, 0, 30)
    assert rows[("bar", None, None)]["ts"] == datetime(2026, 11, 2)
    assert rows[("foo", "2", None)]["value"] == float("inf")
    assert df.filter(pl.col("metric") == "baz")["value"].is_nan().all()


@pytest.mark.parametrize(("text", "line", "what"), [
    ('ok 1 1\nfoo{a=1} 2 3', 2, "malformed label set"),
    ("foo 1 2 3", 1, "not a sample line"),
    ('# TYPE foo gauge\nfoo{a="1"} abc', 2, "is not a number"),
    ("1foo 2", 1, "not a sample line"),
    ('foo{a="1"} 2 x', 1, "timestamp 'x'"),
    ('foo{a="1} 2 3', 1, "not a sample line"),
])
def test_malformed_lines_name_file_and_line(text: str, line: int, what: str) -> None:
    with pytest.raises(BadInput, match=rf"^m\.om:{line}: .*{what}"):
        parse_exposition(text, name="m.om", default_ts=T)


def test_bad_file_writes_nothing(tmp_path: Path, small_fleet_om: Path) -> None:
    bad = tmp_path / "metrics.om.gz"
    body = small_fleet_om.read_bytes().replace(b"# EOF\n", b"DCGM_FI_DEV_GPU_UTIL{gpu=0} 1 1793491200\n# EOF\n")
    bad.write_bytes(gzip.compress(body))
    cfg = Config(db_path=tmp_path / "w.duckdb")
    with Warehouse(cfg.db_path) as wh:
        with pytest.raises(BadInput, match=r"metrics\.om\.gz:\d+: malformed label set"):
            load_openmetrics(wh, cfg, bad)
        assert wh.count("gpu_samples") == wh.count("pods") == wh.count("ingest_state") == 0
        with pytest.raises(BadInput, match="cannot read"):
            load_openmetrics(wh, cfg, tmp_path / "missing.om")


def test_small_fleet_file_loads_with_exact_gpu_hours(tmp_path: Path, small_fleet: SmallFleet,
                                                     small_fleet_om: Path) -> None:
    cfg = Config(db_path=tmp_path / "w.duckdb", cluster="test")
    gz = tmp_path / "metrics.om.gz"
    gz.write_bytes(gzip.compress(small_fleet_om.read_bytes()))
    with Warehouse(cfg.db_path) as wh:
        for _ in range(2):  # re-loading the same file leaves the same rows
            report = load_openmetrics(wh, cfg, gz)
            hours = wh.sql("SELECT namespace, pod, sum(step_s) / 3600 AS h FROM gpu_samples WHERE pod <> '' "
                           "GROUP BY ALL")
            counts = {t: wh.count(t) for t in ("gpu_samples", "gpus", "pods", "nodes", "gpu_hourly")}
            assert counts == {"gpu_samples": 4020, "gpus": 5, "pods": 7, "nodes": 4, "gpu_hourly": 35}
        assert {(r[0], r[1]): r[2] for r in hours.rows()} == small_fleet.gpu_hours(30)
        assert "DCGM_FI_DEV_GPU_UTIL: dropped 3 reading(s) that are not measurements (3 NaN/Inf)" in report.notes
        state = wh.con.execute("SELECT source, status, cursor FROM ingest_state").fetchone()
    assert state == ("openmetrics", "complete", datetime(2026, 11, 1, 5, 59, 30))


def test_parser_speed_300k_lines(tmp_path: Path) -> None:
    labels = ('gpu="{g}",UUID="GPU-{g:08x}-aaaa-bbbb-cccc-dddddddddddd",pci_bus_id="00000000:00:06.0",'
              'device="nvidia{g}",modelName="NVIDIA A100 80GB PCIe",Hostname="node-{n}",'
              'DCGM_FI_DRIVER_VERSION="535.154.05",container="main",namespace="ml",pod="train-{g}"')
    path = tmp_path / "big.om"
    with open(path, "w") as out:
        for g in range(100):
            lab = labels.format(g=g, n=g // 8)
            for m in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
                out.writelines(f"{m}{{{lab}}} {i % 97} {1793491200 + 30 * i}\n" for i in range(1000))
        out.write("# EOF\n")
    started = time.perf_counter()
    df = read_exposition(path)
    took = time.perf_counter() - started
    assert df.height == 300_000 and df["UUID"].n_unique() == 100
    assert took < 6.0, f"300k lines took {took:.1f}s"  # ~1 s here; generous for a shared CI machine

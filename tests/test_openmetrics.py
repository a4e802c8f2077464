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
from gpuinsight.sources import openmetrics as om
from gpuinsight.sources.openmetrics import load_openmetrics, parse_exposition, read_exposition
from gpuinsight.sources.series import load_series
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


def _piece_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every piece of text the parser is fed, from now on."""
    sizes: list[int] = []
    feed = om._Parser.feed

    def recording(self: om._Parser, text: str, first_line: int) -> None:
        sizes.append(len(text))
        feed(self, text, first_line)

    monkeypatch.setattr(om._Parser, "feed", recording)
    return sizes


def test_pieces_parse_as_one_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Series split across pieces, spelled differently in each, comments, CRLF, an exemplar:
    parsed in 64-byte pieces, the same frame as in one piece."""
    lines = ["# HELP foo a gauge", "# TYPE foo gauge"]
    for i in range(40):
        labels = 'a="1",b="2"' if i % 3 else ' b = "2" , a="1" ,'  # one series, two spellings
        lines += [f"foo{{{labels}}} {i} {1793491200 + 30 * i}", f'bar{{gpu="{i % 4}",x=""}} {i / 2} {1793491200 + i}']
        if i % 7 == 0:
            lines += ["", "  # indented comment", f'baz{{g="{i}"}} 1 {1793491200 + i} # {{trace_id="t{i}"}} 1']
    text = "\r\n".join(lines) + "\n# EOF\n\n"
    sizes = _piece_sizes(monkeypatch)
    small = parse_exposition(text.encode(), default_ts=T, chunk_bytes=64)
    assert len(sizes) > 20 and max(sizes) < 64 + max(map(len, lines)) + 2
    sizes.clear()
    whole = parse_exposition(text.encode(), default_ts=T)
    assert len(sizes) == 1
    assert small.equals(whole) and whole.height == 40 + 40 + 6
    assert whole.filter(pl.col("metric") == "foo")["a"].n_unique() == 1
    assert whole[om.LINE].is_sorted() and whole[om.LINE][0] == 3


@pytest.mark.parametrize(("text", "line", "what"), [
    ("ok 1 1793491200\n" * 30 + 'foo{a="1"} 2 x\n' + "ok 1 1793491200\n" * 5, 31, "timestamp 'x'"),
    ("ok 1 1793491200\n" * 30 + "# EOF\n" + "\n" * 40 + "ok 2 1793491200\n", 72, "content after `# EOF`"),
    ("ok 1 1793491200\n" * 30 + 'foo{a=1} 2 3\n', 31, "malformed label set"),
])
def test_errors_in_later_pieces_name_their_line(text: str, line: int, what: str) -> None:
    with pytest.raises(BadInput, match=rf"^m\.om:{line}: .*{what}"):
        parse_exposition(text, name="m.om", default_ts=T, chunk_bytes=50)


def test_not_utf8_in_a_later_piece_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "m.om"
    path.write_bytes(b"\xef\xbb\xbf" + b"ok 1 1793491200\n" * 30 + b"ok{a=\"\xff\"} 1 1793491200\n")
    with pytest.raises(BadInput, match=r"m\.om:31: not UTF-8 text \(byte 0xff\)"):
        read_exposition(path, chunk_bytes=40)


def _loaded(path: Path, tmp_path: Path, name: str) -> dict[str, object]:
    cfg = Config(db_path=tmp_path / f"{name}.duckdb", cluster="test")
    with Warehouse(cfg.db_path) as wh:
        report = load_openmetrics(wh, cfg, path)
        tables = {t: wh.sql(f"SELECT * FROM {t} ORDER BY ALL").rows()
                  for t in ("gpu_samples", "gpus", "pods", "nodes", "gpu_hourly", "pod_cpu_samples", "clusters")}
        state = wh.sql("SELECT source, status, cursor, rows_loaded, details FROM ingest_state").rows()
    return {**tables, "state": state, "notes": report.notes, "rows": report.rows}


def test_file_in_pieces_loads_what_one_piece_loads(tmp_path: Path, small_fleet_om: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The load path streams: 64 KiB pieces and a GPU per DCGM part give the rows, counts and
    notes of the file read whole and transformed at once (the earliest unidentified series is
    the one named, whichever part it is in)."""
    body = small_fleet_om.read_text()
    # GPU-x's part comes first (line 2) but its unidentified series (a gpu index that is not
    # one) is the last line; the series without a UUID on line 3 is the one to name
    first = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x"} 5 1793491200\n'
             'DCGM_FI_DEV_GPU_UTIL{gpu="3",Hostname="x"} 5 1793491200\n')
    last = 'DCGM_FI_DEV_GPU_UTIL{gpu="nvswitch0",UUID="GPU-x"} 5 1793491200\n'
    path = tmp_path / "metrics.om"
    path.write_text(body.replace("# EOF\n", last + "# EOF\n", 1).replace("\n", "\n" + first, 1))
    monkeypatch.setattr(om, "CHUNK_BYTES", path.stat().st_size + 1)
    monkeypatch.setattr(om, "DCGM_POINTS_PER_PART", 10**9)
    sizes = _piece_sizes(monkeypatch)
    whole = _loaded(path, tmp_path, "whole")
    assert len(sizes) == 1
    sizes.clear()
    monkeypatch.setattr(om, "CHUNK_BYTES", 1 << 16)
    monkeypatch.setattr(om, "DCGM_POINTS_PER_PART", 1)
    parts = om._gpu_parts
    n_parts: list[int] = []
    monkeypatch.setattr(om, "_gpu_parts", lambda *a: n_parts.append(len(p := parts(*a))) or p)
    pieces = _loaded(path, tmp_path, "pieces")
    assert len(sizes) > 50 and max(sizes) < (1 << 16) + 1000
    assert n_parts == [7]  # the six GPUs and the series without one
    assert pieces == whole
    assert any('skipped 2 DCGM series' in n and 'metrics.om:3: DCGM_FI_DEV_GPU_UTIL{Hostname="x",gpu="3"}' in n
               for n in pieces["notes"]), pieces["notes"]


def test_file_path_frames_load_what_one_wide_frame_loads(tmp_path: Path) -> None:
    """The file path hands each transform its own series with labels as categoricals and without
    the labels none of them has; the generic path hands every transform one frame of every
    series, labels as strings (each series' missing labels null). A generated fleet with every
    family the transforms read (DCGM, kube-state-metrics, cAdvisor, vLLM buckets and config,
    DCGM energy) loads the same rows both ways."""
    from tests.samplegen import FleetSpec, write_sample

    path = write_sample(tmp_path / "fleet", FleetSpec(days=0.25)) / "metrics.om.gz"
    tables = ("gpu_samples", "gpus", "pods", "nodes", "pod_cpu_samples", "serving_samples", "serving_config",
              "gpu_energy_samples", "kueue_quota_samples", "clusters")
    loaded = {}
    for how in ("file", "frame"):
        cfg = Config(db_path=tmp_path / f"{how}.duckdb", cluster="test")
        with Warehouse(cfg.db_path) as wh:
            if how == "file":
                load_openmetrics(wh, cfg, path)
            else:
                expo = om.scan_exposition(path)
                window = (expo.samples["ts"].min(), expo.samples["ts"].max())
                load_series(wh, cfg, [expo.frame()], source="openmetrics", scope="whole", window=window,
                            step_s=om.infer_step_s(expo))
            loaded[how] = {t: wh.sql(f"SELECT * FROM {t} ORDER BY ALL").rows() for t in tables}
    counts = {t: len(rows) for t, rows in loaded["file"].items()}
    assert all(counts[t] for t in tables if t != "kueue_quota_samples"), counts
    assert loaded["file"] == loaded["frame"]

"""Bad input through the CLI: one line naming the file and position, exit 2, warehouse unchanged."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import gpuinsight as gi
from gpuinsight.cli import main
from gpuinsight.paths import sample_data_dir

TABLES = ("gpu_samples", "gpu_hourly", "pods", "nodes", "queues", "vcjobs", "prices")


def counts(db: Path) -> dict[str, int]:
    with gi.open(db, read_only=True) as g:
        return {t: g.wh.count(t) for t in TABLES}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bad")
    res = CliRunner().invoke(main, ["demo", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out / "demo.duckdb"


def test_truncated_dump_is_exit_2_and_changes_nothing(loaded: Path, tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    shutil.copytree(sample_data_dir() / "kubectl", dump)
    text = (dump / "pods.json").read_text()
    (dump / "pods.json").write_text(text[: len(text) // 2])  # a half-written dump
    before = counts(loaded)
    res = CliRunner().invoke(main, ["collect", "kubernetes", "--db", str(loaded), "--from-dir", str(dump)])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "pods.json" in lines[0] and "line" in lines[0]
    assert "Traceback" not in res.output
    assert counts(loaded) == before


def test_malformed_metrics_line_is_exit_2_naming_file_and_line(tmp_path: Path) -> None:
    sample = tmp_path / "sample"
    shutil.copytree(sample_data_dir(), sample, ignore=shutil.ignore_patterns("openb"))
    with gzip.open(sample / "metrics.om.gz", "rt") as fh:
        head = [next(fh) for _ in range(200)]
    head[150] = 'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1" 12 oops\n'
    with gzip.open(sample / "metrics.om.gz", "wt") as fh:
        fh.writelines(head)
    res = CliRunner().invoke(main, ["demo", "--out", str(tmp_path / "out"), "--sample", str(sample)])
    assert res.exit_code == 2, res.output
    assert "metrics.om.gz:151" in res.output
    # a demo that fails to build a new warehouse removes the file it created: nothing is left behind
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []


def test_bad_price_catalog_and_missing_file(loaded: Path, tmp_path: Path) -> None:
    cat = tmp_path / "cat.csv"
    cat.write_text("instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour\n"
                   "p5.48xlarge,H100,8,55.04,\np4d.24xlarge,A100,8,lots,\n")
    before = counts(loaded)
    res = CliRunner().invoke(main, ["collect", "prices", "--db", str(loaded), "--catalog", str(cat)])
    assert res.exit_code == 2 and "cat.csv:3" in res.output
    assert counts(loaded) == before
    res = CliRunner().invoke(main, ["query", "--db", str(loaded), "no_such_model"])
    assert res.exit_code == 2 and "no query named" in res.output

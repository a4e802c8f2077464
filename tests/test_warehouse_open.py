"""Honest exit codes around the warehouse file: a command that reads a warehouse never creates
one; only demo, collect and import do. A broken demo leaves an existing warehouse as it was."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuinsight.cli import main
from gpuinsight.paths import sample_data_dir
from gpuinsight.warehouse import Warehouse

READERS = [
    ["recommend"], ["recommend", "--format", "json"], ["report", "--out", "{tmp}/r.html"], ["query", "fleet_summary"],
    ["rollback", "plan-x"], ["export", "--to", "{tmp}/export"],
]


@pytest.mark.parametrize("args", READERS, ids=lambda a: " ".join(a[:2]))
def test_a_missing_warehouse_is_exit_2_and_nothing_is_created(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "missing.duckdb"
    res = CliRunner().invoke(main, [*(a.format(tmp=tmp_path) for a in args), "--db", str(db)])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == f"gpuinsight: error: no warehouse at {db} (run gpuinsight demo or collect first)"
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing created"


@pytest.mark.parametrize("args", [["recommend"], ["report", "--out", "{tmp}/r.html"], ["export", "--to", "{tmp}/e"]],
                         ids=lambda a: a[0])
def test_an_empty_warehouse_says_it_is_empty(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "empty.duckdb"
    Warehouse(db).close()
    res = CliRunner().invoke(main, [*(a.format(tmp=tmp_path) for a in args), "--db", str(db)])
    assert res.exit_code == 2, res.output
    assert f"the warehouse at {db} is empty: nothing collected yet" in res.output
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "e").exists()
    res = CliRunner().invoke(main, ["query", "fleet_summary", "--db", str(db), "--format", "json"])
    assert res.exit_code == 0 and "is empty" in res.output


def test_query_lists_the_models_without_a_warehouse(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["query", "--db", str(tmp_path / "none.duckdb"), "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("name,grain,params") and "fleet_summary," in res.output
    assert not (tmp_path / "none.duckdb").exists()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_broken_demo_leaves_the_existing_warehouse_unchanged(tmp_path: Path) -> None:
    db = tmp_path / "fleet.duckdb"
    with Warehouse(db) as wh:
        wh.con.execute("INSERT INTO clusters (cluster) VALUES ('kept')")
    before = _digest(db)
    sample = tmp_path / "sample"
    shutil.copytree(sample_data_dir() / "kubectl", sample / "kubectl")
    (sample / "kubectl" / "pods.json").write_text('{"items": [')  # broken input
    res = CliRunner().invoke(main, ["demo", "--db", str(db), "--out", str(tmp_path / "out"), "--sample", str(sample),
                                    "--replace"])
    assert res.exit_code == 2, res.output
    assert "pods.json" in res.output
    assert _digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.duckdb", "out", "sample"], "no temporary file left"
    with Warehouse(db, read_only=True) as wh:
        assert wh.sql("SELECT cluster FROM clusters").to_series().to_list() == ["kept"]

"""Smaller honesty items of the CLI: a bad parameter value is exit 2; table output under a narrow
output encoding; a report of an edited plan file is refused as ``--apply`` refuses it, and one
never reviewed here carries a warning."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuinsight.cli import main
from tests.faults import GPUINSIGHT


@pytest.fixture(scope="module")
def fleet(sample_warehouse: Path) -> Path:
    """The sample fleet (tests/conftest.py), only read here."""
    return sample_warehouse


def test_a_bad_parameter_value_is_exit_2_naming_the_choices(fleet: Path) -> None:
    res = CliRunner().invoke(main, ["query", "waste_breakdown", "--param", "by=pod", "--db", str(fleet)])
    assert res.exit_code == 2
    assert res.output.strip() == ("gpuinsight: error: parameter by: 'pod' is not one of namespace, queue, cluster_queue, "
                                  "workload, node_pool, node, team")
    res = CliRunner().invoke(main, ["query", "waste_breakdown", "--param", "by=cluster_queue", "--db", str(fleet)])
    assert res.exit_code == 0, res.output


def test_table_output_under_latin_1_uses_ascii_borders(fleet: Path) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "latin-1"}
    res = subprocess.run([GPUINSIGHT, "query", "chargeback", "--param", "by=namespace", "--db", str(fleet)],
                         capture_output=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    text = res.stdout.decode("latin-1")
    assert "training" in text and "|" in text and "─" not in text
    res = subprocess.run([GPUINSIGHT, "query", "--format", "table"], capture_output=True, env=env, timeout=120)
    assert res.returncode == 0 and b"fleet_summary" in res.stdout


def test_a_report_of_an_edited_plan_is_refused_and_an_unreviewed_one_is_marked(fleet: Path, tmp_path: Path) -> None:
    db = tmp_path / "fleet.duckdb"
    db.write_bytes(fleet.read_bytes())
    saved = tmp_path / "plan.json"
    res = CliRunner().invoke(main, ["recommend", "--save-plan", str(saved), "--format", "json", "--db", str(db)])
    assert res.exit_code == 0, res.output
    plan = json.loads(saved.read_text())
    plan["recommendations"][0]["monthly_savings_usd"] = 999999
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(plan))
    res = CliRunner().invoke(main, ["report", "--plan", str(edited), "--out", str(tmp_path / "r.html"), "--db", str(db)])
    assert res.exit_code == 2
    assert f"{edited}: not the plan reviewed" in res.output and "recommendations[0].monthly_savings_usd" in res.output
    assert not (tmp_path / "r.html").exists()

    plan["plan_id"] = "plan-from-elsewhere"  # saved for review in another warehouse
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(plan))
    res = subprocess.run([GPUINSIGHT, "report", "--plan", str(elsewhere), "--out", str(tmp_path / "r.html"),
                          "--db", str(db)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    warning = ("plan plan-from-elsewhere (elsewhere.json) was never saved for review in this warehouse: its figures "
               "are the file's own")
    assert f"gpuinsight: warning: {warning}" in res.stderr
    assert warning.replace("'", "&#x27;") in (tmp_path / "r.html").read_text()

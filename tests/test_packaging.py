"""The wheel carries queries/ and sample_data/, and `gpuinsight demo` runs from an install
outside the repository."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True)
    (whl,) = out.glob("gpuinsight-*.whl")
    return whl


def test_wheel_ships_queries_and_sample_data(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpuinsight/queries/waste_breakdown.sql" in names
    assert "gpuinsight/queries/schema/001_core.sql" in names
    assert any(n.startswith("gpuinsight/sample_data/") for n in names)
    # test and bench support stays in the repository: the sample generator, the report preview
    assert not [n for n in names if n.startswith("gpuinsight/sample/") or n.endswith("reports/preview.py")]
    sql_in_repo = {p.name for p in (ROOT / "queries").glob("*.sql")}
    sql_in_wheel = {Path(n).name for n in names if n.startswith("gpuinsight/queries/") and n.count("/") == 2}
    assert sql_in_repo == sql_in_wheel


def test_demo_runs_from_a_fresh_venv_outside_the_repo(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
                   check=True)
    # Dependencies come from the test environment's site-packages, added by a .pth file so the
    # repository's editable install (activated by .pth files there) is not picked up.
    site = Path(subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    (site / "zz_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUINSIGHT_DB")}
    where = subprocess.check_output([str(py), "-c", "import gpuinsight, sys; print(gpuinsight.__file__)"],
                                    cwd=work, env=env, text=True).strip()
    assert where.startswith(str(env_dir)), where
    res = subprocess.run([str(env_dir / "bin" / "gpuinsight"), "demo", "--out", "out"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    assert (work / "out" / "report.html").stat().st_size > 10_000
    assert (work / "out" / "recommendations.json").exists()
    assert "recommendations" in res.stdout

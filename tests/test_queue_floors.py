"""Floors from every live job: a Volcano Job or PodGroup in the newest snapshot of its kind counts
for its queue's floor unless its phase is terminal, whatever its timestamps say (volcano-sh/volcano
#3426: a Job asking 3 GPUs per pod, no status, no creationTimestamp)."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import gpuinsight as gi
from gpuinsight.cli import main
from gpuinsight.config import Config
from gpuinsight.sources.kubernetes import load_dump_dir
from tests.fleet_tables import T0, MiniFleet

REAL = Path(__file__).parent / "fixtures" / "real" / "k8s"
END = T0 + timedelta(hours=6)


def fleet(tmp_path: Path) -> gi.GpuInsight:
    """Six hours of metrics of another queue's pod: the window the #3426 objects are judged in."""
    f = MiniFleet(cluster="real")
    f.price("p4de.24xlarge", "A100-80GB", 8, 27.45)
    f.node("a800-1", "p4de.24xlarge", "A100-80GB", 8, last=END - timedelta(seconds=300))
    f.pod("busy", "a800-1", namespace="other", queue="other", gpus=2)
    f.series("a800-1", 0, "busy", "other", 0.6, end=END)
    f.queue("other", weight=1, capability=8)
    g = gi.open(tmp_path / "w.duckdb")
    f.load(g.wh)
    g.refresh()
    return g


def dump_3426(folder: Path, *, phase: str | None = None) -> Path:
    """The issue's Queue and Job, with a node whose timestamps are from 2017 (kubernetes #55005)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(REAL / "volcano-3426-queue.yaml", folder / "queues.yaml")
    job = yaml.safe_load((REAL / "volcano-3426-job.yaml").read_text())
    if phase:
        job["status"] = {"state": {"phase": phase}}
    (folder / "vcjobs.yaml").write_text(yaml.safe_dump(job))
    shutil.copy(REAL / "gke-nodes.yaml", folder / "nodes.yaml")
    return folder


def queue_finding(g: gi.GpuInsight, name: str) -> dict | None:
    recs = [r for r in g.recommend().recommendations if r.rule == "queue" and r.queue == name]
    return recs[0].to_dict() if recs else None


@pytest.mark.parametrize("taken", [END, T0 - timedelta(days=3)], ids=["at-the-end", "before-the-window"])
def test_the_3426_queue_keeps_room_for_its_live_job(tmp_path: Path, taken) -> None:
    with fleet(tmp_path) as g:
        report = load_dump_dir(g.wh, Config(cluster="real"), dump_3426(tmp_path / "dump"), observed_at=taken)
        g.refresh()
        # the dump's own timestamps (a node created in 2017) do not date it
        assert any("newest timestamp inside these objects is 2017-" in n for n in report.notes)
        q = g.query("queue_usage").filter(g.query("queue_usage")["queue"] == "a800").row(0, named=True)
        assert (q["capability_gpu"], q["largest_gang_gpus"], q["allocated_gpu_p95"]) == (4.0, 3.0, 0.0)
        rec = queue_finding(g, "a800")
        assert rec is not None  # 4 GPUs of capability, none used: it is lowered ...
        assert rec["proposed"]["capability"]["nvidia.com/gpu"] >= 3  # ... but never below the job's 3
        assert rec["evidence"]["floor_gpus"] == 3


def test_a_finished_or_vanished_job_no_longer_holds_the_floor(tmp_path: Path) -> None:
    with fleet(tmp_path) as g:
        load_dump_dir(g.wh, Config(cluster="real"), dump_3426(tmp_path / "d1", phase="Completed"),
                      observed_at=T0 - timedelta(days=3))
        g.refresh()
        q = g.query("queue_usage").filter(g.query("queue_usage")["queue"] == "a800").row(0, named=True)
        assert q["largest_gang_gpus"] == 0  # terminal, and last seen before the window
        # live in an older read, gone from the newest: not live any more
        load_dump_dir(g.wh, Config(cluster="real"), dump_3426(tmp_path / "d2"), observed_at=T0 - timedelta(days=2))
        other = tmp_path / "d3"
        other.mkdir()
        (other / "vcjobs.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": []}))
        load_dump_dir(g.wh, Config(cluster="real"), other, observed_at=T0 - timedelta(days=1))
        g.refresh()
        q = g.query("queue_usage").filter(g.query("queue_usage")["queue"] == "a800").row(0, named=True)
        assert q["largest_gang_gpus"] == 0


def test_collect_kubernetes_as_of(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    folder = dump_3426(tmp_path / "dump")
    res = CliRunner().invoke(main, ["--db", str(db), "collect", "kubernetes", "--cluster", "real", "--from-dir",
                                    str(folder), "--as-of", "2026-11-01T06:00:00Z"])
    assert res.exit_code == 0, res.output
    with gi.open(db) as g:
        assert g.sql("SELECT DISTINCT observed_at FROM k8s_snapshots").rows() == [(END,)]
    res = CliRunner().invoke(main, ["--db", str(db), "collect", "kubernetes", "--from-dir", str(folder),
                                    "--as-of", "1970-01-01"])
    assert res.exit_code == 2 and "--as-of '1970-01-01': 1970-01-01T00:00:00 is before 2000" in res.output
    res = CliRunner().invoke(main, ["--db", str(db), "collect", "kubernetes", "--as-of", "2h"])
    assert res.exit_code == 2 and "--as-of dates kubectl dumps" in res.output


def test_the_3426_job_read_live_holds_the_floor(tmp_path: Path) -> None:
    """The same objects listed by the API server (the loopback fake): the read is dated now."""
    from gpuinsight.sources.kubernetes import collect_live
    from tests.k8s_server import FakeKubeAPI

    queue = yaml.safe_load((REAL / "volcano-3426-queue.yaml").read_text())
    job = yaml.safe_load((REAL / "volcano-3426-job.yaml").read_text())
    with fleet(tmp_path) as g:
        with FakeKubeAPI(crds=("volcano",)).load(queues=[queue], vcjobs=[job]) as api:
            collect_live(g.wh, Config(cluster="real"), kubeconfig=api.write_kubeconfig(tmp_path))
        g.refresh()
        q = g.query("queue_usage").filter(g.query("queue_usage")["queue"] == "a800").row(0, named=True)
        assert q["largest_gang_gpus"] == 3.0
        rec = queue_finding(g, "a800")
        assert rec is not None and rec["proposed"]["capability"]["nvidia.com/gpu"] >= 3

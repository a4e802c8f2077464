"""The consolidation planner on the real GenAI serving trace (GenTD26, vendored in tests/fixtures/traces): it
finds sharing, never gives a pod less memory than it used at its peak, never squeezes a pod
whose short-window p95 is high, and frees no more GPUs than a relaxed first-fit-decreasing
packing of the same peaks could."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import gpuinsight as gi
from gpuinsight.rules.common import compute_peak
from gpuinsight.rules.engine import evaluate_plan, frames_for, needed_frames
from tests.genai_trace import ffd_gpus, load_trace, memory_violations


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], dict[str, Any]]:
    with gi.open(Path(tmp_path_factory.mktemp("genai")) / "genai.duckdb") as g:
        load_trace(g.wh)
        g.refresh()
        frames = frames_for(g, needed_frames())
    recs, _ = evaluate_plan(frames)  # the ledger's invariants are checked here too
    return recs, frames


def test_sharing_found_and_memory_never_below_the_peak(trace: tuple[list[Any], dict[str, Any]]) -> None:
    recs, frames = trace
    sharing = [r for r in recs if r.rule in ("mig", "mps", "timeslice")]
    assert len(sharing) >= 10
    assert not [r for r in sharing if r.rule == "timeslice"], "production pods are never time-sliced"
    assert memory_violations(sharing, frames["workload_gpu_profile"]) == []


def test_peaks_decide_and_the_saving_is_bounded(trace: tuple[list[Any], dict[str, Any]]) -> None:
    recs, frames = trace
    rows = [r for r in frames["workload_gpu_profile"].to_dicts() if r.get("samples") and r["hours_held"] >= 12]
    moved = {r.workload for r in recs if r.rule in ("mig", "mps", "timeslice")}
    bursty = {r["workload"] for r in rows if max(r["gr_p95"], r["sm_p95"]) <= 0.5 < compute_peak(r)}
    assert bursty and not bursty & moved, "a pod bursting above half a GPU was consolidated"
    cands = [r for r in rows if compute_peak(r) <= 0.5]
    freed = sum(r.proposed["gpus_freed"] for r in recs if r.rule in ("mig", "mps", "timeslice"))
    ffd = ffd_gpus([(r["fb_max_mib"] * 1.10, compute_peak(r)) for r in cands])
    assert 5 <= freed <= len(cands) - ffd

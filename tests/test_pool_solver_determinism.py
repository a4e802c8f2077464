"""A pool's plan is a function of the data and the settings, not of the machine.

Every exact solve is bounded by HiGHS's work (``binpack.ilp_max_nodes`` branch-and-bound nodes),
on one search thread with a fixed seed; a wall-clock limit (``binpack.ilp_time_limit_s``) stays
only as a last-resort safety, and a solve it stops is named in the plan's notes. Checked here:

* a pool that needs branch-and-bound solved on a quiet machine and on one slowed by CPU-burning
  processes: the same plan and the same node count, both when the solve proves its optimum and
  when the work limit stops it (the best plan so far, the same one);
* the same pool in processes whose HiGHS scheduler has 1 and 4 threads (a machine's cores):
  the same plan and node count (with HiGHS's default ``parallel`` they differ);
* the GenAI serving trace on 8-GPU nodes (the bench's shape), planned twice, the second time on
  a slowed machine: byte-identical findings;
* the safety limit, when it triggers, says so in the plan's notes and in the findings' method.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gpuinsight.errors import BadInput
from gpuinsight.rules.engine import evaluate_plan, resolve_all
from gpuinsight.rules.pack_bound import (
    PoolNode,
    PoolPod,
    PoolProblem,
    SolveLimits,
    Stop,
    check_plan,
    plan_cost,
    solve_exact,
    solve_greedy,
)

ROOT = Path(__file__).resolve().parents[1]


# Seven 8-GPU nodes holding 32 GPUs of 1-, 3- and 5-GPU pods (node index, GPUs): four nodes can
# hold them, and proving which four with the fewest GPUs moved takes HiGHS 1.16 about a hundred
# branch-and-bound nodes (a few tenths of a second), where the GenAI pools take one
HARD_POOL = [(1, 3), (2, 3), (3, 1), (3, 1), (6, 3), (0, 1), (0, 1), (3, 3), (5, 1), (2, 3), (4, 3), (0, 3), (5, 3),
             (3, 3)]


def hard_pool() -> PoolProblem:
    nodes = [PoolNode(f"n{j}", 8.0, 55.04) for j in range(7)]
    return PoolProblem(nodes, [PoolPod(f"p{i}", j, float(g)) for i, (j, g) in enumerate(HARD_POOL)])


@contextmanager
def slowed_machine() -> Iterator[None]:
    """Every core busy with a CPU-burning process (at most 8) while the block runs."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(min(os.cpu_count() or 1, 8))]
    try:
        time.sleep(0.2)  # let them start
        yield
    finally:
        for p in burners:
            p.kill()
        for p in burners:
            p.wait()


def outcome(problem: PoolProblem, limits: SolveLimits) -> tuple[Any, ...]:
    """What a solve decided: the plan (proven, else the best found) and the work it took."""
    exact = solve_exact(problem, limits=limits)
    plan = exact.plan or exact.incumbent
    assert plan is not None and check_plan(problem, plan) == []
    return plan.assign, sorted(plan.moved_gangs), plan.shared, plan.optimal, exact.search.nodes, exact.search.stop


def test_a_pool_gets_the_same_plan_on_a_slowed_machine() -> None:
    problem = hard_pool()
    proven, limited = SolveLimits(), SolveLimits(max_nodes=40)
    t0 = time.perf_counter()
    quiet = outcome(problem, proven), outcome(problem, limited)
    t1 = time.perf_counter()
    with slowed_machine():
        slow = outcome(problem, proven), outcome(problem, limited)
    t2 = time.perf_counter()
    print(f"quiet {t1 - t0:.2f} s, slowed {t2 - t1:.2f} s")  # seen with pytest -s
    assert slow == quiet
    (_, _, _, optimal, nodes, stop), (_, _, _, best_so_far, stopped_at, limit) = quiet
    assert optimal and stop is None and nodes > 40  # a pool that needs branch-and-bound
    assert limit is Stop.WORK_LIMIT and stopped_at >= 40 and not best_so_far
    # the best plan the limited solve found is kept where it is no worse than the greedy plan
    exact = solve_exact(problem, limits=limited)
    assert exact.incumbent is not None
    assert plan_cost(problem, exact.incumbent) <= plan_cost(problem, solve_greedy(problem))


PROBE = """
import json, pickle, sys
import highspy
warm = highspy.Highs()
warm.setOptionValue("output_flag", False)
warm.setOptionValue("threads", {threads})  # HiGHS's scheduler is per process: {threads} threads from here on
warm.minimize(warm.addBinary())
from gpuinsight.rules.pack_bound import SolveLimits, solve_exact
exact = solve_exact(pickle.load(sys.stdin.buffer), limits=SolveLimits(max_nodes=40))
plan = exact.plan or exact.incumbent
print("RESULT " + json.dumps([plan.assign, sorted(plan.moved_gangs), exact.search.nodes, str(exact.search.stop)]))
"""


def test_the_plan_does_not_depend_on_the_machines_cores() -> None:
    """The work-limited solve, where a different search would stop elsewhere."""
    results = []
    for threads in (1, 4):
        run = subprocess.run([sys.executable, "-c", PROBE.format(threads=threads)], input=pickle.dumps(hard_pool()),
                             capture_output=True, cwd=ROOT, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:].decode()
        results.append(json.loads(run.stdout.decode().split("RESULT ", 1)[1]))
    assert results[0] == results[1]


def findings_json(recs: list[Any]) -> str:
    return json.dumps([r.to_dict() for r in recs], sort_keys=True, default=str)


def test_the_genai_trace_plan_is_byte_identical_across_runs(genai8_frames: dict[str, Any],
                                                            genai8_plan: tuple[list[Any], Any]) -> None:
    first, ctx = genai8_plan
    with slowed_machine():  # planned again on a busy machine
        second, ctx2 = evaluate_plan(genai8_frames)
    assert findings_json(second) == findings_json(first)
    assert ctx.notes == ctx2.notes == []  # no solve near the safety limit
    binpack = [r for r in first if r.rule == "binpack"]
    assert binpack and all(r.evidence["method"] == "exact ILP (HiGHS)" and r.evidence["plan_is_optimal"]
                           for r in binpack)


def test_the_wall_clock_safety_says_the_plan_depends_on_the_load(genai8_frames: dict[str, Any]) -> None:
    recs, ctx = evaluate_plan(genai8_frames, {"binpack": {"ilp_time_limit_s": 0.001}})
    assert ctx.notes and all("wall-clock safety limit" in n and "machine's load" in n for n in ctx.notes)
    assert any("h100" in n.lower() for n in ctx.notes), ctx.notes  # the pool is named
    methods = [r.evidence["method"] for r in recs if r.rule == "binpack"]
    assert methods and all("load-dependent" in m for m in methods), methods


def test_the_solver_settings_are_bounded() -> None:
    assert resolve_all({"binpack": {"ilp_max_nodes": "2000"}})["binpack"]["ilp_max_nodes"] == 2000
    for bad in ({"ilp_max_nodes": 0}, {"ilp_max_nodes": 2.5}, {"ilp_max_nodes": "many"},
                {"ilp_time_limit_s": 0}, {"ilp_time_limit_s": -1}):
        with pytest.raises(BadInput, match=next(iter(bad))):
            resolve_all({"binpack": bad})

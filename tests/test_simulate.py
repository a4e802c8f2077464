"""What-if scheduling simulator: hand-built clusters with known answers, errors, and a real-trace check."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from gpuinsight.simulate import (
    TraceError,
    format_table,
    list_policies,
    load_nodes,
    load_pods,
    run_simulation,
    simulate,
)
from gpuinsight.simulate.cluster import Cluster, Pod
from gpuinsight.simulate.engine import arrival_rows
from gpuinsight.simulate.fragmentation import FragModel, FragTracker, node_fragmentation, typical_pods
from gpuinsight.simulate.policies import SimContext, make_policy

# the openb extract shipped in sample_data/openb (cited in its README)
OPENB = Path(__file__).resolve().parents[1] / "sample_data" / "openb"

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"
# Target workload used by the hand examples: A (4 CPU, 1 GPU) x2, C (16 CPU, 1 GPU), B (2 CPU, 0.5 GPU)
WORKLOAD = ["a1,4000,1024,1,1000,", "a2,4000,1024,1,1000,", "b1,2000,1024,1,500,", "c1,16000,1024,1,1000,"]
ALL_POLICIES = ["first-fit", "best-fit", "gpu-packing", "gpu-clustering", "dot-product", "random", "fgd",
                "gpuinsight"]


def write(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def context(tmp_path: Path, nodes: list[str], workload: list[str] = WORKLOAD,
            rank: list[int] | None = None) -> SimContext:
    """A cluster from node rows, fragmentation measured against ``workload``, tie rank = node order."""
    cluster = Cluster(load_nodes(write(tmp_path / "nodes.csv", NODE_HEADER, nodes)))
    typical = typical_pods(load_pods(write(tmp_path / "workload.csv", POD_HEADER, workload)))
    frag = FragTracker(cluster, FragModel(typical, cluster.models))
    tie_rank = np.arange(cluster.n_nodes) if rank is None else np.asarray(rank)
    return SimContext(cluster, frag, np.random.default_rng(0), tie_rank)


def put(ctx: SimContext, node: int, gpus: tuple[int, ...], pod: Pod) -> None:
    ctx.cluster.place(node, gpus, pod)
    ctx.frag.update(node)


def choose(ctx: SimContext, policy: str, pod: Pod) -> tuple[int, tuple[int, ...]]:
    candidates = np.flatnonzero(ctx.cluster.feasible(pod))
    return make_policy(policy, ctx).choose(pod, candidates)


def share(milli: int, cpu: int = 2000) -> Pod:
    return Pod(0, cpu, 1024, 1, milli)


def whole(num: int = 1, cpu: int = 4000, spec: str = "") -> Pod:
    return Pod(0, cpu, 1024, num, 1000, spec)


# --- API surface and errors -----------------------------------------------------------------------


def test_list_policies_names_and_one_line_descriptions() -> None:
    policies = list_policies()
    assert list(policies) == ALL_POLICIES
    assert all(desc and "\n" not in desc for desc in policies.values())


def test_unknown_policy_is_a_value_error_naming_the_valid_ones(tmp_path: Path) -> None:
    nodes = write(tmp_path / "n.csv", NODE_HEADER, ["n0,8000,8192,1,T4"])
    pods = write(tmp_path / "p.csv", POD_HEADER, ["p0,1000,1024,1,1000,"])
    with pytest.raises(ValueError, match=r"unknown policy 'tetris'.*best-fit.*fgd.*gpuinsight"):
        run_simulation(pods, nodes, "tetris")


def test_missing_column_names_file_and_header_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "pods_bad.csv", "name,cpu_milli,memory_mib,num_gpu", ["p0,1000,1024,1"])
    with pytest.raises(TraceError) as err:
        load_pods(bad)
    assert str(err.value).startswith(f"{bad}:1: missing column(s) gpu_milli")
    assert isinstance(err.value, ValueError)


def test_non_numeric_value_names_file_and_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "pods.csv", POD_HEADER, ["p0,1000,1024,1,1000,", "p1,lots,1024,1,1000,"])
    with pytest.raises(TraceError, match=rf"^{bad}:3: column cpu_milli: 'lots' is not a number"):
        load_pods(bad)
    nodes = write(tmp_path / "nodes.csv", NODE_HEADER, ["n0,8000,8192,two,T4"])
    with pytest.raises(TraceError, match=rf"^{nodes}:2: column gpu: 'two'"):
        load_nodes(nodes)


def test_inconsistent_gpu_request_is_rejected_with_its_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "pods.csv", POD_HEADER, ["p0,1000,1024,2,500,"])
    with pytest.raises(TraceError, match=rf"^{bad}:2: a 2-GPU pod must request whole GPUs"):
        load_pods(bad)
    short = write(tmp_path / "short.csv", POD_HEADER, ["p0,1000,1024,1"])
    with pytest.raises(TraceError, match=rf"^{short}:2: expected 6 fields, found 4"):
        load_pods(short)


def test_five_column_pod_lists_load_without_gpu_spec(tmp_path: Path) -> None:
    pods = load_pods(write(tmp_path / "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli",
                           ["p0,1000,1024,1,250", "p1,2000,0,0,0"]))
    assert pods.gpu_spec == ("", "")
    assert pods.total_gpu_milli.tolist() == [250, 0]


# --- fragmentation ---------------------------------------------------------------------------------


def test_target_workload_and_single_node_fragmentation_by_hand(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,8000,65536,2,T4"])
    typ = ctx.frag.model.typical
    # most popular first, equal counts by larger (cpu, milli, ...) first; 95% needs all three types
    assert list(zip(typ.cpu.tolist(), typ.gpu_milli.tolist(), typ.weight.tolist(), strict=True)) == [
        (4000, 1000, 0.5), (16000, 1000, 0.25), (2000, 500, 0.25)]
    put(ctx, 0, (1,), share(700, cpu=0))  # GPUs left [1000, 300], CPU left 8000
    # A fits: only the 300 GPU is fragment (x0.5 = 150); C lacks CPU: all 1300 idle (x0.25 = 325);
    # B (500m) fits: the 300 GPU is fragment (x0.25 = 75). Total 550 milli-GPU.
    assert node_fragmentation(8000, [1000, 300], "T4", typ) == pytest.approx(550.0)
    assert ctx.frag.frag[0] == pytest.approx(550.0)
    assert ctx.frag.total() == pytest.approx(550.0)
    assert ctx.frag.model.frag(np.array([8000]), np.array([[1000, 300]]), np.array([0]))[0] == pytest.approx(550)


def test_model_mismatch_makes_all_idle_gpu_fragment(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,32000,65536,2,T4"], ["v1,1000,1024,1,1000,V100", "v2,1000,1024,1,500,V100"])
    assert ctx.frag.frag[0] == pytest.approx(2000.0)


def test_placement_deltas_match_the_reference_definition(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,32000,65536,2,T4", "n1,20000,65536,4,T4"])
    put(ctx, 1, (0,), share(650))
    put(ctx, 1, (2,), whole())
    for pod in (share(500), share(300), whole(), whole(2), Pod(0, 8000, 1024, 0, 0)):
        nodes = np.flatnonzero(ctx.cluster.feasible(pod))
        delta, row_node, row_gpu = ctx.frag.placement_deltas(pod, nodes)
        for d, n, g in zip(delta, row_node, row_gpu, strict=True):
            left = ctx.cluster.gpu_left[n, : ctx.cluster.n_gpu[n]].tolist()
            if pod.is_share:
                left[g] -= pod.gpu_milli
            for j in [j for j, v in enumerate(left) if v == 1000][: pod.num_gpu if not pod.is_share else 0]:
                left[j] = 0
            before = ctx.frag.frag[n]
            after = node_fragmentation(int(ctx.cluster.cpu_left[n]) - pod.cpu, left, "T4", ctx.frag.model.typical)
            assert d == pytest.approx(before - after)


# --- policies: one known answer each (the tie rank always favours node 0) -------------------------


def test_best_fit_picks_the_fullest_node(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,32000,65536,4,T4", "n1,32000,65536,4,T4"])
    put(ctx, 1, (0,), whole())
    assert choose(ctx, "best-fit", whole()) == (1, (1,))
    put(ctx, 1, (2,), share(600))
    assert choose(ctx, "best-fit", share(300)) == (1, (2,))  # and the tightest GPU on it


def test_equal_scores_go_to_the_lowest_tie_rank(tmp_path: Path) -> None:
    rows = ["n0,32000,65536,2,T4", "n1,32000,65536,2,T4", "n2,32000,65536,2,T4"]
    for policy in ("best-fit", "fgd", "gpu-packing"):
        assert choose(context(tmp_path, rows, rank=[2, 0, 1]), policy, whole())[0] == 1, policy
        assert choose(context(tmp_path, rows, rank=[1, 2, 0]), policy, whole())[0] == 2, policy


def test_fractional_pods_share_one_gpu(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,32000,65536,2,T4"])
    for milli in (500, 300):
        node, gpus = choose(ctx, "best-fit", share(milli))
        put(ctx, node, gpus, share(milli))
    assert ctx.cluster.gpu_left[0].tolist() == [200, 1000]


def test_shared_gpu_leaves_room_for_a_whole_gpu_pod_end_to_end(tmp_path: Path) -> None:
    nodes = write(tmp_path / "n.csv", NODE_HEADER, ["n0,32000,65536,2,T4"])
    pods = write(tmp_path / "p.csv", POD_HEADER, ["s6,1000,1024,1,600,", "s4,1000,1024,1,400,", "w,1000,1024,1,1000,"])
    for seed in range(4):  # every arrival order packs 600 + 400 on one GPU
        res = run_simulation(pods, nodes, "best-fit", seed=seed, tune=0, report_points=(100,))
        assert (res.placed_pods, res.failed_pods, res.final_allocation_pct) == (3, 0, 100.0)


def test_gpu_spec_is_respected_by_every_policy(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,32000,65536,2,T4", "n1,32000,65536,4,V100M32"])
    pod = whole(spec="V100M16|V100M32")
    for policy in ALL_POLICIES:
        assert choose(ctx, policy, pod)[0] == 1, policy
    assert not ctx.cluster.feasible(whole(spec="A100")).any()


def test_a_pod_that_fits_nowhere_fails_and_is_counted(tmp_path: Path) -> None:
    nodes = write(tmp_path / "n.csv", NODE_HEADER, ["n0,32000,65536,2,T4", "n1,32000,65536,2,T4"])
    pods = write(tmp_path / "p.csv", POD_HEADER,
                 ["big,1000,1024,4,1000,", "one,1000,1024,1,1000,", "mem,1000,999999,0,0,"])
    res = run_simulation(pods, nodes, "fgd", tune=0)
    assert (res.arrived_pods, res.placed_pods, res.failed_pods, res.failed_gpu_milli) == (3, 1, 2, 4000)


def test_gpu_packing_prefers_a_partly_used_gpu(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,32000,65536,2,T4", "n1,32000,65536,2,T4"])
    put(ctx, 1, (0,), share(700))
    pod = share(250)
    nodes = np.array([0, 1])
    assert make_policy("gpu-packing", ctx).scores(pod, nodes).tolist() == [31, 97]
    assert choose(ctx, "gpu-packing", pod) == (1, (0,))


def test_gpu_clustering_groups_pods_with_the_same_gpu_request(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,32000,65536,4,T4", "n1,32000,65536,4,T4", "n2,32000,65536,4,T4"])
    put(ctx, 0, (0,), whole())
    put(ctx, 1, (0,), share(300))
    assert choose(ctx, "gpu-clustering", share(200)) == (1, (0,))
    assert choose(ctx, "gpu-clustering", whole()) == (0, (1,))
    assert choose(ctx, "gpu-clustering", whole(2)) == (2, (0, 1))  # no 2-GPU group yet: an idle node


def test_dot_product_prefers_the_smallest_dot_product(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,96000,65536,2,T4", "n1,32000,65536,2,T4"])
    cpu_pod = Pod(0, 8000, 1024, 0, 0)
    assert choose(ctx, "dot-product", cpu_pod) == (1, ())


def test_first_fit_takes_the_first_feasible_node_and_gpu(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,4000,65536,2,T4", "n1,32000,65536,2,T4", "n2,32000,65536,2,T4"])
    put(ctx, 1, (0,), share(600))
    assert choose(ctx, "first-fit", share(300, cpu=8000)) == (1, (0,))
    assert choose(ctx, "first-fit", share(300, cpu=1000)) == (0, (0,))


def test_random_is_seeded_and_only_uses_feasible_nodes(tmp_path: Path) -> None:
    rows = ["n0,32000,65536,2,T4", "n1,32000,65536,2,T4", "n2,1000,65536,2,T4", "n3,32000,65536,2,T4"]
    picks = [choose(context(tmp_path, rows), "random", whole())[0] for _ in range(2)]
    assert picks[0] == picks[1]  # same seed, same choice
    ctx = context(tmp_path, rows)
    policy = make_policy("random", ctx)
    seen = {policy.choose(whole(), np.flatnonzero(ctx.cluster.feasible(whole())))[0] for _ in range(60)}
    assert seen == {0, 1, 3}


def test_fgd_picks_the_least_fragmenting_gpu_over_the_tie_rank(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,32000,65536,2,T4", "n1,32000,65536,2,T4"])
    put(ctx, 1, (1,), share(500))  # n1 GPUs left [1000, 500]
    # n1/GPU1 -> [1000, 0]: frag 375 -> 0 (+375, score 59); n0 -> [500, 1000]: 0 -> 375 (-375, score 40)
    assert make_policy("fgd", ctx).scores(share(500), np.array([0, 1])).tolist() == [40, 59]
    assert choose(ctx, "fgd", share(500)) == (1, (1,))
    assert choose(ctx, "best-fit", share(500))[0] == 1


def test_fgd_keeps_cpu_where_gpu_tasks_need_it_unlike_best_fit(tmp_path: Path) -> None:
    ctx = context(tmp_path, ["n0,40000,65536,2,T4", "n1,20000,65536,2,T4"])
    cpu_pod = Pod(0, 8000, 1024, 0, 0)
    assert choose(ctx, "best-fit", cpu_pod)[0] == 1  # least CPU left
    assert choose(ctx, "fgd", cpu_pod)[0] == 0  # n1 would drop below task C's 16 CPUs: +500 frag


def test_gpuinsight_follows_the_gradient_and_consolidates_on_ties(tmp_path: Path) -> None:
    rows = ["n0,32000,65536,2,T4", "n1,32000,65536,2,T4"]
    ctx = context(tmp_path, rows, rank=[1, 0])
    assert choose(ctx, "gpuinsight", whole())[0] == 1  # equal gradient: lowest rank wins
    put(ctx, 0, (1,), share(500))
    assert choose(ctx, "gpuinsight", share(500)) == (0, (1,))  # +375 gradient beats the 500 rank penalty


# --- workload, reporting, determinism ---------------------------------------------------------------


def test_tuning_fills_to_the_target_then_stops(tmp_path: Path) -> None:
    pods = load_pods(write(tmp_path / "p.csv", POD_HEADER, ["a,1000,1024,1,1000,", "b,1000,1024,1,1000,"]))
    rows = arrival_rows(pods, capacity_milli=4000, tune=1.3, rng=np.random.default_rng(7))
    assert len(rows) == 5 and sorted(rows[:2].tolist()) == [0, 1]  # the trace itself, then 3 clones
    many = load_pods(write(tmp_path / "m.csv", POD_HEADER, [f"p{i},1000,1024,1,1000," for i in range(10)]))
    kept = arrival_rows(many, capacity_milli=4000, tune=1.3, rng=np.random.default_rng(7))
    assert len(kept) == 5 and len(set(kept.tolist())) == 5  # dropped at random down to 5200 milli


def test_result_points_and_json(tmp_path: Path) -> None:
    nodes = write(tmp_path / "n.csv", NODE_HEADER, ["n0,32000,65536,2,T4", "n1,32000,65536,2,T4"])
    pods = write(tmp_path / "p.csv", POD_HEADER, ["a,4000,1024,1,1000,", "b,4000,1024,1,1000,"])
    res = run_simulation(pods, nodes, "best-fit", seed=3, tune=1.0, report_points=(25, 50, 100))
    data = json.loads(json.dumps(res.to_dict()))
    assert (data["total_gpus"], data["arrived_pods"], data["placed_pods"], data["failed_pods"]) == (4, 4, 4, 0)
    assert [p["arrived_pct"] for p in data["points"]] == [25, 50, 100]
    assert [p["allocation_pct"] for p in data["points"]] == [25.0, 50.0, 100.0]
    assert data["points"][2]["unallocated_pct"] == 0.0 and data["points"][2]["frag_pct_of_idle"] is None
    assert "arrived%" in format_table(data) and "policy=best-fit" in format_table(res)
    again = run_simulation(pods, nodes, "best-fit", seed=3, tune=1.0, report_points=(25, 50, 100))
    assert again.to_dict() | {"runtime_s": 0} == res.to_dict() | {"runtime_s": 0}


# --- the real trace (sub-sampled cluster) -----------------------------------------------------------


def test_fgd_allocates_at_least_as_much_as_best_fit_on_the_openb_trace(tmp_path: Path) -> None:
    pods = load_pods(OPENB / "openb_pod_list_default.csv")
    lines = (OPENB / "openb_node_list_gpu_node.csv").read_text().splitlines()
    nodes = load_nodes(write(tmp_path / "nodes.csv", lines[0], lines[1::4]))  # every 4th node
    results = {p: simulate(pods, Cluster(nodes), p, seed=42, report_points=(50, 100)) for p in
               ("best-fit", "fgd", "gpuinsight")}
    alloc = {p: r.point(100).allocation_pct for p, r in results.items()}
    frag50 = {p: r.point(50).frag_pct_of_total for p, r in results.items()}
    assert results["fgd"].total_gpus == sum(int(x.split(",")[3]) for x in lines[1::4])
    assert 85.0 < alloc["best-fit"] <= alloc["fgd"] <= 100.0
    assert alloc["gpuinsight"] >= alloc["fgd"] - 0.5
    assert frag50["fgd"] < frag50["best-fit"]
    assert not math.isnan(frag50["gpuinsight"])


def test_simulate_refuses_bytes_that_are_not_utf8_like_the_import(tmp_path: Path) -> None:
    """Bad bytes in a trace are bad input (exit 2, file:line), the same message as ``import``."""
    from click.testing import CliRunner

    from gpuinsight.cli import main

    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n")
    pods = tmp_path / "pods.csv"
    pods.write_bytes(b"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,1000\np1,1000,1024,1,5\xff0\n")
    runner = CliRunner()
    res = runner.invoke(main, ["simulate", "--pods", str(pods), "--nodes", str(nodes), "--policy", "best-fit"])
    assert res.exit_code == 2, res.output
    assert f"{pods}:3: not UTF-8 text (byte 0xff)" in res.output and len(res.output.strip().splitlines()) == 1
    imported = runner.invoke(main, ["import", "alibaba-openb", "--db", str(tmp_path / "w.duckdb"),
                                    "--pods", str(pods), "--nodes", str(nodes)])
    assert imported.exit_code == 2 and f"{pods}:3: not UTF-8 text (byte 0xff)" in imported.output

"""End to end on the embedded sample fleet: `gpuinsight demo` finds exactly the planted waste,
with savings near the generator's true figures, and the GPU-hours per workload match."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import gpuinsight as gi
from gpuinsight.cli import main
from gpuinsight.paths import sample_data_dir

TRUTH = json.loads((sample_data_dir() / "ground_truth.json").read_text())


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("demo")
    res = CliRunner().invoke(main, ["demo", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "recommendations" in res.output and "$" in res.output
    (out / "summary.txt").write_text(res.output)
    return out, res.output


@pytest.fixture(scope="module")
def demo(demo_run: tuple[Path, str]) -> Path:
    return demo_run[0]


@pytest.fixture(scope="module")
def demo_output(demo_run: tuple[Path, str]) -> str:
    return demo_run[1]


def finding_key(f: dict) -> tuple:
    if f["rule"] == "binpack":
        return ("binpack", f["node"])
    if f["rule"] == "queue":
        return ("queue", f["queue"])
    return (f["rule"], f["namespace"], f["workload"])


def test_demo_summary_names_the_input_topology_and_checkpoint_findings(demo_output: str) -> None:
    lines = demo_output.splitlines()
    starved = next(x for x in lines if x.strip().startswith("input-starved GPUs:"))
    assert "cv-train/resnet50-train" in starved and "cause: cpu" in starved
    topo = next(x for x in lines if x.strip().startswith("topology:"))
    assert "nlp/bert-ddp" in topo and "rack-a" in topo and "not priced" in topo
    ckpt = next(x for x in lines if x.strip().startswith("checkpoint-aware spot:"))
    assert "finetune/llama-sft every 30 min" in ckpt and "finetune/mistral-lora every 20 min (inferred)" in ckpt


def test_demo_signals_evidence(demo: Path) -> None:
    recs = {(r["rule"], r["workload"]): r for r in json.loads((demo / "recommendations.json").read_text())}
    truth = {(f["rule"], f["workload"]): f for f in TRUTH["expected_findings"]}
    starved = recs[("input_starved", "resnet50-train")]
    want = truth[("input_starved", "resnet50-train")]["evidence"]
    assert starved["evidence"]["duty_cycle_pct"] / 100 == pytest.approx(want["duty_cycle"], abs=0.02)
    assert starved["evidence"]["burst_period_min"] == want["burst_period_min"]
    assert starved["evidence"]["stall_run_mean_min"] == want["stall_min"]
    assert starved["proposed"]["cause"] == want["cause"] and starved["evidence"]["saving_basis"] == "waiting_time"
    assert not [r for r in recs.values() if r["workload"] == "resnet50-train" and r["rule"] != "input_starved"]
    topo = recs[("topology", "bert-ddp")]
    assert {k: topo["evidence"][k] for k in ("current_span", "tightest_feasible", "feasible_domain")} == \
        truth[("topology", "bert-ddp")]["evidence"]
    assert topo["monthly_savings_usd"] == 0 and topo["evidence"]["saving_basis"] == "slowdown_risk"
    for job in ("llama-sft", "mistral-lora"):
        got, want = recs[("spot", job)]["evidence"], truth[("spot", job)]["evidence"]
        assert got["checkpoint_interval_min"] == want["checkpoint_interval_min"]
        assert got["expected_rework_gpu_hours_per_month"] == pytest.approx(want["rework_gpu_hours_per_month"], rel=0.02)
        assert got["finished_tasks"] == 0  # only the checkpoints make it spot-tolerant


def test_demo_writes_report_and_recommendations(demo: Path) -> None:
    html = (demo / "report.html").read_text()
    assert "<html" in html.lower() and "vega" in html.lower()
    recs = json.loads((demo / "recommendations.json").read_text())
    assert isinstance(recs, list) and recs
    for r in recs:
        for field in ("id", "rule", "namespace", "workload", "node", "queue", "title", "current", "proposed",
                      "monthly_savings_usd", "confidence", "evidence", "actions"):
            assert field in r, field
        assert 0 <= r["confidence"] <= 1


def test_exactly_the_planted_findings(demo: Path) -> None:
    recs = json.loads((demo / "recommendations.json").read_text())
    found = {finding_key(r) for r in recs}
    expected = {finding_key(f) for f in TRUTH["expected_findings"]}
    assert found == expected
    flagged = {(r["namespace"], r["workload"]) for r in recs}
    for w in TRUTH["must_not_flag"]:
        assert (w["namespace"], w["workload"]) not in flagged


def test_savings_near_the_true_figures(demo: Path) -> None:
    recs = {finding_key(r): r for r in json.loads((demo / "recommendations.json").read_text())}
    for f in TRUTH["expected_findings"]:
        got = recs[finding_key(f)]["monthly_savings_usd"]
        want = f["monthly_savings_usd"]
        if want == 0:
            assert got == 0, f
        else:
            # spot depends on the assumed interruption rework; input_starved on the duty cycle measured
            # against the noisy burst level (the p95 of the per-step max); the rest on the same prices
            tol = {"spot": 0.10, "input_starved": 0.05}.get(f["rule"], 0.02)
            assert got == pytest.approx(want, rel=tol), (f, got)


def test_gpu_hours_per_workload_match_ground_truth(demo: Path) -> None:
    with gi.open(demo / "demo.duckdb", read_only=True) as g:
        prof = {(r["namespace"], r["workload"]): r for r in g.query("workload_gpu_profile").to_dicts()}
    step_h = TRUTH["window"]["interval_s"] / 3600
    want: dict[tuple[str, str], list[float]] = {}
    for w in TRUTH["workloads"]:  # the groups of a Ray cluster are entries of one workload
        acc = want.setdefault((w["namespace"], w["workload"]), [0.0, 0.0])
        acc[0] += w["allocated_gpu_hours"] + w["allocated_mig_slice_hours"]
        # within one step per pod incarnation (lifetimes are known to the sample step)
        acc[1] += step_h * w["pod_incarnations"] * w["gpus_per_pod"]
    for key, (hours, tol) in want.items():
        assert prof[key]["gpu_hours"] == pytest.approx(hours, abs=tol + 1e-6), key


def test_buckets_add_up_to_node_cost(demo: Path) -> None:
    with gi.open(demo / "demo.duckdb", read_only=True) as g:
        total = g.sql("SELECT sum(cost_usd) FROM node_hours").item()
        buckets = g.query("waste_breakdown", by="node_pool")["total_usd"].sum()
        summary = g.query("fleet_summary").row(0, named=True)
    assert buckets == pytest.approx(total, rel=1e-9)
    assert summary["total_usd"] == pytest.approx(total, rel=1e-9)
    assert summary["catalog"]


def test_recommend_settings_from_file_and_flags(demo: Path, tmp_path: Path) -> None:
    db = str(demo / "demo.duckdb")
    cfg = tmp_path / "rules.yaml"
    cfg.write_text("idle:\n  max_median_activity: 0.0\n")  # nothing is *exactly* idle
    res = CliRunner().invoke(main, ["recommend", "--db", db, "--format", "json", "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    assert not [r for r in json.loads(res.output) if r["rule"] == "idle"]
    res = CliRunner().invoke(main, ["recommend", "--db", db, "--format", "csv", "--set", "consolidation.memory_headroom=9"])
    assert res.exit_code == 0 and ",mig," not in res.output  # 10x the maximum fits no slice
    assert ",binpack," in res.output


def test_kuberay_and_scale_to_zero_in_the_summary_and_as_valid_objects(demo: Path) -> None:
    from gpuinsight.actions.model import action_ref, expected_after
    from gpuinsight.actions.validate import validate_object
    from tests.crds import CRD_DIRS
    from tests.k8s_apply_server import schemas_for

    summary = (demo / "summary.txt").read_text()
    want = {(f["rule"], f["workload"]): f["monthly_savings_usd"] for f in TRUTH["expected_findings"]}
    ray = sum(v for (rule, _), v in want.items() if rule == "ray")
    assert (f"KubeRay: 1 RayJob(s) whose cluster outlived the job, 1 GPU worker group(s) held idle by minReplicas, "
            f"1 head pod(s) holding GPUs; ${ray:,.0f}/month") in summary
    assert (f"scale to zero: 1 service(s) idle on nights/weekends get a KEDA ScaledObject: 35 h at zero in the "
            f"window, about 0.5 cold start(s) a day, ${want[('scale_to_zero', 'summarizer-preview')]:,.0f}/month"
            ) in summary
    schemas = schemas_for(CRD_DIRS)
    dumps = {f"{o['kind']}/{o['metadata']['name']}": o for name in ("rayclusters", "rayjobs")
             for o in json.loads((sample_data_dir() / "kubectl" / f"{name}.json").read_text())["items"]}
    recs = [r for r in json.loads((demo / "recommendations.json").read_text()) if r["rule"] in ("ray", "scale_to_zero")]
    kinds = set()
    for r in recs:
        for action in r["actions"]:
            ref = action_ref(action)
            kinds.add(ref.kind)
            obj = expected_after(action, dumps.get(f"{ref.kind}/{ref.name}"))
            assert validate_object(obj, schemas) == [], (r["id"], action["target"])
    assert kinds == {"RayJob", "RayCluster", "ScaledObject"}


def test_a_serving_finding_states_its_cost_per_token_after_the_change(demo: Path) -> None:
    """The planted chat service's MIG finding: cost per 1M tokens today and after (half a GPU), equal
    to the ground truth's hand count of its tokens and cost, and the latency observed at its load."""
    recs = {(r["rule"], r["workload"]): r for r in json.loads((demo / "recommendations.json").read_text())}
    truth = {(f["rule"], f["workload"]): f for f in TRUTH["expected_findings"]}
    got, want = recs[("mig", "assistant-8b")]["evidence"], truth[("mig", "assistant-8b")]["unit_economics"]
    assert got["usd_per_1m_tokens"] == pytest.approx(want["usd_per_1m_tokens"], rel=0.01)
    assert got["usd_per_1m_tokens_after"] == pytest.approx(want["usd_per_1m_tokens_after"], rel=0.01)
    assert got["usd_per_1m_tokens_after"] <= got["usd_per_1m_tokens"] / 2 + 1e-9
    assert got["ttft_p95_s_observed"] > 0 and "not measured" in got["latency_basis"]
    assert "usd_per_1m_tokens" not in recs[("mig", "safety-guard")]["evidence"]  # no server metrics: no claim
    with gi.open(demo / "demo.duckdb", read_only=True) as g:
        ue = {r["workload"]: r for r in g.query("unit_economics").to_dicts()}
    for w in TRUTH["workloads"]:
        if "unit_economics" in w:
            row = ue[w["workload"]]
            assert row["tokens"] == pytest.approx(w["unit_economics"]["prompt_tokens"]
                                                  + w["unit_economics"]["generation_tokens"], rel=1e-9)
            assert row["usd_per_1m_tokens"] == pytest.approx(w["unit_economics"]["usd_per_1m_tokens"], rel=0.005)


def test_a_reserved_vllm_is_consolidated_with_its_memory_setting_changed(demo: Path) -> None:
    """The planted FAQ bot: vLLM's default reservation makes its GPU look full; sized on the KV cache it
    used (its size from the pod annotation) it shares a GPU, and the change sets
    --gpu-memory-utilization for its slice, equal to the ground truth's hand count."""
    recs = {(r["rule"], r["workload"]): r for r in json.loads((demo / "recommendations.json").read_text())}
    truth = {(f["rule"], f["workload"]): f for f in TRUTH["expected_findings"]}
    bot, want = recs[("mig", "faq-bot")], truth[("mig", "faq-bot")]["server_memory"]
    setting = bot["proposed"]["server_memory"]
    assert (setting["flag"], setting["basis"], setting["mode"]) == (want["flag"], want["basis"], "set")
    assert setting["value"] == pytest.approx(want["value"], abs=0.002)
    ev = bot["evidence"]
    assert ev["memory_basis"] == "KV cache used at peak"
    assert ev["kv_cache_peak_pct"] / 100 == pytest.approx(want["kv_cache_peak"], abs=1e-4)
    assert ev["server_memory_fraction_now"] == 0.9 and ev["kv_cache_size_source"].startswith("annotation")
    # on its framebuffer it would have fit no slice: 1.1 x its reservation is more than the largest
    # instance smaller than the GPU (4g.40gb)
    assert ev["fb_used_max_gb"] * 1.1 > 40
    assert bot["proposed"]["mig_profile"] == "3g.40gb" and setting["value"] * setting["device_mib"] >= \
        want["reservation_mib"] - 1
    # the chat service moves to a smaller device too: its fraction is set for the slice (sized on its framebuffer)
    chat = recs[("mig", "assistant-8b")]["proposed"]["server_memory"]
    assert chat["basis"] == "framebuffer" and chat["flag"] == "--gpu-memory-utilization"
    assert chat["value"] * chat["device_mib"] >= recs[("mig", "assistant-8b")]["evidence"]["fb_used_max_gb"] * 1024
    assert recs[("mig", "ticket-embedder")]["proposed"].get("server_memory") is None  # not an inference server

"""The ray rule on literal tables: finished RayJobs whose cluster lives on, GPU worker groups held
up idle by minReplicas, head pods holding GPUs; the savings, and that nothing is counted twice."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpuinsight.keys import WorkloadKey
from gpuinsight.rules.engine import evaluate_plan, evaluate_rules
from tests.ray_keda_frames import T0, frame, ray_group_row, ray_job_row, stretch_row
from tests.rule_fleets import Fleet, Node, Pod, Usage

L4X4 = dict(model="L4", gpus=4, price=4.6016, pool="ray")
NS = "ml-platform"


def ray_pods(cluster: str, node: str, group: str, n: int, start: int = 0) -> list[Pod]:
    return [Pod(f"{cluster}-{group}-worker-{i}", node, cluster, namespace=NS, kind="RayCluster",
                labels={"ray.io/group": group, "ray.io/cluster": cluster}) for i in range(start, start + n)]


def batch_fleet() -> Fleet:
    """RayCluster batch-infer: 4 one-GPU workers on a 4-GPU node, busy 04:00-06:00 each day."""
    f = Fleet([Node("ray-1", **L4X4), Node("ray-2", **L4X4)],
              ray_pods("batch-infer", "ray-1", "gpu-workers", 4) + [Pod("x-0", "ray-2", "x", gpus=4)])
    f.usage[(NS, "batch-infer")] = Usage(gr_mean=0.07, gr_p50=0.0, gr_p95=0.85, gr_max=0.9, active_fraction=0.08,
                                         recurring_hours=[4, 5], days_observed=2)
    return f


def daily_gaps() -> list[tuple]:
    # idle 00:00-04:00, then 06:00-04:00 the next day, then 06:00 to the end of the two days
    return [(T0, 4), (T0 + timedelta(hours=6), 22), (T0 + timedelta(hours=30), 18)]


def batch_frames(f: Fleet, **group: object) -> dict:
    g = ray_group_row(f, NS, "batch-infer", "gpu-workers", **group)  # type: ignore[arg-type]
    s = stretch_row(f, NS, "batch-infer", daily_gaps(), kind="RayCluster", group="gpu-workers")
    return f.frames(ray_groups=frame([g]), idle_stretches=frame([s]), ray_jobs=frame([]))


def test_idle_workers_without_autoscaler_get_it_with_min_replicas_zero() -> None:
    f = batch_fleet()
    (r,) = evaluate_rules(batch_frames(f, replicas=4, min_replicas=4, autoscaling=False))
    assert r.rule == "ray" and r.proposed == {
        "change": "worker_min_replicas", "min_replicas": 0, "autoscaling": True, "idle_timeout_s": 600,
        "head_gpus": None, "shutdown_after_finish": None, "ttl_after_finish_s": None}
    assert r.target["kind"] == "RayCluster" and r.target["group"] == "gpu-workers" and r.target["group_index"] == 0
    # all four workers go in each stretch, after the 10-minute idle timeout: (4 + 22 + 18 - 3/6) h of the node
    at_zero = 4 + 22 + 18 - 3 * 600 / 3600
    assert r.monthly_savings_usd == pytest.approx(4.6016 * at_zero / 48 * 730, rel=1e-3)
    assert "turn on the in-tree autoscaler" in r.title


def test_autoscaler_held_by_min_replicas_and_a_slow_timeout() -> None:
    f = batch_fleet()
    (r,) = evaluate_rules(batch_frames(f, replicas=4, min_replicas=4, autoscaling=True, idle_timeout_s=60))
    assert r.proposed["min_replicas"] == 0 and r.proposed["idle_timeout_s"] is None  # its own shorter timeout stays
    assert "turn on" not in r.title and "lower minReplicas 4 -> 0" in r.title
    (slow,) = evaluate_rules(batch_frames(f, replicas=4, min_replicas=0, autoscaling=True, idle_timeout_s=7200))
    assert slow.proposed["idle_timeout_s"] == 600
    # the autoscaler could have let them go (min 0, 60 s): whatever holds them is not the spec, so no ray
    # finding; the usage is still there for the idle rule (a schedule note for this cluster)
    recs = evaluate_rules(batch_frames(f, replicas=4, min_replicas=0, autoscaling=True, idle_timeout_s=60))
    assert [(r.rule, r.proposed.get("reason")) for r in recs] == [("idle", "periodic")]


def test_the_ray_cluster_is_not_judged_again_by_idle() -> None:
    f = batch_fleet()
    f.usage[(NS, "batch-infer")] = Usage(gr_mean=0.001, gr_p50=0.0, gr_p95=0.004, gr_max=0.02, active_fraction=0.0)
    recs, _ = evaluate_plan(batch_frames(f, replicas=4, min_replicas=4, autoscaling=True))
    assert [r.rule for r in recs] == ["ray"]
    # without the Ray tables the same cluster is an idle workload (and the idle rule's to reclaim)
    assert [r.rule for r in evaluate_rules(f.frames())] == ["idle"]


def test_idle_head_gpu_is_removed_and_a_busy_one_is_not() -> None:
    pods = [Pod("llm-ft-head-abcde", "ray-1", "llm-ft", namespace=NS, kind="RayCluster",
                labels={"ray.io/group": "headgroup"})] + ray_pods("llm-ft", "ray-1", "trainers", 3)
    f = Fleet([Node("ray-1", **L4X4)], pods)
    f.usage[(NS, "llm-ft")] = Usage(gr_mean=0.6, gr_p50=0.7, gr_p95=0.9)
    head = ray_group_row(f, NS, "llm-ft", "headgroup", head_gpus=1, gr_hourly_max_p95=0.02)
    workers = ray_group_row(f, NS, "llm-ft", "trainers", replicas=3, min_replicas=3, gr_hourly_max_p95=0.9)
    frames = f.frames(ray_groups=frame([head, workers]), ray_jobs=frame([]), idle_stretches=frame([]))
    (r,) = evaluate_rules(frames)
    assert r.proposed["change"] == "head_gpus" and r.proposed["head_gpus"] == 0
    assert r.monthly_savings_usd == pytest.approx(4.6016 / 4 * 730, rel=1e-3)
    busy = ray_group_row(f, NS, "llm-ft", "headgroup", head_gpus=1, gr_hourly_max_p95=0.6)
    assert evaluate_rules(f.frames(ray_groups=frame([busy, workers]), ray_jobs=frame([]),
                                   idle_stretches=frame([]))) == []


def job_fleet() -> Fleet:
    f = Fleet([Node("ray-1", **L4X4)], ray_pods("embed-x7k2p", "ray-1", "gpu", 2))
    f.usage[(NS, "embed-x7k2p")] = Usage(gr_mean=0.05, gr_p50=0.0, gr_p95=0.7, active_fraction=0.06)
    return f


def test_finished_job_whose_cluster_lives_on() -> None:
    f = job_fleet()
    end = T0 + timedelta(hours=3, minutes=20)
    job = ray_job_row(f, NS, "embed", "embed-x7k2p", end)
    group = ray_group_row(f, NS, "embed-x7k2p", "gpu", replicas=2, min_replicas=2)
    s = stretch_row(f, NS, "embed-x7k2p", [(T0 + timedelta(hours=4), 44)], kind="RayCluster", group="gpu")
    recs, ctx = evaluate_plan(f.frames(ray_jobs=frame([job]), ray_groups=frame([group]), idle_stretches=frame([s])))
    (r,) = recs  # the worker group's idle hours are the job finding's: no second finding
    assert r.proposed["change"] == "job_cleanup" and r.proposed["shutdown_after_finish"] is True
    assert r.proposed["ttl_after_finish_s"] == 300 and r.target == {
        "kind": "RayJob", "name": "embed", "namespace": NS, "ray_cluster": "embed-x7k2p", "group": None,
        "group_index": None, "cluster": "c"}
    # from 04:00 on (the TTL ends at 03:25, inside the hour already excluded): 44 h of 2 of the 4 GPUs
    assert r.evidence["hours_held_after_end"] == 44 and r.evidence["hours_kept_by_proposed_ttl"] == 0
    assert r.monthly_savings_usd == pytest.approx(4.6016 / 2 * 44 / 48 * 730, rel=1e-3)
    assert ctx.workload_leaves(WorkloadKey("c", NS, "embed-x7k2p")) == r.id
    late = ray_job_row(f, NS, "embed", "embed-x7k2p", T0 + timedelta(hours=3, minutes=58))
    (r2,) = evaluate_rules(f.frames(ray_jobs=frame([late]), ray_groups=frame([]), idle_stretches=frame([])))
    assert r2.evidence["hours_kept_by_proposed_ttl"] == 1  # 03:58 + 5 min reaches into 04:00-05:00


@pytest.mark.parametrize("change", [dict(uses_existing=True), dict(shutdown=True, ttl_s=300),
                                    dict(post_peak=0.6), dict(status="Running")])
def test_jobs_that_clean_up_or_keep_working_are_left_alone(change: dict) -> None:
    f = job_fleet()
    job = ray_job_row(f, NS, "embed", "embed-x7k2p", T0 + timedelta(hours=3), **change)  # type: ignore[arg-type]
    assert evaluate_rules(f.frames(ray_jobs=frame([job]), ray_groups=frame([]), idle_stretches=frame([]))) == []


def test_a_long_ttl_is_shortened() -> None:
    f = job_fleet()
    job = ray_job_row(f, NS, "embed", "embed-x7k2p", T0 + timedelta(hours=3), shutdown=True, ttl_s=86400)
    (r,) = evaluate_rules(f.frames(ray_jobs=frame([job]), ray_groups=frame([]), idle_stretches=frame([])))
    assert r.current["ttl_after_finish_s"] == 86400 and r.proposed["ttl_after_finish_s"] == 300
    assert "ttlSecondsAfterFinished is 86400 s" in r.title

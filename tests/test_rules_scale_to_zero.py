"""The scale_to_zero rule on literal tables: which services get a KEDA ScaledObject, what it
saves (only the hours at zero), and where idle (idle all along; periodic batch work) ends."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpuinsight.rules.engine import evaluate_plan, evaluate_rules
from gpuinsight.rules.scale_to_zero import week_profile, zero_hours
from tests.ray_keda_frames import T0, frame, scaled_row, stretch_row
from tests.rule_fleets import Fleet, Node, Pod, Usage

L4 = dict(model="L4", gpus=1, price=0.8048, pool="l4")
WEEK = 168.0
BUSY_DAYTIME = Usage(gr_mean=0.2, gr_p50=0.15, gr_p95=0.6, peak_p95=0.7, gr_max=0.8, active_fraction=0.5,
                     fb_p99=9000, fb_max=9500, hours_held=WEEK, days_observed=7)


def nights_and_weekend() -> list[tuple]:
    """Idle 20:00-08:00 on weekday nights and from Friday 20:00 to the end of the week."""
    out = [(T0 + timedelta(hours=24 * d + 20), 12) for d in range(4)]      # Mon..Thu nights
    out.append((T0 + timedelta(hours=24 * 4 + 20), 52))                    # the weekend
    return [(T0, 8)] + out                                                 # and Monday until 08:00


def service_fleet(namespace: str = "ml-demo", kind: str = "Deployment", usage: Usage = BUSY_DAYTIME) -> Fleet:
    f = Fleet([Node("n1", **L4), Node("n2", **L4)],
              [Pod("summarize-0", "n1", "summarize", namespace=namespace, kind=kind),
               Pod("other-0", "n2", "other")], hours=WEEK)
    f.usage[(namespace, "summarize")] = usage
    f.usage[("ns", "other")] = Usage(hours_held=WEEK)
    return f


def frames_for(f: Fleet, namespace: str = "ml-demo", kind: str = "Deployment", stretches: list | None = None,
               scaled: bool = False) -> dict:
    row = stretch_row(f, namespace, "summarize", nights_and_weekend() if stretches is None else stretches, kind=kind)
    return f.frames(idle_stretches=frame([row]),
                    scaled_workloads=frame([scaled_row(f, namespace, "summarize", kind)] if scaled else []))


def test_service_idle_nights_and_weekends_gets_a_scaled_object() -> None:
    f = service_fleet()
    (r,) = evaluate_rules(frames_for(f))
    assert r.rule == "scale_to_zero" and r.workload == "summarize"
    # stretches of 8, 12 x 4 and 52 hours, each less the 30-minute cooldown; at the node's price
    at_zero = (8 - 0.5) + 4 * (12 - 0.5) + (52 - 0.5)
    assert r.evidence["hours_at_zero"] == pytest.approx(at_zero)
    assert r.monthly_savings_usd == pytest.approx(0.8048 * at_zero / WEEK * 730, rel=1e-3)
    # five stretches end with the service woken up over seven days (the weekend's runs to the end)
    assert r.evidence["expected_cold_starts_per_day"] == pytest.approx(round(5 / 7, 2))
    prof = r.evidence["hour_of_week_idle_share"]
    assert len(prof) == 168 and prof[0] == 1.0 and prof[12] == 0.0 and prof[5 * 24 + 12] == 1.0
    p = r.proposed
    assert p["replicas_when_idle"] == 0 and p["replicas_when_active"] == 1 and p["cooldown_s"] == 1800
    assert p["request_query"] == ('sum(rate(nginx_ingress_controller_requests{exported_namespace="ml-demo",'
                                  'service="summarize"}[2m])) or vector(0)')
    assert p["gpu_query"] == ('max(DCGM_FI_PROF_GR_ENGINE_ACTIVE{namespace="ml-demo",'
                              'pod=~"summarize-[a-z0-9]+-[a-z0-9]+"}) or vector(0)')
    assert r.confidence <= 0.8


def test_the_saving_counts_only_the_hours_at_zero() -> None:
    plan = zero_hours([{"start": T0, "hours": 3, "usd": 3.0, "woke": True},
                       {"start": T0 + timedelta(hours=5), "hours": 10, "usd": 20.0, "woke": True},
                       {"start": T0 + timedelta(hours=20), "hours": 4, "usd": 4.0, "woke": False}],
                      min_hours=4, cooldown_s=3600, cron={6, 7})
    # the 3 h stretch is too short; 10 h less 2 cron hours less 1 h cooldown = 7 h at $2; 4 h less 1 h at $1
    assert plan.zero_hours == pytest.approx(7 + 3) and plan.saved_usd == pytest.approx(14 + 3)
    assert plan.wakeups == 1 and len(plan.stretches) == 2
    assert week_profile([{"how": 3, "gr_avg": 0.25}], "gr_avg", 100.0)[3] == 25.0


def test_production_is_left_alone_unless_asked() -> None:
    f = service_fleet(namespace="prod-search")
    frames = frames_for(f, namespace="prod-search")
    assert evaluate_rules(frames) == []
    (r,) = evaluate_rules(frames, {"scale_to_zero": {"include_production": True}})
    assert r.rule == "scale_to_zero" and r.evidence["production"] is True


def test_a_workload_keda_already_scales_is_not_flagged() -> None:
    f = service_fleet()
    assert evaluate_rules(frames_for(f, scaled=True)) == []


def test_short_gaps_and_frequent_wakeups_are_not_worth_it() -> None:
    f = service_fleet()
    lunch = [(T0 + timedelta(hours=24 * d + 12), 3) for d in range(7)]
    assert evaluate_rules(frames_for(f, stretches=lunch)) == []
    # four 4-hour gaps a day: four cold starts a day
    choppy = [(T0 + timedelta(hours=24 * d + 6 * k), 4) for d in range(7) for k in range(4)]
    assert evaluate_rules(frames_for(f, stretches=choppy)) == []
    (r,) = evaluate_rules(frames_for(f, stretches=choppy), {"scale_to_zero": {"max_cold_starts_per_day": 5}})
    assert r.evidence["expected_cold_starts_per_day"] == pytest.approx(4.0)


def test_idle_all_along_stays_idle_and_nothing_is_counted_twice() -> None:
    idle = Usage(gr_mean=0.002, gr_p50=0.0, gr_p95=0.005, gr_max=0.3, active_fraction=0.02, hours_held=WEEK,
                 fb_p99=2000, fb_max=2100)
    f = service_fleet(kind="StatefulSet", usage=idle)
    recs, ctx = evaluate_plan(frames_for(f, kind="StatefulSet", stretches=[(T0, 168)]))
    assert [r.rule for r in recs] == ["idle"]
    assert recs[0].monthly_savings_usd == pytest.approx(0.8048 * 730, rel=1e-3)


def test_nightly_deployment_gets_keda_with_a_cron_trigger_and_a_volcano_job_a_schedule() -> None:
    nightly = Usage(gr_mean=0.075, gr_p50=0.0, gr_p95=0.9, peak_p95=0.93, gr_max=0.97, active_fraction=0.083,
                    recurring_hours=[2, 3], days_observed=7, hours_held=WEEK)
    runs = [(T0 + timedelta(hours=24 * d + 4), 22) for d in range(6)] + [(T0, 2), (T0 + timedelta(hours=148), 20)]
    f = service_fleet(usage=nightly)
    (r,) = evaluate_rules(frames_for(f, stretches=sorted(runs)))
    assert r.rule == "scale_to_zero" and r.proposed["active_hours_utc"] == [1, 2, 3, 4]
    # the cron trigger holds 01:00-02:00 and 04:00-05:00 of each 04:00-02:00 stretch, the cooldown another
    # half hour; the 2 hours before the first run are too short to count
    assert r.evidence["hours_at_zero"] == pytest.approx(6 * (22 - 2 - 0.5) + (20 - 1 - 0.5))
    job = service_fleet(kind="VolcanoJob", usage=nightly)
    (j,) = evaluate_rules(frames_for(job, kind="VolcanoJob", stretches=sorted(runs)))
    assert j.rule == "idle" and j.proposed["reason"] == "periodic"

"""InputStarvedRule: training GPUs that wait for their data, not idle ones.

A GPU fed faster than it computes stays busy; one whose input pipeline is too slow alternates
between bursts (a batch arrives) and near-zero activity (the next is not there yet) while its
framebuffer stays full: the job is alive, its model resident. That is neither idle (the GPU
works hard when fed) nor a candidate for a smaller slice (its bursts need the whole GPU); the
fix is upstream of the GPU. The rule reads ``workload_input_profile`` and:

* **diagnoses**: bursts reach ``min_burst_level`` (p95 of the per-step max), the duty cycle
  (mean activity / burst level) is at most ``max_duty_cycle``, at least ``min_stall_fraction``
  of the steps hold a stall (a whole step below 5 %, or a step whose min is below 5 % and max
  above half the burst level), stalls are short (``max_stall_minutes`` on average: hours of
  quiet between runs are a schedule, the idle rule's), and the framebuffer is steady through
  the stalls;
* **finds the cause** from what was busy while the GPU waited: the pod's container CPU near its
  request (a CPU-bound loader: more data-loader workers and CPU), PCIe/NVLink receive still high
  (host-to-device copies: pinned memory and prefetch to the GPU), or neither (waiting on storage
  or the network: local NVMe or a cache tier, and prefetch of the next shard). Without CPU or
  PCIe data the cause is not diagnosed and the confidence is lower; the evidence says so;
* **prices the waiting**: the GPU-hours spent waiting (cost x (1 - duty)), and as saving the
  share a fed pipeline would remove: the same work at ``target_duty`` needs duty/target of the
  time, so 1 - duty/target of the cost goes (the job finishes sooner). No GPUs are returned in
  space (``saving_basis`` ``waiting_time``).

It runs first in the ledger's order and claims the workload, so idle reclaim, consolidation and
spot never touch a starved pod (it is busy when fed: scale-to-zero or a MIG slice would break
it). Never proposes fewer GPUs, a slice or scale-to-zero.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from gpuinsight.plan import Recommendation, finding_id
from gpuinsight.plan.kinds.input_starved import INPUT_STARVED, InputStarvedProposed
from gpuinsight.plan.schema import WorkloadTarget
from gpuinsight.rules.base import Rule
from gpuinsight.rules.common import (
    FULL_CONFIDENCE,
    MIN_HOURS,
    cluster_of,
    evidence_confidence,
    mib_to_gb,
    monthly,
    num,
    pct,
    window_hours,
    workload_ref,
)
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.settings import FRACTION, Setting
from gpuinsight.sql.rows import Row

FIXES = {
    "cpu": ["more data-loader workers (e.g. PyTorch DataLoader num_workers)", "a larger CPU request for the pod",
            "decode/augment on the GPU (e.g. NVIDIA DALI)"],
    "transfer": ["pinned host memory and non-blocking copies", "prefetch the next batches to the GPU",
                 "move decoding to the GPU to shrink what crosses PCIe"],
    "storage": ["stage the dataset on local NVMe or behind a cache tier (e.g. Alluxio, Fluid)",
                "prefetch the next shard while the current one trains", "larger, sequential shards"],
    "undiagnosed": ["collect container CPU (cAdvisor) and DCGM PCIe RX to tell the cause",
                    "prefetch the next batches/shard", "more data-loader workers"],
}
GB = 1e9


class InputStarvedRule(Rule):
    name = "input_starved"
    summary = ("Training GPUs that alternate between bursts and stalls with a full framebuffer: waiting for "
               "data, not idle; diagnose the cause (CPU, host-to-device copies, storage) and price the wait.")
    needs = ("workload_input_profile", "workload_gpu_profile", "analysis_window")
    settings = (
        Setting("min_burst_level", 0.5, "When fed, the GPU reaches at least this activity (p95 of the per-step max).",
                bounds=FRACTION),
        Setting("max_duty_cycle", 0.8, "Flag when mean activity / burst level is at most this (waits >= 20 %).",
                bounds=FRACTION),
        Setting("min_stall_fraction", 0.1, "At least this share of steps holds a stall (a step below 5 %, or a "
                                           "step whose min is below 5 % and max above half the burst level).",
                                                   bounds=FRACTION),
        Setting("max_stall_minutes", 30.0, "Stalls last at most this long on average: an input stall is the "
                                           "next batch or shard; hours of quiet are a schedule (the idle rule)."),
        Setting("max_fb_cv", 0.15, "The framebuffer is steady: stddev / mean over steps at most this."),
        Setting("min_fb_idle_ratio", 0.9, "Framebuffer in stalled steps at least this share of busy steps "
                                          "(the model stays resident while the GPU waits).", bounds=FRACTION),
        Setting("target_duty_cycle", 0.95, "What a fed pipeline reaches; the saving is 1 - duty/target of the cost.",
                bounds=(0.01, 1.0)),
        Setting("cpu_busy_ratio", 0.8, "CPU-bound: the pod uses at least this share of its CPU request while "
                                       "its GPUs wait."),
        Setting("transfer_busy_ratio", 0.5, "Copy-bound: PCIe/NVLink RX while waiting at least this share of its "
                                            "rate during bursts ..."),
        Setting("transfer_min_gbps", 1.0, "... and at least this many GB/s."),
        MIN_HOURS,
        FULL_CONFIDENCE,
    )
    kinds = (INPUT_STARVED,)

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        profiles = {r.workload_key: r for r in ctx.rows(frames, "workload_gpu_profile")}
        out = []
        for sig in ctx.rows(frames, "workload_input_profile"):
            key = sig.workload_key
            r = profiles.get(key)
            hours = window_hours(frames, key.cluster)
            if r is None or not hours or num(r.hours_held) < settings["min_hours"]:
                continue
            if r.mig_profile or ctx.ledger.workload_claimed(*key):
                continue
            if not starved(sig, settings):
                continue
            out.append(self._finding(r, sig, frames, settings, ctx, hours))
        return out

    def _finding(self, r: Any, sig: Row, frames: dict[str, pl.DataFrame],
                 settings: dict[str, Any], ctx: PlanContext, hours: float) -> Recommendation:
        duty = num(sig.duty_cycle)
        target = settings["target_duty_cycle"]
        share = max(0.0, 1.0 - duty / target) if target > 0 else 0.0
        rid = finding_id(INPUT_STARVED.name, cluster_of(r), r.namespace, r.workload, None, None)
        granted = ctx.claim_workload_time(rid, r.workload_key, r.node_gpu_hours, frames, share)
        cause, why, measured = diagnose(sig, settings)
        cost_month = monthly(num(r.cost_usd) / hours)
        gpus = round(num(r.avg_gpus_held), 3)
        request = sig.cpu_request
        new_request = None
        if cause == "cpu" and request:
            # the loader delivers duty x the burst rate; to keep up it needs target/duty the cores
            new_request = float(math.ceil(num(request) * target / max(duty, 1e-6)))
        conf = evidence_confidence(num(r.hours_held), settings["full_confidence_hours"])
        conf *= {2: 1.0, 1: 0.85, 0: 0.6}[len(measured)]
        step = int(num(sig.step_s))
        pushed = bool(sig.min_pushed_down)
        period = num(sig.burst_period_s)
        resolved = period > 0 and num(sig.idle_runs) >= 2 and step > 0 and period >= 2 * step
        resolution = (f"{step} s steps, per-step min/mean/max of GR activity pushed down to the source "
                      f"(min_over_time/max_over_time at the scrape interval)" if pushed else
                      f"{step} s steps, one reading per step (the step's value is its min and max)")
        model = r.gpu_model or "GPU"
        return Recommendation(
            rule=INPUT_STARVED.name, id=rid, cluster=cluster_of(r), namespace=r.namespace, workload=r.workload, queue=r.queue,
            title=(f"{r.namespace}/{r.workload} keeps {gpus:g} {model} GPU(s) waiting for input "
                   f"{pct(1 - duty)}% of the time (bursts at {pct(sig.burst_level)}%, framebuffer full): "
                   f"{why}; fix the input pipeline, not the GPUs"),
            current={"gpus": gpus, "duty_cycle": round(duty, 3), "cpu_request": request},
            proposed=InputStarvedProposed(cause, FIXES[cause], target, new_request).to_dict(),
            monthly_savings_usd=monthly(granted),
            confidence=conf,
            evidence={
                "duty_cycle_pct": pct(duty),
                "burst_level_pct": pct(sig.burst_level),
                "gr_active_mean_pct": pct(sig.gr_mean),
                "gr_active_in_stalls_pct": pct(sig.gr_idle_mean),
                "stall_step_fraction_pct": pct(stall_fraction(sig)),
                "idle_step_fraction_pct": pct(sig.idle_step_fraction),
                "mixed_step_fraction_pct": pct(sig.mixed_step_fraction),
                "burst_period_min": round(period / 60, 1) if resolved else None,
                "busy_run_mean_min": round(num(sig.busy_run_mean_s) / 60, 1) if resolved else None,
                "stall_run_mean_min": round(num(sig.idle_run_mean_s) / 60, 1) if resolved else None,
                "stall_run_cv": round(num(sig.idle_run_cv), 3) if resolved else None,
                "period_basis": ("busy and stalled runs of consecutive steps" if resolved else
                                 f"not resolved: bursts and stalls alternate within {step} s steps "
                                 f"({pct(sig.mixed_step_fraction)}% of the steps hold both)"),
                "resolution": resolution,
                "framebuffer_mean_gb": mib_to_gb(sig.fb_mean_mib),
                "framebuffer_cv": round(num(sig.fb_cv), 3),
                "framebuffer_in_stalls_gb": mib_to_gb(sig.fb_idle_mib),
                "cause": cause, "cause_basis": why,
                "measured": sorted(measured),
                "pcie_rx_busy_gbps": _gbps(sig.pcie_rx_busy_bps),
                "pcie_rx_stalled_gbps": _gbps(sig.pcie_rx_idle_bps),
                "pcie_rx_gr_correlation": _r3(sig.pcie_rx_gr_corr),
                "nvlink_rx_busy_gbps": _gbps(sig.nvlink_rx_busy_bps),
                "nvlink_rx_stalled_gbps": _gbps(sig.nvlink_rx_idle_bps),
                "cpu_busy_cores": _r3(sig.cpu_busy_cores),
                "cpu_stalled_cores": _r3(sig.cpu_idle_cores),
                "cpu_request_cores": request,
                "cpu_gr_correlation": _r3(sig.cpu_gr_corr),
                "gpu_cost_usd_per_month": round(cost_month, 2),
                "waiting_usd_per_month": round(cost_month * (1 - duty), 2),
                "saving_share": round(share, 3),
                "hours_observed": round(num(sig.hours_observed), 1),
                "hours_held": num(r.hours_held),
            },
            target=WorkloadTarget(**workload_ref(r)).to_dict(),
        )


def stall_fraction(sig: Row) -> float:
    return num(sig.idle_step_fraction) + num(sig.mixed_step_fraction)


def starved(sig: Row, settings: dict[str, Any]) -> bool:
    """The GPU pattern of input starvation: bursts, a low duty cycle, stalls, a resident model."""
    burst = num(sig.burst_level)
    if burst < settings["min_burst_level"] or num(sig.duty_cycle, 1.0) > settings["max_duty_cycle"]:
        return False
    if stall_fraction(sig) < settings["min_stall_fraction"]:
        return False
    if num(sig.idle_runs) > 0 and num(sig.idle_run_mean_s) > settings["max_stall_minutes"] * 60:
        return False  # long quiet stretches between runs: periodic work, not a pipeline stall
    if sig.fb_cv is None or num(sig.fb_cv) > settings["max_fb_cv"]:
        return False
    busy_fb, idle_fb = num(sig.fb_busy_mib), sig.fb_idle_mib
    return idle_fb is None or busy_fb <= 0 or num(idle_fb) >= settings["min_fb_idle_ratio"] * busy_fb


def diagnose(sig: Row, settings: dict[str, Any]) -> tuple[str, str, set[str]]:
    """(cause, why, what was measured) from what was busy while the GPU waited."""
    measured: set[str] = set()
    cpu_idle, request = sig.cpu_idle_cores, sig.cpu_request
    if num(sig.cpu_coverage) > 0 and cpu_idle is not None:
        measured.add("container_cpu")
    rx_busy = num(sig.pcie_rx_busy_bps) + num(sig.nvlink_rx_busy_bps)
    rx_idle = sig.pcie_rx_idle_bps if sig.pcie_rx_idle_bps is not None else sig.nvlink_rx_idle_bps
    if (num(sig.pcie_coverage) > 0 or num(sig.nvlink_coverage) > 0) and rx_idle is not None:
        measured.add("pcie_nvlink_rx")
        rx_idle = num(sig.pcie_rx_idle_bps) + num(sig.nvlink_rx_idle_bps)
    if "container_cpu" in measured:
        ceiling = num(request) if request else num(sig.cpu_max_cores)
        if ceiling > 0 and num(cpu_idle) >= settings["cpu_busy_ratio"] * ceiling:
            what = f"of its {num(request):g}-core request" if request else "of its peak (no CPU request set)"
            return "cpu", (f"the pod's CPU runs at {pct(num(cpu_idle) / ceiling)}% {what} while its GPUs wait: "
                           "a CPU-bound data loader"), measured
    copying = (num(rx_idle) >= settings["transfer_min_gbps"] * GB
               and num(rx_idle) >= settings["transfer_busy_ratio"] * rx_busy)
    if "pcie_nvlink_rx" in measured and copying:
        return "transfer", (f"host-to-device traffic stays at {num(rx_idle) / GB:.1f} GB/s while the GPUs wait: "
                            "copies of the next batch hold them up"), measured
    if measured == {"container_cpu", "pcie_nvlink_rx"}:
        return "storage", ("neither the pod's CPU nor PCIe/NVLink receive is busy while its GPUs wait: the "
                           "pipeline waits on storage or the network"), measured
    missing = {"container_cpu": "container CPU (cAdvisor)", "pcie_nvlink_rx": "DCGM PCIe/NVLink RX"}
    lacking = " and ".join(v for k, v in missing.items() if k not in measured)
    return "undiagnosed", f"bursts and stalls with a resident model; {lacking} not collected, so the cause is " \
                          "not diagnosed", measured


def _gbps(x: Any) -> float | None:
    return None if x is None else round(num(x) / GB, 3)


def _r3(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 3)

"""Kueue ClusterQueues whose GPU quota is far from their use (the ``queue`` finding kind, declared
by :class:`gpuinsight.rules.queue.QueueRule`, which calls :func:`kueue_findings`).

Per ClusterQueue, flavor and GPU resource (``kueue_quota_usage``):

* Over-provisioned: the p95 of what the queue's workloads held is below ``idle_quota_ratio`` of
  the nominalQuota and at least ``min_idle_gpus`` GPUs of it sit unused (a resource counted in
  GPUs: ``nvidia.com/gpu``, MIG slices; HAMi's cores and memory follow their queue's GPUs). The
  new nominalQuota is the p95 plus ``headroom``. Peaks above it need quota too: in a cohort
  whose borrowingLimit leaves room, borrowing covers them (and the finding says so); otherwise
  the nominalQuota, which is then also the queue's ceiling, keeps the peak plus headroom.
* Starved: a live pending Workload needs more of a resource than the queue can ever give it
  (nominalQuota plus what it may borrow): it could never be admitted; raise nominalQuota to its
  need.

Floors (the same as Volcano queues'): never below the most one live Workload needs (its
admitted usage, else its requests), nor below what the queue reserves now. A quota is an
entitlement, not a bill: the saving is 0; the evidence prices the idle entitlement.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from gpuinsight.plan import Recommendation, finding_id
from gpuinsight.plan.kinds.queue import CLUSTER_QUEUE, QUEUE
from gpuinsight.rules.common import cluster_of, monthly, num
from gpuinsight.sql.rows import Row


def _ceil(value: float) -> float:
    return float(math.ceil(value - 1e-9))


def _row_change(r: Row, settings: dict[str, Any], queue_has_gpu_driver: bool) -> dict[str, Any] | None:
    """The new nominalQuota (and lendingLimit) of one flavor and resource, or None."""
    nominal = num(r.nominal_quota)
    p95, peak = num(r.used_p95), num(r.used_max)
    floor = _ceil(max(num(r.largest_workload_need), num(r.reserved_now)))
    per_gpu = r.gpus_per_unit
    idle = nominal - p95
    over = nominal > 0 and p95 < nominal * settings["idle_quota_ratio"]
    if per_gpu is not None:
        over = over and idle * num(per_gpu) >= settings["min_idle_gpus"]
    elif not queue_has_gpu_driver:
        over = False  # cores or memory alone say nothing about whole GPUs left idle
    borrow = r.borrowing_limit
    if over:
        new = max(1.0, _ceil(p95 * (1 + settings["headroom"])), floor)
        covered = bool(r.cohort) and (borrow is None or new + num(borrow) >= peak)
        if not covered:
            new = max(new, _ceil(peak * (1 + settings["headroom"])))
        if new >= nominal:
            return None
        change: dict[str, Any] = {"flavor": r.flavor, "resource": r.resource, "nominal_quota": new,
                                  "why": "idle", "borrowing_covers_peak": covered and peak > new}
    else:
        need = num(r.largest_pending_need)
        reach = math.inf if r.cohort and borrow is None else nominal + num(borrow)
        new = max(_ceil(need), floor)
        if not need or need <= reach or new <= nominal:
            return None
        change = {"flavor": r.flavor, "resource": r.resource, "nominal_quota": new, "why": "starved",
                  "borrowing_covers_peak": False}
    lend = r.lending_limit
    if lend is not None and num(lend) > change["nominal_quota"]:
        change["lending_limit"] = change["nominal_quota"]  # Kueue: lendingLimit <= nominalQuota
    return change


def kueue_findings(rows: list[Row], settings: dict[str, Any],
                   usd_per_gpu_hour: Mapping[str, float]) -> list[Recommendation]:
    """ClusterQueue findings; ``usd_per_gpu_hour``: each cluster's average price of a GPU-hour."""
    by_queue: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.gpu_resource:
            by_queue[(cluster_of(r), r.cluster_queue)].append(r)
    out = []
    for (cluster, name), qrows in sorted(by_queue.items()):
        # HAMi's cores and memory follow the queue's own device quota (of the same flavor)
        driven = {r.flavor for r in qrows if r.gpus_per_unit is not None
                  and (c := _row_change(r, settings, True)) is not None and c["why"] == "idle"}
        changes = []
        for r in qrows:
            change = _row_change(r, settings, r.flavor in driven)
            if change is not None:
                changes.append((r, change))
        if not changes:
            continue
        out.append(_finding(cluster, name, changes, qrows, settings, usd_per_gpu_hour.get(cluster, 0.0)))
    return out


def _finding(cluster: str, name: str, changes: list[tuple[Row, dict[str, Any]]],
             qrows: list[Row], settings: dict[str, Any], usd_per_gpu_hour: float) -> Recommendation:
    proposed, current, rows_evidence = [], [], []
    idle_gpus = 0.0
    starved = any(c["why"] == "starved" for _, c in changes)
    for r, c in changes:
        entry = {"flavor": c["flavor"], "resource": c["resource"], "nominal_quota": c["nominal_quota"]}
        cur = {"flavor": r.flavor, "resource": r.resource, "nominal_quota": num(r.nominal_quota)}
        if "lending_limit" in c:
            entry["lending_limit"] = c["lending_limit"]
            cur["lending_limit"] = num(r.lending_limit)
        proposed.append(entry)
        current.append(cur)
        if c["why"] == "idle" and r.gpus_per_unit is not None:
            idle_gpus += (num(r.nominal_quota) - c["nominal_quota"]) * num(r.gpus_per_unit)
        rows_evidence.append({
            "flavor": r.flavor, "resource": r.resource, "nominal_quota": num(r.nominal_quota),
            "borrowing_limit": r.borrowing_limit, "lending_limit": r.lending_limit,
            "used_avg": round(num(r.used_avg), 3), "used_p95": round(num(r.used_p95), 3),
            "used_max": round(num(r.used_max), 3), "usage_source": r.source,
            "reserved_now": r.reserved_now, "largest_workload_need": num(r.largest_workload_need),
            "largest_pending_need": num(r.largest_pending_need), "proposed_nominal_quota": c["nominal_quota"],
            "borrowing_covers_peak": c["borrowing_covers_peak"]})
    cohort = next((r.cohort for r in qrows if r.cohort), None)
    covers = [c for _, c in changes if c["borrowing_covers_peak"]]
    parts = ", ".join(f"{c['resource']} ({c['flavor']}) {num(r.nominal_quota):g} -> {c['nominal_quota']:g}"
                      for r, c in changes)
    if starved:
        title = f"ClusterQueue {name}: a pending Workload needs more than the queue can ever admit; raise {parts}"
    else:
        title = (f"ClusterQueue {name} uses far less GPU quota than it holds: lower nominalQuota {parts}"
                 + (f"; borrowing from cohort {cohort} covers the peaks above it" if covers else ""))
    floor_rows = [(r.largest_workload_need, r.reserved_now) for r, _ in changes]
    return Recommendation(
        rule=QUEUE.name, queue=name, cluster=cluster,
        id=finding_id(QUEUE.name, cluster, None, None, None, f"{CLUSTER_QUEUE}/{name}"),
        title=title, current={"quotas": current}, proposed={"quotas": proposed},
        monthly_savings_usd=0.0, confidence=0.5 if starved else 0.6,
        evidence={
            "kind": CLUSTER_QUEUE, "cohort": cohort, "live_workloads": qrows[0].live_workloads,
            "pending_workloads": qrows[0].pending_workloads, "quotas": rows_evidence,
            "idle_entitlement_gpus": round(idle_gpus, 2),
            "idle_entitlement_usd_per_month_at_list": round(monthly(idle_gpus * usd_per_gpu_hour), 2),
            "saving_note": "an entitlement change; dollars come from releasing the capacity",
            "floor_reason": "never below the most one live Workload needs (admitted usage, else requests) nor what "
                            "the queue reserves now",
            "floors": [{"largest_workload_need": a, "reserved_now": b} for a, b in floor_rows],
        },
        target={"kind": CLUSTER_QUEUE, "name": name},
    )

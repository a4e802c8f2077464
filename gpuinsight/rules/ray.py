"""RayRule: KubeRay clusters that hold GPUs for nothing.

Three findings, all of kind ``ray`` (``proposed.change`` says which):

* ``job_cleanup``: a RayJob that finished while its RayCluster went on holding GPUs (no
  ``shutdownAfterJobFinishes``, or a long ``ttlSecondsAfterFinished``). Set both: KubeRay then
  deletes the cluster (also the one still up: it reconciles finished jobs). Saved: the cluster's
  GPU-hours after the job's end, less the proposed TTL. Jobs on an existing cluster
  (``clusterSelector``) or with their own ``deletionStrategy`` are left alone.
* ``worker_min_replicas``: a GPU worker group whose workers all sit idle for long stretches
  while ``minReplicas`` (or, without the autoscaler, ``replicas``) holds them up. Lower
  ``minReplicas`` (to ``keep_min_replicas``), turn the in-tree autoscaler on if it is off, and
  set its idle timeout: idle workers then go and come back when tasks queue. Saved: the
  stretches' hours (less the idle timeout each) of the workers above the new minimum.
* ``head_gpus``: a head pod holding GPUs that do nothing (Ray runs no work on them): the head
  keeps the cluster's control plane and needs none. Saved: the head's GPU-hours.

A Ray cluster a finding acts on is claimed as a whole (its other rows are not judged again by
later rules); a cluster whose job is cleaned up gets no other finding (those GPU-hours are the
job finding's).
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from gpuinsight.keys import WorkloadKey
from gpuinsight.plan import Recommendation, finding_id
from gpuinsight.plan.kinds.ray import RAY, RayProposed, RayTarget
from gpuinsight.rules.base import Rule
from gpuinsight.rules.common import (
    FULL_CONFIDENCE,
    MIN_HOURS,
    WEEK_PROFILE,
    cluster_of,
    evidence_confidence,
    monthly,
    num,
    pct,
    window_hours,
)
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.effects import WorkloadLeaves
from gpuinsight.rules.settings import FRACTION, Setting
from gpuinsight.sql.rows import Row, key_cluster

DONE = ("Complete", "Failed")
HEAD_GROUP = "headgroup"


class RayRule(Rule):
    name = "ray"
    summary = ("KubeRay: RayJobs whose cluster outlives the job, GPU worker groups held up idle by "
               "minReplicas, head pods holding GPUs.")
    needs = ("ray_groups", "ray_jobs", "idle_stretches", "analysis_window")
    settings = (
        MIN_HOURS,
        Setting("min_idle_stretch_hours", 2, "Worker groups: only idle stretches at least this long count."),
        Setting("keep_min_replicas", 0, "Worker groups: the minReplicas proposed."),
        Setting("idle_timeout_s", 600, "Autoscaler idleTimeoutSeconds proposed (and the most a current one may "
                                       "be)."),
        Setting("max_head_peak", 0.10, "Head GPUs are idle when the p95 of their hourly max GR activity is at most "
                                       "this.", bounds=FRACTION),
        Setting("max_post_job_peak", 0.10, "A finished job's cluster is idle when the p95 of its hourly max GR "
                                           "activity after the end is at most this.", bounds=FRACTION),
        Setting("job_ttl_s", 300, "ttlSecondsAfterFinished proposed for a RayJob's cluster."),
        FULL_CONFIDENCE,
    )
    kinds = (RAY,)

    def evaluate(self, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
                 ctx: PlanContext) -> list[Recommendation]:
        out: list[Recommendation] = []
        done: set[tuple[str, str, str]] = set()  # Ray clusters a job finding took
        for j in ctx.rows(frames, "ray_jobs"):
            rec = self._job(j, frames, settings, ctx)
            if rec is not None:
                out.append(rec)
                done.add(_ray_cluster(j))
        stretches = {(s.workload_key, s.ray_group): s for s in ctx.rows(frames, "idle_stretches", without=WEEK_PROFILE)
                      if s.ray_group}
        for g in ctx.rows(frames, "ray_groups"):
            if _ray_cluster(g) in done or not g.configured:
                continue
            if num(g.hours_held) < settings["min_hours"]:
                continue
            if g.node_type == "head" or g.ray_group == HEAD_GROUP:
                rec = self._head(g, frames, settings, ctx)
            else:
                s = stretches.get((WorkloadKey(key_cluster(g), g.namespace, g.workload), g.ray_group))
                rec = self._workers(g, s, frames, settings, ctx) if s else None
            if rec is not None:
                out.append(rec)
        return out

    # -- a finished RayJob whose cluster lives on ----------------------------------------------
    def _job(self, j: Any, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
             ctx: PlanContext) -> Recommendation | None:
        if j.deployment_status not in DONE or j.end_time is None or not j.ray_cluster:
            return None
        if j.uses_existing or j.deletion_strategy:
            return None  # not its cluster to delete / its own cleanup rules
        ttl = int(num(j.ttl_after_finish_s))
        if j.shutdown_after_finish and ttl <= settings["job_ttl_s"]:
            return None  # already cleaned up soon enough: whatever held the GPUs, it is not the spec
        hours, cost = num(j.post_hours), num(j.post_cost_usd)
        if hours <= 0 or cost <= 0 or num(j.post_gr_hourly_max_p95) > settings["max_post_job_peak"]:
            return None  # nothing held after the end, or the cluster kept working (used interactively)
        # hours after the first whole post-end hour that the proposed TTL still keeps
        kept_s = (j.end_time - j.first_post_hour).total_seconds() + settings["job_ttl_s"]
        kept_h = min(hours, max(0, math.ceil(kept_s / 3600.0)))
        saved = cost * (hours - kept_h) / hours
        if saved <= 0:
            return None
        rid = finding_id(RAY.name, cluster_of(j), j.namespace, j.name, "job_cleanup", None)
        granted = ctx.claim_workload_hours(rid, _ray_cluster(j), j.post_node_gpu_hours or [], frames, saved / cost)
        if granted <= 0:
            return None
        if j.alive_at_end:  # the cluster is deleted: its pods leave their nodes
            ctx.record(rid, WorkloadLeaves(_ray_cluster(j)))
        why = ("shutdownAfterJobFinishes is not set" if not j.shutdown_after_finish
               else f"ttlSecondsAfterFinished is {ttl} s")
        gpus = num(j.post_gpu_hours) / hours
        return Recommendation(
            rule=RAY.name, id=rid, cluster=cluster_of(j), namespace=j.namespace, workload=j.name,
            title=(f"RayJob {j.namespace}/{j.name} finished ({j.job_status or j.deployment_status}) "
                   f"at {j.end_time:%Y-%m-%d %H:%M} UTC but its RayCluster {j.ray_cluster} held {gpus:.3g} GPU(s) "
                   f"for {hours:g} h more ({why}): set shutdownAfterJobFinishes and a "
                   f"{settings['job_ttl_s']} s TTL"),
            current={"shutdown_after_finish": bool(j.shutdown_after_finish), "ttl_after_finish_s": ttl,
                     "gpus_after_end": round(gpus, 3)},
            proposed=RayProposed("job_cleanup", shutdown_after_finish=True,
                                 ttl_after_finish_s=int(settings["job_ttl_s"])).to_dict(),
            monthly_savings_usd=monthly(granted),
            confidence=evidence_confidence(hours, settings["full_confidence_hours"]),
            evidence={
                "job_status": j.job_status, "job_deployment_status": j.deployment_status,
                "job_start": _iso(j.start_time), "job_end": _iso(j.end_time),
                "hours_held_after_end": hours, "gpu_hours_after_end": round(num(j.post_gpu_hours), 2),
                "cost_usd_after_end_in_window": round(cost, 2),
                "hours_kept_by_proposed_ttl": kept_h,
                "gr_hourly_max_p95_after_end_pct": pct(j.post_gr_hourly_max_p95),
                "cluster_alive_at_window_end": bool(j.alive_at_end),
                "submission_mode": j.submission_mode,
                "window_hours": round(window_hours(frames, j.cluster), 2),
            },
            target=RayTarget("RayJob", j.name, j.namespace, j.ray_cluster).to_dict(),
        )

    # -- idle GPU workers held up by minReplicas -----------------------------------------------
    def _workers(self, g: Any, s: Row, frames: dict[str, pl.DataFrame],
                 settings: dict[str, Any], ctx: PlanContext) -> Recommendation | None:
        if g.group_index is None or num(g.gpus_per_pod) <= 0:
            return None
        keep = int(settings["keep_min_replicas"])
        autoscaling = bool(g.autoscaling)
        min_replicas = int(num(g.min_replicas))
        replicas = int(num(g.replicas))
        timeout = g.group_idle_timeout_s if g.group_idle_timeout_s is not None else g.idle_timeout_s
        timeout_s = 60 if timeout is None else int(timeout)  # Ray's autoscaler default
        held_by_min = min_replicas > keep if autoscaling else replicas > keep
        slow_timeout = autoscaling and timeout_s > settings["idle_timeout_s"]
        if not held_by_min and not slow_timeout:
            return None  # the autoscaler could have let them go: something else holds them
        new_timeout = min(timeout_s, int(settings["idle_timeout_s"])) if autoscaling else int(settings["idle_timeout_s"])
        saved, zero_h, used = 0.0, 0.0, []
        for st in s.stretches or []:
            hours, pods = int(num(st.get("hours"))), num(st.get("pods"))
            if hours < settings["min_idle_stretch_hours"] or pods <= keep:
                continue
            at_zero = max(0.0, hours - new_timeout / 3600.0)
            saved += num(st.get("usd")) / hours * at_zero * (pods - keep) / pods
            zero_h += at_zero
            used.append(st)
        cost = num(g.cost_usd)
        if saved <= 0 or cost <= 0:
            return None
        target_kind, target_name = _patch_target(g)
        rid = finding_id(RAY.name, cluster_of(g), g.namespace, f"{g.ray_cluster}/{g.ray_group}", "worker_min_replicas",
                         None)
        granted = ctx.claim_workload_hours(rid, _group_workload(g), g.node_gpu_hours or [], frames, saved / cost)
        if granted <= 0:
            return None
        change = []
        if not autoscaling:
            change.append("turn on the in-tree autoscaler")
        if held_by_min:
            change.append(f"lower minReplicas {min_replicas if autoscaling else replicas} -> {keep}")
        if new_timeout != timeout_s or not autoscaling:
            change.append(f"idle timeout {new_timeout} s")
        return Recommendation(
            rule=RAY.name, id=rid, cluster=cluster_of(g), namespace=g.namespace,
            workload=g.owner_name or g.ray_cluster,
            title=(f"Ray cluster {g.namespace}/{g.ray_cluster}: worker group {g.ray_group} kept "
                   f"{int(max(num(st.get('pods')) for st in used))} GPU worker(s) idle for {sum(int(st['hours']) for st in used)} h "
                   f"({'autoscaler on, minReplicas ' + str(min_replicas) if autoscaling else 'no autoscaler, replicas ' + str(replicas)}): "
                   + ", ".join(change)),
            current={"replicas": replicas, "min_replicas": min_replicas, "max_replicas": g.max_replicas,
                     "autoscaling": autoscaling, "idle_timeout_s": timeout_s,
                     "gpus_per_worker": num(g.gpus_per_pod)},
            proposed=RayProposed("worker_min_replicas", min_replicas=keep, autoscaling=True,
                                 # only when it changes: the current one (or Ray's default) is kept
                                 idle_timeout_s=new_timeout if new_timeout != timeout_s or not autoscaling
                                 else None).to_dict(),
            monthly_savings_usd=monthly(granted),
            confidence=evidence_confidence(num(g.hours_held), settings["full_confidence_hours"]),
            evidence={
                **_group_evidence(g),
                "idle_stretches": [{"start": _iso(st["start"]), "hours": st["hours"], "workers": st.get("pods")}
                                   for st in used[:50]],
                "idle_hours_in_long_stretches": sum(int(st["hours"]) for st in used),
                "worker_hours_at_zero": round(zero_h, 2),
                "saved_share_of_cost": round(saved / cost, 3),
                "workers_busy_at_least": s.pods_active_min,
                "window_hours": round(window_hours(frames, g.cluster), 2),
                "applies_to": _applies(target_kind),
            },
            target=RayTarget(target_kind, target_name, g.namespace, g.ray_cluster, g.ray_group,
                             int(g.group_index)).to_dict(),
        )

    # -- a head pod holding GPUs ---------------------------------------------------------------
    def _head(self, g: Any, frames: dict[str, pl.DataFrame], settings: dict[str, Any],
              ctx: PlanContext) -> Recommendation | None:
        if num(g.gpus_per_pod) <= 0 or num(g.head_gpus) <= 0:
            return None
        if num(g.gr_hourly_max_p95, 1.0) > settings["max_head_peak"]:
            return None  # Ray runs work on the head's GPUs: removing them needs another worker
        target_kind, target_name = _patch_target(g)
        rid = finding_id(RAY.name, cluster_of(g), g.namespace, f"{g.ray_cluster}/{HEAD_GROUP}", "head_gpus", None)
        granted = ctx.claim_workload_hours(rid, _group_workload(g), g.node_gpu_hours or [], frames, 1.0)
        if granted <= 0:
            return None
        gpus = num(g.head_gpus)
        return Recommendation(
            rule=RAY.name, id=rid, cluster=cluster_of(g), namespace=g.namespace,
            workload=g.owner_name or g.ray_cluster,
            title=(f"Ray cluster {g.namespace}/{g.ray_cluster}: the head pod holds {gpus:g} GPU(s) that do "
                   f"nothing (p95 of the hourly max GR {pct(g.gr_hourly_max_p95)}%): give the head no GPU "
                   "(num-gpus 0); Ray work runs on the workers"),
            current={"head_gpus": gpus},
            proposed=RayProposed("head_gpus", head_gpus=0).to_dict(),
            monthly_savings_usd=monthly(granted),
            confidence=evidence_confidence(num(g.hours_held), settings["full_confidence_hours"]),
            evidence={**_group_evidence(g), "window_hours": round(window_hours(frames, g.cluster), 2),
                      "applies_to": _applies(target_kind) + "; the head pod gets the change when it is recreated"},
            target=RayTarget(target_kind, target_name, g.namespace, g.ray_cluster, HEAD_GROUP).to_dict(),
        )


def _patch_target(g: Row) -> tuple[str, str]:
    """Where the change is made: a RayService's own spec (KubeRay would revert its cluster), else
    the RayCluster (a RayJob's cluster is created once from the job and not reconciled back)."""
    if g.owner_kind == "RayService" and g.owner_name:
        return "RayService", str(g.owner_name)
    return "RayCluster", str(g.ray_cluster)


def _applies(kind: str) -> str:
    if kind == "RayService":
        return ("the RayService's rayClusterConfig: KubeRay rolls this out as a new RayCluster (a zero-downtime "
                "upgrade holds both clusters' GPUs until the new one serves)")
    return "the RayCluster, in place"


def _ray_cluster(r: Row) -> WorkloadKey:
    """The RayCluster of a ``ray_jobs`` or ``ray_groups`` row, as the workload its pods belong to."""
    return WorkloadKey(key_cluster(r), r.namespace, str(r.ray_cluster))


def _group_workload(g: Row) -> WorkloadKey:
    """The workload a ``ray_groups`` row's pods belong to, as the ledger claims it (the RayCluster)."""
    return WorkloadKey(key_cluster(g), g.namespace, str(g.workload or g.ray_cluster))


def _group_evidence(g: Row) -> dict[str, Any]:
    return {
        "ray_cluster": g.ray_cluster, "group": g.ray_group, "node_type": g.node_type,
        "owner": f"{g.owner_kind}/{g.owner_name}" if g.owner_kind else None,
        "pods_seen": g.pods, "gpus_per_pod": num(g.gpus_per_pod),
        "gpu_hours": round(num(g.gpu_hours), 2), "cost_usd_in_window": round(num(g.cost_usd), 2),
        "hours_held": num(g.hours_held), "gr_active_mean_pct": pct(g.gr_mean),
        "gr_hourly_max_p95_pct": pct(g.gr_hourly_max_p95), "gr_active_max_pct": pct(g.gr_max),
        "autoscaling": bool(g.autoscaling), "autoscaler_version": g.autoscaler_version,
    }


def _iso(ts: Any) -> str | None:
    return None if ts is None else (ts.isoformat() if hasattr(ts, "isoformat") else str(ts))

"""idle: scale an idle workload to zero (suspend a CronJob; a note for kinds that cannot scale:
a Volcano Job is suspended with vcctl, or deleted with its manifest kept).

Periodic work (``proposed.reason == "periodic"``) is not removed: it gets a note with the UTC
hours to keep it running (scale it to zero in between with a cron-driven scaler, or run it as
a CronJob); nothing is changed for it automatically.
"""

from __future__ import annotations

from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.builders.common import readable, workload_ref
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds import IDLE

# the finding kinds this module builds the actions of
BUILDS = (IDLE,)

SCALABLE = ("Deployment", "StatefulSet")


def volcano_release(ref: Ref) -> str:
    """How to give back a submitted Volcano Job's GPUs: it cannot be scaled to zero or suspended
    by a spec change (its admission webhook refuses those), but Volcano suspends it on request
    (the Job and its manifest stay), or it is deleted after its manifest is saved."""
    ns, name = ref.namespace, ref.name
    return (f"a submitted Volcano Job cannot be scaled or edited: suspend it (vcctl job suspend -n {ns} -N {name}: "
            f"its pods go, the Job stays, vcctl job resume -n {ns} -N {name} restarts it), or save its manifest "
            f"and delete it (kubectl get vcjob -n {ns} {name} -o yaml > {name}.yaml; kubectl delete vcjob -n {ns} "
            f"{name}; resubmit from {name}.yaml when it is needed)")


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    return readable([workload_ref(rec, rec.target)])


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    ref = workload_ref(rec, rec.target)
    if rec.proposed.get("reason") == "periodic":
        hours = (rec.proposed.get("schedule") or {}).get("active_hours_utc") or []
        return [model.note(f"{ref.key} works only at UTC hours {', '.join(str(h) for h in hours)}: keep it "
                           f"running then and scale it to zero in between (a cron-triggered autoscaler such as "
                           f"a KEDA cron ScaledObject, or run it as a CronJob); not changed automatically", ref.key)]
    if ref.kind == "CronJob":
        cfg = ref.skeleton() | {"spec": {"suspend": True}}
        observed = state.observe(ref, ["/spec/suspend"])
        return [model.k8s_apply(cfg, "workload", f"{ref.key}: suspend (its runs hold idle GPUs)", observed)]
    if ref.kind not in SCALABLE:
        how = {"VolcanoJob": volcano_release(ref),
               "Pod": f"delete the bare Pod (kubectl delete pod -n {ref.namespace} {ref.name})"}.get(
            ref.kind, f"scale or delete the {ref.kind} at its source")
        return [model.note(f"{ref.key} holds GPUs while idle; {how}", ref.key)]
    cfg = ref.skeleton() | {"spec": {"replicas": 0}}
    observed = state.observe(ref, ["/spec/replicas"])
    before = observed["fields"].get("/spec/replicas")
    change = f"scale {before} -> 0 replicas" if before is not None else "scale to 0 replicas"
    return [model.k8s_apply(cfg, "workload", f"{ref.key}: {change} (idle GPUs)", observed)]

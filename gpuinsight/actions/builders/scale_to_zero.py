"""scale_to_zero: a KEDA ScaledObject for the workload (server-side apply, created by the plan).

The object scales the Deployment / StatefulSet to zero when it is idle and back when it is
called or busy: a ``prometheus`` trigger on its request rate at the ingress (activation
threshold 0: any request wakes it; the metric exists while the workload is at zero), a
``prometheus`` trigger on its GPU activity (holds it up while it works), and a ``cron`` trigger
per span of its recurring busy hours. A single-replica workload gets ``minReplicaCount: 0`` and
``maxReplicaCount: 1``; one with N replicas gets ``idleReplicaCount: 0`` and min = max = N, so
KEDA's HPA only ever switches between zero and what it runs today (never fewer replicas under
load). ``cooldownPeriod`` is the quiet time before it goes to zero.
"""

from __future__ import annotations

from typing import Any

from gpuinsight.actions import model
from gpuinsight.actions.builders.common import fail, readable, workload_ref
from gpuinsight.actions.patching import get
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds import SCALE_TO_ZERO
from gpuinsight.rules.common import SCALE_TARGET_KINDS

# the finding kinds this module builds the actions of
BUILDS = (SCALE_TO_ZERO,)

API_VERSIONS = {"Deployment": "apps/v1", "StatefulSet": "apps/v1"}


def scaled_object_ref(rec: Recommendation) -> tuple[Ref, Ref]:
    """(the workload, its ScaledObject: same namespace and name)."""
    ref = workload_ref(rec, rec.target)
    if ref.kind not in SCALE_TARGET_KINDS:
        raise fail(rec, "target.kind", f"KEDA scales a {' or '.join(SCALE_TARGET_KINDS)} here, not a {ref.kind}")
    return ref, Ref("ScaledObject", ref.namespace, ref.name)


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    return readable(list(scaled_object_ref(rec)))


def triggers(p: dict[str, Any], replicas: int) -> list[dict[str, Any]]:
    url = str(p["prometheus_url"])
    out: list[dict[str, Any]] = [
        {"type": "prometheus", "name": "requests",
         "metadata": {"serverAddress": url, "query": str(p["request_query"]), "threshold": "1",
                      "activationThreshold": "0"}},
        {"type": "prometheus", "name": "gpu-activity",
         "metadata": {"serverAddress": url, "query": str(p["gpu_query"]), "threshold": str(p["gpu_activation"]),
                      "activationThreshold": str(p["gpu_activation"])}},
    ]
    for i, (start, end) in enumerate(spans(p.get("active_hours_utc") or [])):
        out.append({"type": "cron", "name": f"usual-hours-{i}",
                    "metadata": {"timezone": "Etc/UTC", "start": f"0 {start} * * *", "end": f"0 {end} * * *",
                                 "desiredReplicas": str(replicas)}})
    return out


def spans(hours: list[int]) -> list[tuple[int, int]]:
    """[22, 23, 0, 1] -> [(22, 2)]: (start hour, end hour) of each run of consecutive UTC hours."""
    wanted = sorted(set(int(h) % 24 for h in hours))
    if not wanted or len(wanted) == 24:
        return []
    starts = [h for h in wanted if (h - 1) % 24 not in wanted]
    out = []
    for s in starts:
        e = s
        while (e + 1) % 24 in wanted:
            e = (e + 1) % 24
        out.append((s, (e + 1) % 24))
    return out


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    p = rec.proposed
    target, ref = scaled_object_ref(rec)
    existing = state.get(ref)
    if existing is not None:
        aimed = get(existing, "/spec/scaleTargetRef/name")
        if aimed != target.name:
            raise fail(rec, "target", f"ScaledObject {ref.namespace}/{ref.name} exists and scales {aimed!r}")
    live = state.get(target)
    replicas = get(live, "/spec/replicas") if live is not None and state.is_known(target, "/spec/replicas") else None
    replicas = int(replicas) if isinstance(replicas, int) and replicas > 0 else int(p["replicas_when_active"])
    counts: dict[str, int] = ({"minReplicaCount": 0, "maxReplicaCount": 1} if replicas == 1 else
                              {"idleReplicaCount": 0, "minReplicaCount": replicas, "maxReplicaCount": replicas})
    spec = {"scaleTargetRef": {"apiVersion": API_VERSIONS[target.kind], "kind": target.kind, "name": target.name},
            **counts, "cooldownPeriod": int(p["cooldown_s"]), "pollingInterval": int(p["polling_interval_s"]),
            "triggers": triggers(p, replicas)}
    cfg = ref.skeleton() | {"spec": spec}
    observed = state.observe(ref, ["/spec"])
    text = (f"{ref.key}: scale {target.key} to zero after {p['cooldown_s']} s without requests or GPU work, back "
            f"to {replicas} replica(s) on the first request"
            + (f" or at its usual UTC hours {p['active_hours_utc']}" if p.get("active_hours_utc") else "")
            + "; needs KEDA, the request metric in Prometheus, and no HPA of its own on the workload")
    return [model.k8s_apply(cfg, "workload", text, observed)]

"""binpack: free whole nodes by moving pods (whole gangs, PDB-aware) onto fuller nodes.

Actions, in apply order: the Volcano scheduler ConfigMap with the binpack plugin weighting
``nvidia.com/gpu`` (the rest of the conf is kept as read), the Karpenter NodePool's
``consolidationPolicy: WhenEmptyOrUnderutilized``, a cordon per freed node, then one drain per
gang (all its pods evicted together, wherever they run) or per other pod. Pods of a PodGroup
whose minMember is below its pod count are a gang only up to minMember: they are drained one
at a time, at most (pods - minMember) of them. A move list that splits a strict gang, moves a
pod that is not where the plan says, leaves GPU pods behind on a "freed" node (other than
those another finding of the plan takes away, ``proposed.pods_leaving``), or evicts more pods
than a PodDisruptionBudget allows is refused.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuinsight.actions import model
from gpuinsight.actions.builders.common import check_pdbs, eviction_batches, fail
from gpuinsight.actions.patching import pointer
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds import BINPACK

# the finding kinds this module builds the actions of
BUILDS = (BINPACK,)

SCHEDULER_CM = Ref("ConfigMap", "volcano-system", "volcano-scheduler-configmap")
CONF_KEY = "volcano-scheduler.conf"
GPU = "nvidia.com/gpu"
DEFAULT_CONF = """actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def refs(rec: Recommendation, state: ClusterState) -> list[Ref]:
    out = [SCHEDULER_CM] + [Ref("Node", None, str(n)) for n in rec.proposed.get("nodes_freed") or []]
    pool = rec.proposed.get("node_pool")
    if isinstance(pool, str) and pool and (state.node_pools.get(pool) or {}).get("kind", "karpenter") == "karpenter":
        out.append(Ref("NodePool", None, pool))
    return out


def binpack_conf(conf_text: str, gpu_weight: int = 10) -> str:
    """The scheduler conf with binpack packing ``nvidia.com/gpu`` (added if the plugin is absent)."""
    conf = yaml.safe_load(conf_text) or {}
    tiers = conf.setdefault("tiers", [])
    plugin = next((p for t in tiers for p in t.get("plugins") or [] if p.get("name") == "binpack"), None)
    if plugin is None:
        if not tiers:
            tiers.append({"plugins": []})
        plugin = {"name": "binpack"}
        tiers[-1].setdefault("plugins", []).append(plugin)
    args = plugin.setdefault("arguments", {})
    listed = [r.strip() for r in str(args.get("binpack.resources") or "").split(",") if r.strip()]
    if GPU not in listed:
        listed.append(GPU)
    args["binpack.resources"] = ", ".join(listed)
    args[f"binpack.resources.{GPU}"] = gpu_weight
    return yaml.safe_dump(conf, sort_keys=False)


def build(rec: Recommendation, state: ClusterState) -> list[dict[str, Any]]:
    moves = rec.proposed.get("moves") or []
    freed = [str(n) for n in rec.proposed.get("nodes_freed") or []]
    if not moves and not freed:
        raise fail(rec, "proposed.moves", "no moves and no nodes to free")
    batches = eviction_batches(rec, state, moves)
    _check_freed(rec, state, freed, batches)
    check_pdbs(rec, state, batches)
    actions: list[dict[str, Any]] = []
    ptr = pointer("data", CONF_KEY)
    observed = state.observe(SCHEDULER_CM, [ptr])
    live_conf = observed["fields"].get(ptr)
    new_conf = binpack_conf(live_conf or DEFAULT_CONF, int(rec.proposed.get("gpu_weight", 10)))
    if live_conf is None or yaml.safe_load(new_conf) != yaml.safe_load(live_conf):
        text = "binpack plugin packs nvidia.com/gpu"
        if live_conf is None:
            text += " (live conf not observed: based on the Volcano chart default; apply refuses if it differs)"
            if observed.get("exists") is None:
                observed = {**observed, "fields": {ptr: DEFAULT_CONF}}
        cfg = SCHEDULER_CM.skeleton() | {"data": {CONF_KEY: new_conf}}
        actions.append(model.k8s_apply(cfg, "config", f"ConfigMap volcano-system/{SCHEDULER_CM.name}: {text}",
                                       observed))
    pool = rec.proposed.get("node_pool")
    info = state.node_pools.get(pool) if isinstance(pool, str) else None
    if info is not None and info.get("kind") == "karpenter":
        np = Ref("NodePool", None, str(pool))
        policy_ptr = "/spec/disruption/consolidationPolicy"
        obs = state.observe(np, [policy_ptr])
        if obs["fields"].get(policy_ptr) != "WhenEmptyOrUnderutilized":
            cfg = np.skeleton() | {"spec": {"disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized"}}}
            actions.append(model.k8s_apply(cfg, "node-pool", f"NodePool {pool}: consolidationPolicy "
                                           f"{obs['fields'].get(policy_ptr) or '?'} -> WhenEmptyOrUnderutilized", obs))
    elif info is not None:
        actions.append(model.note(f"node group {pool}: the freed nodes stay cordoned and empty; the cluster "
                                  f"autoscaler (or you) removes them", f"aws:eks/{pool}"))
    for node in freed:
        actions.append(model.cordon(node, state.observe(Ref("Node", None, node), ["/spec/unschedulable"])))
    for gang, nodes, pods, dest in batches:
        what = f"gang {gang} ({len(pods)} pods together)" if gang else f"pod {pods[0]['namespace']}/{pods[0]['name']}"
        actions.append(model.drain(nodes, pods, gang, f"evict {what} from {', '.join(nodes)}; "
                                                      f"Volcano binpack places them (planned: {dest})"))
    return actions


def _check_freed(rec: Recommendation, state: ClusterState, freed: list[str], batches: list[Any]) -> None:
    moved = {(p["namespace"], p["name"]) for _, _, pods, _ in batches for p in pods}
    # pods other findings of the plan take away first (scaled to zero, moved to MIG or shared GPUs)
    leaving = {(str(p.get("namespace")), str(p.get("pod"))) for p in rec.proposed.get("pods_leaving") or []
               if isinstance(p, dict)}
    on: dict[str, list[dict[str, Any]]] = {}
    for p in state.pods:
        on.setdefault(str(p.get("node")), []).append(p)
    for node in freed:
        stay = [f"{p['namespace']}/{p['name']}" for p in on.get(node, [])
                if (p.get("gpu_request") or 0) > 0 and (p["namespace"], p["name"]) not in moved | leaving]
        if stay:
            raise fail(rec, "proposed.nodes_freed", f"node {node} keeps GPU pods {', '.join(stay)}")

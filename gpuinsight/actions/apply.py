"""Apply a plan safely, and roll it back.

``apply_plan``: validate the plan, refuse it when too old or when the cluster drifted from what
it observed, check every API is served, dry-run everything (``dryRun=All``), then apply in phase
order (config, node pools, labels, workloads, scale-down, cordon, drain), stopping at the first
error. Every action gets an ``applied_actions`` row with the object's previous state.
``rollback`` restores those previous states in reverse order.

A plan of several clusters is applied in one pass, each action through the context of the
cluster it names (``kube`` is {cluster: Kube}; one Kube stands for a plan whose changes are all
in one cluster); a change in a cluster with no context is refused before anything is read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpuinsight.actions import audit, model
from gpuinsight.actions.audit import ApplyResult, Step
from gpuinsight.actions.builders import ordered_actions
from gpuinsight.actions.clusters import action_cluster, per_cluster, require
from gpuinsight.actions.eks import Eks, describe_for_audit
from gpuinsight.actions.kube import Kube, MissingApi
from gpuinsight.actions.patching import (
    PatchError,
    get,
    json_patch,
    norm,
    restore_ops,
    snapshot_fields,
    strip_server_fields,
)
from gpuinsight.actions.redact import MARK, contains_mark, redact, redact_fields
from gpuinsight.actions.refs import Ref
from gpuinsight.errors import BadInput, GpuInsightError, NotFound, RuntimeFailure
from gpuinsight.plan import Plan
from gpuinsight.plan.io import FUTURE_SKEW, validate_plan
from gpuinsight.plan.vocabulary import INERT_TYPES, kind_info

if TYPE_CHECKING:
    from gpuinsight.warehouse import Warehouse

ROLLBACK_MANAGER = "gpuinsight-rollback"
# How long a step waits for what must happen before it: pods evicted from a node to be
# repartitioned (their termination grace period, 30 s by default, with room for slow ones), and
# mig-manager's repartition (it stops the GPU Operator's pods, reconfigures, restarts them:
# minutes; a reboot with WITH_REBOOT takes longer). Checked every POLL_S seconds.
POD_WAIT_S, LABEL_WAIT_S, POLL_S = 900.0, 3600.0, 5.0


class ApplyFailed(RuntimeFailure):
    """The apply (or rollback) stopped; ``result`` says what happened to each action."""

    def __init__(self, message: str, result: ApplyResult) -> None:
        super().__init__(message)
        self.result = result


# -- drift -------------------------------------------------------------------------------------
def k8s_drift(action: dict[str, Any], live: dict[str, Any] | None, *, strict: bool = False) -> str | None:
    obs = action.get("observed") or {}
    target = action.get("target")
    if obs.get("exists") is True and live is None:
        return f"{target} no longer exists"
    if obs.get("exists") is False and live is not None:
        return f"{target} exists now; the plan would create it"
    if live is None:
        return None
    meta = live.get("metadata") or {}
    rv = obs.get("resourceVersion")
    if rv and meta.get("resourceVersion") != rv and (strict or live.get("kind") == "ConfigMap"):
        return f"{target} changed (resourceVersion {rv} -> {meta.get('resourceVersion')})"
    gen = obs.get("generation")
    if gen is not None and meta.get("generation") is not None and int(meta["generation"]) != int(gen):
        return f"{target} spec changed (generation {gen} -> {meta['generation']})"
    for ptr, seen in (obs.get("fields") or {}).items():
        # plans keep secrets redacted, so the live value is compared in the same form
        now = redact_fields({ptr: get(live, ptr)})[ptr]
        if norm(now) != norm(seen):
            return f"{target} {ptr} is {_short(now)}, the plan saw {_short(seen)}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _pods(action: dict[str, Any]) -> list[Ref]:
    return [Ref("Pod", p["namespace"], p["name"]) for p in action.get("pods") or []]


# -- one action at a time ----------------------------------------------------------------------
class _Runner:
    """Carries out actions, each through the Kubernetes context of the cluster it names."""

    def __init__(self, kubes: dict[str, Kube], eks: Eks | Mapping[str, Eks] | None, strict: bool) -> None:
        self.kubes, self.eks, self.strict = kubes, eks, strict

    @classmethod
    def for_actions(cls, actions: list[dict[str, Any]], kube: Kube | Mapping[str, Kube] | None,
                    eks: Eks | Mapping[str, Eks] | None, strict: bool) -> _Runner:
        """A runner for ``actions``: every cluster they change has a context (else BadInput)."""
        clusters = {action_cluster(a) for a in actions if a["type"] != "aws-eks"}
        if clusters and kube is None:
            raise BadInput("the plan changes Kubernetes objects: a cluster connection (--context) is needed")
        runner = cls(per_cluster(kube, clusters, what="kube context", flag="--context"), eks, strict)
        for action in actions:
            if action["type"] == "aws-eks":
                runner.need_eks(action)
            else:
                runner.need_kube(action)
        return runner

    def need_kube(self, action: dict[str, Any]) -> Kube:
        return require(self.kubes, action_cluster(action), what="kube context", flag="--context")

    def need_eks(self, action: dict[str, Any]) -> Eks:
        eks = self.eks
        if isinstance(eks, Mapping):  # a region's client per cluster; one client serves any
            eks = eks.get(action_cluster(action))
        if eks is None:
            raise BadInput("the plan calls the EKS API: an EKS client (AWS region and credentials) is needed")
        return eks

    def current(self, action: dict[str, Any]) -> Any:
        """The state the action changes, as it is now (the audit's ``previous``)."""
        kind = action["type"]
        if kind == "aws-eks":
            return describe_for_audit(self.need_eks(action).current(action))
        if kind == "drain":
            kube = self.need_kube(action)
            return [{"namespace": r.namespace, "name": r.name, "node": get(kube.get(r), "/spec/nodeName")}
                    for r in _pods(action)]
        ref = model.action_ref(action)
        assert ref is not None
        return strip_server_fields(self.need_kube(action).get(ref))

    def drift(self, action: dict[str, Any], now: Any) -> str | None:
        kind = action["type"]
        if kind == "aws-eks":
            return self.need_eks(action).drift(action, now)
        if kind == "drain":
            nodes = set(action.get("nodes") or [action.get("node")])
            for pod in now:
                if pod["node"] is None:
                    return f"pod {pod['namespace']}/{pod['name']} no longer exists"
                if pod["node"] not in nodes:
                    return f"pod {pod['namespace']}/{pod['name']} runs on {pod['node']}, not {sorted(nodes)}"
            return None
        return k8s_drift(action, now, strict=self.strict)

    def preflight(self, action: dict[str, Any]) -> None:
        if action["type"] == "aws-eks":
            self.need_eks(action)
            return
        kube = self.need_kube(action)
        ref = model.action_ref(action)
        info = ref.info if ref else kind_info("Pod")
        sub = "eviction" if action["type"] == "drain" else None
        if not kube.served(info, sub):
            what = f"{info.api_version} {info.plural}{'/' + sub if sub else ''}"
            raise MissingApi(f"{action['target']}: {what} is not served by this cluster (CRD not installed?)", 404)

    def wait_before(self, action: dict[str, Any]) -> None:
        """What must hold before the action is applied: the pods a repartition needs gone are
        gone from the node; the labels the node must show first (mig-manager's success) are there.
        A failure (a pod still running, ``nvidia.com/mig.config.state=failed``) stops the apply."""
        kube = self.need_kube(action)
        node = str(action.get("node"))
        deadline = time.monotonic() + (POD_WAIT_S if action.get("wait_for_pods_gone") else LABEL_WAIT_S)
        while True:
            if action.get("wait_for_pods_gone"):
                left = [f"{p['namespace']}/{p['name']}" for p in action["wait_for_pods_gone"]
                        if get(kube.get(Ref("Pod", p["namespace"], p["name"])), "/spec/nodeName") == node]
                if not left:
                    return
                why = f"pods {', '.join(left)} still run on {node}"
            else:
                labels = get(kube.get(Ref("Node", None, node)), "/metadata/labels") or {}
                wanted = action.get("wait_for_label") or {}
                if all(labels.get(k) == v for k, v in wanted.items()):
                    return
                if any(labels.get(k) == "failed" for k in wanted):
                    raise RuntimeFailure(f"{action['target']}: {', '.join(f'{k}=failed' for k in wanted)}: the "
                                         f"reconfiguration failed (see the mig-manager pod's log on {node}); the node "
                                         f"stays cordoned")
                why = f"{node} does not show {wanted} yet"
            if time.monotonic() >= deadline:
                raise RuntimeFailure(f"{action['target']}: gave up waiting: {why}")
            time.sleep(POLL_S)

    def run(self, action: dict[str, Any], *, dry_run: bool, resource_version: str | None = None) -> dict[str, Any]:
        """Carry out one action. ``resource_version`` (of the object as just read) makes the write
        conditional: an object changed since is a 409 conflict, not a silent overwrite."""
        kind = action["type"]
        if kind == "aws-eks":
            eks = self.need_eks(action)
            return {"args": eks.dry_run(action)} if dry_run else redact(eks.apply(action))
        kube = self.need_kube(action)
        if kind == "drain":
            for ref in _pods(action):
                kube.evict(ref.namespace or "", ref.name, dry_run=dry_run)
            return {"evicted": [r.key for r in _pods(action)]}
        if kind == "k8s-patch":
            ref = model.action_ref(action)
            assert ref is not None
            ops = list(action["patch"])
            if resource_version:
                ops.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})
            out = kube.patch(ref, ops, "json", dry_run=dry_run)
        else:
            cfg = model.apply_config(action)
            assert cfg is not None
            if resource_version:
                cfg = {**cfg, "metadata": {**cfg["metadata"], "resourceVersion": resource_version}}
            out = kube.apply(cfg, dry_run=dry_run, force=False)
        return {"resourceVersion": get(out, "/metadata/resourceVersion")}


def snapshot(action: dict[str, Any], obj: Any) -> Any:
    """What the audit keeps of an object: only the fields the action touches (no env, no other
    containers, no Secret data), secrets redacted all the same; drains and EKS keep their own."""
    if action["type"] in ("drain", "aws-eks"):
        return redact(obj)
    if obj is None:
        return None
    snap = snapshot_fields(obj, model.touched_paths(action))
    snap["fields"] = redact_fields(snap["fields"])
    snap["resourceVersion"] = get(obj, "/metadata/resourceVersion")
    return snap


def _after(action: dict[str, Any], obj: Any) -> dict[str, Any] | None:
    """The touched fields as the action leaves them (rollback checks nobody changed them since)."""
    if action["type"] in ("drain", "aws-eks"):
        return None
    after = model.expected_after(action, obj)
    return redact_fields({p: get(after, p) for p in model.touched_paths(action)})


# -- apply -------------------------------------------------------------------------------------
def apply_plan(plan: Plan, kube: Kube | Mapping[str, Kube] | None, wh: Warehouse, *,
               eks: Eks | Mapping[str, Eks] | None = None,
               max_age: timedelta = timedelta(hours=24), only: Iterable[str] | None = None,
               strict: bool = False, now: datetime | None = None) -> ApplyResult:
    """Apply ``plan`` (its recommendations' actions; ``only`` limits it to some recommendation ids).

    ``kube`` is the Kubernetes client of each cluster the actions change ({cluster: Kube}, or
    one Kube when they are all in one cluster); ``eks`` one EKS client or one per cluster.
    Raises BadInput for an invalid, refused or stale plan or a cluster with no client, ApplyFailed (exit 1) when drift, the
    dry run or the apply stops it; what was applied before a failure stays recorded for rollback.
    """
    validate_plan(plan)
    now = now or datetime.now(UTC)
    created = plan.created_at if plan.created_at.tzinfo else plan.created_at.replace(tzinfo=UTC)
    if now - created > max_age:
        raise BadInput(f"plan {plan.plan_id}: created_at {created.isoformat()} is older than {max_age}; "
                       f"run recommend again")
    if created > now + FUTURE_SKEW:
        raise BadInput(f"plan {plan.plan_id}: created_at {created.isoformat()} is in the future")
    wanted = set(only) if only is not None else None
    if wanted is not None and (unknown := wanted - {r.id for r in plan.recommendations}):
        raise NotFound(f"plan {plan.plan_id}: no recommendation {', '.join(sorted(unknown))}")
    actions = ordered_actions(plan, wanted)
    for action in actions:
        if action["type"] == "refused":
            raise BadInput(action["message"])
    actions = [a for a in actions if a["type"] not in INERT_TYPES]
    result = ApplyResult(plan.plan_id)
    if audit.rows(wh, plan.plan_id, ("applied",)):
        raise BadInput(f"plan {plan.plan_id} is already applied; roll it back first (gpuinsight rollback "
                       f"{plan.plan_id})")
    if not actions:
        return result
    runner = _Runner.for_actions(actions, kube, eks, strict)
    audit.save_recommendations(wh, plan)
    base = audit.next_seq(wh, plan.plan_id)
    seqs = [base + i for i in range(len(actions))]

    def stop(index: int, status: str, message: str, previous: Any = None) -> ApplyFailed:
        result.steps.append(audit.record(wh, plan.plan_id, seqs[index], actions[index], status, message, previous))
        for j in range(index + 1, len(actions)):
            result.steps.append(audit.record(wh, plan.plan_id, seqs[j], actions[j], "not-applied",
                                             f"stopped at step {seqs[index]}"))
        done = len(result.applied)
        hint = (f"; {done} change(s) were applied before it: roll back with `gpuinsight rollback {plan.plan_id}`"
                if done else "; nothing was changed")
        return ApplyFailed(f"{message}{hint}", result)

    # 1. every API served, 2. no drift, 3. server-side dry run of everything
    previous: list[Any] = []
    for i, action in enumerate(actions):
        try:
            runner.preflight(action)
            prev = runner.current(action)
        except GpuInsightError as exc:
            raise stop(i, "dry-run-failed", str(exc)) from exc
        drift = runner.drift(action, prev)
        if drift:
            raise stop(i, "refused", f"the cluster changed since the plan: {drift}; run recommend again",
                       snapshot(action, prev))
        previous.append(prev)
    for i, action in enumerate(actions):
        try:
            runner.run(action, dry_run=True)
        except GpuInsightError as exc:
            raise stop(i, "dry-run-failed", f"dry run: {exc}", snapshot(action, previous[i])) from exc
    for i, action in enumerate(actions):
        audit.record(wh, plan.plan_id, seqs[i], action, "dry-run-ok", "", snapshot(action, previous[i]))
    # 4. apply, recording each change as it happens
    for i, action in enumerate(actions):
        try:
            if action.get("wait_for_pods_gone") or action.get("wait_for_label"):
                runner.wait_before(action)  # before the object is read: waiting changes it (labels)
            prev = runner.current(action)
            rv = get(prev, "/metadata/resourceVersion") if isinstance(prev, dict) else None
            applied = runner.run(action, dry_run=False, resource_version=rv)
        except GpuInsightError as exc:
            raise stop(i, "failed", str(exc), snapshot(action, previous[i])) from exc
        message = action.get("description", "")
        applied["after"] = _after(action, prev)
        result.steps.append(audit.record(wh, plan.plan_id, seqs[i], action, "applied", message,
                                         snapshot(action, prev), applied))
    return result


# -- rollback ----------------------------------------------------------------------------------
def rollback(plan_id: str, kube: Kube | Mapping[str, Kube] | None, wh: Warehouse, *,
             eks: Eks | Mapping[str, Eks] | None = None, force: bool = False) -> ApplyResult:
    """Restore what ``apply_plan`` changed for ``plan_id``, newest first; stop at the first error.

    Each change is restored through the client of the cluster it was applied to (``kube`` as
    for :func:`apply_plan`). A field changed again after the apply is not overwritten unless
    ``force``.
    """
    rows = [r for r in reversed(audit.rows(wh, plan_id, ("applied",)))]
    if not rows:
        done = audit.rows(wh, plan_id)
        raise NotFound(f"plan {plan_id}: nothing applied to roll back"
                       + (f" ({len(done)} recorded action(s), none in state applied)" if done else ""))
    runner = _Runner.for_actions([r["applied"]["action"] for r in rows], kube, eks, False)
    result = ApplyResult(plan_id)
    steps = []
    # an object as the newer restores leave it (a cordon undone by an uncordon of the same plan is
    # checked against what undoing the uncordon restores, not against the live object)
    restored: dict[str, dict[str, Any] | None] = {}
    for row in rows:
        action, prev = row["applied"]["action"], row["previous"]
        todo = _restore_plan(runner, action, prev, row["applied"].get("after"), force, restored)
        steps.append((row, action, prev, todo))
        if todo.get("patch") is not None:
            key = f"{action_cluster(action)}/{todo['ref'].key}"
            try:
                restored[key] = json_patch(todo["live"] or {}, todo["patch"])
            except PatchError:
                restored.pop(key, None)
    for row, action, _prev, todo in steps:  # dry run of every restore first
        try:
            _restore(runner, action, todo, dry_run=True)
        except GpuInsightError as exc:
            raise ApplyFailed(f"rollback dry run, step {row['seq']} {row['target']}: {exc}; nothing restored",
                              result) from exc
    for row, action, _prev, todo in steps:
        try:
            message = _restore(runner, action, todo, dry_run=False)
        except GpuInsightError as exc:
            raise ApplyFailed(f"rollback stopped at step {row['seq']} {row['target']}: {exc}; "
                              f"{len(result.steps)} step(s) restored", result) from exc
        status = "irreversible" if action["type"] == "drain" else "rolled-back"
        audit.set_status(wh, plan_id, row["seq"], status, message)
        result.steps.append(Step(row["seq"], row["target"], row["operation"], status, message))
    return result


def _restore_plan(runner: _Runner, action: dict[str, Any], prev: Any, after: Any,
                  force: bool, restored: dict[str, dict[str, Any] | None] | None = None) -> dict[str, Any]:
    kind = action["type"]
    if kind in ("drain", "aws-eks"):
        return {"previous": prev}
    ref = model.action_ref(action)
    assert ref is not None
    key = f"{action_cluster(action)}/{ref.key}"
    live = (restored or {}).get(key) if key in (restored or {}) else runner.need_kube(action).get(ref)
    if isinstance(prev, dict) and "fields" not in prev:  # a row written before audits kept fields only
        after = after or _after(action, prev)
        prev = snapshot(action, prev)
    if not force and live is not None:
        for ptr, value in (after or {}).items():
            now = redact_fields({ptr: get(live, ptr)})[ptr]
            if norm(now) != norm(value):
                raise ApplyFailed(f"rollback refused: {action['target']} {ptr} changed after the apply "
                                  f"(now {_short(now)}); pass --force to restore anyway", ApplyResult(""))
    if prev is None:
        return {"delete": ref, "exists": live is not None}
    if contains_mark(prev.get("fields")):
        raise ApplyFailed(f"rollback refused: the recorded state of {action['target']} has {MARK} values "
                          f"(secrets are never stored); restore it by hand", ApplyResult(""))
    ops = [op for op in action.get("patch") or [] if op.get("op") == "test" and op["path"].endswith("/name")]
    return {"patch": ops + restore_ops(prev, live or {}), "ref": ref, "live": live}


def _restore(runner: _Runner, action: dict[str, Any], todo: dict[str, Any], *, dry_run: bool) -> str:
    kind = action["type"]
    if kind == "drain":
        return "evicted pods are recreated by their controllers; evictions cannot be undone"
    if kind == "aws-eks":
        return "dry run ok" if dry_run else runner.need_eks(action).revert(action, todo["previous"])
    kube = runner.need_kube(action)
    if "delete" in todo:
        if todo["exists"]:
            kube.delete(todo["delete"], dry_run=dry_run)
        return f"deleted {todo['delete'].key} (it did not exist before)"
    if todo["patch"]:
        kube.patch(todo["ref"], todo["patch"], "json", dry_run=dry_run, field_manager=ROLLBACK_MANAGER)
    return f"restored {', '.join(model.touched_paths(action))}"

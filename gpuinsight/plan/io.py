"""Plans as files: write, read back, validate, sign.

A plan file is ``{"plan_id", "created_at", "catalog", "window", "notes", "clusters", "recommendations": [...]}``;
a bare recommendation array (``recommend --format json``) is accepted when the caller supplies
``plan_id`` and ``created_at``. A plan file is input a person may have edited, so every field is
checked before anything uses it and a bad one is refused naming it (``recommendations[2].actions[0]
.node: ...``): ids match ``^[a-z0-9-]+$`` (a plan id made before ids were lower case, ``plan-20261130T222252Z``,
is still read),
names are Kubernetes names, numbers are finite, times are ISO-8601 and not in the future, unknown
fields are refused, and every action has the structure its type needs. Every recommendation names
its ``cluster``, and its target and actions name the same one (a plan's ``clusters`` lists every
cluster it judged, so each recommendation's is among them).

What a kind's own ``proposed`` / ``target`` / ``evidence`` must hold is checked at one call point,
:func:`check_rule_fields`, against the schemas of its kind (:mod:`gpuinsight.plan.kinds`).

``plan_digest`` is the SHA-256 of a plan's canonical JSON: ``recommend --save-plan`` records it
(with the content) in ``reviewed_plans`` and ``recommend --plan FILE --apply`` applies a file only
when its digest is the recorded one (:func:`gpuinsight.plan.store.check_reviewed`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuinsight.errors import BadInput
from gpuinsight.plan.kinds import RULE_NAMES, validate_finding
from gpuinsight.plan.model import Plan, Recommendation
from gpuinsight.plan.schema import DNS_LABEL, DNS_NAME, LABEL_KEY, LABEL_VALUE, cluster_name, show
from gpuinsight.plan.schema import resource_list as check_resource_list
from gpuinsight.plan.vocabulary import ACTION_TYPES, BY_GVK, EKS_CALLS, PHASES
from gpuinsight.textfile import decode_utf8

REC_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,127}\Z")
PLAN_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\Z")
# Ids made before plan ids were lower case (``plan-20261130T222252Z``): still read from the plan
# files and warehouse rows that hold them; nothing makes new ones.
LEGACY_PLAN_ID = re.compile(r"^plan-[0-9]{8}T[0-9]{6}Z\Z")
EKS_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}\Z")
GANG = re.compile(r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
POINTER = re.compile(r"^(/([^~/]|~[01])*)+\Z")
MAX_TEXT = 4000            # titles, descriptions, messages
MAX_PLAN_BYTES = 64 << 20  # a plan of thousands of findings is a few MB
FUTURE_SKEW = timedelta(minutes=5)  # clocks of the reviewing and the applying machine may differ

PLAN_KEYS = ("plan_id", "created_at", "catalog", "window", "notes", "clusters", "recommendations")
REC_KEYS = ("id", "rule", "cluster", "namespace", "workload", "node", "queue", "title", "current", "proposed",
            "monthly_savings_usd", "confidence", "evidence", "actions", "target")
ACTION_KEYS = {"type", "phase", "target", "description", "recommendation", "cluster", "ref", "object", "observed",
               "patch_type", "patch", "node", "nodes", "labels", "pods", "gang", "call", "args", "copy_from",
               "message", "wait_for_pods_gone", "wait_for_label"}
OBSERVED_KEYS = {"exists", "source", "resourceVersion", "generation", "fields", "scalingConfig"}


def _bad(where: str, message: str) -> BadInput:
    return BadInput(f"{where}: {message}")


def _int(value: Any, where: str, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        else:
            raise _bad(where, f"{show(value)} is not an integer")
    if value < minimum or (maximum is not None and value > maximum):
        raise _bad(where, f"{value} is out of range ({minimum}..{maximum if maximum is not None else ''})")
    return value


def _number(value: Any, where: str, minimum: float | None = 0.0, maximum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(where, f"{show(value)} is not a finite number")
    if minimum is not None and value < minimum:
        raise _bad(where, f"{value} is below {minimum:g}")
    if maximum is not None and value > maximum:
        raise _bad(where, f"{value} is above {maximum:g}")
    return float(value)


def _str(value: Any, where: str, pattern: re.Pattern[str] | None = None, max_len: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or not value:
        raise _bad(where, f"{show(value)} is not a non-empty string")
    if len(value) > max_len:
        raise _bad(where, f"{len(value)} characters (at most {max_len})")
    if pattern is not None and not pattern.match(value):
        raise _bad(where, f"{show(value)} is not a valid name here")
    return value


def _opt_str(value: Any, where: str, pattern: re.Pattern[str] | None = None, max_len: int = MAX_TEXT) -> None:
    if value is not None:
        _str(value, where, pattern, max_len)


def _text(value: Any, where: str) -> None:
    """Free text (titles, descriptions): a string; written out it is always quoted or sanitised."""
    if not isinstance(value, str):
        raise _bad(where, f"{show(value)} is not a string")
    if len(value) > MAX_TEXT:
        raise _bad(where, f"{len(value)} characters (at most {MAX_TEXT})")


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(where, "not an object")
    return value


def _keys(data: dict[str, Any], allowed: Any, where: str) -> None:
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        raise _bad(f"{where}.{unknown[0]}" if where else unknown[0], "unknown field")


def _name(value: Any, where: str) -> str:
    """An object name (DNS-1123 subdomain, at most 253 characters)."""
    return _str(value, where, DNS_NAME, 253)


def _namespace(value: Any, where: str) -> str:
    return _str(value, where, DNS_LABEL, 63)


def check_labels(labels: Any, where: str) -> None:
    if not isinstance(labels, dict):
        raise _bad(where, "a {key: value} map")
    for key, value in labels.items():
        if not LABEL_KEY.match(str(key)):
            raise _bad(f"{where}.{key}", "not a valid label key")
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            raise _bad(f"{where}.{key}", f"{show(value)} is not a valid label value")


# -- per-rule fields: the one call point ----------------------------------------------------------
def check_rule_fields(rec: dict[str, Any], where: str) -> None:
    """Validate the kind-specific ``proposed`` / ``target`` / ``evidence`` of one recommendation
    against its kind's schemas (:mod:`gpuinsight.plan.kinds`; raises BadInput naming the field)."""
    validate_finding(rec, where)


# -- actions --------------------------------------------------------------------------------------
def _ref(ref: Any, where: str) -> tuple[str, str, str | None, str]:
    ref = _object(ref, where)
    _keys(ref, ("apiVersion", "kind", "namespace", "name"), where)
    key = (ref.get("apiVersion"), ref.get("kind"))
    if not all(isinstance(k, str) for k in key) or key not in BY_GVK:
        raise _bad(f"{where}.kind", f"{show(ref.get('apiVersion'))} {show(ref.get('kind'))} is not a kind "
                                    f"gpuinsight changes")
    info = BY_GVK[key]  # type: ignore[index]
    name = _name(ref.get("name"), f"{where}.name")
    ns = ref.get("namespace")
    if info.namespaced:
        _namespace(ns, f"{where}.namespace")
    elif ns is not None:
        raise _bad(f"{where}.namespace", f"{info.kind} is cluster-scoped")
    return info.api_version, info.kind, ns, name


def _apply_object(obj: Any, where: str) -> tuple[str, str, str | None, str]:
    obj = _object(obj, where)
    meta = _object(obj.get("metadata"), f"{where}.metadata")
    _keys(meta, ("name", "namespace", "labels", "annotations"), f"{where}.metadata")
    ref = _ref({"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta.get("name"),
                "namespace": meta.get("namespace")}, where)
    if "labels" in meta:
        check_labels(meta["labels"], f"{where}.metadata.labels")
    if "annotations" in meta:
        ann = _object(meta["annotations"], f"{where}.metadata.annotations")
        for key, value in ann.items():
            if not LABEL_KEY.match(str(key)) or not isinstance(value, str):
                raise _bad(f"{where}.metadata.annotations.{key}", "not a valid annotation")
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        raise _bad(f"{where}.spec", "not an object")
    kind = obj["kind"]
    if kind == "Queue":
        if "weight" in spec:
            _int(spec["weight"], f"{where}.spec.weight", 1, 65535)
        for key in ("capability", "deserved"):
            if key in spec:
                check_resource_list(spec[key], f"{where}.spec.{key}")
        if "resource" in (spec.get("guarantee") or {}):
            check_resource_list(spec["guarantee"]["resource"], f"{where}.spec.guarantee.resource")
    if "replicas" in spec and kind in ("Deployment", "StatefulSet"):
        _int(spec["replicas"], f"{where}.spec.replicas")
    if kind == "NodePool" and "limits" in spec:
        check_resource_list(spec["limits"], f"{where}.spec.limits")
    if kind == "ConfigMap":
        for key, value in _object(obj.get("data") or {}, f"{where}.data").items():
            if not re.match(r"^[-._a-zA-Z0-9]{1,253}$", str(key)):
                raise _bad(f"{where}.data.{key}", "not a valid ConfigMap key")
            if not isinstance(value, str):
                raise _bad(f"{where}.data.{key}", "not a string")
    return ref


def _observed(obs: Any, where: str) -> None:
    obs = _object(obs, where)
    _keys(obs, OBSERVED_KEYS, where)
    if obs.get("exists") not in (True, False, None):
        raise _bad(f"{where}.exists", f"{show(obs.get('exists'))} is not true, false or null")
    _opt_str(obs.get("source"), f"{where}.source", re.compile(r"^[a-z]+$"), 20)
    _opt_str(obs.get("resourceVersion"), f"{where}.resourceVersion", re.compile(r"^[0-9A-Za-z._-]+$"), 100)
    if obs.get("generation") is not None:
        _int(obs["generation"], f"{where}.generation")
    for ptr in _object(obs.get("fields") or {}, f"{where}.fields"):
        if not POINTER.match(str(ptr)):
            raise _bad(f"{where}.fields", f"{show(ptr)} is not a JSON pointer")


def _patch(ops: Any, where: str) -> None:
    if not isinstance(ops, list) or not ops:
        raise _bad(where, "a JSON patch (a non-empty list of add/remove/replace/test operations)")
    for i, op in enumerate(ops):
        w = f"{where}[{i}]"
        op = _object(op, w)
        _keys(op, ("op", "path", "value"), w)
        if op.get("op") not in ("add", "remove", "replace", "test"):
            raise _bad(f"{w}.op", f"{show(op.get('op'))} is not add, remove, replace or test")
        path = op.get("path")
        if not isinstance(path, str) or not POINTER.match(path) or len(path) > 1000:
            raise _bad(f"{w}.path", f"{show(path)} is not a JSON pointer")
        if path.split("/")[1] in ("apiVersion", "kind") or path in ("/metadata/name", "/metadata/namespace"):
            raise _bad(f"{w}.path", f"{path} identifies the object; a patch cannot change it")
        if op["op"] != "remove" and "value" not in op:
            raise _bad(f"{w}.value", "missing")


def _pod_list(pods: Any, where: str) -> None:
    if not isinstance(pods, list) or not pods:
        raise _bad(where, "a non-empty list of {namespace, name}")
    for i, pod in enumerate(pods):
        pod = _object(pod, f"{where}[{i}]")
        _keys(pod, ("namespace", "name"), f"{where}[{i}]")
        _namespace(pod.get("namespace"), f"{where}[{i}].namespace")
        _name(pod.get("name"), f"{where}[{i}].name")


def check_action(action: Any, where: str, rec_id: str | None = None, cluster: str | None = None) -> None:
    if not isinstance(action, dict) or action.get("type") not in ACTION_TYPES:
        got = action.get("type") if isinstance(action, dict) else action
        raise _bad(f"{where}.type", f"{show(got)} is not one of {', '.join(ACTION_TYPES)}")
    _keys(action, ACTION_KEYS, where)
    kind = action["type"]
    if action.get("phase", "note") not in PHASES:
        raise _bad(f"{where}.phase", f"{show(action.get('phase'))} is not one of {', '.join(PHASES)}")
    for key in ("target", "description", "message"):
        if key in action:
            _text(action[key], f"{where}.{key}")
    if "recommendation" in action and rec_id is not None and action["recommendation"] != rec_id:
        raise _bad(f"{where}.recommendation", f"{show(action['recommendation'])} is not this recommendation's id")
    if cluster is not None and action.get("cluster") != cluster:
        # apply picks the context by it: an action of another (or no) cluster is never carried out
        raise _bad(f"{where}.cluster", f"{show(action.get('cluster'))} is not this recommendation's cluster "
                                       f"{show(cluster)}")
    if "observed" in action and kind != "aws-eks":
        _observed(action["observed"], f"{where}.observed")
    if kind == "k8s-apply":
        ref = _apply_object(action.get("object"), f"{where}.object")
        if _ref(action.get("ref"), f"{where}.ref") != ref:
            raise _bad(f"{where}.ref", "does not name the object")
    elif kind in ("k8s-patch", "manifest-patch"):
        _ref(action.get("ref"), f"{where}.ref")
        if action.get("patch_type", "json") != "json":
            raise _bad(f"{where}.patch_type", f"{show(action.get('patch_type'))} (only json)")
        _patch(action.get("patch"), f"{where}.patch")
    elif kind == "k8s-label":
        _name(action.get("node"), f"{where}.node")
        labels = action.get("labels")
        if not isinstance(labels, dict) or not labels:
            raise _bad(f"{where}.labels", "a non-empty {key: value} map")
        check_labels(labels, f"{where}.labels")
        if "wait_for_pods_gone" in action:
            _pod_list(action["wait_for_pods_gone"], f"{where}.wait_for_pods_gone")
    elif kind in ("cordon", "uncordon"):
        _name(action.get("node"), f"{where}.node")
        if "wait_for_label" in action:
            wait = action["wait_for_label"]
            if not isinstance(wait, dict) or not wait:
                raise _bad(f"{where}.wait_for_label", "a non-empty {key: value} map")
            check_labels(wait, f"{where}.wait_for_label")
    elif kind == "drain":
        _pod_list(action.get("pods"), f"{where}.pods")
        nodes = action.get("nodes", [])
        if not isinstance(nodes, list):
            raise _bad(f"{where}.nodes", "a list of node names")
        for i, node in enumerate(nodes):
            _name(node, f"{where}.nodes[{i}]")
        _opt_str(action.get("node"), f"{where}.node", DNS_NAME, 253)
        _opt_str(action.get("gang"), f"{where}.gang", GANG, 320)
    elif kind == "aws-eks":
        if action.get("call") not in EKS_CALLS:
            raise _bad(f"{where}.call", f"{show(action.get('call'))} is not one of {', '.join(EKS_CALLS)}")
        args = _object(action.get("args"), f"{where}.args")
        _str(args.get("clusterName"), f"{where}.args.clusterName", EKS_NAME, 100)
        _str(args.get("nodegroupName"), f"{where}.args.nodegroupName", EKS_NAME, 63)
        for key, value in _object(args.get("scalingConfig") or {}, f"{where}.args.scalingConfig").items():
            _int(value, f"{where}.args.scalingConfig.{key}")
        _opt_str(action.get("copy_from"), f"{where}.copy_from", EKS_NAME, 63)
        _object(action.get("observed") or {}, f"{where}.observed")
    elif kind in ("note", "refused"):
        _text(action.get("message", ""), f"{where}.message")


# -- recommendations and plans --------------------------------------------------------------------
def check_recommendation(data: Any, where: str) -> None:
    data = _object(data, where)
    _keys(data, REC_KEYS, where)
    if data.get("rule") not in RULE_NAMES:
        raise _bad(f"{where}.rule", f"unknown rule {show(data.get('rule'))} (one of {', '.join(RULE_NAMES)})")
    if "id" in data:
        _str(data["id"], f"{where}.id", REC_ID, 128)
    if "cluster" not in data:
        raise _bad(f"{where}.cluster", "missing (the cluster the finding is about)")
    cluster_name(data["cluster"], f"{where}.cluster")
    _opt_str(data.get("namespace"), f"{where}.namespace", DNS_LABEL, 63)
    for key in ("workload", "node", "queue"):
        _opt_str(data.get(key), f"{where}.{key}", DNS_NAME, 253)
    if "title" not in data:
        raise _bad(f"{where}.title", "missing")
    _text(data["title"], f"{where}.title")
    for key in ("current", "proposed", "target", "evidence"):
        if key in data:
            _object(data[key], f"{where}.{key}")
    if "monthly_savings_usd" in data:
        _number(data["monthly_savings_usd"], f"{where}.monthly_savings_usd", minimum=None)
    if "confidence" in data:
        _number(data["confidence"], f"{where}.confidence", 0.0, 1.0)
    check_rule_fields(data, where)
    _same_cluster(data.get("target"), data["cluster"], f"{where}.target")
    actions = data.get("actions") or []
    if not isinstance(actions, list):
        raise _bad(f"{where}.actions", "not a list")
    for i, action in enumerate(actions):
        check_action(action, f"{where}.actions[{i}]", data.get("id"), data["cluster"])


def _same_cluster(value: Any, cluster: str, where: str) -> None:
    """Every ``cluster`` inside a target (its own, a shared group's members') is the finding's."""
    if isinstance(value, dict):
        if "cluster" in value and value["cluster"] != cluster:
            raise _bad(f"{where}.cluster", f"{show(value['cluster'])} is not the finding's cluster {show(cluster)}")
        for key, item in value.items():
            _same_cluster(item, cluster, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _same_cluster(item, cluster, f"{where}[{i}]")


def check_plan_id(value: Any, where: str) -> str:
    """A plan id: ``^[a-z0-9-]+$`` (what :meth:`Plan.new_id` makes), or the exact upper-case form
    older versions made; either is safe unquoted in a file name, a shell comment or YAML."""
    if isinstance(value, str) and LEGACY_PLAN_ID.match(value):
        return value
    return _str(value, where, PLAN_ID, 63)


def validate_plan(plan: Plan) -> None:
    """Check a plan held in memory (the same checks as a loaded file)."""
    check_plan_id(plan.plan_id, "plan_id")
    clusters = _clusters(plan.clusters, "clusters")
    seen: set[str] = set()
    for i, rec in enumerate(plan.recommendations):
        check_recommendation(rec.to_dict(), f"recommendations[{i}]")
        if rec.id in seen:
            raise _bad(f"recommendations[{i}].id", f"{rec.id!r} appears twice")
        seen.add(rec.id)
        _in_clusters(rec.cluster, clusters, f"recommendations[{i}].cluster")


def _clusters(value: Any, where: str) -> set[str]:
    if not isinstance(value, list):
        raise _bad(where, "a list of cluster names")
    for i, name in enumerate(value):
        cluster_name(name, f"{where}[{i}]")
    if len(set(value)) != len(value):
        raise _bad(where, "a cluster appears twice")
    return set(value)


def _in_clusters(cluster: str, clusters: set[str], where: str) -> None:
    if clusters and cluster not in clusters:
        raise _bad(where, f"{show(cluster)} is not one of the plan's clusters ({', '.join(sorted(clusters))})")


def plan_to_json(plan: Plan) -> dict[str, Any]:
    return {"plan_id": plan.plan_id, "created_at": plan.created_at.isoformat(), "catalog": plan.catalog,
            "window": [w.isoformat() if w else None for w in plan.window], "notes": list(plan.notes),
            "clusters": list(plan.clusters), "recommendations": plan.to_json_obj()}


def plan_text(plan: Plan) -> str:
    """The plan file's text (``recommend --save-plan``, ``plan.json`` of ``--emit``)."""
    return json.dumps(plan_to_json(plan), indent=2, default=str, allow_nan=False) + "\n"


def _time(value: Any, where: str, now: datetime) -> datetime:
    if isinstance(value, datetime):
        when = value
    else:
        if not isinstance(value, str) or len(value) > 40:
            raise _bad(where, f"{show(value)} is not an ISO-8601 time")
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise _bad(where, f"{show(value)} is not an ISO-8601 time") from None
    aware = when if when.tzinfo else when.replace(tzinfo=UTC)
    if aware > now + FUTURE_SKEW:
        raise _bad(where, f"{aware.isoformat()} is in the future (now {now.isoformat(timespec='seconds')})")
    return when


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def parse_json(text: str, name: str) -> Any:
    """Strict JSON: no NaN/Infinity, no repeated keys (a reviewer must see what is applied)."""
    try:
        return json.loads(text, parse_constant=_no_constants, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise BadInput(f"{name}: not JSON: nested too deeply") from None
    except ValueError as exc:
        raise BadInput(f"{name}: not JSON: {str(exc).splitlines()[0]}") from None


def read_plan_data(source: str | Path) -> tuple[str, Any]:
    """(name, parsed JSON) of a plan file."""
    path = Path(source)
    try:
        size = path.stat().st_size
        if size > MAX_PLAN_BYTES:
            raise BadInput(f"{path}: {size} bytes is too large for a plan (at most {MAX_PLAN_BYTES})")
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read plan: {exc.strerror}") from exc
    text = decode_utf8(data, str(path))
    return str(path), parse_json(text, str(path))


def load_plan(source: str | Path | dict[str, Any] | list[Any], *, plan_id: str | None = None,
              created_at: datetime | None = None, now: datetime | None = None) -> Plan:
    """A plan from a file path, a JSON string or parsed JSON; any invalid field raises BadInput."""
    name, data = "plan", source
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith(("{", "["))):
        name, data = read_plan_data(source)
    elif isinstance(source, str):
        data = parse_json(source, "plan")
    return plan_from_data(data, name, plan_id=plan_id, created_at=created_at, now=now)


def plan_from_data(data: Any, name: str = "plan", *, plan_id: str | None = None,
                   created_at: datetime | None = None, now: datetime | None = None) -> Plan:
    now = now or datetime.now(UTC)
    if isinstance(data, list):
        data = {"plan_id": plan_id, "created_at": created_at, "recommendations": data}
    if not isinstance(data, dict):
        raise BadInput(f"{name}: a plan object or a recommendation array")
    _keys(data, PLAN_KEYS, f"{name}:")
    pid = plan_id or data.get("plan_id")
    when = created_at or data.get("created_at")
    if not pid:
        raise _bad(f"{name}: plan_id", "missing")
    check_plan_id(pid, f"{name}: plan_id")
    if when is None:
        raise _bad(f"{name}: created_at", "missing (the plan's age decides whether it may be applied)")
    created = _time(when, f"{name}: created_at", now)
    _opt_str(data.get("catalog"), f"{name}: catalog", max_len=500)
    window = data.get("window") or [None, None]
    if not isinstance(window, list) or len(window) != 2:
        raise _bad(f"{name}: window", "a [start, end] pair of ISO-8601 times or nulls")
    bounds = tuple(w and _time(w, f"{name}: window[{i}]", now) for i, w in enumerate(window))
    notes = data.get("notes") or []
    if not isinstance(notes, list):
        raise _bad(f"{name}: notes", "a list of strings")
    for i, note in enumerate(notes):
        _text(note, f"{name}: notes[{i}]")
    clusters = _clusters(data.get("clusters") or [], f"{name}: clusters")
    recs_raw = data.get("recommendations")
    if not isinstance(recs_raw, list):
        raise _bad(f"{name}: recommendations", "not a list")
    recs, seen = [], set()
    for i, raw in enumerate(recs_raw):
        check_recommendation(raw, f"{name}: recommendations[{i}]")
        _in_clusters(raw["cluster"], clusters, f"{name}: recommendations[{i}].cluster")
        rec = Recommendation.from_dict(raw)
        if rec.id in seen:
            raise _bad(f"{name}: recommendations[{i}].id", f"{rec.id!r} appears twice")
        seen.add(rec.id)
        recs.append(rec)
    return Plan(plan_id=str(pid), created_at=created, catalog=data.get("catalog"),
                window=(bounds[0], bounds[1]), recommendations=recs, notes=list(notes), clusters=sorted(clusters))


# -- review signature -----------------------------------------------------------------------------
def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str,
                      allow_nan=False)


def plan_digest(plan: Plan) -> str:
    """SHA-256 of the plan's canonical JSON (what a reviewer saw, whatever its formatting)."""
    return hashlib.sha256(canonical(plan_to_json(plan)).encode("utf-8")).hexdigest()


def first_difference(reviewed: Any, given: Any, where: str = "") -> str | None:
    """Where two JSON documents first differ (``recommendations[2].actions[1]: removed``)."""
    if isinstance(reviewed, dict) and isinstance(given, dict):
        for key in sorted(set(reviewed) | set(given), key=str):
            sub = f"{where}.{key}" if where else str(key)
            if key not in given:
                return f"{sub}: removed"
            if key not in reviewed:
                return f"{sub}: added"
            found = first_difference(reviewed[key], given[key], sub)
            if found:
                return found
        return None
    if isinstance(reviewed, list) and isinstance(given, list):
        for i, (a, b) in enumerate(zip(reviewed, given, strict=False)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        if len(reviewed) != len(given):
            n = min(len(reviewed), len(given))
            return f"{where}[{n}]: {'removed' if len(given) < len(reviewed) else 'added'}"
        return None
    if canonical(reviewed) != canonical(given):
        return f"{where or 'plan'}: was {show(reviewed)}, now {show(given)}"
    return None

"""Plans as files: write, read back, and validate (a hand-edited plan must name its bad field).

A plan file is ``{"plan_id", "created_at", "catalog", "window", "notes", "recommendations": [...]}``;
a bare recommendation array (``recommend --format json``) is accepted when the caller supplies
``plan_id`` and ``created_at``. Validation covers the ``proposed``/``target`` of every rule and
the shape of any ``actions`` present (server-side validation and the dry run do the rest).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from gpuinsight.actions.model import ACTION_TYPES, EKS_CALLS
from gpuinsight.actions.refs import KINDS
from gpuinsight.errors import BadInput
from gpuinsight.rules.base import RULE_NAMES, Plan, Recommendation
from gpuinsight.rules.typed import DNS_NAME, LABEL_VALUE, MIG_PROFILE, QUANTITY  # noqa: F401  (re-exported)
from gpuinsight.rules.typed import quantity as check_quantity  # noqa: F401  (re-exported)
from gpuinsight.rules.typed import resource_list as check_resource_list


def _bad(where: str, message: str) -> BadInput:
    return BadInput(f"{where}: {message}")


def _int(value: Any, where: str, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise _bad(where, f"{value!r} is not an integer")
    if value < minimum or (maximum is not None and value > maximum):
        raise _bad(where, f"{value} is out of range ({minimum}..{maximum if maximum is not None else ''})")
    return value


def _str(value: Any, where: str, pattern: re.Pattern[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise _bad(where, f"{value!r} is not a non-empty string")
    if pattern is not None and not pattern.match(value):
        raise _bad(where, f"{value!r} is not a valid name here")
    return value


def check_proposed(rec: dict[str, Any], where: str) -> None:
    """The ``proposed`` and ``target`` of a recommendation, against its kind's schemas (each rule
    registers them with its finding kinds: ``gpuinsight.rules.registry``)."""
    from gpuinsight.rules.registry import validate_finding

    validate_finding(rec, where)


def check_action(action: Any, where: str) -> None:
    if not isinstance(action, dict) or action.get("type") not in ACTION_TYPES:
        got = action.get("type") if isinstance(action, dict) else action
        raise _bad(f"{where}.type", f"{got!r} is not one of {', '.join(ACTION_TYPES)}")
    kind = action["type"]
    if kind == "k8s-apply":
        obj = action.get("object")
        if not isinstance(obj, dict) or not isinstance((obj.get("metadata") or {}).get("name"), str):
            raise _bad(f"{where}.object", "needs apiVersion, kind and metadata.name")
        if (obj.get("apiVersion"), obj.get("kind")) not in {(k.api_version, k.kind) for k in KINDS}:
            raise _bad(f"{where}.object.kind", f"{obj.get('apiVersion')} {obj.get('kind')} is not handled")
        spec = obj.get("spec") or {}
        if obj["kind"] == "Queue":
            if "weight" in spec:
                _int(spec["weight"], f"{where}.object.spec.weight", 1, 65535)
            for key in ("capability", "deserved"):
                if key in spec:
                    check_resource_list(spec[key], f"{where}.object.spec.{key}")
            if "resource" in (spec.get("guarantee") or {}):
                check_resource_list(spec["guarantee"]["resource"], f"{where}.object.spec.guarantee.resource")
        if "replicas" in spec and obj["kind"] in ("Deployment", "StatefulSet"):
            _int(spec["replicas"], f"{where}.object.spec.replicas")
        if obj["kind"] == "NodePool" and "limits" in spec:
            check_resource_list(spec["limits"], f"{where}.object.spec.limits")
    elif kind == "k8s-label":
        _str(action.get("node"), f"{where}.node")
        labels = action.get("labels")
        if not isinstance(labels, dict) or not labels:
            raise _bad(f"{where}.labels", "a non-empty {key: value} map")
        for key, value in labels.items():
            if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
                raise _bad(f"{where}.labels.{key}", f"{value!r} is not a valid label value")
    elif kind == "k8s-patch":
        ops = action.get("patch")
        if not isinstance(ops, list) or not all(isinstance(o, dict) and o.get("op") in ("add", "remove", "replace",
                                                                                       "test")
                                                and str(o.get("path", "")).startswith("/") for o in ops):
            raise _bad(f"{where}.patch", "a JSON patch (add/remove/replace/test operations)")
    elif kind == "cordon":
        _str(action.get("node"), f"{where}.node")
    elif kind == "drain":
        pods = action.get("pods")
        if not isinstance(pods, list) or not all(isinstance(x, dict) and x.get("namespace") and x.get("name")
                                                 for x in pods):
            raise _bad(f"{where}.pods", "a list of {namespace, name}")
    elif kind == "aws-eks":
        if action.get("call") not in EKS_CALLS:
            raise _bad(f"{where}.call", f"{action.get('call')!r} is not one of {', '.join(EKS_CALLS)}")
        args = action.get("args") or {}
        _str(args.get("clusterName"), f"{where}.args.clusterName")
        _str(args.get("nodegroupName"), f"{where}.args.nodegroupName")
        for key, value in (args.get("scalingConfig") or {}).items():
            _int(value, f"{where}.args.scalingConfig.{key}")


def check_recommendation(data: Any, where: str) -> None:
    if not isinstance(data, dict):
        raise _bad(where, "not an object")
    if data.get("rule") not in RULE_NAMES:
        raise _bad(f"{where}.rule", f"unknown rule {data.get('rule')!r} (one of {', '.join(RULE_NAMES)})")
    for key in ("current", "proposed", "target", "evidence"):
        if key in data and not isinstance(data[key], dict):
            raise _bad(f"{where}.{key}", "not an object")
    check_proposed(data, where)
    actions = data.get("actions") or []
    if not isinstance(actions, list):
        raise _bad(f"{where}.actions", "not a list")
    for i, action in enumerate(actions):
        check_action(action, f"{where}.actions[{i}]")


def validate_plan(plan: Plan) -> None:
    for i, rec in enumerate(plan.recommendations):
        check_recommendation(rec.to_dict(), f"recommendations[{i}]")


def plan_to_json(plan: Plan) -> dict[str, Any]:
    return {"plan_id": plan.plan_id, "created_at": plan.created_at.isoformat(), "catalog": plan.catalog,
            "window": [w.isoformat() if w else None for w in plan.window], "notes": list(plan.notes),
            "recommendations": plan.to_json_obj()}


def _time(value: Any, where: str) -> datetime:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise _bad(where, f"{value!r} is not an ISO-8601 time") from None


def load_plan(source: str | Path | dict[str, Any] | list[Any], *, plan_id: str | None = None,
              created_at: datetime | None = None) -> Plan:
    """A plan from a file path, a JSON string or parsed JSON; invalid fields raise BadInput."""
    name = "plan"
    data: Any = source
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith(("{", "["))):
        path = Path(source)
        name = str(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise BadInput(f"{path}: cannot read plan: {exc.strerror}") from exc
        except ValueError as exc:
            raise BadInput(f"{path}: not JSON: {exc}") from exc
    elif isinstance(source, str):
        try:
            data = json.loads(source)
        except ValueError as exc:
            raise BadInput(f"plan: not JSON: {exc}") from exc
    if isinstance(data, list):
        data = {"plan_id": plan_id, "created_at": created_at, "recommendations": data}
    if not isinstance(data, dict):
        raise BadInput(f"{name}: a plan object or a recommendation array")
    pid = plan_id or data.get("plan_id")
    when = created_at or data.get("created_at")
    if not pid:
        raise _bad(f"{name}: plan_id", "missing")
    if when is None:
        raise _bad(f"{name}: created_at", "missing (the plan's age decides whether it may be applied)")
    recs_raw = data.get("recommendations")
    if not isinstance(recs_raw, list):
        raise _bad(f"{name}: recommendations", "not a list")
    recs = []
    for i, raw in enumerate(recs_raw):
        check_recommendation(raw, f"{name}: recommendations[{i}]")
        recs.append(Recommendation.from_dict(raw))
    window = data.get("window") or [None, None]
    return Plan(plan_id=str(pid), created_at=_time(when, f"{name}: created_at"), catalog=data.get("catalog"),
                window=(window[0] and _time(window[0], "window"), window[1] and _time(window[1], "window")),
                recommendations=recs, notes=list(data.get("notes") or []))

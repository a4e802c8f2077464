"""EKS managed node groups through boto3: create a SPOT group, rescale an on-demand group.

EKS has no server-side dry run, so the dry run here is: botocore's own parameter validation,
``describe_nodegroup`` on the groups involved (which proves the credentials can read them) and
the preconditions (a group to create must not exist; a group to rescale must).
"""

from __future__ import annotations

import copy
from typing import Any

from gpuinsight.actions.patching import norm
from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.plan.vocabulary import EKS_CALLS

# Fields a new group takes from the group it is copied from, when the plan did not carry them.
COPIED = ("subnets", "nodeRole", "amiType", "diskSize", "labels", "remoteAccess", "tags", "launchTemplate")


class EksError(RuntimeFailure):
    pass


class Eks:
    def __init__(self, client: Any) -> None:
        self.client = client

    @classmethod
    def from_region(cls, region: str | None = None, **client_kwargs: Any) -> Eks:
        import boto3

        return cls(boto3.client("eks", region_name=region, **client_kwargs))

    def _invoke(self, call: str, **args: Any) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

        try:
            return getattr(self.client, call)(**args)
        except ParamValidationError as exc:
            raise BadInput(f"eks {call}: {exc}") from exc
        except ClientError as exc:
            err = exc.response.get("Error", {})
            raise EksError(f"eks {call} {args.get('nodegroupName', '')}: {err.get('Code')}: "
                           f"{err.get('Message')}") from exc
        except BotoCoreError as exc:
            raise EksError(f"eks {call}: {exc}") from exc

    def describe(self, cluster: str, nodegroup: str) -> dict[str, Any] | None:
        try:
            return self._invoke("describe_nodegroup", clusterName=cluster, nodegroupName=nodegroup)["nodegroup"]
        except EksError as exc:
            if "ResourceNotFoundException" in str(exc):
                return None
            raise

    def validate(self, call: str, args: dict[str, Any]) -> None:
        from botocore.validate import ParamValidator

        if call not in EKS_CALLS:
            raise BadInput(f"aws-eks call {call!r}: not one of {', '.join(EKS_CALLS)}")
        op = self.client.meta.method_to_api_mapping[call]
        shape = self.client.meta.service_model.operation_model(op).input_shape
        report = ParamValidator().validate(args, shape)
        if report.has_errors():
            raise BadInput(f"aws-eks {call} args: {report.generate_report()}")

    def resolve(self, action: dict[str, Any]) -> dict[str, Any]:
        """The call's final arguments: a new group copies what it lacks from ``copy_from``."""
        args = copy.deepcopy(action["args"])
        source = action.get("copy_from")
        if action["call"] == "create_nodegroup" and source and any(k not in args for k in ("subnets", "nodeRole")):
            src = self.describe(args["clusterName"], source)
            if src is None:
                raise EksError(f"eks: node group {source} to copy from does not exist in {args['clusterName']}")
            for key in COPIED:
                if key not in args and src.get(key):
                    args[key] = copy.deepcopy(src[key])
            if "launchTemplate" in args:
                args["launchTemplate"] = {k: v for k, v in args["launchTemplate"].items() if k in ("id", "version")}
        return args

    # -- the apply protocol ----------------------------------------------------------------
    def current(self, action: dict[str, Any]) -> dict[str, Any] | None:
        args = action["args"]
        return self.describe(args["clusterName"], args["nodegroupName"])

    def drift(self, action: dict[str, Any], live: dict[str, Any] | None) -> str | None:
        observed = action.get("observed") or {}
        name = action["args"]["nodegroupName"]
        if action["call"] == "create_nodegroup":
            return f"node group {name} already exists" if live is not None else None
        if live is None:
            return f"node group {name} no longer exists"
        for key, value in (observed.get("scalingConfig") or {}).items():
            now = (live.get("scalingConfig") or {}).get(key)
            if norm(now) != norm(value):
                return f"node group {name} scalingConfig.{key} is {now}, the plan saw {value}"
        return None

    def dry_run(self, action: dict[str, Any]) -> dict[str, Any]:
        args = self.resolve(action)
        self.validate(action["call"], args)
        return args

    def apply(self, action: dict[str, Any]) -> dict[str, Any]:
        args = self.resolve(action)
        resp = self._invoke(action["call"], **args)
        resp.pop("ResponseMetadata", None)
        return {"args": args, "response": _jsonable(resp)}

    def revert(self, action: dict[str, Any], previous: dict[str, Any] | None) -> str:
        args = action["args"]
        cluster, name = args["clusterName"], args["nodegroupName"]
        if action["call"] == "create_nodegroup":
            self._invoke("delete_nodegroup", clusterName=cluster, nodegroupName=name)
            return f"deleted node group {name}"
        scaling = {k: v for k, v in ((previous or {}).get("scalingConfig") or {}).items()
                   if k in ("minSize", "maxSize", "desiredSize")}
        if not scaling:
            raise EksError(f"eks: no previous scalingConfig recorded for {name}")
        self._invoke("update_nodegroup_config", clusterName=cluster, nodegroupName=name, scalingConfig=scaling)
        return f"node group {name} scalingConfig restored to {scaling}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def describe_for_audit(group: dict[str, Any] | None) -> dict[str, Any] | None:
    """What an audit row keeps of a node group (no ARNs of roles, just the scaling facts)."""
    if group is None:
        return None
    return _jsonable({k: group.get(k) for k in ("nodegroupName", "clusterName", "capacityType", "instanceTypes",
                                                  "scalingConfig", "status") if k in group})

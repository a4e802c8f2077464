"""``queue``: a Volcano Queue or Kueue ClusterQueue whose quota does not match what its jobs use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinsight.plan.kind import Evidence, FindingKind
from gpuinsight.plan.schema import (
    DNS_NAME,
    LABEL_KEY,
    Schema,
    Target,
    integer,
    list_of,
    mapping,
    number,
    optional,
    resource_list,
    schema,
    spec,
    text,
)

CLUSTER_QUEUE = "ClusterQueue"


def _guarantee(value: Any, where: str) -> None:
    mapping(value, where)
    resource_list(value.get("resource", value), where)


@dataclass
class FlavorQuota(Schema):
    """One (flavor, resource) quota of a Kueue ClusterQueue."""

    flavor: str = spec(text(DNS_NAME))
    resource: str = spec(text(LABEL_KEY))
    nominal_quota: float = spec(number)
    lending_limit: float | None = spec(optional(number), None)


@dataclass
class QueueProposed(Schema):
    """A Volcano Queue's weight / deserved / capability / guarantee, or a ClusterQueue's quotas."""

    weight: int | None = spec(optional(integer(1, 65535)), None)
    deserved: dict[str, Any] | None = spec(optional(resource_list), None)
    capability: dict[str, Any] | None = spec(optional(resource_list), None)
    guarantee: dict[str, Any] | None = spec(optional(_guarantee), None)
    quotas: list[dict[str, Any]] | None = spec(optional(list_of(schema(FlavorQuota), non_empty=True)), None)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().to_dict().items() if v is not None}


@dataclass
class QueueTarget(Target):
    name: str = spec(text(DNS_NAME))
    kind: str = spec(text(choices=("Queue", CLUSTER_QUEUE)), "Queue")


QUEUE = FindingKind("queue", "queue quota", "#5d4037", "entitlement", QueueProposed, QueueTarget, Evidence)

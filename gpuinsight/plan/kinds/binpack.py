"""``binpack``: free whole nodes of a pool by moving pods onto fuller nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinsight.plan.kind import Evidence, FindingKind, words
from gpuinsight.plan.schema import (
    DNS_NAME,
    Schema,
    Target,
    list_of,
    mapping,
    number,
    optional,
    schema,
    spec,
    text,
)


@dataclass
class Move(Schema):
    namespace: str = spec(text(DNS_NAME))
    pods: list[str] = spec(list_of(text(DNS_NAME), non_empty=True))
    to: str = spec(text(DNS_NAME))
    workload: str | None = spec(optional(text()), None)
    gang: str | None = spec(optional(text()), None)
    gpus: float = spec(number, 0.0)
    # "from" is a Python keyword: it is added by to_dict and checked by the extra check below


def _check_moves(data: dict[str, Any], where: str) -> None:
    for i, move in enumerate(data.get("moves") or []):
        text(DNS_NAME)(move.get("from") if isinstance(move, dict) else None, f"{where}.moves[{i}].from")


@dataclass
class BinpackProposed(Schema):
    moves: list[dict[str, Any]] = spec(list_of(schema(Move)))
    nodes_freed: list[str] = spec(list_of(text(DNS_NAME)), [])
    node_pool: str | None = spec(optional(text()), None)
    # pods on the freed nodes that other findings of the plan take away (or move away) first (by finding id)
    pods_leaving: list[dict[str, Any]] = spec(list_of(mapping), [])
    extra_checks = (_check_moves,)


@dataclass
class NodeSetTarget(Target):
    nodes: list[str] = spec(list_of(text(DNS_NAME), non_empty=True))
    kind: str = spec(text(choices=("NodeSet",)), "NodeSet")
    pool: str | None = spec(optional(text()), None)


@dataclass
class NodeEvidence(Evidence):
    """A node-level finding: the pool its nodes are in (what a finding's target is shown as)."""

    pool: str | None = words()


BINPACK = FindingKind("binpack", "binpacking", "#ef6c00", "nodes_released", BinpackProposed, NodeSetTarget,
                      NodeEvidence)

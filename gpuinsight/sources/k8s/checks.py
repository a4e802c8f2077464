"""Checks on one load's mapped rows that a single object's mapper cannot make: values that are
well-formed but would move every figure without a word. Each is refused naming the file and
items, or kept with a counted note in the load report (docs/collectors.md, "Bad input").

* Two items with the same natural key (a pod UID, a namespace/name) and different content: the
  load cannot know which is true (merging would keep the last, and an 8-GPU pod could vanish),
  so it is refused. The same object listed twice is kept once, with a note.
* A node with more physical GPUs than any instance type has: refused (the capacity figures of
  the whole fleet would grow by it); a price catalog that lists such a node type raises the bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuinsight.errors import BadInput
from gpuinsight.sources.base import LoadReport
from gpuinsight.sources.k8s.common import MapContext
from gpuinsight.sources.k8s.dumpfile import item_label
from gpuinsight.sources.k8s.kinds import Kind
from gpuinsight.sources.plausible import MAX_GPUS_PER_NODE


def checked_rows(kind: Kind, items: Sequence[dict[str, Any]], rows: list[dict[str, Any]], ctx: MapContext,
                 origin: str, report: LoadReport) -> list[dict[str, Any]]:
    """``rows`` (one per item, in order) without repeats, after the checks above."""
    if kind.stem == "nodes":
        _check_node_gpus(items, rows, ctx, origin)
    return _without_repeats(kind, items, rows, origin, report)


def _without_repeats(kind: Kind, items: Sequence[dict[str, Any]], rows: list[dict[str, Any]], origin: str,
                     report: LoadReport) -> list[dict[str, Any]]:
    key_columns = [k for k in kind.contract.primary_key if k != "cluster"]
    first: dict[tuple[Any, ...], int] = {}
    kept: list[dict[str, Any]] = []
    repeats = 0
    for i, row in enumerate(rows):
        key = tuple(row.get(k) for k in key_columns)
        j = first.setdefault(key, i)
        if j == i:
            kept.append(row)
            continue
        differs = next((c for c in sorted(set(row) | set(rows[j])) if row.get(c) != rows[j].get(c)), None)
        if differs is not None:
            what = "/".join(str(v) for v in key)
            raise BadInput(f"{origin}: items {j} ({item_label(items[j])}) and {i} ({item_label(items[i])}) are the same "
                           f"{kind.kind} ({'/'.join(key_columns)} {what}) with different content (first: {differs}); "
                           "a dump lists each object once: which one is true is unknown")
        repeats += 1
    if repeats:
        report.notes.append(f"{origin}: {repeats} item(s) listed twice with the same content, loaded once")
    return kept


def max_gpus_per_node(ctx: MapContext) -> int:
    """The most physical GPUs a node may have: MAX_GPUS_PER_NODE, or more where a loaded price
    catalog (or the shipped one) lists an instance type with more."""
    from gpuinsight.sources.prices import instance_gpu_facts

    counts = [count for _, count in (*(ctx.instance_facts or {}).values(), *instance_gpu_facts().values())]
    return max([MAX_GPUS_PER_NODE, *counts])


def _check_node_gpus(items: Sequence[dict[str, Any]], rows: list[dict[str, Any]], ctx: MapContext,
                     origin: str) -> None:
    limit = max_gpus_per_node(ctx)
    for i, row in enumerate(rows):
        count = row.get("gpu_count")
        if count is not None and count > limit:
            raise BadInput(f"{origin}: item {i} ({item_label(items[i])}): {count:,} physical GPUs on one node (from its "
                           f"GPU labels or status.capacity) is more than any instance type has ({limit}); if its GPUs "
                           "are shared, label the node nvidia.com/gpu.replicas; if the node type really has that "
                           "many, list it in a price catalog with its gpu_count")

"""Import the Alibaba GPU cluster trace "openb" (Weng et al., "Beware of Fragmentation",
USENIX ATC'23; alibaba/clusterdata cluster-trace-gpu-v2023) into ``nodes`` and ``pods``.

The trace's times are anonymised offsets in seconds; they are placed after a fixed epoch
(:data:`OPENB_EPOCH`) so the SQL models can chart them. GPU-sharing pods ask for a fraction
of one GPU: ``gpu_request = num_gpu * gpu_milli / 1000``. GPU models are kept as the trace
gives them (``G2``, ``T4``, ``V100M32`` ...): G1-G3 are undisclosed, and ``V100M16`` vs
``V100M32`` matter to the pods' ``gpu_spec`` constraints. An import replaces the cluster
:data:`OPENB_CLUSTER` as a whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.simulate.trace import NODE_COLUMNS, POD_COLUMNS, read_rows
from gpuinsight.sources.base import LoadContract, LoadReport
from gpuinsight.sources.k8s.common import to_json
from gpuinsight.sources.k8s.writer import table_schema
from gpuinsight.warehouse.db import Warehouse

OPENB_CLUSTER = "alibaba-openb"
OPENB_NAMESPACE = "openb"
OPENB_EPOCH = datetime(2023, 1, 1)  # the trace's time 0 (offsets are anonymised)
POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")

CONTRACTS = (
    LoadContract("nodes", ("cluster", "node"), "replace", description="openb nodes (cluster alibaba-openb)"),
    LoadContract("pods", ("cluster", "uid"), "replace", description="openb pods; uid = pod name"),
)


# Bounds of the trace's integer columns: far above any real row (openb nodes have <= 96 cores,
# <= 8 GPUs; its time offsets span months), far below what would overflow a column.
MAX_CPU_MILLI = 10_000_000
MAX_MEMORY_MIB = 1 << 31
MAX_OFFSET_S = 1_000_000_000


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    """Yield ("FILE:LINE", row): the simulator's openb reader, so both read the trace alike."""
    for line, row in read_rows(path, required):
        yield f"{path}:{line}", row


def _int(row: dict[str, str], column: str, where: str, *, lo: int = 0, hi: int | None = None,
         optional: bool = False) -> int | None:
    text = (row.get(column) or "").strip()
    if not text and optional:
        return None
    try:
        value = int(float(text)) if text.endswith(".0") else int(text)
    except (ValueError, OverflowError):
        raise BadInput(f"{where}: {column}: expected an integer, got {text[:40]!r}") from None
    if value < lo or (hi is not None and value > hi):
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise BadInput(f"{where}: {column}: {str(value)[:30]} is out of range ({bound})")
    return value


def _at(offset: int | None) -> datetime | None:
    return None if offset is None else OPENB_EPOCH + timedelta(seconds=offset)


def read_nodes(path: Path) -> list[dict[str, object]]:
    rows = []
    seen: dict[str, str] = {}
    for where, r in _rows(path, NODE_COLUMNS):
        name = r["sn"].strip()
        if not name:
            raise BadInput(f"{where}: sn is empty")
        if name in seen:
            raise BadInput(f"{where}: duplicate node {name} (first at {seen[name]})")
        seen[name] = where
        cpu = _int(r, "cpu_milli", where, hi=MAX_CPU_MILLI)
        mem = _int(r, "memory_mib", where, hi=MAX_MEMORY_MIB)
        gpus = _int(r, "gpu", where, hi=64)
        model = r["model"].strip() or None
        if gpus and not model:
            raise BadInput(f"{where}: model is empty on a node with {gpus} GPUs")
        capacity = {"cpu": (cpu or 0) / 1000, "memory": float((mem or 0) * 2**20)}
        if gpus:
            capacity["nvidia.com/gpu"] = float(gpus)
        rows.append({
            "cluster": OPENB_CLUSTER, "node": name, "gpu_model": model if gpus else None,
            "gpu_product": model if gpus else None, "gpu_count": gpus, "labels": to_json({}),
            "capacity": to_json(capacity),
        })
    return rows


def read_pods(path: Path) -> list[dict[str, object]]:
    rows = []
    seen: dict[str, str] = {}
    for where, r in _rows(path, POD_COLUMNS):
        name = r["name"].strip()
        if not name:
            raise BadInput(f"{where}: name is empty")
        if name in seen:
            raise BadInput(f"{where}: duplicate pod {name} (first at {seen[name]})")
        seen[name] = where
        num_gpu = _int(r, "num_gpu", where, hi=64) or 0
        gpu_milli = _int(r, "gpu_milli", where, hi=1000) or 0
        if num_gpu and not gpu_milli:
            raise BadInput(f"{where}: gpu_milli is 0 for a pod asking for {num_gpu} GPU(s)")
        phase = (r.get("pod_phase") or "").strip() or None
        if phase is not None and phase not in PHASES:
            raise BadInput(f"{where}: pod_phase: unknown phase {phase!r}")
        created = _int(r, "creation_time", where, optional=True, hi=MAX_OFFSET_S)
        scheduled = _int(r, "scheduled_time", where, optional=True, hi=MAX_OFFSET_S)
        deleted = _int(r, "deletion_time", where, optional=True, hi=MAX_OFFSET_S)
        if created is not None and deleted is not None and deleted < created:
            raise BadInput(f"{where}: deletion_time {deleted} is before creation_time {created}")
        spec = (r.get("gpu_spec") or "").strip()
        qos = (r.get("qos") or "").strip()
        rows.append({
            "cluster": OPENB_CLUSTER, "uid": name, "namespace": OPENB_NAMESPACE, "name": name,
            "workload_kind": "Pod", "workload": name,
            "gpu_request": num_gpu * gpu_milli / 1000,
            "gpu_requests": to_json({"num_gpu": num_gpu, "gpu_milli": gpu_milli} if num_gpu else {}),
            "created": _at(created), "scheduled": _at(scheduled), "started": _at(scheduled),
            "finished": _at(deleted), "last_seen": _at(deleted), "phase": phase,
            "labels": to_json({"qos": qos} if qos else {}),
            "annotations": to_json({"cpu_milli": _int(r, "cpu_milli", where, hi=MAX_CPU_MILLI),
                                    "memory_mib": _int(r, "memory_mib", where, hi=MAX_MEMORY_MIB),
                                    "gpu_spec": spec.split("|") if spec else []}),
            "source": "openb",
        })
    return rows


def import_openb(wh: Warehouse, cfg: Config, pods_csv: Path, nodes_csv: Path) -> LoadReport:
    """Load an openb pod list and node list; replaces the ``alibaba-openb`` cluster's rows."""
    nodes = read_nodes(Path(nodes_csv))
    pods = read_pods(Path(pods_csv))
    if not nodes:
        raise BadInput(f"{nodes_csv}: no nodes")
    node_frame = pl.DataFrame(nodes, schema={c: t for c, t in table_schema(wh, "nodes").items() if c in nodes[0]})
    pod_schema = {c: t for c, t in table_schema(wh, "pods").items() if not pods or c in pods[0]}
    pod_frame = pl.DataFrame(pods, schema=pod_schema) if pods else pl.DataFrame(schema=pod_schema)
    report = LoadReport(source="alibaba-openb")
    end = pod_frame["last_seen"].max() if pods else None
    with wh.transaction() as con:
        report.add("nodes", wh.replace_where("nodes", node_frame, "cluster = ?", [OPENB_CLUSTER], con=con))
        report.add("pods", wh.replace_where("pods", pod_frame, "cluster = ?", [OPENB_CLUSTER], con=con))
        clusters = pl.DataFrame([{"cluster": OPENB_CLUSTER, "first_seen": OPENB_EPOCH, "last_seen": end}],
                                schema=table_schema(wh, "clusters"))
        wh.merge("clusters", clusters, ("cluster",), con=con)
        state = pl.DataFrame([{
            "source": "alibaba-openb", "scope": OPENB_CLUSTER, "cursor": end, "run_id": None,
            "status": "complete", "rows_loaded": len(nodes) + len(pods),
            "details": to_json({"pods": Path(pods_csv).name, "nodes": Path(nodes_csv).name,
                                "epoch": OPENB_EPOCH.isoformat()}),
            "updated_at": datetime.now(UTC).replace(tzinfo=None, microsecond=0),
        }], schema=table_schema(wh, "ingest_state"))
        wh.merge("ingest_state", state, ("source", "scope"), con=con)
    if pods and not pod_frame["created"].is_null().all():
        report.window = (pod_frame["created"].min(), end)
    report.notes.append(f"times are offsets after {OPENB_EPOCH:%Y-%m-%d} (the trace anonymises dates)")
    return report

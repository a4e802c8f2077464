"""Load and validate openb-format pod and node CSVs (Alibaba GPU trace v2023).

Pod CSV columns: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli`` (required) and optionally
``gpu_spec`` (``|``-separated allowed GPU models, empty = any). Other columns (qos, times, phase) are
ignored: the what-if experiment submits pods one by one with no departures.

Node CSV columns: ``sn,cpu_milli,memory_mib,gpu,model``.

Every problem raises :class:`TraceError` whose message names the file and the 1-based line.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuinsight.errors import BadInput
from gpuinsight.textfile import utf8_text

MILLI = 1000

POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


class TraceError(BadInput, ValueError):
    """A pod or node CSV is malformed; the message says ``file:line: what``."""


@dataclass(frozen=True)
class PodTrace:
    """Pods of one trace file, column-wise. ``gpu_milli`` is per GPU and 0 for CPU-only pods."""

    path: Path
    names: tuple[str, ...]
    cpu: np.ndarray  # int64 milli-CPU
    mem: np.ndarray  # int64 MiB
    num_gpu: np.ndarray  # int64
    gpu_milli: np.ndarray  # int64, 1..1000 for GPU pods, 0 for CPU pods
    gpu_spec: tuple[str, ...]  # '' = any model

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> np.ndarray:
        """GPU request of each pod in milli-GPU (num_gpu x gpu_milli)."""
        return self.num_gpu * self.gpu_milli


@dataclass(frozen=True)
class NodeTrace:
    """Nodes of one cluster file, column-wise."""

    path: Path
    names: tuple[str, ...]
    cpu: np.ndarray  # int64 milli-CPU
    mem: np.ndarray  # int64 MiB
    num_gpu: np.ndarray  # int64
    model: tuple[str, ...]  # '' for CPU-only nodes

    def __len__(self) -> int:
        return len(self.names)


def read_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line number, row) of an openb CSV after checking the header has the required columns.

    Shared by the simulator and the warehouse import; errors are ``TraceError`` (a ``BadInput``)
    saying ``file:line: what``.
    """
    # bytes that are not UTF-8: bad input naming the line, before the CSV reader sees them
    with io.StringIO(utf8_text(path, error=TraceError), newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise TraceError(f"{path}:1: empty file, expected header {','.join(required)}") from None
        except csv.Error as exc:
            raise TraceError(f"{path}:1: {exc}") from exc
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(f"{path}:1: missing column(s) {', '.join(missing)} (header: {','.join(header)})")
        try:
            for values in reader:
                if not values or all(not v.strip() for v in values):
                    continue
                if len(values) != len(header):
                    raise TraceError(
                        f"{path}:{reader.line_num}: expected {len(header)} fields, found {len(values)}"
                    )
                yield reader.line_num, {h: v.strip() for h, v in zip(header, values, strict=True)}
        except csv.Error as exc:
            raise TraceError(f"{path}:{reader.line_num}: {exc}") from exc


def _int(path: Path, line: int, row: dict[str, str], col: str) -> int:
    raw = row[col]
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(f"{path}:{line}: column {col}: {raw!r} is not a number") from None
    if not np.isfinite(value) or value != int(value):
        raise TraceError(f"{path}:{line}: column {col}: {raw!r} is not a whole number")
    if value < 0:
        raise TraceError(f"{path}:{line}: column {col}: {raw!r} is negative")
    return int(value)


def load_pods(path: Path | str) -> PodTrace:
    """Read a pod list CSV. Raises :class:`TraceError` on any malformed line."""
    path = Path(path)
    names: list[str] = []
    cols: dict[str, list[int]] = {c: [] for c in POD_COLUMNS[1:]}
    specs: list[str] = []
    for line, row in read_rows(path, POD_COLUMNS):
        vals = {c: _int(path, line, row, c) for c in POD_COLUMNS[1:]}
        num, milli = vals["num_gpu"], vals["gpu_milli"]
        spec = row.get("gpu_spec", "")
        if num == 0:
            milli, spec = 0, ""  # the reference simulator only reads GPU fields of GPU pods
        elif not 1 <= milli <= MILLI:
            raise TraceError(f"{path}:{line}: gpu_milli must be 1..1000 for a GPU pod, got {milli}")
        elif num > 1 and milli != MILLI:
            raise TraceError(f"{path}:{line}: a {num}-GPU pod must request whole GPUs (gpu_milli=1000)")
        vals["gpu_milli"] = milli
        names.append(row["name"])
        specs.append("|".join(s for s in spec.split("|") if s and s.lower() != "nan"))
        for c in cols:
            cols[c].append(vals[c])
    if not names:
        raise TraceError(f"{path}:2: no pods in file")
    arr = {c: np.asarray(v, dtype=np.int64) for c, v in cols.items()}
    return PodTrace(path, tuple(names), arr["cpu_milli"], arr["memory_mib"], arr["num_gpu"],
                    arr["gpu_milli"], tuple(specs))


def load_nodes(path: Path | str) -> NodeTrace:
    """Read a node list CSV. Raises :class:`TraceError` on any malformed line."""
    path = Path(path)
    names: list[str] = []
    cols: dict[str, list[int]] = {c: [] for c in ("cpu_milli", "memory_mib", "gpu")}
    models: list[str] = []
    for line, row in read_rows(path, NODE_COLUMNS):
        for c in cols:
            cols[c].append(_int(path, line, row, c))
        model = row["model"]
        if model.lower() == "nan":
            model = ""
        names.append(row["sn"])
        models.append(model if cols["gpu"][-1] > 0 else "")
    if not names:
        raise TraceError(f"{path}:2: no nodes in file")
    arr = {c: np.asarray(v, dtype=np.int64) for c, v in cols.items()}
    if int(arr["gpu"].sum()) == 0:
        raise TraceError(f"{path}: the cluster has no GPUs")
    return NodeTrace(path, tuple(names), arr["cpu_milli"], arr["memory_mib"], arr["gpu"], tuple(models))

"""Mutable cluster state for the simulator: CPU/memory left per node and milli-GPU left per GPU.

GPUs are stored in a ``(nodes, max_gpus)`` array; slots past a node's GPU count hold 0 and so never
fit a GPU request, which keeps every vectorised test free of extra masks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuinsight.simulate.trace import MILLI, NodeTrace, PodTrace


@dataclass(frozen=True, slots=True)
class Pod:
    """One arriving pod. ``row`` is its line in the pod trace (clones share their original's row)."""

    row: int
    cpu: int
    mem: int
    num_gpu: int
    gpu_milli: int
    spec: str = ""

    @property
    def total_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def is_share(self) -> bool:
        """A GPU-sharing pod: one GPU, less than a whole one."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def affinity(self) -> int:
        """GPU-clustering tag: 0 = share-gpu, k = whole k-GPU pod, -1 = no GPU."""
        if self.num_gpu == 0:
            return -1
        return 0 if self.is_share else self.num_gpu

    @classmethod
    def from_trace(cls, pods: PodTrace, row: int) -> Pod:
        return cls(row, int(pods.cpu[row]), int(pods.mem[row]), int(pods.num_gpu[row]),
                   int(pods.gpu_milli[row]), pods.gpu_spec[row])


def spec_allows(spec: str, model: str) -> bool:
    """Whether a pod with GPU-model constraint ``spec`` ('A|B', '' = any) may use a ``model`` node."""
    if not spec:
        return True
    return bool(model) and model in spec.split("|")


class Cluster:
    """Node and GPU occupancy. Mutated only through :meth:`place`."""

    def __init__(self, nodes: NodeTrace) -> None:
        self.names = nodes.names
        self.n_nodes = len(nodes)
        self.max_gpus = max(1, int(nodes.num_gpu.max()))
        self.cpu_cap = nodes.cpu.astype(np.int64).copy()
        self.cpu_left = self.cpu_cap.copy()
        self.mem_left = nodes.mem.astype(np.int64).copy()
        self.n_gpu = nodes.num_gpu.astype(np.int64).copy()
        exists = np.arange(self.max_gpus)[None, :] < self.n_gpu[:, None]
        self.gpu_left = np.where(exists, MILLI, 0).astype(np.int64)
        self.models: tuple[str, ...] = tuple(sorted(set(nodes.model)))
        self.model_id = np.array([self.models.index(m) for m in nodes.model], dtype=np.int64)
        # column 0 counts share-gpu pods, column k counts whole k-GPU pods (GPU clustering)
        self.affinity = np.zeros((self.n_nodes, self.max_gpus + 1), dtype=np.int64)
        self.total_gpus = int(self.n_gpu.sum())
        self._access: dict[str, np.ndarray] = {}

    def access(self, spec: str) -> np.ndarray:
        """Boolean mask of nodes whose GPU model satisfies ``spec``."""
        mask = self._access.get(spec)
        if mask is None:
            by_model = np.array([spec_allows(spec, m) for m in self.models], dtype=bool)
            mask = by_model[self.model_id]
            self._access[spec] = mask
        return mask

    def gpu_left_total(self) -> np.ndarray:
        return self.gpu_left.sum(axis=1)

    def allocated_gpu_milli(self) -> int:
        return self.total_gpus * MILLI - int(self.gpu_left.sum())

    def feasible(self, pod: Pod) -> np.ndarray:
        """Nodes that pass the filter: CPU, memory, GPU model, and enough GPUs with enough milli left."""
        ok = (self.cpu_left >= pod.cpu) & (self.mem_left >= pod.mem)
        if pod.num_gpu:
            ok &= self.access(pod.spec)
            ok &= (self.gpu_left >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
        return ok

    def place(self, node: int, gpus: Sequence[int], pod: Pod) -> None:
        """Bind ``pod`` to ``node`` using GPU slots ``gpus``; raises ValueError if it does not fit."""
        if len(gpus) != pod.num_gpu or len(set(gpus)) != len(gpus):
            raise ValueError(f"pod needs {pod.num_gpu} distinct GPU(s), got {list(gpus)}")
        if self.cpu_left[node] < pod.cpu or self.mem_left[node] < pod.mem:
            raise ValueError(f"pod does not fit CPU/memory of node {self.names[node]}")
        for g in gpus:
            if not 0 <= g < self.n_gpu[node] or self.gpu_left[node, g] < pod.gpu_milli:
                raise ValueError(f"GPU {g} of node {self.names[node]} cannot take {pod.gpu_milli} milli")
        if pod.num_gpu and not self.access(pod.spec)[node]:
            raise ValueError(f"node {self.names[node]} GPU model does not match {pod.spec!r}")
        self.cpu_left[node] -= pod.cpu
        self.mem_left[node] -= pod.mem
        for g in gpus:
            self.gpu_left[node, g] -= pod.gpu_milli
        if pod.affinity >= 0:
            self.affinity[node, pod.affinity] += 1


# --- GPU selection on a chosen node (the reference simulator's "gpuSelMethod") -------------------


def exclusive_gpus(left: np.ndarray, num: int) -> tuple[int, ...]:
    """The first ``num`` fully free GPUs by index (whole-GPU pods)."""
    free = np.flatnonzero(left == MILLI)[:num]
    return tuple(int(g) for g in free)


def tightest_gpu(left: np.ndarray, milli: int) -> int:
    """Best fit: the GPU with the least milli left that still fits (lowest index on ties)."""
    fits = np.where(left >= milli, left, MILLI + 1)
    return int(np.argmin(fits))


def first_gpu(left: np.ndarray, milli: int) -> int:
    return int(np.argmax(left >= milli))


def random_gpu(left: np.ndarray, milli: int, rng: np.random.Generator) -> int:
    return int(rng.choice(np.flatnonzero(left >= milli)))


def select_gpus(cluster: Cluster, node: int, pod: Pod, method: str,
                rng: np.random.Generator | None = None) -> tuple[int, ...]:
    """GPU slots for ``pod`` on ``node``: exclusive pods take free GPUs; sharing pods use ``method``."""
    if pod.num_gpu == 0:
        return ()
    left = cluster.gpu_left[node]
    if not pod.is_share:
        return exclusive_gpus(left, pod.num_gpu)
    if method == "best":
        return (tightest_gpu(left, pod.gpu_milli),)
    if method == "first":
        return (first_gpu(left, pod.gpu_milli),)
    if method == "random":
        if rng is None:
            raise ValueError("random GPU selection needs an rng")
        return (random_gpu(left, pod.gpu_milli, rng),)
    raise ValueError(f"unknown GPU selection method {method!r}")

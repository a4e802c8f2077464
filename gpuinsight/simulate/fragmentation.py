"""GPU fragmentation measured against a target workload (Weng et al., ATC'23, section 4).

Target workload: the most popular *task types* of the trace, a task type being
(cpu request, per-GPU milli, GPU count, GPU model constraint). Types are taken in decreasing
popularity until they cover 95% of pods; their popularities are renormalised to sum to 1.

For a node with per-GPU idle milli ``g_i``, CPU left ``C`` and GPU model ``model``, the fragmented
GPU amount *for one task type* ``p`` is

* all idle GPU milli ``sum_i g_i`` if ``p`` cannot run on the node: it needs no GPU (CPU-only
  type), the model does not match, ``C < cpu_p``, or fewer than ``num_p`` GPUs have ``g_i >= milli_p``;
* otherwise only the GPUs too small for it: ``sum_i g_i [g_i < milli_p]``.

The node's fragmentation is the popularity-weighted sum over types, equivalently
``F = idle - sum_p w_p ok_p U_p`` with ``U_p = sum_i g_i [g_i >= milli_p]``. The cluster's
fragmentation is the sum over nodes. FGD places a pod where ``F`` grows least.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from gpuinsight.simulate.cluster import Cluster, Pod, spec_allows
from gpuinsight.simulate.trace import MILLI, PodTrace

POPULARITY_THRESHOLD = 0.95
DEFAULT_CPU_MILLI = 100  # Kubernetes' non-zero default for a pod without a CPU request


@dataclass(frozen=True)
class TypicalPods:
    """Target workload: task types and their popularity (``weight`` sums to 1)."""

    cpu: np.ndarray
    gpu_milli: np.ndarray
    num_gpu: np.ndarray
    spec: tuple[str, ...]
    weight: np.ndarray
    count: np.ndarray

    def __len__(self) -> int:
        return len(self.spec)


def typical_pods(pods: PodTrace, threshold: float = POPULARITY_THRESHOLD) -> TypicalPods:
    """Most popular task types covering ``threshold`` of the pods, popularity renormalised."""
    cpu = np.where(pods.cpu > 0, pods.cpu, DEFAULT_CPU_MILLI)
    counts = Counter(zip(cpu.tolist(), pods.gpu_milli.tolist(), pods.num_gpu.tolist(), pods.gpu_spec,
                         strict=True))
    # decreasing count; equal counts: decreasing (cpu, milli, num, spec), as the reference sorts
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    needed = threshold * len(pods)
    chosen: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, n in ranked:
        if covered >= needed:
            break
        chosen.append((key, n))
        covered += n
    keys = [k for k, _ in chosen]
    count = np.array([n for _, n in chosen], dtype=np.int64)
    return TypicalPods(
        cpu=np.array([k[0] for k in keys], dtype=np.int64),
        gpu_milli=np.array([k[1] for k in keys], dtype=np.int64),
        num_gpu=np.array([k[2] for k in keys], dtype=np.int64),
        spec=tuple(k[3] for k in keys),
        weight=count / count.sum(),
        count=count,
    )


class FragModel:
    """Vectorised fragmentation of node states against a target workload.

    Only GPU task types enter the sums: a CPU-only type finds every idle GPU milli fragmented, which is
    the ``idle`` term of ``F = idle - sum_p w_p ok_p U_p``.
    """

    def __init__(self, typical: TypicalPods, models: tuple[str, ...]) -> None:
        gpu = typical.gpu_milli > 0
        self.typical = typical
        self.m_values = np.unique(typical.gpu_milli[gpu])
        self.midx = np.searchsorted(self.m_values, typical.gpu_milli[gpu])
        self.num = typical.num_gpu[gpu]
        self.cpu = typical.cpu[gpu]
        self.w = typical.weight[gpu].astype(np.float64)
        specs = [s for s, g in zip(typical.spec, gpu, strict=True) if g]
        # access[model, type]: can a task of this type use a GPU of this model
        self.access = np.array([[spec_allows(s, m) for s in specs] for m in models], dtype=bool)
        if self.access.size == 0:
            self.access = np.zeros((len(models), len(specs)), dtype=bool)

    def usable(self, gpu_left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per threshold m: idle milli on GPUs with >= m left (U) and how many such GPUs (cnt)."""
        ge = gpu_left[:, :, None] >= self.m_values[None, None, :]
        cnt = ge.sum(axis=1)
        usable = (gpu_left[:, :, None] * ge).sum(axis=1)
        return usable, cnt

    def ok_usable(self, cpu_left: np.ndarray, usable: np.ndarray, cnt: np.ndarray,
                  model_id: np.ndarray) -> np.ndarray:
        """``ok_p * U_p`` per state and GPU task type (integer milli)."""
        ok = (cnt[:, self.midx] >= self.num) & (cpu_left[:, None] >= self.cpu) & self.access[model_id]
        return np.where(ok, usable[:, self.midx], 0)

    def frag(self, cpu_left: np.ndarray, gpu_left: np.ndarray, model_id: np.ndarray) -> np.ndarray:
        """Expected fragmented milli-GPU of each state (rows of ``gpu_left``)."""
        usable, cnt = self.usable(gpu_left)
        okU = self.ok_usable(cpu_left, usable, cnt, model_id)
        return gpu_left.sum(axis=1) - okU @ self.w


def node_fragmentation(cpu_left: int, gpu_left: list[int], model: str, typical: TypicalPods) -> float:
    """Fragmented milli-GPU of a single node (readable reference; the simulator uses FragModel)."""
    idle = sum(gpu_left)
    frag = 0.0
    for cpu, milli, num, spec, w in zip(typical.cpu, typical.gpu_milli, typical.num_gpu, typical.spec,
                                        typical.weight, strict=True):
        fits = sum(1 for g in gpu_left if g >= milli) >= num
        if milli > 0 and spec_allows(spec, model) and fits and cpu_left >= cpu:
            frag += w * sum(g for g in gpu_left if g < milli)
        else:
            frag += w * idle
    return float(frag)


class FragTracker:
    """Per-node fragmentation of the live cluster, updated incrementally after each placement."""

    def __init__(self, cluster: Cluster, model: FragModel) -> None:
        self.cluster = cluster
        self.model = model
        self.usable, self.cnt = model.usable(cluster.gpu_left)
        self.ok_usable = model.ok_usable(cluster.cpu_left, self.usable, self.cnt, cluster.model_id)
        self.idle = cluster.gpu_left_total().astype(np.int64)
        self.frag = self.idle - self.ok_usable @ model.w

    def update(self, node: int) -> None:
        c, m = self.cluster, self.model
        sl = slice(node, node + 1)
        self.usable[sl], self.cnt[sl] = m.usable(c.gpu_left[sl])
        self.ok_usable[sl] = m.ok_usable(c.cpu_left[sl], self.usable[sl], self.cnt[sl], c.model_id[sl])
        self.idle[node] = c.gpu_left[node].sum()
        self.frag[node] = self.idle[node] - self.ok_usable[node] @ m.w

    def total(self) -> float:
        return float(self.frag.sum())

    def placement_deltas(self, pod: Pod, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fragmentation *decrease* (old - new, milli-GPU) for every way to place ``pod`` on ``nodes``.

        Returns ``(delta, row_node, row_gpu)``: one row per (node, GPU slot) option for GPU-sharing
        pods (only the first slot of each distinct idle value, as equal slots are interchangeable),
        one row per node otherwise (``row_gpu`` = -1). Computed exactly in integers except the final
        weighted sum, so an option that changes nothing has delta exactly 0.
        """
        c, m = self.cluster, self.model
        cpu_new = c.cpu_left[nodes] - pod.cpu
        if pod.is_share:
            left = c.gpu_left[nodes]
            earlier_same = np.tril(left[:, :, None] == left[:, None, :], k=-1).any(axis=2)
            valid = (left >= pod.gpu_milli) & ~earlier_same
            r, slot = np.nonzero(valid)
            a = left[r, slot]
            a2 = a - pod.gpu_milli
            ge_a = a[:, None] >= m.m_values
            ge_a2 = a2[:, None] >= m.m_values
            row_node = nodes[r]
            usable = self.usable[row_node] - a[:, None] * ge_a + a2[:, None] * ge_a2
            cnt = self.cnt[row_node] - ge_a + ge_a2
            cpu_new = cpu_new[r]
            row_gpu = slot.astype(np.int64)
        else:
            row_node = nodes
            used = pod.num_gpu * MILLI if pod.num_gpu else 0  # whole GPUs count for every threshold
            usable = self.usable[nodes] - used
            cnt = self.cnt[nodes] - pod.num_gpu
            row_gpu = np.full(len(nodes), -1, dtype=np.int64)
        okU = m.ok_usable(cpu_new, usable, cnt, c.model_id[row_node])
        delta = pod.total_milli + (okU - self.ok_usable[row_node]) @ m.w
        return delta, row_node, row_gpu

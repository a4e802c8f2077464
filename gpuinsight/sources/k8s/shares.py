"""What part of a physical GPU a pod holds, when something other than whole ``nvidia.com/gpu``
devices granted it: the claims a pod row carries in ``pods.gpu_shares`` (a JSON list), read
by the ``pod_gpu_shares`` model, which turns them into shares of one GPU with the node's facts.

* HAMi (``hami.io/vgpu-devices-allocated``) and Volcano vGPU (``volcano.sh/vgpu-ids-new``): the
  scheduler writes, per container, ``UUID,type,memory MiB,cores %:`` for each device it chose
  (HAMi ``docs/develop/protocol.md``); one claim per physical device, summed over containers.
  Without the annotation (a pending pod, or kube-state-metrics, which publishes no such
  annotation unless allow-listed) the requests say it per container: ``nvidia.com/gpu`` vGPUs
  (``nvidia.com/vgpu`` in some installs), each with ``nvidia.com/gpumem`` MiB or
  ``nvidia.com/gpumem-percentage`` % of its memory (neither: all of it, HAMi's default) and
  ``nvidia.com/gpucores`` % of its cores (default 0); Volcano's ``volcano.sh/vgpu-number``,
  ``-memory``, ``-memory-percentage``, ``-cores`` likewise.
* KAI Scheduler (and Run:ai): the ``gpu-fraction`` annotation (a fraction of one device's memory;
  times ``gpu-fraction-num-devices``) or ``gpu-memory`` (MiB). KAI reserves the device with a
  reservation pod (namespace ``kai-resource-reservation``, label ``app:
  kai-resource-reservation``, requesting ``nvidia.com/gpu: 1``; its binder,
  ``pkg/binder/binding/resourcereservation``) and labels the reservation pod and every fraction
  pod on that device with the same ``runai-gpu-group``: the fraction pods are billed, the
  reservation pod is a placeholder (claim ``kai-reservation``, billed nothing).

The physical GPUs of a HAMi or Volcano vGPU node are the entries of its register annotation
(``hami.io/node-nvidia-register``, ``volcano.sh/node-vgpu-register``), not the inflated
``nvidia.com/gpu`` it advertises (HAMi's ``deviceSplitCount``): :func:`node_devices`.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from gpuinsight.sources.k8s.common import SHARE_RESOURCES, MapError

HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
VOLCANO_ALLOCATED = "volcano.sh/vgpu-ids-new"
HAMI_REGISTER = "hami.io/node-nvidia-register"
VOLCANO_REGISTER = "volcano.sh/node-vgpu-register"
KAI_FRACTION = "gpu-fraction"
KAI_MEMORY = "gpu-memory"
KAI_DEVICES = "gpu-fraction-num-devices"
KAI_GROUP = "runai-gpu-group"
KAI_RESERVATION_APP = "kai-resource-reservation"
KAI_RESERVATION_NAMESPACES = ("kai-resource-reservation", "runai-reservation")

# HAMi's default resource names (charts/hami/values.yaml: resourceName, resourceMem, ...); some
# installs rename the count (DaoCloud: nvidia.com/vgpu)
HAMI_COUNT = ("nvidia.com/gpu", "nvidia.com/vgpu")
HAMI_MEM = "nvidia.com/gpumem"
HAMI_MEM_PCT = "nvidia.com/gpumem-percentage"
HAMI_CORES = "nvidia.com/gpucores"
VOLCANO_COUNT = "volcano.sh/vgpu-number"
VOLCANO_MEM = "volcano.sh/vgpu-memory"
VOLCANO_MEM_PCT = "volcano.sh/vgpu-memory-percentage"
VOLCANO_CORES = "volcano.sh/vgpu-cores"
assert {HAMI_MEM, HAMI_MEM_PCT, HAMI_CORES, VOLCANO_MEM, VOLCANO_MEM_PCT, VOLCANO_CORES} == set(SHARE_RESOURCES)
# the largest real device memory is below 300 GB; 2**31 MiB is HAMi's own int32 bound
MAX_DEVICE_MIB = float(1 << 31)


def parse_allocated(text: str, where: str) -> list[dict[str, Any]]:
    """``UUID,type,mem,cores:`` per device, ``;`` per container -> one claim per device
    (memory and cores summed over the pod's containers)."""
    devices: dict[str, dict[str, Any]] = {}
    for ci, container in enumerate(text.split(";")):
        for part in container.split(":"):
            part = part.strip()
            if not part:
                continue
            fields = part.split(",")
            if len(fields) < 4 or not fields[0]:
                raise MapError(where, f"container {ci}: {part[:60]!r} is not 'UUID,type,memory,cores'")
            try:
                mem, cores = float(fields[2]), float(fields[3])
            except ValueError:
                raise MapError(where, f"container {ci}: memory and cores of {part[:60]!r} are not numbers") from None
            if not (0 <= mem <= MAX_DEVICE_MIB and 0 <= cores <= 100):
                raise MapError(where, f"container {ci}: {part[:60]!r}: memory 0..2^31 MiB, cores 0..100 %")
            d = devices.setdefault(fields[0], {"kind": "vgpu", "device": fields[0], "count": 1,
                                               "mem_mib": 0.0, "cores": 0.0})
            d["mem_mib"] += mem
            d["cores"] = min(100.0, d["cores"] + cores)
    return list(devices.values())


def _vgpu_requests(res: dict[str, float], count_names: tuple[str, ...], mem: str, pct: str,
                   cores: str) -> dict[str, Any] | None:
    count = next((res[n] for n in count_names if res.get(n)), 0.0)
    if not count or not any(k in res for k in (mem, pct, cores)):
        return None
    claim: dict[str, Any] = {"kind": "vgpu", "device": None, "count": count, "cores": min(100.0, res.get(cores, 0.0))}
    if res.get(mem):
        claim["mem_mib"] = res[mem]
    else:  # neither: the whole memory (HAMi's default when defaultMemory is 0)
        claim["mem_pct"] = min(100.0, res.get(pct) or 100.0)
    return claim


def _number(value: str, where: str, lo: float, hi: float) -> float:
    try:
        out = float(value)
    except ValueError:
        raise MapError(where, f"{value[:40]!r} is not a number") from None
    if not (math.isfinite(out) and lo <= out <= hi):
        raise MapError(where, f"{value[:40]!r} is out of range ({lo:g}..{hi:g})")
    return out


def pod_claims(containers: list[dict[str, float]], annotations: dict[str, str], labels: dict[str, str],
               namespace: str) -> list[dict[str, Any]]:
    """The share claims of a pod from its containers' GPU resources (requests, limits standing
    in; app containers and restartable sidecars), annotations and labels; ``[]`` when only whole
    devices (``nvidia.com/gpu``, MIG, ``nvidia.com/gpu.shared``) are asked for."""
    group = labels.get(KAI_GROUP)
    if labels.get("app") == KAI_RESERVATION_APP or (group and namespace in KAI_RESERVATION_NAMESPACES):
        return [{"kind": "kai-reservation", "group": group}]
    for key in (HAMI_ALLOCATED, VOLCANO_ALLOCATED):
        text = annotations.get(key, "").strip()
        if text.replace(";", "").replace(":", "").strip():
            return parse_allocated(text, f"metadata.annotations.{key}")
    fraction, memory = annotations.get(KAI_FRACTION), annotations.get(KAI_MEMORY)
    if fraction or memory:
        claim: dict[str, Any] = {"kind": "kai", "group": group, "count": 1.0}
        if annotations.get(KAI_DEVICES):
            claim["count"] = _number(annotations[KAI_DEVICES], f"metadata.annotations.{KAI_DEVICES}", 1, 4096)
        if fraction:
            claim["fraction"] = _number(fraction, f"metadata.annotations.{KAI_FRACTION}", 0, 1)
        else:
            claim["mem_mib"] = _number(str(memory), f"metadata.annotations.{KAI_MEMORY}", 0, MAX_DEVICE_MIB)
        return [claim]
    out = []
    for res in containers:
        claim = (_vgpu_requests(res, HAMI_COUNT, HAMI_MEM, HAMI_MEM_PCT, HAMI_CORES)
                 or _vgpu_requests(res, (VOLCANO_COUNT,), VOLCANO_MEM, VOLCANO_MEM_PCT, VOLCANO_CORES))
        if claim:
            out.append(claim)
    if not out:  # Volcano vGPU without memory or cores: whole devices
        count = sum(res.get(VOLCANO_COUNT, 0.0) for res in containers)
        if count:
            out.append({"kind": "vgpu", "device": None, "count": count, "cores": 100.0, "mem_pct": 100.0})
    return out


def node_devices(annotations: dict[str, str]) -> list[dict[str, Any]] | None:
    """The physical GPUs a HAMi or Volcano vGPU device plugin registered on a node: id, memory
    (MiB), cores (%), split count; None when the node has no register annotation.

    HAMi writes JSON (``[{"id":..., "count":10, "devmem":32768, "devcore":100, ...}]``) or, before,
    ``id,count,devmem,devcore,type,numa,health[,index,mode]:`` per device; Volcano vGPU
    ``id,count,devmem,type,health:`` (cores are always 100 %)."""
    for key, scheme in ((HAMI_REGISTER, "hami"), (VOLCANO_REGISTER, "volcano")):
        text = (annotations.get(key) or "").strip()
        if not text:
            continue
        where = f"metadata.annotations.{key}"
        if text.startswith("["):
            try:
                raw = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                raise MapError(where, f"invalid JSON ({exc})") from None
            if not isinstance(raw, list) or not all(isinstance(d, dict) for d in raw):
                raise MapError(where, "expected a JSON list of devices")
            return [_device(d.get("id"), d.get("count"), d.get("devmem"), d.get("devcore", 100), where, scheme,
                            d.get("type")) for d in raw]
        out = []
        for part in text.split(":"):
            fields = [f.strip() for f in part.split(",")]
            if not part.strip():
                continue
            if scheme == "hami" and len(fields) in (7, 9):
                out.append(_device(fields[0], fields[1], fields[2], fields[3], where, scheme, fields[4]))
            elif scheme == "volcano" and len(fields) >= 5:
                out.append(_device(fields[0], fields[1], fields[2], 100, where, scheme, fields[3]))
            else:
                raise MapError(where, f"{part[:60]!r} is not a device entry of the {scheme} register format")
        return out
    return None


def _device(uid: Any, count: Any, mem: Any, cores: Any, where: str, scheme: str, kind: Any) -> dict[str, Any]:
    if not isinstance(uid, str) or not uid:
        raise MapError(where, "a device without an id")
    return {"id": uid, "scheme": scheme, "type": str(kind) if kind else None,
            "split": _number(str(count), f"{where} ({uid}) count", 0, 4096),
            "memory_mib": _number(str(mem), f"{where} ({uid}) memory", 0, MAX_DEVICE_MIB) or None,
            "cores": _number(str(cores), f"{where} ({uid}) cores", 0, 10000) or 100.0}

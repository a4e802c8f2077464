"""What the rules read from the inference servers' metrics (``unit_economics``): the one place a
finding learns a serving workload's tokens, its cost per million tokens and its latency.

* A consolidation or MIG finding on a serving workload states the cost per 1M tokens after the
  change: today's cost per token x (the share of a GPU it pays after / the GPUs it holds now), the
  tokens being the ones it serves today (the change moves no traffic). Its latency evidence is the
  p95 time to first token observed at today's load, which is the load the slice will see; how the
  smaller slice changes it is not measured, and the finding says so rather than promise it.
* A serving workload that held GPUs for the whole window and served no token is idle, whatever its
  GPU activity says (a server polling or compiling keeps the GR engine busy with no work).
* **Reserved memory is not used memory** (:func:`serving_size`, docs/rules.md "Serving memory"):
  vLLM reserves ``--gpu-memory-utilization`` of the device at start (TGI ``--cuda-memory-fraction``)
  and fills what its weights and activations leave with KV cache, so DCGM shows the reservation,
  not the use. Where the KV cache's size in bytes is known (vLLM's ``kv_cache_memory_bytes``, or
  the pod annotation ``gpuinsight.io/kv-cache-bytes``) and its use was measured, the workload needs
  ``reservation - (1 - peak KV use x (1 + kv_cache_headroom)) x KV size``: an under-stated KV
  size only makes that larger (safe); nothing is taken from a KV size no one stated. Whatever the
  basis, a server whose memory setting is a share of the device gets the setting that makes the
  size true on the device it moves to (:func:`server_setting`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpuinsight.keys import WorkloadKey
from gpuinsight.plan.kinds.server_memory import FRACTION_FLAGS, KEEP_BYTES_FLAGS, KV_BYTES_FLAG
from gpuinsight.rules.common import Targets, num
from gpuinsight.rules.context import PlanContext
from gpuinsight.sources.k8s.common import MapError, parse_quantity
from gpuinsight.sql.rows import Row

MODEL = "unit_economics"
MEMORY_MODEL = "serving_memory"
KV_ANNOTATION = "gpuinsight.io/kv-cache-bytes"
MIB = 2**20
# The memory setting of each server, a share of the device's memory the server reserves whole
# (weights, activations, KV cache): the change sets it so that the reservation is what the
# workload needs on the device it moves to. SGLang's --mem-fraction-static covers weights and KV
# pool only (activations come on top): its bytes are kept as they are (scaled by the devices'
# memory ratio), never sized down. Triton / TensorRT-LLM size the KV cache from the memory left
# free after the weights load, so they follow the device by themselves. The flags are part of the
# plan contract (gpuinsight.plan.kinds.server_memory: FRACTION_FLAGS, KEEP_BYTES_FLAGS, KV_BYTES_FLAG).


def serving_by_workload(frames: dict[str, Any], ctx: PlanContext) -> dict[WorkloadKey, dict[str, Any]]:
    """Workload -> its serving totals over every model it served (``unit_economics`` rows)."""
    out: dict[WorkloadKey, dict[str, Any]] = {}
    for r in ctx.rows(frames, MODEL):
        key = r.workload_key
        acc = out.setdefault(key, {"tokens": 0.0, "cost_usd": 0.0, "hours": 0, "ttft_p95_s": None,
                                   "models": [], "servers": set(), "price_missing": False})
        acc["tokens"] += num(r.tokens)
        acc["cost_usd"] += num(r.cost_usd)
        acc["hours"] = max(acc["hours"], int(num(r.hours)))
        acc["price_missing"] = acc["price_missing"] or bool(r.price_missing)
        if r.ttft_p95_s is not None:
            acc["ttft_p95_s"] = max(num(acc["ttft_p95_s"]), num(r.ttft_p95_s))
        acc["models"].append(r.model_name or "")
        acc["servers"].add(r.server or "")
    return out


def unit_cost_evidence(serving: dict[str, Any] | None, gpus_now: float, gpus_after: float) -> dict[str, Any]:
    """Evidence fields of a consolidation finding on a serving workload (empty for other work)."""
    if not serving or serving["tokens"] <= 0 or serving["price_missing"] or gpus_now <= 0:
        return {}
    now = serving["cost_usd"] / serving["tokens"] * 1e6
    return {
        "usd_per_1m_tokens": round(now, 4),
        "usd_per_1m_tokens_after": round(now * gpus_after / gpus_now, 4),
        "tokens_per_hour": round(serving["tokens"] / max(serving["hours"], 1), 1),
        "models": sorted(set(serving["models"])),
        "ttft_p95_s_observed": None if serving["ttft_p95_s"] is None else round(serving["ttft_p95_s"], 4),
        "latency_basis": ("p95 time to first token observed at today's load, the load the slice will see; "
                          "its latency on the slice is not measured"),
    }


def served_nothing(serving: dict[str, Any] | None, min_hours: float) -> bool:
    """Held GPUs for at least ``min_hours`` hours of serving metrics and served no token."""
    return bool(serving) and serving["tokens"] == 0 and serving["hours"] >= min_hours


# -- memory ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServingSize:
    """What an inference server must be given, and on what basis."""

    server: str
    mem_mib: float              # the framebuffer the device must hold (the reservation + the context reserve)
    budget_mib: float           # the reservation the server's setting asks for (mem_mib - context reserve)
    basis: str                  # "kv_cache" | "framebuffer"
    kv_bytes_setting: bool      # vLLM sized its KV cache with --kv-cache-memory-bytes
    kv_cache_mib: float | None  # the KV size the sizing took (bytes stated or reported), None: not known
    kv_target: float | None     # share of that KV cache kept (peak use x (1 + headroom), at most 1)
    evidence: dict[str, Any] = field(default_factory=dict)


def parse_kv_annotation(values: Any) -> tuple[float | None, str | None]:
    """The smallest KV size (bytes) the pods' annotations state, or (None, why it was not taken)."""
    found: list[float] = []
    for v in list(values or []):
        try:
            b = parse_quantity(str(v).strip(), f"annotation {KV_ANNOTATION}")
        except MapError:
            return None, f"annotation {KV_ANNOTATION}={str(v)[:40]!r} is not a quantity: ignored"
        if b <= 0:
            return None, f"annotation {KV_ANNOTATION}={str(v)[:40]!r} is not a size: ignored"
        found.append(b)
    return (min(found), None) if found else (None, None)


def _server(facts: Any) -> str:
    servers = [x for x in str(facts.server or "").split(",") if x]
    return servers[0] if len(servers) == 1 else ""


def serving_size(profile: Row, facts: Row | None, t: Targets) -> ServingSize | None:
    """How much framebuffer a serving workload (its ``workload_gpu_profile`` row, and ``facts``,
    its ``serving_memory`` row) must be given; None for other work. Only servers whose memory setting the change
    rewrites (``FRACTION_FLAGS``) are sized below their reservation, and only on a KV size stated
    in bytes with its use measured for ``t.min_kv_hours`` hours; every other case keeps the
    framebuffer maximum, and the evidence says why."""
    if not facts:
        return None
    server = _server(facts)
    fb = num(profile.fb_max_mib)
    plain = fb * (1 + t.memory_headroom)
    reported = facts.kv_cache_memory_bytes
    stated, annotation_note = parse_kv_annotation(facts.kv_cache_bytes_annotations)
    sources = [(b, "vLLM kv_cache_memory_bytes") for b in (reported,) if b is not None and num(b) > 0]
    sources += [(b, f"annotation {KV_ANNOTATION}") for b in (stated,) if b is not None]
    kv_bytes, kv_source = min(sources, key=lambda x: x[0]) if sources else (None, None)
    peak, hours = facts.kv_cache_peak, num(facts.kv_hours)
    evidence: dict[str, Any] = {
        "server": server or None,
        "kv_cache_peak_pct": None if peak is None else round(100 * num(peak), 2),
        "kv_cache_hours_measured": int(hours),
        "server_memory_fraction_now": facts.gpu_memory_utilization,
        "kv_cache_blocks": facts.num_gpu_blocks,
        "kv_cache_block_tokens": facts.block_size,
        "kv_cache_dtype": facts.cache_dtype,
    }
    if annotation_note:
        evidence["kv_cache_note"] = annotation_note
    setting = server in FRACTION_FLAGS
    kv_bytes_setting = reported is not None and num(reported) > 0
    # a share of the device is asked once the process holds its CUDA context: the device holds both
    reserve = t.server_context_mib if setting and not kv_bytes_setting else 0.0
    why = None
    if not setting:
        why = (f"{server or 'its inference server'}'s memory setting is not one gpuinsight sizes down "
               "(vLLM --gpu-memory-utilization and TGI --cuda-memory-fraction are)")
    elif peak is None or hours < t.min_kv_hours:
        why = (f"its KV-cache use was measured for {int(hours)} h (at least {t.min_kv_hours:g} h needed)"
               if peak is not None else f"{server} publishes no KV-cache use")
    elif kv_bytes is None:
        why = ("the KV cache's size in bytes is not known: vLLM reports it in blocks (num_gpu_blocks x block_size "
               "tokens) whose bytes per token depend on the model, and its weights only in its log; state it "
               f"with the pod annotation {KV_ANNOTATION} (the size the server's log gives)")
    elif kv_bytes / MIB > fb:
        why = f"the KV size stated ({kv_bytes / MIB:,.0f} MiB, {kv_source}) exceeds the framebuffer used: ignored"
    if why is not None:
        evidence.update(memory_basis="framebuffer maximum", memory_basis_why=why)
        return ServingSize(server, plain + reserve, plain, "framebuffer", kv_bytes_setting,
                           None if kv_bytes is None else kv_bytes / MIB, None, evidence)
    kv_mib = num(kv_bytes) / MIB
    kv_target = min(1.0, num(peak) * (1 + t.kv_headroom))
    budget = (fb - (1 - kv_target) * kv_mib) * (1 + t.memory_headroom)
    evidence.update(memory_basis="KV cache used at peak", kv_cache_gb=round(kv_mib / 1024, 2),
                    kv_cache_size_source=kv_source, kv_cache_kept_pct=round(100 * kv_target, 2),
                    reserved_gb=round(fb / 1024, 2), memory_released_gb=round((fb - budget) / 1024, 2))
    return ServingSize(server, budget + reserve, budget, "kv_cache", kv_bytes_setting, kv_mib, kv_target, evidence)


def server_setting(size: ServingSize | None, device_mib: float, device_mib_now: float) -> dict[str, Any] | None:
    """The server setting a change carries (``proposed.server_memory``): the share of the device
    it moves to that the server reserves (vLLM, TGI), its KV size in bytes (vLLM sized with
    --kv-cache-memory-bytes), or the ratio that keeps SGLang's static bytes; None when nothing
    needs to change (the same device and the same reservation) or the server has no such setting."""
    if size is None or device_mib <= 0:
        return None
    same_device = abs(device_mib - device_mib_now) < 1.0
    if size.server in FRACTION_FLAGS:
        if size.kv_bytes_setting:
            if size.basis != "kv_cache" or size.kv_cache_mib is None or size.kv_target is None:
                return None  # an absolute KV size follows no device: nothing to change
            value: float = float(math.ceil(size.kv_cache_mib * size.kv_target * MIB))
            return {"server": size.server, "flag": KV_BYTES_FLAG, "mode": "set", "value": value,
                    "device_mib": round(device_mib), "device_mib_before": round(device_mib_now), "basis": size.basis}
        if same_device and size.basis != "kv_cache":
            return None
        return {"server": size.server, "flag": FRACTION_FLAGS[size.server], "mode": "set",
                "value": math.ceil(size.budget_mib / device_mib * 1000) / 1000,
                "device_mib": round(device_mib), "device_mib_before": round(device_mib_now), "basis": size.basis}
    if size.server in KEEP_BYTES_FLAGS and not same_device:
        return {"server": size.server, "flag": KEEP_BYTES_FLAGS[size.server], "mode": "scale",
                "value": round(device_mib_now / device_mib, 4), "device_mib": round(device_mib),
                "device_mib_before": round(device_mib_now), "basis": size.basis}
    return None


def memory_by_workload(frames: dict[str, Any], ctx: PlanContext) -> dict[WorkloadKey, Row]:
    """Workload -> its ``serving_memory`` row."""
    return {r.workload_key: r for r in ctx.rows(frames, MEMORY_MODEL)}

"""The inference server memory setting a ``mig``, ``mps`` or ``timeslice`` change carries
(``proposed.server_memory``; :mod:`gpuinsight.rules.serving` sizes it, the builders write it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinsight.plan.schema import Schema, bad, number, spec, text

# the flags a server's memory is set with: a share of the device's memory (vLLM, TGI) ...
FRACTION_FLAGS: dict[str, str] = {"vllm": "--gpu-memory-utilization", "tgi": "--cuda-memory-fraction"}
# ... a share kept static of what is free (SGLang: scaled to keep the same bytes on another device) ...
KEEP_BYTES_FLAGS: dict[str, str] = {"sglang": "--mem-fraction-static"}
KV_BYTES_FLAG = "--kv-cache-memory-bytes"  # vLLM: an absolute KV size (gpu_memory_utilization then ignored)


def _check_setting(data: dict[str, Any], where: str) -> None:
    flags = {*FRACTION_FLAGS.values(), *KEEP_BYTES_FLAGS.values(), KV_BYTES_FLAG}
    if data.get("flag") not in flags:
        raise bad(f"{where}.flag", f"{data.get('flag')!r} is not a memory setting gpuinsight changes ({sorted(flags)})")
    value = data.get("value")
    if data.get("flag") == KV_BYTES_FLAG:
        if not isinstance(value, int | float) or value < 1 or value != int(value):
            raise bad(f"{where}.value", f"{value!r} is not a whole number of bytes")
    elif data.get("mode") == "set" and not (isinstance(value, int | float) and 0 < value <= 1):
        raise bad(f"{where}.value", f"{value!r} is not a share of the device's memory in (0, 1]")


@dataclass
class ServerMemory(Schema):
    """The inference server's memory setting the change carries: ``set`` the flag to ``value`` (a
    share of the device it moves to, or vLLM's KV bytes), or ``scale`` the value its container
    has by ``value`` (the memory of the device it leaves over that of the one it moves to: the
    same bytes)."""

    server: str = spec(text(choices=("vllm", "tgi", "sglang")))
    flag: str = spec(text())
    mode: str = spec(text(choices=("set", "scale")))
    value: float = spec(number)
    device_mib: float = spec(number)
    device_mib_before: float = spec(number)
    basis: str = spec(text(choices=("kv_cache", "framebuffer")))
    extra_checks = (_check_setting,)

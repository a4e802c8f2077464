"""An inference server's memory setting, changed together with the move it makes true.

A recommendation on an inference server may carry ``proposed.server_memory``
(``rules/serving.py``): vLLM's ``--gpu-memory-utilization`` and TGI's ``--cuda-memory-fraction``
are shares of the device the server sees, so moving it onto a MIG slice (a smaller device) or
sizing it below its reservation needs the share set anew; vLLM's ``--kv-cache-memory-bytes`` is
set in bytes; SGLang's ``--mem-fraction-static`` is scaled to keep the same bytes. The change is
a guarded JSON patch of the server container's ``args`` (or ``command`` where the flag is
there): ``test`` of the container's name and of the value it replaces, then ``replace``; a flag
the container does not pass is appended to its ``args``. What cannot be patched safely is
refused with what to do by hand: the flag inside a shell string (``sh -c "vllm serve ..."``), a
value that is not a number, a workload whose spec was not observed.
"""

from __future__ import annotations

from typing import Any

from gpuinsight.actions.builders.common import container_asks_gpu, fail
from gpuinsight.rules.base import Recommendation

SHELLS = frozenset({"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/env"})


def setting_of(rec: Recommendation) -> dict[str, Any] | None:
    setting = rec.proposed.get("server_memory")
    return setting if isinstance(setting, dict) and setting.get("flag") else None


def describe(setting: dict[str, Any]) -> str:
    if setting["mode"] == "scale":
        return (f"{setting['flag']} x {setting['value']:g} (the same bytes on a device of "
                f"{setting['device_mib']:,.0f} MiB)")
    return f"{setting['flag']}={_text(setting, setting['value'])}"


def _text(setting: dict[str, Any], value: float) -> str:
    if setting["flag"] == "--kv-cache-memory-bytes":
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _spellings(flag: str) -> tuple[str, str]:
    """The flag as documented and with underscores (vLLM's parser takes both)."""
    return flag, "--" + flag[2:].replace("-", "_")


def _find(items: list[Any], flag: str) -> tuple[int, str] | None:
    """(index of the value, its text) of ``flag`` in a list of arguments: the element after the
    flag, or the ``--flag=value`` element itself; None when the list does not pass it as its own
    element (a flag inside a longer string is the caller's to refuse)."""
    names = _spellings(flag)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            continue
        if item in names and i + 1 < len(items) and isinstance(items[i + 1], str):
            return i + 1, items[i + 1]
        for name in names:
            if item.startswith(name + "="):
                return i, item
    return None


def _in_a_string(items: list[Any], flag: str) -> bool:
    """The flag appears inside a longer argument (a shell command line)."""
    return any(isinstance(x, str) and any(n in x for n in _spellings(flag)) and x not in _spellings(flag)
               and not any(x.startswith(n + "=") for n in _spellings(flag)) for x in items)


def container_ops(rec: Recommendation, cptr: str, container: dict[str, Any], setting: dict[str, Any]
                  ) -> tuple[list[dict[str, Any]], str]:
    """The JSON-patch operations that give one container the setting, and what they do."""
    flag = setting["flag"]
    where = f"{cptr} ({container.get('name')})"
    for field in ("args", "command"):
        items = container.get(field) or []
        if not isinstance(items, list):
            raise fail(rec, "proposed.server_memory", f"{where}.{field} is not a list")
        found = _find(items, flag)
        if found is None:
            if _in_a_string(items, flag):
                raise fail(rec, "proposed.server_memory",
                           f"{where}: {flag} is inside a shell string of its {field}; set {describe(setting)} there "
                           f"by hand, with the move")
            continue
        index, old = found
        joined = "=" in old and old.startswith("--")
        raw = old.split("=", 1)[1] if joined else old
        try:
            current = float(raw)
        except ValueError:
            raise fail(rec, "proposed.server_memory", f"{where}: {flag} is {raw!r}, not a number") from None
        value = current * float(setting["value"]) if setting["mode"] == "scale" else float(setting["value"])
        if setting["mode"] == "scale" and flag != "--kv-cache-memory-bytes" and not 0 < value <= 1:
            raise fail(rec, "proposed.server_memory", f"{where}: {flag} {raw} x {setting['value']:g} = {value:.3f} "
                                                      f"is not a share of the device; the workload does not fit it")
        new = _text(setting, value)
        new_item = f"{old.split('=', 1)[0]}={new}" if joined else new
        path = f"{cptr}/{field}/{index}"
        ops = [{"op": "test", "path": path, "value": old}, {"op": "replace", "path": path, "value": new_item}]
        return ops, f"{flag} {raw} -> {new}"
    if setting["mode"] == "scale":
        return [], ""  # not set: the server's own default follows the device
    command = container.get("command") or []
    if any(isinstance(x, str) and x.rsplit("/", 1)[-1] in {s.rsplit("/", 1)[-1] for s in SHELLS} for x in command[:1]) \
            and "-c" in command:
        raise fail(rec, "proposed.server_memory", f"{where}: its command is a shell string; add {describe(setting)} "
                                                  f"to the server's command line by hand, with the move")
    new = _text(setting, float(setting["value"]))
    if container.get("args"):
        ops = [{"op": "add", "path": f"{cptr}/args/-", "value": flag}, {"op": "add", "path": f"{cptr}/args/-", "value": new}]
    else:
        ops = [{"op": "add", "path": f"{cptr}/args", "value": [flag, new]}]
    return ops, f"{flag} (unset) -> {new}"


def spec_ops(rec: Recommendation, spec_ptr: str, spec: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The setting on every container of an observed pod spec that passes the flag, else on its
    first container asking for a GPU (the server's); (operations, what each does)."""
    setting = setting_of(rec)
    if setting is None:
        return [], []
    containers = spec.get("containers") or []
    with_flag = [j for j, c in enumerate(containers)
                 if any(_find(c.get(f) or [], setting["flag"]) or _in_a_string(c.get(f) or [], setting["flag"])
                        for f in ("args", "command"))]
    gpu = [j for j, c in enumerate(containers) if container_asks_gpu(c)]
    chosen = with_flag or gpu[:1]
    if not chosen:
        raise fail(rec, "proposed.server_memory", f"{spec_ptr}: no container asks for a GPU or passes "
                                                  f"{setting['flag']}")
    ops: list[dict[str, Any]] = []
    done: list[str] = []
    for j in chosen:
        c = containers[j]
        cptr = f"{spec_ptr}/containers/{j}"
        mine, what = container_ops(rec, cptr, c, setting)
        if mine:
            ops += [{"op": "test", "path": f"{cptr}/name", "value": c.get("name")}, *mine]
            done.append(f"{c.get('name')}: {what}")
    return ops, done


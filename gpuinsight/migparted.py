"""The mig-parted config format (``version: v1``, ``mig-configs``), as NVIDIA's mig-parted reads it.

mig-manager (GPU Operator) applies the config named by a node's ``nvidia.com/mig.config`` label
from its config file; a custom one is a ConfigMap with the key ``config.yaml``. The checks here
are those of mig-parted's own parser, NVIDIA/mig-parted @ bd7160f43f16462eeb21e1eda5e67b5b6b03fd7d
(Apache-2.0): ``api/spec/v1/spec.go`` (``Spec.UnmarshalJSON``: ``version`` must be ``v1``, the
only other field ``mig-configs``, at least one config and one entry each;
``MigConfigSpec.UnmarshalJSON``: ``devices`` and ``mig-enabled`` required, ``devices`` ``"all"``
or a list of integers, ``device-filter`` a string or list of strings, ``mig-devices`` required
when ``mig-enabled`` and forbidden with a count when not, no other field),
``pkg/types/mig_config.go`` (``AssertValidFormat``: counts not negative, not all zero) and the
profile grammar of go-nvlib ``pkg/nvlib/device/mig_profile.go`` vendored there
(``[<c>c.]<g>g.<gb>gb[+attr,...|-attr,...]``). Whether a GPU can hold the instances of an entry
is the GPU's placement rules (the MIG layouts of ``mig_catalog``), checked by :func:`layout_errors`.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from gpuinsight.errors import BadInput

ENTRY_FIELDS = ("device-filter", "devices", "mig-enabled", "mig-devices")
_FIELD = re.compile(r"^([0-9]+)(c|g|gb)\Z")
_ATTR = re.compile(r"^[A-Za-z][A-Za-z0-9.]*\Z")


def profile_errors(profile: Any) -> list[str]:
    """go-nvlib's parseMigProfile: ``1g.10gb``, ``1c.2g.10gb``, ``1g.10gb+me``, ``1g.24gb-me``."""
    if not isinstance(profile, str) or not profile:
        return ["profile is the empty string"]
    plus, minus = profile.split("+", 1), profile.split("-", 1)
    if len(plus) == 2 and len(minus) == 2:
        return [f"profile {profile!r} contains both '+/-' attributes"]
    head, attrs = (plus if len(plus) == 2 else minus)[0], (plus if len(plus) == 2 else minus)[1:]
    parts = head.split(".", 2)
    want = ("c", "g", "gb") if len(parts) == 3 else ("g", "gb") if len(parts) == 2 else None
    if want is None:
        return [f"cannot parse fields of {profile!r}: expected 2 or 3"]
    for part, suffix in zip(parts, want, strict=True):
        m = _FIELD.match(part)
        if m is None or m.group(2) != suffix:
            return [f"cannot parse fields of {profile!r}: {part!r} is not %d{suffix}"]
    for attr_list in attrs:
        seen: set[str] = set()
        for a in attr_list.split(","):
            if a in seen or not _ATTR.match(a) or a.endswith("."):
                return [f"cannot parse attributes of {profile!r}: {a!r}"]
            seen.add(a)
    return []


def entry_errors(entry: Any, where: str) -> list[str]:
    """One ``MigConfigSpec``."""
    if not isinstance(entry, dict):
        return [f"{where}: not an object"]
    errors = [f"{where}: unexpected field: {k}" for k in entry if k not in ENTRY_FIELDS]
    errors += [f"{where}: missing required field: {k}" for k in ("devices", "mig-enabled") if k not in entry]
    devices = entry.get("devices")
    if "devices" in entry and devices != "all" and not (
            isinstance(devices, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in devices)):
        errors.append(f"{where}.devices: {devices!r} is neither \"all\" nor a list of integers")
    flt = entry.get("device-filter")
    if "device-filter" in entry and not (isinstance(flt, str) or (
            isinstance(flt, list) and all(isinstance(x, str) for x in flt))):
        errors.append(f"{where}.device-filter: {flt!r} is neither a string nor a list of strings")
    enabled = entry.get("mig-enabled")
    if "mig-enabled" in entry and not isinstance(enabled, bool):
        errors.append(f"{where}.mig-enabled: {enabled!r} is not a boolean")
    devs = entry.get("mig-devices")
    if "mig-devices" in entry and devs is not None:
        if not isinstance(devs, dict):
            errors.append(f"{where}.mig-devices: not a map of profile to count")
        else:
            for name, count in devs.items():
                errors += [f"{where}.mig-devices: invalid format for {name!r}: {e}" for e in profile_errors(name)]
                if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                    errors.append(f"{where}.mig-devices.{name}: invalid count {count!r}")
            if devs and not any(isinstance(c, int) and c > 0 for c in devs.values()):
                errors.append(f"{where}.mig-devices: all counts for all MigProfiles are 0")
    if enabled is True and devs is None:
        errors.append(f"{where}: missing required field 'mig-devices' when 'mig-enabled' is true")
    if enabled is False and isinstance(devs, dict) and devs:
        errors.append(f"{where}: MIG devices included when 'mig-enabled' is false")
    return errors


def spec_errors(doc: Any) -> list[str]:
    """A whole config file (``Spec``): every error mig-parted's parser would stop at."""
    if not isinstance(doc, dict):
        return ["not a map"]
    if "version" not in doc:
        return ["unable to parse with missing 'version' field"]
    if doc["version"] != "v1":
        return [f"unknown version: {doc['version']}"]
    errors = [f"unexpected field: {k}" for k in doc if k not in ("version", "mig-configs")]
    configs = doc.get("mig-configs")
    if "mig-configs" in doc:
        if not isinstance(configs, dict) or not configs:
            return [*errors, "at least one entry in 'mig-configs' is required"]
        for name, entries in configs.items():
            if not isinstance(entries, list) or not entries:
                errors.append(f"at least one entry in {name!r} is required")
                continue
            for i, entry in enumerate(entries):
                errors += entry_errors(entry, f"mig-configs.{name}[{i}]")
    return errors


def layout_errors(entries: list[dict[str, Any]], gpu_count: int, slice_class: dict[str, str],
                  layouts: list[Counter[str]]) -> list[str]:
    """A node's entries against its GPUs: every GPU in exactly one entry, and each partitioned
    GPU's instances within one valid layout (``slice_class``: profile -> class, ``layouts``:
    the maximal valid layouts as class multisets, ``mig_catalog``)."""
    errors = []
    seen: Counter[int] = Counter()
    for i, entry in enumerate(entries):
        devices = range(gpu_count) if entry.get("devices") == "all" else entry.get("devices") or []
        for d in devices:
            seen[d] += 1
            if not 0 <= d < gpu_count:
                errors.append(f"entry {i}: device {d} is not a GPU of the node (0..{gpu_count - 1})")
        if entry.get("mig-enabled"):
            classes: Counter[str] = Counter()
            for profile, count in (entry.get("mig-devices") or {}).items():
                if profile not in slice_class:
                    errors.append(f"entry {i}: profile {profile} is not one of the GPU's")
                else:
                    classes[slice_class[profile]] += count
            if not any(all(lay[c] >= n for c, n in classes.items()) for lay in layouts):
                errors.append(f"entry {i}: {dict(classes)} fits no valid MIG layout of the GPU")
    errors += [f"GPU {d} is in {n} entries" for d, n in sorted(seen.items()) if n > 1]
    errors += [f"GPU {d} is in no entry" for d in range(gpu_count) if d not in seen]
    return errors


def check_entries(entries: Any, where: str) -> None:
    """Raise :class:`BadInput` naming the first error of a config's entries (plan files)."""
    if not isinstance(entries, list) or not entries:
        raise BadInput(f"{where}: at least one entry is required")
    for i, entry in enumerate(entries):
        errors = entry_errors(entry, f"{where}[{i}]")
        if errors:
            raise BadInput(errors[0])

"""Canonical GPU model names, from the many spellings sources use.

dcgm-exporter ``modelName`` ("NVIDIA H100 80GB HBM3"), GPU feature discovery's
``nvidia.com/gpu.product`` ("NVIDIA-H100-80GB-HBM3"), Karpenter's ``instance-gpu-name``
("h100") and price catalogs ("H100") all map to one name per SKU family and memory size,
the names used by ``mig-profiles.csv`` (``H100-80GB``, ``A100-40GB``, ``H100-NVL-94GB``...).
"""

from __future__ import annotations

import re

# (pattern on the upper-cased, separator-normalised name, canonical name). Order matters.
_RULES: tuple[tuple[str, str], ...] = (
    (r"GH200", "GH200"),
    (r"H200", "H200-141GB"),
    (r"H100.*NVL", "H100-NVL-94GB"),
    (r"H100.*96", "H100-96GB"),
    (r"H100", "H100-80GB"),
    (r"H800", "H800-80GB"),
    (r"A100.*40", "A100-40GB"),
    (r"A100", "A100-80GB"),
    (r"A800", "A800-80GB"),
    (r"A10G", "A10G"),
    (r"A10\b", "A10"),
    (r"L40S", "L40S"),
    (r"L4\b", "L4"),
    (r"T4\b", "T4"),
    (r"V100", "V100"),
    (r"A30\b", "A30"),
    (r"B200", "B200"),
)

# Physical memory per canonical model (MiB), for sizing when no FB sample says otherwise.
MEMORY_MIB: dict[str, int] = {
    "H200-141GB": 144384,
    "H100-NVL-94GB": 95830,
    "H100-96GB": 98304,
    "H100-80GB": 81559,
    "A100-80GB": 81920,
    "A100-40GB": 40960,
    "A10G": 22888,
    "L40S": 45776,
    "L4": 22888,
    "A30": 24576,
}

MIG_CAPABLE = frozenset({"A100-40GB", "A100-80GB", "H100-80GB", "H100-NVL-94GB", "H100-96GB", "H200-141GB", "A30"})


def canonical_gpu_model(name: str | None, memory_mib: float | None = None) -> str | None:
    """Map any spelling to the canonical model; ``None`` stays ``None``.

    ``memory_mib`` disambiguates bare family names ("A100" in a price catalog).
    """
    if not name:
        return None
    text = re.sub(r"[-_\s]+", " ", name.upper())
    text = text.replace("NVIDIA ", "").strip()
    for pattern, canonical in _RULES:
        if re.search(pattern, text):
            if canonical == "A100-80GB" and memory_mib and memory_mib < 60000:
                return "A100-40GB"
            return canonical
    return name.strip()


def is_mig_capable(model: str | None) -> bool:
    return model in MIG_CAPABLE

"""Locate the data shipped with the package (queries/, sample_data/).

In a wheel they live inside the package (``gpuinsight/queries``); in a source checkout
(editable install) they are at the repository root next to the package.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    for candidate in (_PKG / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"{name}/ not found next to the gpuinsight package ({_PKG})")


def queries_dir() -> Path:
    return _find("queries")


def sample_data_dir() -> Path:
    return _find("sample_data")


def package_data_dir() -> Path:
    """Small data files shipped as package data (default price catalog, MIG tables)."""
    return _PKG / "data"

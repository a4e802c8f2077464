"""Load a generated fleet folder (``sample_data/`` by default): metrics, kubectl dumps, prices.

The metrics go first and the kubectl dumps after them: the dumps are a snapshot at the end
of the window and carry facts the metrics do not (owner references, Volcano objects), so
their view of a pod is the one that should be newest.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.paths import sample_data_dir
from gpuinsight.sources.base import LoadReport
from gpuinsight.sources.openmetrics import load_openmetrics
from gpuinsight.warehouse.db import Warehouse

METRICS_FILES = ("metrics.om.gz", "metrics.om", "metrics.prom.gz", "metrics.prom")


def _optional(module: str, name: str, source: str, reports: list[LoadReport]) -> object | None:
    """A loader from a module that may not be installed in this build; skipped with a note."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        reports.append(LoadReport(source=source, notes=[f"skipped: {module}.{name} is not available"]))
        return None


def load_sample_dir(wh: Warehouse, cfg: Config, folder: str | Path | None = None) -> list[LoadReport]:
    root = Path(folder) if folder is not None else sample_data_dir()
    if not root.is_dir():
        raise BadInput(f"{root}: not a directory")
    reports: list[LoadReport] = []
    metrics = next((root / f for f in METRICS_FILES if (root / f).is_file()), None)
    kubectl = root / "kubectl"
    if metrics is None and not kubectl.is_dir():
        raise BadInput(f"{root}: no sample fleet here (expected metrics.om.gz and/or kubectl/); "
                       "generate one from a clone of the repository with `python -m tests.samplegen --out DIR`")
    if metrics is not None:
        reports.append(load_openmetrics(wh, cfg, metrics))
    if kubectl.is_dir():
        load_dump_dir = _optional("gpuinsight.sources.kubernetes", "load_dump_dir", "kubernetes", reports)
        if load_dump_dir is not None:
            reports.append(load_dump_dir(wh, cfg, kubectl))  # type: ignore[operator]
    load_catalog = _optional("gpuinsight.sources.prices", "load_catalog", "prices", reports)
    if load_catalog is not None:
        # the fleet's own catalog (it states its spot assumption) wins over the shipped default
        catalog = root / "prices.csv"
        reports.append(load_catalog(wh, cfg, catalog if catalog.is_file() else None))  # type: ignore[operator]
    return reports

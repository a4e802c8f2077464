"""Deterministic sample GPU fleet: DCGM + kube-state-metrics history, kubectl dumps, ground truth.

>>> from tests.samplegen import FleetSpec, build_fleet, gpu_sample_frames
>>> fleet = build_fleet(FleetSpec(days=0.5))
>>> sum(df.height for df in gpu_sample_frames(fleet)) > 0
True

`write_sample(out_dir)` is what produced the repository's `sample_data/`.
"""

from __future__ import annotations

from pathlib import Path

from .dumps import write_kubectl_dumps
from .fleet import Fleet, build_fleet
from .frames import GPU_SAMPLES_SCHEMA, gpu_sample_frames
from .openmetrics import write_openmetrics
from .spec import GPUS_PER_CELL, FleetSpec
from .truth import ground_truth, write_ground_truth

__all__ = [
    "GENERATED_FILES",
    "GPUS_PER_CELL",
    "GPU_SAMPLES_SCHEMA",
    "Fleet",
    "FleetSpec",
    "build_fleet",
    "ground_truth",
    "gpu_sample_frames",
    "write_ground_truth",
    "write_kubectl_dumps",
    "write_openmetrics",
    "write_price_catalog",
    "write_sample",
]

GENERATED_FILES = ("metrics.om.gz", "ground_truth.json", "prices.csv", "kubectl/nodes.json", "kubectl/pods.json",
                   "kubectl/events.json", "kubectl/queues.json", "kubectl/podgroups.json", "kubectl/vcjobs.json",
                   "kubectl/nodepools.json", "kubectl/pdbs.json", "kubectl/rayclusters.json", "kubectl/rayjobs.json",
                   "kubectl/scaledobjects.json", "kubectl/hypernodes.json")


def write_sample(out_dir: str | Path, spec: FleetSpec | None = None, *, gzip: bool = True) -> Path:
    """Write a whole sample: `metrics.om.gz` (or `metrics.om`), `kubectl/*.json`, `ground_truth.json`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fleet = build_fleet(spec or FleetSpec())
    write_openmetrics(fleet, out / ("metrics.om.gz" if gzip else "metrics.om"), gzip=gzip)
    write_kubectl_dumps(fleet, out / "kubectl")
    write_ground_truth(fleet, out / "ground_truth.json")
    write_price_catalog(fleet, out / "prices.csv")
    return out


def write_price_catalog(fleet: Fleet, path: str | Path) -> Path:
    """The fleet's price catalog in the design's CSV format, with the spot assumption stated.

    The reference prices have no spot figures, so the sample prices spot at
    ``SPOT_PRICE_FRACTION`` of on-demand and names that in the catalog and its source.
    """
    import csv

    from .spec import INSTANCE_TYPES, PRICE_SOURCE, SPOT_PRICE_FRACTION

    path = Path(path)
    used = sorted(set(fleet.nodes["instance_type"].to_list()))
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["instance_type", "gpu_model", "gpu_count", "on_demand_usd_per_hour", "spot_usd_per_hour",
                    "region", "as_of", "catalog", "source"])
        for name in used:
            it = INSTANCE_TYPES[name]
            w.writerow([name, it.model_name, it.gpu_count, f"{it.on_demand_usd:.6f}",
                        f"{it.on_demand_usd * SPOT_PRICE_FRACTION:.6f}", "us-east-1", "2026-07-20",
                        f"sample-us-east-1-2026-07-20-spot{round(SPOT_PRICE_FRACTION * 100)}", PRICE_SOURCE])
    return path

"""Deterministic sample GPU fleet: DCGM + kube-state-metrics history, kubectl dumps, ground truth.

>>> from gpuinsight.sample import FleetSpec, build_fleet, gpu_sample_frames
>>> fleet = build_fleet(FleetSpec(days=0.5))
>>> sum(df.height for df in gpu_sample_frames(fleet)) > 0
True

`write_sample(out_dir)` is what produced the repository's `sample_data/`.
"""

from __future__ import annotations

from pathlib import Path

from .fleet import Fleet, build_fleet
from .frames import GPU_SAMPLES_SCHEMA, gpu_sample_frames
from .kubectl import write_kubectl_dumps
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
    "write_sample",
]

GENERATED_FILES = ("metrics.om.gz", "ground_truth.json", "kubectl/nodes.json", "kubectl/pods.json",
                   "kubectl/events.json", "kubectl/queues.json", "kubectl/podgroups.json", "kubectl/vcjobs.json",
                   "kubectl/nodepools.json", "kubectl/pdbs.json")


def write_sample(out_dir: str | Path, spec: FleetSpec | None = None, *, gzip: bool = True) -> Path:
    """Write a whole sample: `metrics.om.gz` (or `metrics.om`), `kubectl/*.json`, `ground_truth.json`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fleet = build_fleet(spec or FleetSpec())
    write_openmetrics(fleet, out / ("metrics.om.gz" if gzip else "metrics.om"), gzip=gzip)
    write_kubectl_dumps(fleet, out / "kubectl")
    write_ground_truth(fleet, out / "ground_truth.json")
    return out

"""The kubectl JSON dumps of a generated fleet: every object kind, written one file per kind as
``kubectl get KIND -o json`` would (the object builders are in kubectl.py, crds.py and kuberay.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .crds import hypernode_objects, nodepool_objects, podgroup_objects, queue_objects, vcjob_objects
from .fleet import Fleet
from .kubectl import Snapshot, event_objects, node_object, pdb_objects, pod_object
from .kuberay import raycluster_objects, rayjob_objects, scaledobject_objects


def _dump(path: Path, items: list[dict[str, Any]]) -> None:
    doc = {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
    path.write_text(json.dumps(doc, indent=4, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def write_kubectl_dumps(fleet: Fleet, directory: str | Path) -> Path:
    """Write the end-of-window kubectl JSON dumps into `directory` (created if missing)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    s = Snapshot(fleet)
    nodes = [node_object(s, n) for n in s.nodes]
    pods = [pod_object(s, p) for p in s.pods]
    jobs = vcjob_objects(s)
    _dump(d / "nodes.json", nodes)
    _dump(d / "pods.json", pods)
    _dump(d / "vcjobs.json", jobs)
    _dump(d / "podgroups.json", podgroup_objects(s))
    _dump(d / "queues.json", queue_objects(s))
    _dump(d / "nodepools.json", nodepool_objects(s))
    _dump(d / "pdbs.json", pdb_objects(s))
    _dump(d / "events.json", event_objects(s, pods, jobs))
    _dump(d / "rayclusters.json", raycluster_objects(s))
    _dump(d / "rayjobs.json", rayjob_objects(s))
    _dump(d / "scaledobjects.json", scaledobject_objects(s))
    _dump(d / "hypernodes.json", hypernode_objects(s))
    return d

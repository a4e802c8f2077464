"""Kubernetes object -> warehouse row mappers, one module per family of kinds.

The dump path and the live path of :mod:`gpuinsight.sources.kubernetes` share them.
"""

from gpuinsight.sources.k8s.cluster import event_row, nodepool_row, pdb_row
from gpuinsight.sources.k8s.common import MapContext, MapError, parse_quantity, parse_time
from gpuinsight.sources.k8s.nodes import node_row
from gpuinsight.sources.k8s.pods import pod_row, resolve_workload
from gpuinsight.sources.k8s.volcano import podgroup_row, queue_row, vcjob_row

__all__ = [
    "MapContext", "MapError", "event_row", "node_row", "nodepool_row", "parse_quantity", "parse_time",
    "pdb_row", "pod_row", "podgroup_row", "queue_row", "resolve_workload", "vcjob_row",
]

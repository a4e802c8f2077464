"""What-if GPU scheduling simulator, checked against the FGD paper (Weng et al., USENIX ATC'23).

>>> result = run_simulation("pods.csv", "nodes.csv", "fgd", seed=42)  # doctest: +SKIP
>>> result.to_dict()["points"]  # doctest: +SKIP
"""

from gpuinsight.simulate.engine import (
    DEFAULT_REPORT_POINTS,
    LoadPoint,
    SimulationResult,
    format_table,
    run_simulation,
    simulate,
)
from gpuinsight.simulate.policies import list_policies
from gpuinsight.simulate.trace import TraceError, load_nodes, load_pods

__all__ = [
    "DEFAULT_REPORT_POINTS",
    "LoadPoint",
    "SimulationResult",
    "TraceError",
    "format_table",
    "list_policies",
    "load_nodes",
    "load_pods",
    "run_simulation",
    "simulate",
]

"""The fewest nodes a pool's current work could fit on: an exact bin-packing ILP (HiGHS).

Used as the yardstick for the binpack rule's greedy plan: ``gap = nodes after the plan -
optimal nodes``. Units are gangs or single pods (a gang moves whole); units that may not move
(MIG pods, gangs spread over several nodes) stay pinned to their node. Pools too large for a
quick exact answer return ``None`` and the caller falls back to the capacity bound.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

MAX_VARIABLES = 6000


@dataclass(frozen=True)
class Unit:
    gpus: float
    pinned_to: int | None = None  # node index it must stay on


def _highs() -> Any:
    import highspy

    # HiGHS prints a banner on stdout from C the first time; keep it off our output
    # (which may be JSON) by pointing file descriptor 1 at /dev/null for the construction.
    sys.stdout.flush()
    try:
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    except OSError:  # no usable stdout descriptor: nothing to protect
        h = highspy.Highs()
    else:
        try:
            os.dup2(devnull, 1)
            h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
    h.setOptionValue("output_flag", False)
    return h


def optimal_nodes(units: list[Unit], capacities: list[float], *, time_limit_s: float = 2.0) -> int | None:
    """Minimum number of nodes that can hold every unit, or None if too big or not solved."""
    if not capacities:
        return 0
    if len(units) * len(capacities) > MAX_VARIABLES:
        return None
    import highspy

    h = _highs()
    h.setOptionValue("time_limit", float(time_limit_s))
    nodes = range(len(capacities))
    y = [h.addBinary() for _ in nodes]
    x: dict[tuple[int, int], Any] = {}
    for u, unit in enumerate(units):
        allowed = [unit.pinned_to] if unit.pinned_to is not None else list(nodes)
        for n in allowed:
            x[u, n] = h.addBinary()
        h.addConstr(sum(x[u, n] for n in allowed) == 1)
    for n in nodes:
        load = [units[u].gpus * var for (u, m), var in x.items() if m == n]
        if load:
            h.addConstr(sum(load) <= capacities[n] * y[n])
    h.minimize(sum(y))
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return round(h.getObjectiveValue())

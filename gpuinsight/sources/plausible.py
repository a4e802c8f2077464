"""Bounds that separate real input from values that would move every figure.

A declaration (a timestamp, a GPU request, a queue weight, a count) outside these bounds is bad
input: the load stops naming the file and line or object and field, and writes nothing. Only
telemetry readings are dropped one by one instead (:mod:`gpuinsight.sources.dcgm`). The reasons
for each bound are in docs/collectors.md ("Bad input").
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# No GPU fleet data predates 2000; a timestamp before it is a unit mistake or a zero value (1970).
EARLIEST = datetime(2000, 1, 1)
EARLIEST_S = (EARLIEST - datetime(1970, 1, 1)).total_seconds()
# Clocks drift and time zones get mixed up, but data is never more than a day in the future.
FUTURE_SLACK = timedelta(days=1)
# Whole devices one container or node can hold: 8-GPU nodes time-sliced into up to 512 replicas
# each still fit; 8Ei, 1e23 or 2**64 do not.
MAX_DEVICES_PER_OBJECT = 4096
# Physical GPUs in one node: the most any instance type has (GCP a2-megagpu-16g, NVIDIA DGX-2 and
# HGX-2 boards: 16; AWS and Azure types have at most 8). A price catalog listing a larger node
# type raises it (sources/k8s/checks.py).
MAX_GPUS_PER_NODE = 16
# Cluster-wide resource lists (Volcano queue capability, PodGroup minResources).
MAX_DEVICES_PER_CLUSTER = 1 << 20
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def latest() -> datetime:
    """The latest plausible timestamp (naive UTC): now plus a day of clock skew."""
    return datetime.now(UTC).replace(tzinfo=None) + FUTURE_SLACK


def latest_s() -> float:
    return (latest() - datetime(1970, 1, 1)).total_seconds()


def time_problem(ts: datetime) -> str | None:
    """Why ``ts`` (naive UTC) cannot be a real timestamp, or None."""
    if ts < EARLIEST:
        return f"{ts.isoformat()} is before {EARLIEST.year}"
    if ts > latest():
        return f"{ts.isoformat()} is in the future"
    return None

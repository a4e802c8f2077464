"""One plan, several clusters: which state a finding's actions are built against and which
Kubernetes context (or kubectl dump, or EKS client) carries them out.

Every finding names its cluster (the ``--cluster`` name its data was loaded under), and so does
every action built for it. Nothing maps a cluster to a context by guessing: one context given
alone stands for a plan whose changes are all in one cluster; changes in several clusters need
each cluster's named (``--context CLUSTER=CTX``, repeated), and a change in a cluster with none
named is refused before anything is read or written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from gpuinsight.actions.state import ClusterState
from gpuinsight.errors import BadInput

T = TypeVar("T")

# a value for every cluster of a plan (a mapping), or one value for a plan of one cluster
PerCluster = T | Mapping[str, T] | None  # type: ignore[valid-type]
States = ClusterState | Mapping[str, ClusterState]


def action_cluster(action: dict[str, Any]) -> str:
    """The cluster an action changes ("" for an action recorded before actions named it)."""
    return str(action.get("cluster") or "")


def names(clusters: Iterable[str]) -> str:
    return ", ".join(sorted({c or "(unnamed)" for c in clusters}))


def per_cluster(value: Any, clusters: Iterable[str], *, what: str, flag: str) -> dict[str, Any]:
    """``value`` as {cluster: value} for the ``clusters`` that need one.

    A mapping is taken as it is (a cluster it does not name has none); a single value stands
    for the one cluster there is, and is refused when there are several (BadInput naming
    them and how to name each: ``flag CLUSTER=...``)."""
    wanted = sorted(set(clusters))
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if len(wanted) > 1:
        raise BadInput(f"the plan changes {len(wanted)} clusters ({names(wanted)}): one {what} cannot stand for "
                       f"all of them; name each cluster's: {flag} CLUSTER=... (repeated)")
    return {wanted[0]: value} if wanted else {}


def require(values: Mapping[str, T], cluster: str, *, what: str, flag: str) -> T:
    """The value named for ``cluster``; BadInput saying how to name it when there is none."""
    if cluster in values:
        return values[cluster]
    shown = cluster or "(unnamed)"
    raise BadInput(f"cluster {shown}: no {what} named for it; the plan changes it, so name one with "
                   f"{flag} {shown}=...{' (or ' + flag + ' ... alone for a plan of one cluster)' if not values else ''}; "
                   f"nothing was changed")


def parse_cluster_option(values: Sequence[str] | str | None, flag: str) -> str | dict[str, str] | None:
    """``--context CTX`` (one value, for a plan of one cluster) or ``--context CLUSTER=CTX``
    repeated (one per cluster). Mixing the two forms, or naming a cluster twice, is bad usage."""
    if values is None or isinstance(values, str):
        return values or None
    values = [v for v in values if v is not None]
    if not values:
        return None
    pairs = [v for v in values if "=" in v]
    if not pairs:
        if len(values) > 1:
            raise BadInput(f"{flag} given {len(values)} times: name each cluster's, {flag} CLUSTER=VALUE")
        return values[0]
    if len(pairs) != len(values):
        raise BadInput(f"{flag}: either one value alone or CLUSTER=VALUE for each cluster, not both")
    out: dict[str, str] = {}
    for item in pairs:
        cluster, _, value = item.partition("=")
        cluster, value = cluster.strip(), value.strip()
        if not cluster or not value:
            raise BadInput(f"{flag} {item!r}: expected CLUSTER=VALUE")
        if cluster in out:
            raise BadInput(f"{flag}: cluster {cluster} named twice")
        out[cluster] = value
    return out


def state_for(states: States, cluster: str) -> ClusterState | None:
    """The state of ``cluster`` (a single state stands only for its own cluster)."""
    if isinstance(states, ClusterState):
        return states if states.cluster == cluster else None
    return states.get(cluster)


def state_map(states: States) -> dict[str, ClusterState]:
    return {states.cluster: states} if isinstance(states, ClusterState) else dict(states)

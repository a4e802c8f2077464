"""Finding ids: the same finding, the same id, across runs (design.md: a hash of the rule and its
target, the target's cluster included)."""

from __future__ import annotations

import hashlib


def stable_id(rule: str, *parts: str | None) -> str:
    """A hash of a name and some parts: the same parts, the same id, across runs."""
    key = "|".join([rule, *[p or "" for p in parts]])
    # ids are DNS-label-like (plan files check them): scale_to_zero -> scale-to-zero-<hash>
    return f"{rule.replace('_', '-')}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def finding_id(rule: str, cluster: str, *target: str | None) -> str:
    """The id of a finding: the same finding, the same id, across runs (design.md: a hash of
    the rule and its target). The target's cluster is part of it: the same namespace and
    workload in two clusters are two findings. Every rule makes its ids here."""
    if not cluster:
        raise ValueError(f"{rule} finding: an id needs the cluster")
    return stable_id(rule, cluster, *target)

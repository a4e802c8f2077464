"""One explicit configuration object, passed down from the faces (CLI, notebook API).

Nothing reads module-level globals or environment variables except :meth:`Config.from_env`,
which only the CLI calls.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

DEFAULT_DB = "gpuinsight.duckdb"
# Long enough for a collection of a day of a large fleet to finish (docs/performance.md), short
# enough that a scheduled job stuck behind a hung writer fails the same hour.
DEFAULT_LOCK_TIMEOUT_S = 600.0
# the cluster name rows are stored under when no --cluster is given (and findings of frames
# without a cluster column belong to)
DEFAULT_CLUSTER = "default"


@dataclass(frozen=True)
class PrometheusConfig:
    url: str = ""
    bearer_token: str | None = None          # never logged or stored
    basic_auth: tuple[str, str] | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.25                  # first retry after ~2x this, doubling, capped at 8 s
    concurrency: int = 4
    max_points_per_series: int = 11_000      # Prometheus rejects more per range query
    # extra label matchers on every query, e.g. {"cluster": "prod-a"} on a multi-cluster Thanos
    matchers: dict[str, str] = field(default_factory=dict)
    # load chunks the server answered only partially (Thanos/Mimir warnings) instead of
    # leaving them out for a later run to re-read
    allow_partial: bool = False

    def redacted(self) -> dict[str, Any]:
        """What may appear in logs and the warehouse: no credentials, no header values."""
        return {"url": self.url, "auth": "bearer" if self.bearer_token else ("basic" if self.basic_auth else None),
                "headers": sorted(self.headers)}


@dataclass(frozen=True)
class Config:
    db_path: Path = Path(DEFAULT_DB)
    cluster: str = DEFAULT_CLUSTER
    catalog: str | None = None               # price catalog name; None = newest loaded
    window_days: float | None = None          # analysis window: the last N days of data; None = all
    # DuckDB's memory limit (a size like "8GB" or a share of RAM like "25%"; docs/performance.md);
    # None keeps DuckDB's own (80 % of RAM). Beyond it sorts, aggregates and windows spill to disk
    memory_limit: str | None = None
    s3_endpoint_url: str | None = None        # S3-compatible store for report uploads (MinIO, moto)
    # how long to wait for another process that holds the warehouse (docs/warehouse.md)
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
    progress: bool = False                   # progress bars (the CLI sets it on terminals only)
    debug: bool = False
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    rule_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    # labels that name a DCGM series' node, in order (docs/collectors.md, "Which node a GPU is on");
    # Hostname/hostname count only when they name a node kube-state-metrics or a dump knows
    node_labels: tuple[str, ...] = ("node", "kubernetes_node", "nodename", "Hostname", "hostname")

    def with_(self, **changes: Any) -> Config:
        return replace(self, **changes)

    @classmethod
    def from_env(cls, db: str | os.PathLike[str] | None = None, *,
                 default_db: str | os.PathLike[str] = DEFAULT_DB, **changes: Any) -> Config:
        """``db``, else ``$GPUINSIGHT_DB``, else ``default_db``; ``$GPUINSIGHT_MEMORY_LIMIT`` and
        ``$GPUINSIGHT_LOCK_TIMEOUT`` (seconds, or a duration like 30m) unless ``changes`` set them."""
        path = db or os.environ.get("GPUINSIGHT_DB") or default_db
        if os.environ.get("GPUINSIGHT_MEMORY_LIMIT") and "memory_limit" not in changes:
            changes["memory_limit"] = os.environ["GPUINSIGHT_MEMORY_LIMIT"]
        if os.environ.get("GPUINSIGHT_LOCK_TIMEOUT") and "lock_timeout_s" not in changes:
            changes["lock_timeout_s"] = lock_timeout(os.environ["GPUINSIGHT_LOCK_TIMEOUT"])
        return cls(db_path=Path(path), **changes)


def lock_timeout(text: str) -> float:
    """Seconds (``90``) or a duration (``30m``); a bad value is bad input."""
    from gpuinsight.errors import BadInput
    from gpuinsight.sql.registry import parse_duration

    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parse_duration(text).total_seconds()
        except ValueError:
            raise BadInput(f"GPUINSIGHT_LOCK_TIMEOUT={text!r}: seconds, or a duration like 30m") from None
    if not 0 <= seconds < 1e7:
        raise BadInput(f"GPUINSIGHT_LOCK_TIMEOUT={text!r}: between 0 and 1e7 seconds")
    return seconds

"""The DuckDB warehouse: schema migrations and idempotent loads."""

from gpuinsight.warehouse.db import Warehouse, connect
from gpuinsight.warehouse.migrations import migrate, schema_version

__all__ = ["Warehouse", "connect", "migrate", "schema_version"]

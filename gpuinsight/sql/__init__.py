"""SQL models: ``queries/*.sql`` files with a header, loaded and run by name."""

from gpuinsight.sql.registry import Param, Query, QueryRegistry, load_registry

__all__ = ["Param", "Query", "QueryRegistry", "load_registry"]

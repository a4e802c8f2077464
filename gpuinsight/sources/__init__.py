"""Sources: fetch data from the outside world and load it into the warehouse.

Each source declares its loading contracts (:class:`LoadContract`): target table, natural
key, write disposition and incremental cursor. Sources never decide anything.
"""

from gpuinsight.sources.base import LoadContract, LoadReport

__all__ = ["LoadContract", "LoadReport"]

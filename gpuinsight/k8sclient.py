"""The ``kubernetes`` client package, imported without the validator its dynamic client loads.

``import kubernetes`` (or any ``kubernetes.x``) runs the package's ``__init__``, which imports
``kubernetes.dynamic``; that imports the optional ``kubernetes_validate`` when it is installed
(the ``validate`` and ``test`` extras), which imports jsonschema's format checkers, and with
``rfc3987-syntax`` installed (jsonschema's ``format-nongpl`` extra, which Jupyter pulls in)
those compile about 40 grammars at import: seconds of CPU on every command that talks to a
cluster. gpuinsight uses ``kubernetes.client`` and ``kubernetes.config`` only, never the dynamic
client, so :func:`kubernetes` hides the validator while the package is imported (the dynamic
client then behaves as if it were not installed); :mod:`gpuinsight.actions.validate` imports it
itself, only where it validates.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

_VALIDATOR = "kubernetes_validate"


def kubernetes() -> ModuleType:
    """The imported ``kubernetes`` package (``.client``, ``.config``), imported on first use."""
    loaded = sys.modules.get("kubernetes")
    if loaded is not None:
        return loaded
    hide = _VALIDATOR not in sys.modules
    if hide:
        sys.modules[_VALIDATOR] = None  # type: ignore[assignment]  # `import` of it raises ImportError
    try:
        return importlib.import_module("kubernetes")
    finally:
        if hide and sys.modules.get(_VALIDATOR, False) is None:
            del sys.modules[_VALIDATOR]  # importable again, e.g. by gpuinsight.actions.validate

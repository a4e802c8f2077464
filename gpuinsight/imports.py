"""Imports that would cost seconds of CPU for parts of other packages gpuinsight never uses.

* ``import kubernetes`` (or any ``kubernetes.x``) runs the package's ``__init__``, which imports
  ``kubernetes.dynamic``; that imports the optional ``kubernetes_validate`` when it is installed
  (the ``validate`` and ``test`` extras), which imports jsonschema's format checkers (below).
  gpuinsight uses ``kubernetes.client`` and ``kubernetes.config`` only, never the dynamic
  client, so :func:`kubernetes` hides the validator while the package is imported (the dynamic
  client then behaves as if it were not installed); :mod:`gpuinsight.actions.validate` imports
  it itself, only where it validates.
* jsonschema's format checkers import ``rfc3987_syntax`` when it is installed (jsonschema's
  ``format-nongpl`` extra, which Jupyter pulls in), and it compiles about 40 Lark grammars at
  import, for the ``iri`` and ``iri-reference`` formats only: 2-3 s of CPU, and seconds more of
  system time in memory mappings, in every process that imports Altair (``report``, ``demo``).
  No schema gpuinsight or Altair validates uses those two formats (Vega-Lite's use ``uri``),
  so the command line does without them (:func:`without_iri_grammars`, called once by
  ``gpuinsight.cli.main``). A Python process of the user's own (a notebook) is left alone.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

_VALIDATOR = "kubernetes_validate"
_IRI_GRAMMARS = "rfc3987_syntax"


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


def without_iri_grammars() -> None:
    """For the rest of this process, jsonschema checks no ``iri``/``iri-reference`` format
    instead of compiling rfc3987-syntax's grammars (no effect if jsonschema is imported already)."""
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault(_IRI_GRAMMARS, None)  # type: ignore[arg-type]  # its import raises ImportError

"""A model's rows as typed records built from its header's ``-- columns:`` line.

:func:`row_type` gives one frozen class per model (a named tuple: attribute access, cheap to
build): reading a column the model does not declare is an ``AttributeError`` where it is read,
not a silent None. A class whose model has the columns of a key gets it as a property, with the
cluster: ``node_key`` (cluster, node), ``workload_key`` (cluster, namespace, workload) and
``pod_key`` (cluster, namespace, pod), so that callers index by typed, cluster-aware keys.

:func:`typed_rows` turns a frame into such rows: a frame from the warehouse holds exactly the
declared columns (the registry checks every answer); a frame built by hand (tests, a caller's
own) may leave declared columns out (they read as None) and any column it holds beyond the
declared ones is dropped.
"""

from __future__ import annotations

from collections import namedtuple
from functools import cache
from typing import Any

import polars as pl

from gpuinsight.keys import NodeKey, PodKey, WorkloadKey
from gpuinsight.sql.registry import Query, QueryRegistry, load_registry


class ModelRow(tuple):  # type: ignore[type-arg]
    """The base of every model's row class (see :func:`row_type`)."""

    __slots__ = ()
    model: str = ""
    _fields: tuple[str, ...] = ()

    def __getattr__(self, name: str) -> Any:  # only reached when no column or property has the name
        raise AttributeError(f"model {self.model} declares no column {name!r} (its columns: {', '.join(self._fields)})")


def key_cluster(row: Any) -> str:
    """The cluster part of a row's keys ("" when the row names none)."""
    return str(row.cluster or "")


_KEYS: tuple[tuple[str, tuple[str, ...], Any], ...] = (
    ("node_key", ("cluster", "node"), lambda r: NodeKey(key_cluster(r), r.node)),
    ("workload_key", ("cluster", "namespace", "workload"), lambda r: WorkloadKey(key_cluster(r), r.namespace, r.workload)),
    ("pod_key", ("cluster", "namespace", "pod"), lambda r: PodKey(key_cluster(r), r.namespace, r.pod)),
)


def _class_name(model: str) -> str:
    return "".join(part.title() for part in model.split("_")) + "Row"


def make_row_type(q: Query) -> type[ModelRow]:
    """The row class of a model: its declared columns as fields, its keys as properties."""
    base = namedtuple("_" + _class_name(q.name), q.columns)  # type: ignore[misc]  # noqa: PYI024
    attrs: dict[str, Any] = {"__slots__": (), "model": q.name, "__doc__": f"A row of the model {q.name}: {q.grain}."}
    for name, needs, key in _KEYS:
        if set(needs) <= set(q.columns):
            attrs[name] = property(key)
    return type(_class_name(q.name), (base, ModelRow), attrs)


@cache
def row_type(model: str) -> type[ModelRow]:
    """The row class of the package's model ``model`` (``queries/<model>.sql``)."""
    return make_row_type(_registry().get(model))


@cache
def _registry() -> QueryRegistry:
    """The package's models (their headers), read once per process."""
    return load_registry()


def typed_rows(model: str, frame: pl.DataFrame | None) -> list[Any]:
    """The frame's rows as ``model``'s row class (module docstring: absent and extra columns)."""
    if frame is None or frame.height == 0:
        return []
    cls = row_type(model)
    columns = cls._fields
    if tuple(frame.columns) != columns:
        frame = frame.select([pl.col(c) if c in frame.columns else pl.lit(None).alias(c) for c in columns])
    make = cls._make
    return [make(t) for t in frame.iter_rows()]


def make_row(model: str, **values: Any) -> Any:
    """One row of ``model`` from the columns given (the others None); a column the model does
    not declare is a TypeError."""
    cls = row_type(model)
    unknown = sorted(set(values) - set(cls._fields))
    if unknown:
        raise TypeError(f"model {model} declares no column(s) {', '.join(unknown)}")
    return cls._make(values.get(c) for c in cls._fields)


# a typed row of some model (annotations: which model is said where the row is read)
Row = ModelRow

"""Storing DCGM samples narrow: integer keys into dimension tables, measures as they are.

Migration ``019_narrow_samples.sql`` holds the samples in ``gpu_sample_facts``: per row the
GPU's identity (``gpu_keys``: cluster, UUID, MIG instance), its holder pod (``pod_keys``:
cluster, namespace, pod, '' for none), its node (``node_keys``) and its other labels
(``sample_labels``: MIG profile, GPU index, model name, container) as integers, the measures as
stored before. The view ``gpu_samples`` shows them as one wide table. Keys are given to new
dimension rows as they first appear and are never renumbered.

Every loader stores through here:

* :class:`SampleRows` is a batch as its distinct label sets (a small table) and its rows (an
  index into that table, the time and the measures): the Prometheus collector decodes answers
  straight into it, so no string is repeated per row; a wide ``gpu_samples``-shaped frame is
  split into one with :meth:`SampleRows.from_wide`.
* :func:`store_sample_rows` numbers the batch's label sets (upserting the dimensions), then
  replaces the GPU-steps the batch holds (the collectors' natural key: a GPU or MIG instance at
  a step, whatever pods held it) and inserts the rows, inside the caller's transaction.
* :func:`store_sample_relation` does the same in SQL for rows a query yields in the wide shape
  (a bulk import of Parquet files), without bringing them into Python.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

from gpuinsight.warehouse.db import registered

TS = pl.Datetime("us")
# The labels of a sample row, in the dimensions they are numbered by.
GPU_IDENTITY = ("cluster", "gpu_uuid", "mig_instance")
HOLDER = ("cluster", "namespace", "pod")
NODE = ("cluster", "node")
OTHER_LABELS = ("mig_profile", "gpu_index", "model_name", "container")
LABEL_COLUMNS = ("cluster", "gpu_uuid", "mig_instance", "namespace", "pod", "container", "node", "gpu_index",
                 "model_name", "mig_profile")
LABEL_TYPES: dict[str, pl.DataType] = {
    "cluster": pl.Utf8(), "gpu_uuid": pl.Utf8(), "mig_instance": pl.Int32(), "namespace": pl.Utf8(),
    "pod": pl.Utf8(), "container": pl.Utf8(), "node": pl.Utf8(), "gpu_index": pl.Int32(), "model_name": pl.Utf8(),
    "mig_profile": pl.Utf8(),
}
# The measures, in gpu_sample_facts' column order (step_s among them).
MEASURES = ("gr_active", "gr_active_max", "sm_active", "sm_active_max", "gpu_util", "fb_used_mib", "fb_used_max_mib",
            "fb_free_mib", "power_w", "step_s", "gr_active_min", "pcie_rx_bps", "pcie_tx_bps", "pcie_tx_max_bps",
            "nvlink_rx_bps")
MEASURE_TYPES: dict[str, pl.DataType] = {c: (pl.Int32() if c == "step_s" else pl.Float64()) for c in MEASURES}
KEYS = ("gpu_key", "pod_key", "node_key", "label_key")
FACT_COLUMNS = ("gpu_key", "ts", "pod_key", "node_key", "label_key", *MEASURES)
# The natural key of a sample: a GPU step per holder pod; a load replaces whole GPU steps.
NATURAL_KEY = ("cluster", "gpu_uuid", "mig_instance", "ts", "namespace", "pod")
LABEL_ID = "label_id"


@dataclass
class SampleRows:
    """A batch of samples: ``labels`` (one row per distinct label set, :data:`LABEL_COLUMNS`;
    other columns are carried but not stored) and ``rows`` (:data:`LABEL_ID`: the row of
    ``labels``; ``ts``; the measures). At most one row per GPU, holder pod and ``ts``."""

    labels: pl.DataFrame
    rows: pl.DataFrame

    @property
    def height(self) -> int:
        return self.rows.height

    @classmethod
    def empty(cls) -> SampleRows:
        return cls(pl.DataFrame(schema=LABEL_TYPES),
                   pl.DataFrame(schema={LABEL_ID: pl.UInt32(), "ts": TS, **MEASURE_TYPES}))

    @classmethod
    def from_wide(cls, frame: pl.DataFrame) -> SampleRows:
        """Split a ``gpu_samples``-shaped frame (extra label columns are kept with the labels);
        of rows with the same natural key the last one counts, as in a merge. Label sets are
        numbered in the order they first appear."""
        if frame.height == 0:
            return cls.empty()
        label_cols = [c for c in frame.columns if c not in MEASURES and c != "ts"]
        # the label strings as integer codes: deduplicating, grouping and numbering on them does
        # not hash a string per row (three times faster on a day of 10,000 GPUs)
        coded = frame.select(*[pl.col(c).cast(pl.Categorical).to_physical() if frame.schema[c] in (pl.String, pl.Categorical)
                               else pl.col(c) for c in label_cols], "ts")
        last = coded.select(pl.struct(list(NATURAL_KEY)).is_last_distinct()).to_series()
        if not last.all():
            frame, coded = frame.filter(last), coded.filter(last)
        sets = coded.select(label_cols).with_row_index("_row").group_by(label_cols, maintain_order=True).agg("_row")
        label_id = sets.select("_row").with_row_index(LABEL_ID).explode("_row").sort("_row")[LABEL_ID]
        labels = frame.select(pl.col(label_cols).gather(sets["_row"].list.first()))
        measures = [(pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c)
                    for c, t in MEASURE_TYPES.items()]
        return cls(labels, frame.select(pl.lit(label_id).alias(LABEL_ID), pl.col("ts").cast(TS), *measures))

    def wide(self) -> pl.DataFrame:
        """The ``gpu_samples``-shaped frame (labels repeated on every row)."""
        return self.rows.join(self.labels.with_row_index(LABEL_ID), on=LABEL_ID, how="left",
                              maintain_order="left").drop(LABEL_ID)

    def spans(self) -> pl.DataFrame:
        """Per cluster, the first and last ``ts`` of the batch (two rows each): what the
        rollups rebuild."""
        if self.height == 0:
            return pl.DataFrame(schema={"cluster": pl.Utf8(), "ts": TS})
        per = (self.rows.select(LABEL_ID, "ts")
               .join(self.labels.select("cluster").with_row_index(LABEL_ID), on=LABEL_ID)
               .group_by("cluster").agg(pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi")))
        return pl.concat([per.select("cluster", ts="lo"), per.select("cluster", ts="hi")])


_UPSERT_DIMENSIONS = """
INSERT INTO gpu_keys
SELECT (SELECT coalesce(max(gpu_key), 0) FROM gpu_keys) + row_number() OVER (ORDER BY cluster, gpu_uuid, mig_instance),
       cluster, gpu_uuid, mig_instance
FROM (SELECT DISTINCT cluster, gpu_uuid, mig_instance FROM {src}) s
ANTI JOIN gpu_keys k USING (cluster, gpu_uuid, mig_instance);

INSERT INTO pod_keys
SELECT (SELECT coalesce(max(pod_key), 0) FROM pod_keys) + row_number() OVER (ORDER BY cluster, namespace, pod),
       cluster, namespace, pod
FROM (SELECT DISTINCT cluster, namespace, pod FROM {src}) s
ANTI JOIN pod_keys k USING (cluster, namespace, pod);

INSERT INTO node_keys
SELECT (SELECT coalesce(max(node_key), 0) FROM node_keys) + row_number() OVER (ORDER BY cluster, node),
       cluster, node
FROM (SELECT DISTINCT cluster, node FROM {src} WHERE node IS NOT NULL) s
ANTI JOIN node_keys k USING (cluster, node);

INSERT INTO sample_labels
SELECT (SELECT coalesce(max(label_key), 0) FROM sample_labels)
           + row_number() OVER (ORDER BY mig_profile, gpu_index, model_name, container),
       mig_profile, gpu_index, model_name, container
FROM (SELECT DISTINCT mig_profile, gpu_index, model_name, container FROM {src}) s
WHERE NOT EXISTS (SELECT 1 FROM sample_labels l
                  WHERE l.mig_profile = s.mig_profile AND l.gpu_index IS NOT DISTINCT FROM s.gpu_index
                    AND l.model_name IS NOT DISTINCT FROM s.model_name AND l.container = s.container);
"""

# the keys of each label set of {src} (a relation with LABEL_COLUMNS and {lid}), dimensions upserted.
# Left joins from the label sets, each dimension looked up on its own: every label set has its
# keys (just numbered), and with inner joins DuckDB may join the dimensions to each other first
# on their shared cluster (a cross product of every GPU and pod of a cluster: 69 M rows, 26 CPU-s
# for 10,000 GPUs on the first load, when the new dimension rows have no statistics yet).
_KEYS_OF = """
SELECT s.{lid}, g.gpu_key, p.pod_key, n.node_key, l.label_key
FROM {src} s
LEFT JOIN gpu_keys g ON g.cluster = s.cluster AND g.gpu_uuid = s.gpu_uuid AND g.mig_instance = s.mig_instance
LEFT JOIN pod_keys p ON p.cluster = s.cluster AND p.namespace = s.namespace AND p.pod = s.pod
LEFT JOIN node_keys n ON n.cluster = s.cluster AND n.node = s.node
LEFT JOIN sample_labels l
  ON l.mig_profile = s.mig_profile AND l.gpu_index IS NOT DISTINCT FROM s.gpu_index
 AND l.model_name IS NOT DISTINCT FROM s.model_name AND l.container = s.container
"""


# labels a sample may lack (NULL); every other one is part of its identity
OPTIONAL_LABELS = ("node", "gpu_index", "model_name")


def _check_labels(labels: pl.DataFrame) -> pl.DataFrame:
    missing = [c for c in LABEL_COLUMNS if c not in labels.columns and c not in OPTIONAL_LABELS]
    if missing:
        raise ValueError(f"sample labels lack {missing}")  # a bug, not input
    return labels.select([(pl.col(c) if c in labels.columns else pl.lit(None)).cast(t).alias(c)
                          for c, t in LABEL_TYPES.items()])


def label_keys(con: duckdb.DuckDBPyConnection, labels: pl.DataFrame) -> pl.DataFrame:
    """The keys (:data:`KEYS`) of each row of ``labels``, in its order; dimension rows it lacks
    are added (inside the caller's transaction)."""
    frame = _check_labels(labels).with_row_index(LABEL_ID)
    with registered(con, "_gi_labels", frame.to_arrow()):
        con.execute(_UPSERT_DIMENSIONS.format(src="_gi_labels"))
        keys = con.sql(_KEYS_OF.format(src="_gi_labels", lid=LABEL_ID)).pl()
    if keys.height != frame.height or keys.select(pl.any_horizontal(pl.col(k).is_null() for k in KEYS if k != "node_key")
                                                  .any()).item():
        raise RuntimeError("sample labels without keys")  # a bug: every label set was just numbered
    return keys.sort(LABEL_ID).select([pl.col(k).cast(pl.Int32) for k in KEYS])


def fact_rows(samples: SampleRows, keys: pl.DataFrame) -> pl.DataFrame:
    """``samples``' rows with their label sets' keys, in :data:`FACT_COLUMNS` order."""
    idx = samples.rows[LABEL_ID].cast(pl.UInt32)
    return samples.rows.select(
        *[keys[k].gather(idx).alias(k) for k in ("gpu_key",)], "ts",
        *[keys[k].gather(idx).alias(k) for k in ("pod_key", "node_key", "label_key")], *MEASURES)


def store_sample_rows(con: duckdb.DuckDBPyConnection, samples: SampleRows | pl.DataFrame, *,
                      replace: bool = True) -> int:
    """Store a batch (a wide frame is split first); returns the rows stored.

    ``replace``: every stored row of a GPU step the batch holds goes first (a re-collection
    may hand a GPU step to other pods); without it the rows are appended (a bulk import of
    rows known to be new). Runs in the caller's transaction.
    """
    if isinstance(samples, pl.DataFrame):
        samples = SampleRows.from_wide(samples)
    if samples.height == 0:
        return 0
    facts = fact_rows(samples, label_keys(con, samples.labels))
    with registered(con, "_gi_facts", facts.to_arrow()):
        lo, hi = facts["ts"].min(), facts["ts"].max()
        # bounded by the batch's time span so that DuckDB skips the row groups of other days; a
        # batch of steps not stored yet (a collection moving on) has nothing to replace, and the
        # delete would still gather the batch's distinct GPU steps first
        if replace and con.execute("SELECT 1 FROM gpu_sample_facts WHERE ts BETWEEN ? AND ? LIMIT 1",
                                   [lo, hi]).fetchall():
            con.execute("DELETE FROM gpu_sample_facts AS t USING (SELECT DISTINCT gpu_key, ts FROM _gi_facts) AS b "
                        "WHERE t.gpu_key = b.gpu_key AND t.ts = b.ts AND t.ts BETWEEN ? AND ?", [lo, hi])
        con.execute(f"INSERT INTO gpu_sample_facts SELECT {', '.join(FACT_COLUMNS)} FROM _gi_facts")
    return facts.height


# A label set's 64-bit hash: rows are joined to their label set's keys on it rather than on the
# ten label columns (strings among them); used only when it tells the batch's label sets apart.
_LABEL_HASH = f"hash({', '.join(LABEL_COLUMNS)})"


def store_sample_relation(con: duckdb.DuckDBPyConnection, relation: str, params: Sequence[Any] = ()) -> int:
    """Append the rows of ``relation`` (a query or table function yielding ``gpu_samples``'
    columns; measures it lacks are NULL; a fixed text, its values bound as ``params``): their
    label sets are numbered and the rows inserted keyed, in SQL, without bringing them into
    Python. For rows known to be new (a bulk import); loads of data that may repeat go through
    :func:`store_sample_rows`. Returns the rows stored.

    The relation is read twice: its distinct label sets (numbered first), then every row, joined
    to its label set's keys by the label set's hash when no two of the batch's label sets share
    one (every row's label set is among them, so its hash names it), else on the labels."""
    src, bound = f"({relation})", list(params) or None
    have = set(con.sql(f"SELECT * FROM {src} LIMIT 0", params=bound).columns)
    labels = ", ".join(LABEL_COLUMNS)
    failed = False
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE _gi_label_sets AS SELECT row_number() OVER () AS _lid, "
                    f"{_LABEL_HASH} AS _h, * FROM (SELECT DISTINCT {labels} FROM {src})", bound)
        con.execute(_UPSERT_DIMENSIONS.format(src="_gi_label_sets"))
        con.execute("CREATE OR REPLACE TEMP TABLE _gi_label_keys AS SELECT s.*, k.* EXCLUDE (_lid) FROM _gi_label_sets s "
                    f"JOIN ({_KEYS_OF.format(src='_gi_label_sets', lid='_lid')}) k USING (_lid)")
        by_hash = con.execute("SELECT count(DISTINCT _h) = count(*) FROM _gi_label_keys").fetchall()[0][0]
        if by_hash:
            rows = f"(SELECT {_LABEL_HASH} AS _h, * FROM {src}) s JOIN _gi_label_keys k USING (_h)"
        else:
            rows = f"{src} s JOIN _gi_label_keys k ON " + " AND ".join(f"k.{c} IS NOT DISTINCT FROM s.{c}"
                                                                      for c in LABEL_COLUMNS)
        measures = ", ".join(f"s.{c}" if c in have else f"NULL::{'INTEGER' if c == 'step_s' else 'DOUBLE'}"
                             for c in MEASURES)
        row = con.execute(f"INSERT INTO gpu_sample_facts SELECT k.gpu_key, s.ts, k.pod_key, k.node_key, k.label_key, "
                          f"{measures} FROM {rows}", bound).fetchall()
    except BaseException:
        failed = True
        raise
    finally:
        # inside a transaction an error aborted, DuckDB refuses these too: that must not hide the error
        with contextlib.suppress(duckdb.Error) if failed else contextlib.nullcontext():
            con.execute("DROP TABLE IF EXISTS _gi_label_sets")
            con.execute("DROP TABLE IF EXISTS _gi_label_keys")
    return int(row[0][0]) if row else 0

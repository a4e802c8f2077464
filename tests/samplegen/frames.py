"""The fleet's DCGM samples as polars DataFrames in the warehouse `gpu_samples` shape.

This is what a collector would load from the emitted OpenMetrics (one sample per series and
step, so the `*_max` columns equal the values), produced without going through text.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import polars as pl

from .fleet import Fleet
from .signals import cell_blocks, cell_values

GPU_SAMPLES_SCHEMA: dict[str, pl.DataType] = {
    "cluster": pl.String(),
    "ts": pl.Datetime("us"),
    "gpu_uuid": pl.String(),
    "mig_instance": pl.Int32(),
    "mig_profile": pl.String(),
    "node": pl.String(),
    "gpu_index": pl.Int32(),
    "model_name": pl.String(),
    "namespace": pl.String(),
    "pod": pl.String(),
    "container": pl.String(),
    "gr_active": pl.Float64(),
    "gr_active_max": pl.Float64(),
    "sm_active": pl.Float64(),
    "sm_active_max": pl.Float64(),
    "gpu_util": pl.Float64(),
    "fb_used_mib": pl.Float64(),
    "fb_used_max_mib": pl.Float64(),
    "fb_free_mib": pl.Float64(),
    "power_w": pl.Float64(),
    "step_s": pl.Int32(),
}


def _block_frame(fleet: Fleet, c0: int, c1: int, k0: int, k1: int, pod_strings: pl.DataFrame) -> pl.DataFrame:
    v = cell_values(fleet, c0, c1, k0, k1)
    n_dev, n_k = v.gr.shape
    keep = ~v.gap.T.ravel()  # rows ordered by time, then device
    dev_rows = np.tile(np.arange(v.d0, v.d0 + n_dev, dtype=np.int64), n_k)[keep]
    sp = fleet.spec
    ts_us = (sp.start_s + sp.interval_s * np.arange(k0, k1, dtype=np.int64)) * 1_000_000
    flat = lambda a: a.T.ravel()[keep]  # noqa: E731
    static = fleet.devices.select(
        gpu_uuid="uuid", mig_instance=pl.col("mig_instance").cast(pl.Int32), mig_profile="mig_profile",
        node="node", gpu_index=pl.col("gpu_index").cast(pl.Int32), model_name="model_name",
    )[dev_rows]
    pods = pod_strings[flat(v.holder) + 1]
    gr, sm, fb = flat(v.gr), flat(v.sm), flat(v.fb)
    cols = {
        "ts": pl.Series(np.repeat(ts_us, n_dev)[keep]).cast(pl.Datetime("us")),
        "gr_active": gr, "gr_active_max": gr, "sm_active": sm, "sm_active_max": sm,
        "gpu_util": pl.Series(flat(v.util), nan_to_null=True),
        "fb_used_mib": fb, "fb_used_max_mib": fb, "fb_free_mib": flat(v.fb_free), "power_w": flat(v.power),
    }
    df = pl.concat([static, pods, pl.DataFrame(cols)], how="horizontal")
    return df.with_columns(cluster=pl.lit(sp.cluster), step_s=pl.lit(sp.interval_s, dtype=pl.Int32)).select(
        [pl.col(c).cast(t) for c, t in GPU_SAMPLES_SCHEMA.items()]
    )


def pod_string_table(fleet: Fleet) -> pl.DataFrame:
    """namespace/pod/container per pod row, shifted by one: row 0 is the unallocated GPU."""
    empty = pl.DataFrame({"namespace": [""], "pod": [""], "container": [""]})
    return pl.concat([empty, fleet.pods.select("namespace", pod="name", container="container")])


def gpu_sample_frames(fleet: Fleet, chunk_hours: float = 24) -> Iterator[pl.DataFrame]:
    """Yield the fleet's samples in `gpu_samples` shape, one DataFrame per `chunk_hours` of time.

    Rows: one per DCGM entity (whole GPU, or MIG instance with `mig_instance` = GPU_I_ID) and
    sample, minus the exporter gap.  Large fleets are computed in blocks of cells; within a
    block rows are ordered by time, then device.
    """
    sp = fleet.spec
    per_chunk = max(1, int(chunk_hours * 3600) // sp.interval_s)
    strings = pod_string_table(fleet)
    for k0 in range(0, sp.steps, per_chunk):
        k1 = min(sp.steps, k0 + per_chunk)
        parts = [_block_frame(fleet, c0, c1, k0, k1, strings) for c0, c1 in cell_blocks(fleet, k1 - k0)]
        yield parts[0] if len(parts) == 1 else pl.concat(parts, rechunk=False)

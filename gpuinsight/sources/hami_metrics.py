"""HAMi's per-container metrics -> ``gpu_samples`` rows: per-pod activity on GPUs HAMi shares,
where dcgm-exporter (which sees the device, not HAMi's containers) has no pod labels.

HAMi's vGPUmonitor (``cmd/vGPUmonitor/metrics.go``) publishes, per container and device:
``hami_container_device_utilization_ratio`` (the container's SM utilisation, 0..100, from
NVML's per-process samples) and ``hami_vgpu_memory_used_bytes`` (HAMi 2.9+; labels
``namespace``, ``pod``, ``container``, ``device_uuid``), or under ``--legacy-metrics`` and before
2.9 ``Device_utilization_desc_of_container`` and ``vGPU_device_memory_usage_in_bytes`` (labels
``podnamespace``, ``podname``, ``ctrname``, ``deviceuuid``). Each becomes a row of that pod on
that GPU: ``gr_active`` and ``sm_active`` = utilisation / 100 (summed over the pod's containers
on the device, at most 1), ``fb_used_mib`` = bytes / 2^20 (summed). A row dcgm-exporter gave for
the same GPU, pod and time wins. A reading outside 0..100 % or below 0 bytes is not a measurement:
dropped.
"""

from __future__ import annotations

import polars as pl

from gpuinsight.sources.prom.frames import TS, first_label

UTIL = ("hami_container_device_utilization_ratio", "Device_utilization_desc_of_container")
MEMORY = ("hami_vgpu_memory_used_bytes", "vGPU_device_memory_usage_in_bytes")
METRICS = (*UTIL, *MEMORY)


def hami_samples(series: pl.DataFrame, cluster: str, step_s: int, columns: dict[str, pl.DataType],
                 pod_node: dict[tuple[str, str], str] | None = None) -> pl.DataFrame:
    """Rows with ``columns`` (``gpu_samples``' and the node hint) from HAMi's container series."""
    if series.height == 0 or "metric" not in series.columns:
        return pl.DataFrame(schema=columns)
    s = series.filter(pl.col("metric").is_in(list(METRICS)))
    if s.height == 0:
        return pl.DataFrame(schema=columns)
    rows = s.select(
        pl.col("metric").is_in(list(UTIL)).alias("_util"), pl.col("ts"), pl.col("value"),
        first_label(s, "device_uuid", "deviceuuid").alias("gpu_uuid"),
        first_label(s, "exported_namespace", "namespace", "podnamespace").alias("namespace"),
        first_label(s, "exported_pod", "pod", "podname").alias("pod"),
        first_label(s, "exported_container", "container", "ctrname").alias("container"),
    ).filter(pl.col("gpu_uuid").is_not_null() & pl.col("pod").is_not_null() & pl.col("namespace").is_not_null()
             & pl.col("value").is_finite() & (pl.col("value") >= 0)
             & (~pl.col("_util") | (pl.col("value") <= 100)))
    if rows.height == 0:
        return pl.DataFrame(schema=columns)
    out = rows.group_by("gpu_uuid", "ts", "namespace", "pod").agg(
        (pl.col("value").filter(pl.col("_util")).sum() / 100.0).clip(0, 1).alias("gr_active"),
        pl.col("_util").any().alias("_has_util"),
        (pl.col("value").filter(~pl.col("_util")).sum() / 2**20).alias("fb_used_mib"),
        (~pl.col("_util")).any().alias("_has_mem"),
        pl.col("container").sort().first().alias("container"),
    ).with_columns(
        pl.when(pl.col("_has_util")).then(pl.col("gr_active")).alias("gr_active"),
        pl.when(pl.col("_has_mem")).then(pl.col("fb_used_mib")).alias("fb_used_mib"),
    )
    nodes = pod_node or {}
    out = out.with_columns(
        pl.struct("namespace", "pod").map_elements(lambda r: nodes.get((r["namespace"], r["pod"])),
                                                   return_dtype=pl.Utf8).alias("node"),
        pl.col("gr_active").alias("gr_active_max"), pl.col("gr_active").alias("gr_active_min"),
        pl.col("gr_active").alias("sm_active"), pl.col("gr_active").alias("sm_active_max"),
        (pl.col("gr_active") * 100).alias("gpu_util"), pl.col("fb_used_mib").alias("fb_used_max_mib"),
        pl.lit(-1, dtype=pl.Int32).alias("mig_instance"), pl.lit("").alias("mig_profile"),
        pl.lit(cluster).alias("cluster"), pl.lit(int(step_s), dtype=pl.Int32).alias("step_s"),
    )
    return out.select([(pl.col(c) if c in out.columns else pl.lit(None)).cast(t).alias(c)
                       for c, t in columns.items()]).with_columns(pl.col("ts").cast(TS))

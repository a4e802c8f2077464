"""The report's own models cut their answers in the warehouse to what the charts draw: the cells
the heatmap shows, the hour the activity chart shows. Each gives what the chart's own reduction
of the full answer gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import gpuinsight as gi
from gpuinsight.reports.charts import heatmap, heatmap_cells
from gpuinsight.reports.signals import typical_hour

# The timeline as it was read from the raw samples (per pod and step the pod's whole GPUs, then
# averaged over the pods): the pod-steps the model reads now must give the same steps.
FROM_SAMPLES = """
WITH names AS (SELECT DISTINCT cluster, namespace, pod FROM pod_gpu_allocations WHERE namespace = $ns AND workload = $wl),
per_pod AS (
    SELECT g.cluster, g.namespace, g.pod, g.ts, max(g.step_s) AS step_s, avg(g.gr_active) AS gr_active,
           min(coalesce(g.gr_active_min, g.gr_active)) AS gr_active_min, max(g.gr_active_max) AS gr_active_max,
           avg(g.fb_used_mib) AS fb_used_mib, sum(g.pcie_rx_bps) AS pcie_rx_bps, sum(g.nvlink_rx_bps) AS nvlink_rx_bps
    FROM gpu_samples g JOIN names n ON n.cluster = g.cluster AND n.namespace = g.namespace AND n.pod = g.pod
    WHERE g.mig_instance < 0 GROUP BY ALL)
SELECT p.ts, max(p.step_s) AS step_s, avg(p.gr_active) AS gr_active, min(p.gr_active_min) AS gr_active_min,
       max(p.gr_active_max) AS gr_active_max, avg(p.fb_used_mib) AS fb_used_mib, avg(p.pcie_rx_bps) AS pcie_rx_bps,
       avg(p.nvlink_rx_bps) AS nvlink_rx_bps, avg(c.cpu_cores) AS cpu_cores, avg(pd.cpu_request) AS cpu_request
FROM per_pod p
LEFT JOIN pod_cpu_samples c ON c.cluster = p.cluster AND c.namespace = p.namespace AND c.pod = p.pod AND c.ts = p.ts
LEFT JOIN (SELECT cluster, namespace, name, max(cpu_request) AS cpu_request FROM pods GROUP BY ALL) pd
  ON pd.cluster = p.cluster AND pd.namespace = p.namespace AND pd.name = p.pod
GROUP BY p.ts ORDER BY p.ts
"""


def same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert_frame_equal(a, b, check_dtypes=False, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize("params", [
    {}, {"max_nodes": 5, "max_cells": 40}, {"max_nodes": 1, "max_cells": 1}, {"max_cells": 200},
    {"since": "2026-11-01T07:00:00", "until": "2026-11-02T05:00:00", "max_nodes": 7, "max_cells": 30},
    {"since": "2030-01-01T00:00:00"},
])
def test_heatmap_cells_are_the_charts_cut_of_the_node_hours(sample_warehouse: Path, params: dict[str, Any]) -> None:
    with gi.open(sample_warehouse, read_only=True) as g:
        window = {k: v for k, v in params.items() if k in ("since", "until")}
        cut = {k: v for k, v in params.items() if k.startswith("max_")}
        cells = g.query("gpu_heatmap_cells", **params)
        mine = heatmap_cells(g.query("gpu_heatmap", **window), **cut)
    assert cells.columns == mine.columns
    if mine.is_empty():
        assert cells.is_empty()
        return
    same(cells, mine)
    assert cells.get_column("n").n_unique() == min(cut.get("max_nodes", 200), int(cells["nodes"][0]))
    assert cells.height <= cut.get("max_cells", 4800) or cells["bin_hours"][0] >= 168
    # the chart drawn from either is the same chart
    assert heatmap(cells).to_dict() == heatmap(mine).to_dict()


def test_the_typical_hour_is_picked_in_the_warehouse_from_the_pod_steps(sample_warehouse: Path) -> None:
    with gi.open(sample_warehouse, read_only=True) as g:
        workloads = g.sql("SELECT DISTINCT namespace, workload FROM pod_gpu_allocations "
                          "WHERE workload IS NOT NULL ORDER BY ALL").rows()
        assert len(workloads) > 10
        for ns, wl in workloads:
            steps = g.query("workload_activity_timeline", namespace=ns, workload=wl)
            same(steps, g.sql(FROM_SAMPLES, {"ns": ns, "wl": wl}))
            hour = g.query("workload_activity_timeline", namespace=ns, workload=wl, typical_hour=True)
            same(hour, typical_hour(steps))
            if steps.height:
                assert hour.height and hour.get_column("ts").dt.truncate("1h").n_unique() == 1


def test_the_typical_hour_of_hours_equally_far_from_the_median_is_the_earliest() -> None:
    # four whole hours; the median (0.5) lies between 0.6 (the first hour) and 0.4 (the second, a
    # little above it in floats, so a little nearer): equally far, whatever the sum order
    ts = pl.datetime_range(pl.datetime(2026, 1, 1), pl.datetime(2026, 1, 1, 3, 30), "30m", eager=True)
    timeline = pl.DataFrame({"ts": ts, "gr_active": [0.6, 0.6, 0.1 + 0.2 + 0.1, 0.4, 0.9, 0.9, 0.1, 0.1]})
    assert typical_hour(timeline).get_column("ts").to_list() == ts[:2].to_list()

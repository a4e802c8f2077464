"""Where the models' time goes: each materialized model's rebuild, then the rules' heaviest query
(``workload_gpu_profile``) under EXPLAIN ANALYZE with its costliest operators, and its
per-workload quantiles computed three ways on the same samples: exact (``quantile_cont``, as the
model does), binned (a histogram per workload: activity to 0.001, framebuffer to 1 MiB) and
approximate (DuckDB's ``approx_quantile``, a t-digest), with each one's error against exact.

    python bench/models_profile.py [--gpus 200] [--days 30] [--interval 60] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUANTILES = ("gr_p50", "gr_p95", "gr_p99", "sm_p95", "sm_p99", "fb_p95_mib", "fb_p99_mib")
KEY = "cluster, namespace, workload_kind, workload"
# The per-workload samples, as workload_gpu_profile.sql joins them (its CTEs `names` and `s`).
SAMPLES = """
WITH names AS (
    SELECT cluster, namespace, pod, any_value(workload_kind) AS workload_kind, any_value(workload) AS workload
    FROM pod_gpu_allocations GROUP BY cluster, namespace, pod
), s AS (
    SELECT n.cluster, n.namespace, n.workload_kind, n.workload, g.gr_active, g.sm_active, g.fb_used_mib
    FROM gpu_samples g JOIN names n ON n.cluster = g.cluster AND n.namespace = g.namespace AND n.pod = g.pod
    WHERE g.pod <> ''
)"""
EXACT = f"""{SAMPLES}
SELECT {KEY}, quantile_cont(gr_active, [0.5, 0.95, 0.99]) AS gr, quantile_cont(sm_active, [0.95, 0.99]) AS sm,
       quantile_cont(fb_used_mib, [0.95, 0.99]) AS fb
FROM s GROUP BY ALL"""
# Histogram quantiles: one hash aggregation counts each workload's samples per bin (activity
# ratios to 0.001, framebuffer to 1 MiB; three grouping sets over one scan), then
# quantile_cont's interpolation between the bins holding ranks floor(h) and ceil(h),
# h = (n - 1) q, over the cumulative counts. Exact up to the rounding: error <= half a bin.
BINNED = f"""{SAMPLES},
b AS (
    SELECT {KEY}, CASE WHEN grouping(gr) = 0 THEN 'gr' WHEN grouping(sm) = 0 THEN 'sm' ELSE 'fb' END AS m,
           coalesce(gr, sm, fb) AS v, count(*) AS c
    FROM (SELECT {KEY}, round(gr_active, 3) AS gr, round(sm_active, 3) AS sm, round(fb_used_mib) AS fb FROM s)
    GROUP BY GROUPING SETS (({KEY}, gr), ({KEY}, sm), ({KEY}, fb))
), cum AS (
    SELECT *, sum(c) OVER (PARTITION BY {KEY}, m ORDER BY v) AS hi, sum(c) OVER (PARTITION BY {KEY}, m) AS n
    FROM b WHERE v IS NOT NULL
), pos AS (
    SELECT cum.*, qs.q, (cum.n - 1) * qs.q AS h
    FROM cum JOIN (VALUES ('gr', 0.5), ('gr', 0.95), ('gr', 0.99), ('sm', 0.95), ('sm', 0.99), ('fb', 0.95),
                          ('fb', 0.99)) qs(m, q) USING (m)
), r AS (
    SELECT {KEY}, m, q, any_value(h) AS h, min(v) FILTER (WHERE hi > floor(h)) AS x0,
           min(v) FILTER (WHERE hi > ceil(h)) AS x1
    FROM pos GROUP BY ALL
)
SELECT {KEY}, list(x0 + (h - floor(h)) * (x1 - x0) ORDER BY q) FILTER (WHERE m = 'gr') AS gr,
       list(x0 + (h - floor(h)) * (x1 - x0) ORDER BY q) FILTER (WHERE m = 'sm') AS sm,
       list(x0 + (h - floor(h)) * (x1 - x0) ORDER BY q) FILTER (WHERE m = 'fb') AS fb
FROM r GROUP BY ALL"""


def profile_operators(con, sql: str, params: dict, out: Path, top: int = 5) -> tuple[float, list[str]]:
    """Run ``sql`` with DuckDB's JSON profiler; (CPU seconds, the costliest operators described)."""
    import json

    con.execute("SET enable_profiling = 'json'")
    con.execute("SET profiling_output = ?", [str(out)])
    try:
        con.execute(sql, params).fetchall()
    finally:
        con.execute("RESET enable_profiling")
    doc = json.loads(out.read_text())
    ops: list[tuple[float, str]] = []

    def walk(node: dict) -> None:
        info = node.get("extra_info", {})
        what = info.get("Aggregates") or info.get("Conditions") or info.get("Table") or ""
        what = ", ".join(what) if isinstance(what, list) else str(what)
        ops.append((node.get("timing", 0.0), f"{node['name']} ({node.get('intermediate_rows', 0):,} rows) {what}"))
        for child in node.get("children", []):
            walk(child)

    for node in doc["operator"]:
        walk(node)
    cpu = float(doc["query"]["cpu_time"])
    return cpu, [f"{secs:6.2f} s CPU ({secs / cpu:4.0%})  {desc[:150]}" for secs, desc in sorted(ops, reverse=True)[:top]]


def main() -> None:
    from bench.fleet_warehouse import add_fleet_args

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fleet_args(ap, gpus=200, days=30, interval=60)
    a = ap.parse_args()


    from bench.fleet_warehouse import load_fleet, open_for, write_fleet_files

    with tempfile.TemporaryDirectory(prefix="gi-bench-") as tmp:
        files = write_fleet_files(a.workdir or Path(tmp) / "fleet", a.gpus, a.days, a.interval)
        db = Path(tmp) / "bench.duckdb"
        with open_for(db, files) as g:
            load_fleet(g, files)
            n = g.wh.count("gpu_samples")
            print(f"fleet: {files.gpus:,} GPUs, {a.days:g} d at {a.interval} s: {n:,} sample rows")
            print("materialized models (rebuild, in dependency order):")
            with g.wh.transaction() as con:
                for q in g.registry.build_order():
                    t0 = time.perf_counter()
                    g.registry.build(con, q)  # as a refresh does (a partitioned model in slices of hours)
                    print(f"  {q.name:<22} {time.perf_counter() - t0:6.2f} s  {g.wh.count(q.name):>12,} rows")
            q = g.registry.get("workload_gpu_profile")
            params = q.bind({})
            t0 = time.perf_counter()
            exact = g.sql(q.text, params)  # the model itself, not the answer refresh keeps
            print(f"workload_gpu_profile: {time.perf_counter() - t0:.2f} s, {exact.height:,} workloads")
            cpu, ops = profile_operators(g.wh.con, q.text, params, Path(tmp) / "profile.json")
            print(f"  profiled (DuckDB JSON profiler, the EXPLAIN ANALYZE figures): {cpu:.1f} s CPU; costliest operators:")
            for line in ops:
                print(f"    {line}")
            print("  the per-workload quantiles alone (the same samples, the same join):")
            results = {}
            for label, sql in (("exact quantile_cont", EXACT), ("binned (histogram) quantiles", BINNED),
                               ("approx_quantile (t-digest)", EXACT.replace("quantile_cont", "approx_quantile"))):
                t0 = time.perf_counter()
                results[label] = g.wh.con.sql(sql).pl().sort("cluster", "namespace", "workload_kind", "workload")
                took = time.perf_counter() - t0
                err = ""
                if results[label] is not results.get("exact quantile_cont"):
                    ref = results["exact quantile_cont"]
                    worst = {}
                    for m in ("gr", "sm", "fb"):
                        a = ref[m].list.to_array(3 if m == "gr" else 2).arr.to_list()
                        b = results[label][m].list.to_array(3 if m == "gr" else 2).arr.to_list()
                        worst[m] = max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))
                    err = (f"; largest error vs exact: GR {worst['gr']:.4f}, SM {worst['sm']:.4f}, "
                           f"FB {worst['fb']:.2f} MiB")
                print(f"    {label:<30} {took:6.2f} s{err}")

if __name__ == "__main__":
    main()

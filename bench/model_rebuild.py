"""Time the rebuild of named SQL models on an existing warehouse, one after the other in one process.

Each model is rebuilt as ``refresh`` rebuilds it (a ``materialize: table`` model into its table,
a ``materialize: default`` model's whole-window answer into ``<name>__default``), so list a
model's dependencies before it when the warehouse lacks them. Prints per model: wall seconds,
CPU seconds (user + system) and the process's peak RSS so far.

    python bench/model_rebuild.py WAREHOUSE analysis_window,pod_gpu_allocations,workload_input_profile \
        [--memory-limit 6GB]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _cpu_s() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def main() -> None:
    from gpuinsight.sql import load_registry
    from gpuinsight.sql.registry import _execute_ddl
    from gpuinsight.warehouse.db import connect

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("db", type=Path, help="the warehouse (changed: the models' tables are rebuilt)")
    ap.add_argument("models", help="comma-separated model names, dependencies first")
    ap.add_argument("--memory-limit", help="DuckDB's memory_limit, e.g. 6GB (default: DuckDB's own)")
    a = ap.parse_args()
    registry = load_registry()
    queries = [registry.get(name) for name in a.models.split(",") if name]
    con = connect(a.db, memory_limit=a.memory_limit)  # the package's settings: no extension fetched
    for q in queries:
        t0, c0 = time.perf_counter(), _cpu_s()
        if q.keep_default:
            _execute_ddl(con, q, table=q.default_table, params=q.bind({}))
        else:
            _execute_ddl(con, q)
        peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        rows = con.execute(f'SELECT count(*) FROM "{q.default_table if q.keep_default else q.name}"').fetchone()
        print(f"{q.name:28s} {time.perf_counter() - t0:8.2f} s {_cpu_s() - c0:8.2f} CPU-s  peak {peak_gb:5.2f} GB  "
              f"{rows[0] if rows else 0:>12,} rows", flush=True)
    con.close()


if __name__ == "__main__":
    main()

"""Time the rebuild of named SQL models on an existing warehouse, one after the other.

Each model is rebuilt as ``refresh`` rebuilds it (``QueryRegistry.build``: a ``materialize:
table`` model into its table, a partitioned one slice of hours at a time, a ``materialize:
default`` model's whole-window answer into ``<name>__default``) and committed, so list a model's
dependencies before it when the warehouse lacks them. Prints per model: wall seconds, CPU seconds
(user + system), peak RSS and rows.

``--baseline-code DIR`` builds each model twice, each in a fresh process (its peak RSS its own:
``wait4``): first with the package and queries of another source tree (e.g. a worktree of an
older commit), kept aside as ``<name>__baseline``, then with this tree's; then compares the two
tables' rows: integers, strings and timestamps equal, doubles to ``--rel-tol`` relative (a
parallel sum adds in another order from one build to the next), and drops the baseline's table.

    python bench/model_rebuild.py WAREHOUSE analysis_window,pod_gpu_allocations,workload_input_profile \\
        [--memory-limit 6GB] [--baseline-code DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if TYPE_CHECKING:
    from gpuinsight.sql import Query

BASELINE_SUFFIX = "__baseline"


def _cpu_s() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def _table_of(q: Query) -> str:
    return q.default_table if q.keep_default else q.name


def build_one(db: Path, name: str, memory_limit: str | None, keep_as: str | None,
              slice_samples: int | None = None) -> dict:
    """Build one model (this process's gpuinsight) and commit; with ``keep_as`` rename its table."""
    from gpuinsight.sql import load_registry
    from gpuinsight.sql import registry as registry_module
    from gpuinsight.warehouse.db import connect

    if slice_samples is not None:
        registry_module.SLICE_SAMPLES = slice_samples

    registry = load_registry()
    q = registry.get(name)
    con = connect(db, memory_limit=memory_limit)  # the package's settings: no extension fetched
    threads = con.execute("SELECT current_setting('threads')").fetchone()
    t0, c0 = time.perf_counter(), _cpu_s()
    con.execute("BEGIN TRANSACTION")
    table = registry.build(con, q)
    con.execute("COMMIT")
    took, cpu = time.perf_counter() - t0, _cpu_s() - c0
    rows = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()
    if keep_as:
        con.execute(f'DROP TABLE IF EXISTS "{keep_as}"')
        con.execute(f'ALTER TABLE "{table}" RENAME TO "{keep_as}"')
    con.close()
    return {"seconds": took, "cpu_s": cpu, "rows": rows[0] if rows else 0, "threads": threads[0] if threads else None}


def compare(con: duckdb.DuckDBPyConnection, new: str, old: str, rel_tol: float) -> dict:
    """Rows of ``new`` missing from ``old`` and back, doubles compared to ``rel_tol`` relative:
    joined on the other columns when they name one row in each table, else by EXCEPT ALL with the
    doubles rounded to that many significant digits."""
    cols = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? "
                       "AND schema_name = 'main' ORDER BY column_index", [new]).fetchall()
    doubles = [c for c, t in cols if t in ("DOUBLE", "FLOAT")]
    others = [c for c, t in cols if t not in ("DOUBLE", "FLOAT")]
    n_new, n_old = (con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in (new, old))
    q = ", ".join(f'"{c}"' for c in others) or "1"
    unique = all(con.execute(f'SELECT count(*) = count(DISTINCT ({q})) FROM "{t}"').fetchone()[0]
                 for t in (new, old)) if others else False
    if unique:
        on = " AND ".join(f'n."{c}" IS NOT DISTINCT FROM o."{c}"' for c in others)
        close = " AND ".join(f'(n."{c}" IS NOT DISTINCT FROM o."{c}" OR abs(n."{c}" - o."{c}") <= '
                             f'{rel_tol} * greatest(abs(n."{c}"), abs(o."{c}")))' for c in doubles) or "true"
        differ = con.execute(f'SELECT count(*) FROM (SELECT *, true AS _in FROM "{new}") n '
                             f'FULL JOIN (SELECT *, true AS _in FROM "{old}") o ON {on} '
                             f'WHERE n._in IS NULL OR o._in IS NULL OR NOT ({close})').fetchone()[0]
        how = "joined on the other columns"
    else:
        digits = max(1, round(-math.log10(rel_tol)))
        sel = ", ".join([f'"{c}"' for c in others] + [
            f'CASE WHEN "{c}" = 0 OR NOT isfinite("{c}") THEN "{c}" '
            f'ELSE round("{c}", {digits - 1} - floor(log10(abs("{c}")))::INTEGER) END' for c in doubles])
        differ = sum(con.execute(f'SELECT count(*) FROM (SELECT {sel} FROM "{a}" EXCEPT ALL SELECT {sel} FROM "{b}")'
                                 ).fetchone()[0] for a, b in ((new, old), (old, new)))
        how = f"EXCEPT ALL both ways, doubles rounded to {digits} significant digits"
    return {"rows": n_new, "baseline_rows": n_old, "differ": differ, "how": how}


def _child(code: Path, db: Path, name: str, memory_limit: str | None, keep_as: str | None,
           slice_samples: int | None = None) -> dict:
    cmd = [sys.executable, __file__, str(db), name, "--child-code", str(code)]
    if slice_samples is not None:
        cmd += ["--slice-samples", str(slice_samples)]
    if memory_limit:
        cmd += ["--memory-limit", memory_limit]
    if keep_as:
        cmd += ["--keep-as", keep_as]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{name} with {code}: failed")
    r = json.loads(out.decode().strip().splitlines()[-1])
    r.update(process_s=time.perf_counter() - t0, process_cpu_s=usage.ru_utime + usage.ru_stime,
             peak_gb=usage.ru_maxrss / 2**20)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("db", type=Path, help="the warehouse (changed: the models' tables are rebuilt)")
    ap.add_argument("models", help="comma-separated model names, dependencies first")
    ap.add_argument("--memory-limit", default=os.environ.get("GPUINSIGHT_MEMORY_LIMIT"),
                    help="DuckDB's memory_limit, e.g. 6GB (default: $GPUINSIGHT_MEMORY_LIMIT, else DuckDB's own)")
    ap.add_argument("--baseline-code", type=Path, help="also build each model with this source tree, compare")
    ap.add_argument("--rel-tol", type=float, default=1e-9, help="doubles equal to this relative tolerance")
    ap.add_argument("--slice-samples", type=int,
                    help="this tree's SLICE_SAMPLES for the models partitioned by hour (default: its own)")
    ap.add_argument("--child-code", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--keep-as", help=argparse.SUPPRESS)
    a = ap.parse_args()
    names = [n for n in a.models.split(",") if n]
    if a.child_code:  # one build with the package of that tree
        sys.path.insert(0, str(a.child_code))
        print(json.dumps(build_one(a.db, names[0], a.memory_limit, a.keep_as, a.slice_samples)))
        return
    if not a.baseline_code:
        for name in names:
            r = build_one(a.db, name, a.memory_limit, None, a.slice_samples)
            peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
            print(f"{name:28s} {r['seconds']:8.2f} s {r['cpu_s']:8.2f} CPU-s  peak {peak_gb:5.2f} GB (so far)  "
                  f"{r['rows']:>12,} rows  ({r['threads']} threads)", flush=True)
        return
    from gpuinsight.sql import load_registry
    from gpuinsight.warehouse.db import connect

    here = Path(__file__).resolve().parents[1]
    registry = load_registry()
    print(f"memory_limit {a.memory_limit or 'DuckDB default'}; each build a fresh process, the baseline's first")
    for name in names:
        table = _table_of(registry.get(name))
        base = _child(a.baseline_code, a.db, name, a.memory_limit, table + BASELINE_SUFFIX)
        mine = _child(here, a.db, name, a.memory_limit, None, a.slice_samples)
        with open("/proc/loadavg") as fh:
            load = " ".join(fh.read().split()[:3])
        con = connect(a.db, memory_limit=a.memory_limit)
        cmp = compare(con, table, table + BASELINE_SUFFIX, a.rel_tol)
        con.execute(f'DROP TABLE "{table}{BASELINE_SUFFIX}"')
        con.close()
        for label, r in ((str(a.baseline_code), base), ("this tree", mine)):
            print(f"{name:22s} {label:34s} build {r['seconds']:7.2f} s {r['cpu_s']:7.2f} CPU-s | process "
                  f"{r['process_s']:7.2f} s {r['process_cpu_s']:7.2f} CPU-s peak {r['peak_gb']:5.2f} GB | "
                  f"{r['rows']:>11,} rows ({r['threads']} threads)", flush=True)
        print(f"{name:22s} ratio baseline/this: {base['seconds'] / mine['seconds']:.2f}x wall, "
              f"{base['cpu_s'] / mine['cpu_s']:.2f}x CPU, peak {base['peak_gb']:.2f} -> {mine['peak_gb']:.2f} GB; "
              f"rows {cmp['baseline_rows']:,} -> {cmp['rows']:,}, {cmp['differ']:,} differ ({cmp['how']}, "
              f"rel tol {a.rel_tol:g}); load average {load}", flush=True)


if __name__ == "__main__":
    main()

"""What a daily export costs against exporting everything, on a copy of a loaded warehouse.

A team that keeps a Parquet lake (Athena, Trino, Spark) runs ``gpuinsight export --to LAKE`` after
each day's collection. On a copy of ``WAREHOUSE`` (e.g. the one ``bench/pipeline.py --keep-db``
leaves) this script takes the last day's samples and hourly rows out, then times, each as a fresh
``gpuinsight export`` process (wall, CPU of user + system, peak RSS by ``wait4``):

1. the first export into an empty folder (every day partition written);
2. the same export again, nothing changed;
3. the export after the last day's rows are back, as a day's load adds them (the day's export);
4. ``--full`` (every day partition written again).

With ``--baseline-code DIR`` (e.g. a worktree of an older commit) the first export is also timed
with that tree's package into another empty folder, side by side. The last line:
``export: <GPUs> GPUs, a day's export: <s> s, <cpu> CPU-s = <pct> % of the first export's CPU``.

    python bench/export.py WAREHOUSE [--workdir DIR] [--baseline-code DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.fleet_warehouse import copy_warehouse  # noqa: E402
from bench.pipeline import run_stage  # noqa: E402

# the tables a day's load adds rows to, and their time columns
DAY_TABLES = {"gpu_sample_facts": "ts", "gpu_hourly_facts": "hour"}


def export_stage(name: str, tree: Path, args: list[str], workdir: Path) -> dict:
    """``gpuinsight export ARGS`` with the package of source tree ``tree``, as a fresh process
    (``run_stage``: wall time, CPU, its own peak RSS); with what it says of ``gpu_samples``."""
    code = (f"import sys; sys.path.insert(0, {str(tree)!r}); from gpuinsight.cli import main; "
            "sys.argv = ['gpuinsight', *sys.argv[1:]]; main()")
    r = run_stage(name, [sys.executable, "-c", code, "export", *args], workdir)
    said = next((line for line in r["stdout"].splitlines() if line.startswith("gpu_samples: ")), "")
    return {**r, "name": name, "gpu_samples": said.split("(", 1)[-1].rstrip(")")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("warehouse", type=Path)
    ap.add_argument("--workdir", type=Path, help="where the copy and the lakes go (default: a temporary folder)")
    ap.add_argument("--baseline-code", type=Path, help="another source tree whose first export is timed beside")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuinsight-export-bench-", dir=a.workdir) as tmp:
        work = Path(tmp)
        db = copy_warehouse(a.warehouse, work / "copy.duckdb")
        con = duckdb.connect(str(db))
        gpus = con.execute("SELECT count(DISTINCT (cluster, gpu_uuid)) FROM gpu_keys").fetchall()[0][0]
        last = con.execute("SELECT max(ts)::DATE FROM gpu_sample_facts").fetchall()[0][0]
        for table, col in DAY_TABLES.items():
            con.execute(f"CREATE TABLE last_day_{table} AS SELECT * FROM {table} WHERE {col} >= $d", {"d": last})
            con.execute(f"DELETE FROM {table} WHERE {col} >= $d", {"d": last})
        con.execute("CHECKPOINT")
        con.close()
        print(f"warehouse: {a.warehouse} ({gpus:,} GPUs); the day taken out and added back: {last}", flush=True)
        rows = []
        if a.baseline_code:
            rows.append(export_stage("baseline: first export", a.baseline_code.resolve(),
                                     ["--db", str(db), "--to", str(work / "lake-baseline")], work))
        lake = ["--db", str(db), "--to", str(work / "lake")]
        rows.append(export_stage("first export (empty folder)", HERE.parent, lake, work))
        rows.append(export_stage("again, nothing changed", HERE.parent, lake, work))
        con = duckdb.connect(str(db))
        for table in DAY_TABLES:
            con.execute(f"INSERT INTO {table} SELECT * FROM last_day_{table}")
            con.execute(f"DROP TABLE last_day_{table}")
        con.execute("CHECKPOINT")
        con.close()
        rows.append(day := export_stage("after the day's rows are added", HERE.parent, lake, work))
        rows.append(export_stage("--full", HERE.parent, [*lake, "--full"], work))
    print(f"{'export':34s} {'seconds':>8s} {'CPU s':>7s} {'peak RSS':>9s}  gpu_samples")
    for r in rows:
        print(f"{r['name']:34s} {r['seconds']:8.1f} {r['cpu_s']:7.1f} {r['peak_mb'] / 1024:7.2f} GB  {r['gpu_samples']}")
    first = next(r for r in rows if r["name"].startswith("first"))
    print(f"export: {gpus:,} GPUs, a day's export: {day['seconds']:.1f} s, {day['cpu_s']:.1f} CPU-s "
          f"= {100 * day['cpu_s'] / first['cpu_s']:.1f} % of the first export's CPU ({first['cpu_s']:.1f} CPU-s)")


if __name__ == "__main__":
    main()

"""`recommend` at fleet scale, cold and warm: the rules engine (frames from the SQL models, rules,
actions, the plan stored) on a generated fleet of about 10,000 GPUs with its Volcano objects.

The warehouse is built once (``bench/fleet_warehouse.py``); then a fresh process opens it and
runs ``recommend`` twice: the first run is cold (new process: DuckDB's buffer pool empty, the
rules' modules imported on first use; the OS file cache is not dropped), the second warm.
A third, warm fetch of the frames alone shows the SQL models' share.

    python bench/recommend.py [--gpus 10000] [--days 7] [--interval 300] [--workdir DIR]

``--cli`` times the commands a daily job runs instead, each a fresh process as the CronJob starts
it (imports included): ``gpuinsight recommend --format json`` and ``gpuinsight report`` on the
warehouse ``--db`` (wall, CPU and peak RSS from ``wait4``), ``--rounds`` times, interleaved with
the same commands of each other source tree given with ``--code DIR`` (e.g. a worktree of an
older commit) so that both share the machine's load. It then checks the trees agree: the
recommendation JSON byte for byte, and the report's content: its page text with the plan id and
the time it was generated masked and numbers to 6 significant digits, each chart's spec and data
rows in a canonical order (DuckDB's parallel sums differ in the last digits from run to run,
which can swap two equal totals and reorder a group_by's rows even between two runs of the
same code).

    python bench/recommend.py --cli --db WAREHOUSE [--code OLD_TREE] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def child(db: Path) -> dict:
    import gpuinsight as gi

    runs = []
    with gi.open(db) as g:
        for _ in range(2):  # cold, then warm
            t0, c0 = time.perf_counter(), time.process_time()
            plan = g.recommend()
            # CPU time counts DuckDB's worker threads too: on a busy machine it is the steadier figure
            runs.append({"recommend_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                         "rules": dict(Counter(r.rule for r in plan.recommendations)),
                         "saving": plan.total_monthly_savings_usd, "by_basis": plan.savings_by_basis})

        t0 = time.perf_counter()
        g.rule_frames()  # the share of a warm run spent in the SQL models
        frames_s = time.perf_counter() - t0
    return {"runs": runs, "frames_s": frames_s, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_cli(code: Path, args: list[str], out: Path) -> dict:
    """``python -m gpuinsight.cli ARGS`` of the source tree ``code`` in a fresh process (stdout
    to ``out``): wall, CPU (user + system, its threads included) and peak RSS from ``wait4``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    t0 = time.perf_counter()
    with open(out, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "gpuinsight.cli", *args], cwd=code, env=env, stdout=fh,
                                stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"[{code}] gpuinsight {' '.join(args)} failed: {err.decode()[-2000:]}")
    return {"s": time.perf_counter() - t0, "cpu": usage.ru_utime + usage.ru_stime, "mb": usage.ru_maxrss / 1024}


def report_content(path: Path) -> tuple[str, dict]:
    """What a report shows, comparable across runs (see the module docstring): the page text
    and the charts' specs with their data."""
    import re

    specs_re = re.compile(r'<script type="application/json" id="gi-specs">(.*?)</script>', re.S)
    text = path.read_text(encoding="utf-8")
    found = specs_re.search(text)
    specs = json.loads(found.group(1).replace("<\\/", "</")) if found else {}

    def num6(m: re.Match[str]) -> str:
        try:
            return f"{float(m.group(0).replace(',', '')):.6g}"
        except ValueError:
            return m.group(0)

    page = re.sub(r"\d[\d,]*\.?\d*", num6, re.sub(r"plan-\d{8}-\d{6}|<p>generated [^<]*</p>", "(when)",
                                                      specs_re.sub("", text)))
    names: dict[str, str] = {}

    def canon(x: object, key: str = "") -> object:
        if isinstance(x, float):
            return float(f"{x:.6g}")
        if isinstance(x, list):
            items = [canon(v) for v in x]
            return sorted(items, key=lambda v: json.dumps(v, sort_keys=True)) if key in ("sort", "rows") else items
        if not isinstance(x, dict):
            return x
        if key == "datasets":  # named by a hash of their rows as written: renamed by their canonical rows
            out = {}
            for name, rows in x.items():
                rows = canon(rows, "rows")
                names[name] = "data-" + hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]
                out[names[name]] = rows
            return out
        return {k: canon(v, k) for k, v in x.items()}

    canonical = canon(specs)
    spec_text = json.dumps(canonical, sort_keys=True)
    for old, new in names.items():
        spec_text = spec_text.replace(old, new)
    return page, json.loads(spec_text)


def cli_main(a: argparse.Namespace) -> None:
    trees = [ROOT, *[c.resolve() for c in a.code]]
    runs: dict[tuple[Path, str], list[dict]] = {(t, c): [] for t in trees for c in ("recommend", "report")}
    with tempfile.TemporaryDirectory(prefix="gi-bench-") as tmp:
        outs = {t: Path(tmp) / f"tree{i}" for i, t in enumerate(trees)}
        for folder in outs.values():
            folder.mkdir()
        print(f"{a.db} ({a.db.stat().st_size / 1e9:.2f} GB); {a.rounds} rounds, each command a fresh process, the "
              f"trees interleaved; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
        for _ in range(a.rounds):
            for t in trees:
                runs[t, "recommend"].append(run_cli(t, ["--db", str(a.db), "recommend", "--format", "json"],
                                                    outs[t] / "recommend.json"))
                runs[t, "report"].append(run_cli(t, ["--db", str(a.db), "report", "--out", str(outs[t] / "report.html")],
                                                 outs[t] / "report.out"))
        print(f"{'tree':<44} {'command':<10} {'wall s':>7} {'CPU s':>7} {'peak MB':>8}  (median of {a.rounds})")
        for (t, cmd), rs in runs.items():
            print(f"{str(t):<44} {cmd:<10} {statistics.median(r['s'] for r in rs):7.2f} "
                  f"{statistics.median(r['cpu'] for r in rs):7.2f} {statistics.median(r['mb'] for r in rs):8.0f}")
        first = outs[trees[0]]
        plan = (first / "recommend.json").read_bytes()
        content = report_content(first / "report.html")
        for t in trees[1:]:
            same_plan = (outs[t] / "recommend.json").read_bytes() == plan
            theirs = report_content(outs[t] / "report.html")
            same_report = theirs == content
            print(f"vs {t}: recommendation JSON {'the same, byte for byte' if same_plan else 'DIFFERENT'} "
                  f"({len(plan):,} bytes, {len(json.loads(plan))} findings); report content "
                  f"{'the same' if same_report else 'DIFFERENT'} ({len(content[1])} charts)")
            if not same_report:  # say where
                differ = sorted(k for k in {*content[1], *theirs[1]} if content[1].get(k) != theirs[1].get(k))
                print(f"  differing: {'the page text, ' if theirs[0] != content[0] else ''}charts {', '.join(differ)}")
            for cmd in ("recommend", "report"):
                new, old = (statistics.median(r["cpu"] for r in runs[x, cmd]) for x in (trees[0], t))
                print(f"  {cmd}: CPU {new:.2f} s here vs {old:.2f} s there ({old / new:.2f}x)")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


def main() -> None:
    from bench.fleet_warehouse import add_fleet_args

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fleet_args(ap, gpus=10_000, days=7, interval=300)
    ap.add_argument("--db", type=Path, help="an existing warehouse to run on (skips generating and loading)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--cli", action="store_true", help="time `recommend --format json` and `report` as fresh processes")
    ap.add_argument("--code", type=Path, action="append", default=[],
                    help="with --cli: also run this source tree's commands, interleaved, and compare the outputs")
    ap.add_argument("--rounds", type=int, default=3, help="with --cli: runs of each command per tree")
    a = ap.parse_args()
    if a.cli:
        if a.db is None:
            ap.error("--cli needs --db")
        cli_main(a)
        return
    if a.child:
        print(json.dumps(child(a.child)))
        return
    from bench.fleet_warehouse import build_warehouse, write_fleet_files

    with tempfile.TemporaryDirectory(prefix="gi-bench-") as tmp:
        db = a.db
        if db is None:
            files = write_fleet_files(a.workdir or Path(tmp) / "fleet", a.gpus, a.days, a.interval)
            db = Path(tmp) / "bench.duckdb"
            info = build_warehouse(db, files)
            print(f"fleet: {files.gpus:,} GPUs, {a.days:g} days at {a.interval} s, {files.sample_rows:,} sample rows, "
                  f"{files.meta['pods']:,} pods, Volcano objects from kubectl dumps "
                  f"(load {info['load_s']:.1f} s, models {info['refresh_s']:.1f} s)")
        res = subprocess.run([sys.executable, __file__, "--child", str(db)], capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(res.stderr[-3000:])
        r = json.loads(res.stdout.strip().splitlines()[-1])
    for label, run in zip(("cold", "warm"), r["runs"], strict=True):
        print(f"recommend {label}: {run['recommend_s']:6.2f} s end to end (frames, rules, actions, plan stored), "
              f"{run['cpu_s']:.2f} s CPU  target < 10 s: {'met' if run['recommend_s'] < 10 else 'NOT met'}; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"  of a warm run, fetching the frames from the SQL models: {r['frames_s']:.2f} s")
    first = r["runs"][0]
    print(f"{sum(first['rules'].values())} findings ({dict(sorted(first['rules'].items()))}), "
          f"${first['saving']:,.0f}/month ({first['by_basis']}); child peak RSS {r['maxrss_mb']:,.0f} MB")


if __name__ == "__main__":
    main()

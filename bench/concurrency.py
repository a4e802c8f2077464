"""Writers and readers of one warehouse at once, as separate `gpuinsight` processes.

Each round starts from a copy of a warehouse holding the sample fleet and launches, all at once,
W writers (`collect kubernetes` of the sample dump with its pods listed K times, each under its
own cluster name) and R readers (`query fleet_summary`, `recommend --format json`, `export`, in
turn). It prints, per round: exit codes, how many processes waited for the lock (and said so),
the longest wait, the wall time; whether every reader saw a whole state (the nodes of 0..W
loads); and the rows lost: pods and nodes the writers loaded that are not in the file at the end
(must be 0). docs/warehouse.md describes the model being measured.

    .venv/bin/python bench/concurrency.py --writers 4 --readers 8 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPUINSIGHT = str(Path(sys.executable).with_name("gpuinsight"))
READERS = (["query", "fleet_summary", "--format", "json"], ["recommend", "--format", "json"], ["export", "--to", "{lake}"])


def dump(folder: Path, copies: int, tag: str) -> tuple[Path, int]:
    from gpuinsight.paths import sample_data_dir

    src = sample_data_dir() / "kubectl"
    folder.mkdir(parents=True)
    pods = json.loads((src / "pods.json").read_text())
    items = []
    for k in range(copies):
        for p in pods["items"]:
            q = json.loads(json.dumps(p))
            q["metadata"]["uid"] = f"{tag}-{k}-{p['metadata']['uid']}"
            q["metadata"]["name"] = f"{p['metadata']['name']}-r{k}"
            items.append(q)
    (folder / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    shutil.copy(src / "nodes.json", folder / "nodes.json")
    return folder, len(items)


def counts(db: Path) -> dict[str, int]:
    from gpuinsight.warehouse import Warehouse

    with Warehouse(db, read_only=True) as wh:
        return {t: wh.count(t) for t in ("nodes", "pods")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--copies", type=int, default=5, help="times each writer lists the sample's 44 pods")
    a = ap.parse_args()
    import gpuinsight as gi

    with tempfile.TemporaryDirectory(prefix="gi-concurrency-") as tmp:
        work = Path(tmp)
        base = work / "base.duckdb"
        with gi.open(base) as g:
            g.load_sample()
        before = counts(base)
        dumps = [dump(work / f"dump{i}", a.copies, f"w{i}") for i in range(a.writers)]
        env = {**os.environ, "GPUINSIGHT_LOCK_TIMEOUT": "900"}
        print(f"{a.writers} writers x {a.readers} readers, {a.rounds} rounds; each writer loads "
              f"{dumps[0][1]} pods and 22 nodes; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        lost_total = 0
        for r in range(a.rounds):
            db = work / f"round{r}.duckdb"
            shutil.copyfile(base, db)
            t0 = time.perf_counter()
            commands = [("writer", [GPUINSIGHT, "collect", "kubernetes", "--from-dir", str(folder), "--cluster", f"c{i}",
                                    "--db", str(db)]) for i, (folder, _) in enumerate(dumps)]
            for j in range(a.readers):
                args = [x.replace("{lake}", str(work / f"lake{r}-{j}")) for x in READERS[j % len(READERS)]]
                commands.append((args[0], [GPUINSIGHT, *args, "--db", str(db)]))
            procs = []
            for k, (role, cmd) in enumerate(commands):  # output to files: a full pipe would stall a process
                out, err = open(work / f"{r}-{k}.out", "w+"), open(work / f"{r}-{k}.err", "w+")  # noqa: SIM115
                procs.append((role, time.perf_counter(), out, err, subprocess.Popen(cmd, stdout=out, stderr=err, env=env)))
            results = []
            for role, started, out, err, p in procs:
                p.wait()
                ended = time.perf_counter()
                out.seek(0)
                err.seek(0)
                results.append((role, p.returncode, out.read(), err.read(), ended - started))
                out.close()
                err.close()
            wall = time.perf_counter() - t0
            codes = sorted({rc for _, rc, _, _, _ in results})
            waited = sum("waiting for it" in err for _, _, _, err, _ in results)
            whole = [json.loads(out)[0]["nodes"] in {before["nodes"] + 22 * k for k in range(a.writers + 1)}
                     for role, rc, out, _, _ in results if role == "query" and rc == 0]
            after = counts(db)
            expected = {"nodes": before["nodes"] + 22 * a.writers, "pods": before["pods"] + sum(n for _, n in dumps)}
            lost = sum(max(0, expected[t] - after[t]) for t in expected)
            lost_total += lost
            slowest = max(results, key=lambda x: x[4])
            print(f"round {r + 1}: exit codes {codes}; {waited}/{len(results)} waited (said so); "
                  f"readers saw a whole state {sum(whole)}/{len(whole)}; rows lost {lost}; wall {wall:.1f} s "
                  f"(slowest: {slowest[0]} {slowest[4]:.1f} s)")
            for role, rc, _, err, _ in results:
                if rc != 0:
                    print(f"  {role} exit {rc}: {err.strip().splitlines()[-1][:200]}")
        print(f"rows lost over {a.rounds} rounds: {lost_total}")


if __name__ == "__main__":
    main()

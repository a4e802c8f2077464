"""The write path (docs/warehouse.md) tried as an adversarial user would, with real processes.

A writer holds the warehouse file alone and writes in one transaction with the model rebuild,
checkpointed before it reports success; readers open it read-only, alongside one another, and
wait (saying so) for a writer. Faults are injected into real ``gpuinsight`` processes
(tests/faults.py): a filesystem with little room at several sizes, SIGKILL at several moments,
DuckDB out of memory, the file replaced under a writer, a second writer, a read-only filesystem.
After each, the warehouse holds its state from before the command or the complete state after
it, and the command exited 0 only for the complete one: no row is lost. Run with ``-s`` for the
figures (writers x readers, faults injected, rows lost).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import gpuinsight as gi
from gpuinsight.paths import sample_data_dir
from gpuinsight.sql import load_registry
from gpuinsight.warehouse import Warehouse
from tests.faults import GPUINSIGHT, layer, run_read_only, run_with_little_room

SAMPLE_DUMP = sample_data_dir() / "kubectl"
SAMPLE_PODS = len(json.loads((SAMPLE_DUMP / "pods.json").read_text())["items"])
SAMPLE_NODES = len(json.loads((SAMPLE_DUMP / "nodes.json").read_text())["items"])
VOLATILE = ("ingest_state", "model_state")  # times of the load itself


def state(db: Path) -> tuple[dict[str, int], tuple[float, ...], str]:
    """Rows per table, the headline figures (rounded to cents), and the models' status."""
    with Warehouse(db, read_only=True) as wh:
        tables = [r[0] for r in wh.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' ORDER BY 1").fetchall()]
        counts = {t: wh.count(t) for t in tables if t not in VOLATILE}
        registry = load_registry()
        status = registry.status(wh.con)
        if status == "outdated":  # never built
            return counts, (), status
        s = registry.run(wh.con, "fleet_summary").row(0, named=True)
        figures = tuple(round(float(s[k] or 0), 2) for k in ("gpus", "gpu_hours", "allocated_gpu_hours",
                                                             "used_gpu_hours", "monthly_waste_usd"))
        return counts, figures, status


def lost_rows(got: tuple[dict[str, int], tuple[float, ...], str], want: tuple[dict[str, int], tuple[float, ...], str]
              ) -> int:
    return sum(max(0, n - got[0].get(t, 0)) for t, n in want[0].items())


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUINSIGHT, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def copy_db(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return dest


def dump_with_pods(folder: Path, copies: int) -> Path:
    """The sample's kubectl dump with its pods listed ``copies`` times under new UIDs and names:
    a load that takes a while to write."""
    folder.mkdir(parents=True, exist_ok=True)
    pods = json.loads((SAMPLE_DUMP / "pods.json").read_text())
    items = []
    for k in range(copies):
        for p in pods["items"]:
            q = json.loads(json.dumps(p))
            q["metadata"]["uid"] = f"{p['metadata']['uid'][:-6]}{k:06d}"
            q["metadata"]["name"] = f"{p['metadata']['name']}-r{k}"
            items.append(q)
    (folder / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    shutil.copy(SAMPLE_DUMP / "nodes.json", folder / "nodes.json")
    return folder


def holds_open(pid: int, path: Path) -> bool:
    """Has process ``pid`` the file ``path`` open (Linux /proc)?"""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) == str(path):
                return True
        except OSError:
            continue
    return False


def wait_until_open(proc: subprocess.Popen[str], path: Path, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if holds_open(proc.pid, path):
            return True
        time.sleep(0.01)
    return False


@pytest.fixture(scope="module")
def base(sample_warehouse: Path) -> Path:
    """The sample fleet in a fresh warehouse (tests/conftest.py): copied before any write."""
    return sample_warehouse


@pytest.fixture(scope="module")
def collected(base: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """The states before and after `collect kubernetes` of the sample dump as cluster prod."""
    db = copy_db(base, tmp_path_factory.mktemp("ref") / "fleet.duckdb")
    res = cli("collect", "kubernetes", "--from-dir", str(SAMPLE_DUMP), "--cluster", "prod", "--db", str(db))
    assert res.returncode == 0, res.stderr
    before, after = state(base), state(db)
    assert after[0]["pods"] == before[0]["pods"] + SAMPLE_PODS and after[2] == before[2] == "current"
    return before, after


# -- faults ------------------------------------------------------------------------------------

ROOMS = (0, 1 << 20, 4 << 20, 8 << 20, 9 << 20, 64 << 20)  # bytes free after the warehouse


def test_collect_on_a_full_disk_keeps_the_previous_state_or_loads_everything(
        base: Path, collected: tuple[Any, Any], tmp_path: Path) -> None:
    before, after = collected
    outcomes = []
    for room in ROOMS:
        run = run_with_little_room([GPUINSIGHT, "collect", "kubernetes", "--from-dir", str(SAMPLE_DUMP), "--cluster",
                                    "prod", "--db", f"{{dir}}/{base.name}"], [base], room, tmp_path / str(room))
        got = state(run.after / base.name)
        assert got in (before, after), (room, run.stderr)
        if run.returncode == 0:
            assert got == after and "loaded" in run.stdout
        else:
            assert run.returncode == 1 and run.stdout == "", run.stdout  # no success line
            assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
            assert "No space left" in run.stderr or "too large" in run.stderr.lower(), run.stderr
        outcomes.append((room >> 20, run.returncode, "after" if got == after else "before", lost_rows(got, after)
                         if run.returncode == 0 else lost_rows(got, before)))
    print(f"\nfull disk ({layer()}): (MiB free, exit, state, rows lost) {outcomes}")
    assert outcomes[0][1] != 0 and outcomes[-1][1] == 0, "the sweep must include a failure and a success"
    assert all(o[3] == 0 for o in outcomes)


def test_demo_on_a_nearly_full_disk_reports_success_only_for_a_whole_warehouse(base: Path, tmp_path: Path) -> None:
    """At 20 MiB the demo used to print its whole summary and exit 0 with most of its data lost
    (a WAL deleted after a rename); at 8 MiB it cannot fit."""
    complete = {t: n for t, n in state(base)[0].items() if t != "recommendations"}
    outcomes = []
    for room in (8 << 20, 20 << 20):
        run = run_with_little_room([GPUINSIGHT, "demo", "--out", "{dir}/d"], [], room, tmp_path / str(room))
        db = run.after / "d" / "demo.duckdb"
        counts = {t: n for t, n in state(db)[0].items() if t != "recommendations"} if db.exists() else {}
        whole = counts == complete
        empty = not any(counts.get(t) for t in ("nodes", "pods", "gpu_samples", "prices", "events"))
        if run.returncode == 0:
            assert whole and "recommendations" in run.stdout and (run.after / "d" / "report.html").exists()
        else:
            assert run.returncode == 1 and "wrote" not in run.stdout, run.stdout
            assert "No space left" in run.stderr or "too large" in run.stderr.lower(), run.stderr
            assert whole or empty, counts  # the previous state (none), or all of it committed
        outcomes.append((room >> 20, run.returncode, "whole" if whole else "empty" if empty else "PARTIAL"))
    print(f"\ndemo on a small disk ({layer()}): (MiB free, exit, warehouse) {outcomes}")


def test_a_killed_writer_leaves_the_previous_state_or_the_complete_load(base: Path, tmp_path: Path) -> None:
    dump = dump_with_pods(tmp_path / "dump", 10)
    before = state(base)
    reference = copy_db(base, tmp_path / "ref" / "fleet.duckdb")
    assert cli("collect", "kubernetes", "--from-dir", str(dump), "--db", str(reference)).returncode == 0
    after = state(reference)
    outcomes = []
    for delay in (0.0, 0.3, 0.7, 1.2):
        db = copy_db(base, tmp_path / f"k{delay}" / "fleet.duckdb")
        proc = subprocess.Popen([GPUINSIGHT, "collect", "kubernetes", "--from-dir", str(dump), "--db", str(db)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert wait_until_open(proc, db)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        got = state(db)
        assert got in (before, after), delay
        outcomes.append((delay, proc.returncode, "after" if got == after else "before"))
    print(f"\nSIGKILL after the writer opened the file: (s, exit, state) {outcomes}")
    assert any(rc == -signal.SIGKILL for _, rc, _ in outcomes)


def test_out_of_memory_inside_the_transaction_is_reported_as_itself(base: Path, tmp_path: Path) -> None:
    db = copy_db(base, tmp_path / "fleet.duckdb")
    before = state(db)
    res = cli("collect", "kubernetes", "--from-dir", str(dump_with_pods(tmp_path / "dump", 4)), "--db", str(db),
              env={"GPUINSIGHT_MEMORY_LIMIT": "8MB"})
    assert res.returncode == 1
    assert "Out of Memory Error" in res.stderr and "TransactionContext" not in res.stderr, res.stderr
    assert state(db) == before


def test_a_warehouse_replaced_under_a_writer_is_a_failure_not_a_lost_write(base: Path, tmp_path: Path) -> None:
    db = copy_db(base, tmp_path / "fleet.duckdb")
    other = copy_db(base, tmp_path / "other.duckdb")
    proc = subprocess.Popen([GPUINSIGHT, "collect", "kubernetes", "--from-dir", str(dump_with_pods(tmp_path / "d", 4)),
                             "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_until_open(proc, db)
    os.replace(other, db)  # what the old demo did to a warehouse under a running collect
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and out == "", out
    assert "was replaced by another file while this process wrote it" in err, err
    print(f"\nfile replaced under a writer: exit {proc.returncode}: {err.strip()[:160]}")


# -- concurrency -------------------------------------------------------------------------------

def test_writers_and_readers_at_once(base: Path, tmp_path: Path) -> None:
    """Two writers (two clusters' dumps) and three readers started together: every one exits 0,
    the readers each see a whole state, and the file ends with both loads."""
    db = copy_db(base, tmp_path / "fleet.duckdb")
    dumps = [dump_with_pods(tmp_path / f"dump{i}", 3) for i in range(2)]
    nodes0 = state(db)[0]["nodes"]
    env = {**os.environ, "GPUINSIGHT_LOCK_TIMEOUT": "240"}
    writers = [subprocess.Popen([GPUINSIGHT, "collect", "kubernetes", "--from-dir", str(d), "--cluster", f"c{i}",
                                 "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for i, d in enumerate(dumps)]
    readers = [subprocess.Popen([GPUINSIGHT, *args, "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
               for args in (["query", "fleet_summary", "--format", "json"], ["query", "fleet_summary", "--format", "json"],
                            ["export", "--to", str(tmp_path / "lake")])]
    results = [(p, *p.communicate(timeout=300)) for p in writers + readers]
    for p, _, err in results:
        assert p.returncode == 0, (p.args, err)
    waited = sum("waiting for it" in err for _, _, err in results)
    for _, out, _ in results[2:4]:
        nodes = json.loads(out)[0]["nodes"]
        assert nodes in (nodes0, nodes0 + SAMPLE_NODES, nodes0 + 2 * SAMPLE_NODES), nodes  # before, one load, both
    final = state(db)
    assert final[0]["nodes"] == nodes0 + 2 * SAMPLE_NODES and final[2] == "current"
    print(f"\nwriters x readers at once: 2 x 3, all exit 0, {waited} waited for the lock with a message")


def test_readers_share_the_file_and_work_on_a_read_only_filesystem(base: Path, tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    db = copy_db(base, folder / "fleet.duckdb")
    readers = [subprocess.Popen([GPUINSIGHT, "query", "fleet_summary", "--format", "json", "--db", str(db)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in readers:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and json.loads(out)[0]["nodes"] == SAMPLE_NODES and "waiting" not in err, err
    for args in (["query", "fleet_summary", "--format", "csv"], ["recommend", "--format", "json"],
                 ["report", "--out", str(tmp_path / "r.html")], ["export", "--to", str(tmp_path / "lake")]):
        res = run_read_only([GPUINSIGHT, *args, "--db", str(db)], folder)
        assert res.returncode == 0, (args, res.stderr)
    assert sorted(p.name for p in folder.iterdir()) == ["fleet.duckdb"]
    with Warehouse(db) as wh:  # left stale by an interrupted collection: on a read-only filesystem nobody can rebuild
        load_registry().invalidate(wh.con)
        wh.checkpoint()
    res = run_read_only([GPUINSIGHT, "query", "fleet_summary", "--db", str(db)], folder)
    assert res.returncode == 2
    assert res.stderr.strip() == (f"gpuinsight: error: {db}: its models predate data an interrupted load committed; open "
                                  "it where it can be written once (e.g. `gpuinsight query fleet_summary`) to rebuild them")


def test_a_reader_waits_for_a_writer_with_a_message_and_gives_up_after_the_timeout(base: Path, tmp_path: Path) -> None:
    db = copy_db(base, tmp_path / "fleet.duckdb")
    with Warehouse(db):  # a writer holding the file (this process)
        res = cli("query", "fleet_summary", "--db", str(db), env={"GPUINSIGHT_LOCK_TIMEOUT": "1"})
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith(f"gpuinsight: {db} is being written by PID {os.getpid()}") and "waiting" in lines[0]
    assert lines[1].startswith(f"gpuinsight: error: {db}: in use by PID {os.getpid()}") and "waited 1 s" in lines[1]


def test_demo_waits_for_a_running_collect_then_refuses_to_replace_its_data(base: Path, tmp_path: Path) -> None:
    db = copy_db(base, tmp_path / "fleet.duckdb")
    dump = dump_with_pods(tmp_path / "d", 4)
    with gi.open(db) as g:  # a collection under way in this process, holding the file
        demo = subprocess.Popen([GPUINSIGHT, "demo", "--out", str(tmp_path / "out")], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "GPUINSIGHT_DB": str(db)})  # $GPUINSIGHT_DB, no --db
        assert demo.stderr is not None
        waiting = demo.stderr.readline()
        assert f"{db} is being used by PID {os.getpid()}" in waiting and "waiting for it" in waiting, waiting
        g.collect_kubernetes(from_dir=dump)
    out, err = demo.communicate(timeout=120)
    assert demo.returncode == 2, out
    assert err.startswith(f"gpuinsight: error: {db} holds data a demo did not load") and "--replace" in err, err
    assert state(db)[0]["pods"] == state(base)[0]["pods"] + 4 * SAMPLE_PODS  # the collected pods are all there


def test_demo_replacing_a_warehouse_keeps_applied_actions_and_reviews_and_says_so(base: Path, tmp_path: Path) -> None:
    db = copy_db(base, tmp_path / "fleet.duckdb")
    with Warehouse(db) as wh:
        wh.con.execute("DELETE FROM pods WHERE namespace = 'training'")  # data the demo will put back
        wh.con.execute("INSERT INTO applied_actions (plan_id, seq, target, operation, status, applied_at) VALUES "
                       "('plan-a', 1, 'Queue/research', 'patch', 'applied', now()::TIMESTAMP), "
                       "('plan-a', 2, 'Node/n1', 'label', 'rolled-back', now()::TIMESTAMP)")
        wh.con.execute("INSERT INTO reviewed_plans VALUES ('plan-a', 'abc', '{}', 'plan.json', now()::TIMESTAMP)")
        wh.checkpoint()
    res = cli("demo", "--out", str(tmp_path / "out"), "--db", str(db), "--replace")
    assert res.returncode == 0, res.stderr
    assert ("kept from the warehouse it replaced: 2 applied-action record(s) of 1 plan(s) (1 change(s) still applied: "
            "`gpuinsight rollback PLAN_ID` undoes them) and 1 reviewed plan(s)") in res.stdout
    counts = state(db)[0]
    assert counts["applied_actions"] == 2 and counts["reviewed_plans"] == 1
    assert {t: counts[t] for t in ("nodes", "pods", "gpu_samples")} == {t: state(base)[0][t] for t in
                                                                        ("nodes", "pods", "gpu_samples")}
    with Warehouse(db, read_only=True) as wh:  # what a later demo compares to replace it without --replace
        recorded = json.loads(wh.sql("SELECT details FROM ingest_state WHERE source = 'demo'").item())["rows"]
    assert recorded == {t: n for t, n in counts.items() if t in recorded} and recorded["pods"] == counts["pods"]


# -- no network, not a warehouse ---------------------------------------------------------------

def test_a_sqlite_file_is_not_a_warehouse_and_nothing_is_fetched(tmp_path: Path) -> None:
    from gpuinsight.warehouse.db import NO_EXTENSIONS

    db = tmp_path / "fleet.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (x)")
    network_off = ["unshare", "-n"] if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0 \
        else []
    for args in (["query", "fleet_summary"], ["collect", "kubernetes", "--from-dir", str(SAMPLE_DUMP)]):
        res = subprocess.run([*network_off, GPUINSIGHT, *args, "--db", str(db)], capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip() == f"gpuinsight: error: {db}: not a DuckDB warehouse file (a SQLite database)"
    # DuckDB itself, given the file with the package's settings: no download, only "not installed"
    import duckdb

    with pytest.raises(duckdb.Error) as info:
        duckdb.connect(str(db), config=dict(NO_EXTENSIONS))
    assert "download" not in str(info.value).lower() and "install" in str(info.value).lower()


def test_every_connection_the_package_opens_has_extension_autoloading_off(base: Path, tmp_path: Path) -> None:
    import ast

    from gpuinsight.paths import queries_dir
    from gpuinsight.warehouse.db import connect_memory
    from gpuinsight.warehouse.export import export_tables, open_lake

    package = Path(gi.__file__).parent
    opened = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "connect" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "duckdb":
                opened.append(str(path.relative_to(package)))
    assert set(opened) == {"warehouse/db.py"}, "connections are opened in warehouse/db.py only"
    for path in [*package.rglob("*.py"), *queries_dir().rglob("*.sql")]:
        text = path.read_text(encoding="utf-8")
        for word in ("INSTALL ", "LOAD ", "install_extension", "load_extension"):
            assert word not in text, (path, word)

    db = copy_db(base, tmp_path / "fleet.duckdb")
    with Warehouse(db, read_only=True) as ro:
        list(export_tables(ro, str(tmp_path / "lake")))
        connections = [ro.con, connect_memory(), open_lake(str(tmp_path / "lake"))]
        with Warehouse(tmp_path / "other.duckdb") as rw:
            connections.append(rw.con)
            for con in connections:
                settings = dict(con.execute(
                    "SELECT name, value FROM duckdb_settings() WHERE name IN ('autoinstall_known_extensions', "
                    "'autoload_known_extensions', 'allow_community_extensions')").fetchall())
                assert settings == dict.fromkeys(settings, "false") and len(settings) == 3, settings


# -- the transaction itself --------------------------------------------------------------------

def test_an_error_inside_a_transaction_is_raised_as_itself(tmp_path: Path) -> None:
    import duckdb
    import polars as pl

    from gpuinsight.errors import RuntimeFailure

    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.merge("queues", pl.DataFrame({"cluster": ["c"], "name": ["q"], "weight": [1]}), ["cluster", "name"])
        with pytest.raises(duckdb.ConstraintException), wh.transaction() as con:
            wh.merge("queues", pl.DataFrame({"cluster": ["c"], "name": ["r"], "weight": [2]}), ["cluster", "name"],
                     con=con)
            con.execute("INSERT INTO schema_version VALUES (1, 'again', now()::TIMESTAMP)")  # a duplicate key
        # 4 MB more than the fresh warehouse holds in memory (its catalog and reference rows)
        used = int(wh.con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0] or 0)
        wh.con.execute(f"SET memory_limit = '{(used >> 10) + 4096}KB'")
        with pytest.raises(duckdb.OutOfMemoryException), wh.transaction() as con:
            big = pl.DataFrame({"cluster": ["c"] * 300_000, "name": [f"q{i}" for i in range(300_000)], "weight": [1] * 300_000})
            wh.merge("queues", big, ["cluster", "name"], con=con)
        wh.con.execute("RESET memory_limit")
        # a nested unit that failed fails the whole, even when the code between swallowed it
        with pytest.raises(RuntimeFailure, match="bad unit"), wh.transaction():
            wh.merge("queues", pl.DataFrame({"cluster": ["c"], "name": ["s"], "weight": [3]}), ["cluster", "name"])
            try:
                with wh.transaction():
                    raise RuntimeFailure("bad unit")
            except RuntimeFailure:
                pass
        assert wh.sql("SELECT name FROM queues").to_series().to_list() == ["q"]


def test_an_interrupted_chunked_load_leaves_the_models_marked_stale_and_a_reader_rebuilds_them(
        base: Path, tmp_path: Path) -> None:
    from gpuinsight.errors import BadInput

    db = copy_db(base, tmp_path / "fleet.duckdb")
    with gi.open(db) as g, pytest.raises(RuntimeError, match="killed"), g.writing():
        g.wh.con.execute("DELETE FROM pods WHERE namespace = 'training'")
        g.wh.commit_so_far()  # a whole chunk committed
        raise RuntimeError("killed")  # the run ends before its last transaction
    assert state(db)[2] == "stale"
    with gi.open(db, read_only=True) as g, pytest.raises(BadInput, match="predate data an interrupted load committed"):
        g.query("fleet_summary")
    res = cli("query", "fleet_summary", "--db", str(db), "--format", "json")
    assert res.returncode == 0, res.stderr
    assert state(db)[2] == "current"

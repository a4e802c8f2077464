"""Seeded mutation of a saved (reviewed) plan file, run through the CLI.

Each mutant is applied (``recommend --plan MUTANT --emit OUT --apply``) against the loopback API
server with a warehouse holding the reviewed original. Every mutant differs from what was
reviewed, so each must be refused: exit 2, one line naming the file and the field (or the JSON
position), no write request to the server, no output directory, warehouse tables unchanged.
The same mutants are also emitted without review (``--plan MUTANT --emit OUT``): exit 0 or 2; on
0 every YAML file holds one document and steps.sh parses, on 2 nothing is written (every third
mutant by default, to keep the suite's time).

    GPUINSIGHT_FUZZ_SEED=7 GPUINSIGHT_FUZZ_MUTANTS=500 GPUINSIGHT_FUZZ_EMIT_EVERY=1 pytest tests/test_plan_fuzz.py -s
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import re
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

import gpuinsight
from gpuinsight.actions import attach_actions
from gpuinsight.cli import main
from gpuinsight.errors import BadInput
from gpuinsight.plan import Plan
from gpuinsight.plan.io import canonical, plan_from_data, plan_text, plan_to_json
from gpuinsight.plan.store import record_review
from tests.k8s_apply_server import live_state, seeded
from tests.test_actions_builders import all_recs

SEED = int(os.environ.get("GPUINSIGHT_FUZZ_SEED", "20261130"))
MUTANTS = int(os.environ.get("GPUINSIGHT_FUZZ_MUTANTS", "100"))
EMIT_EVERY = int(os.environ.get("GPUINSIGHT_FUZZ_EMIT_EVERY", "3"))  # also emit every Nth mutant unreviewed
HOSTILE: list[Any] = [
    None, -1, 0, 2**70, 1e308, -0.5, True, "", " ", "x" * 300, "a\nb", "\n---\nkind: Namespace\nmetadata: {name: x}",
    "$(touch PWNED)", "`touch PWNED`", "; rm -rf /", "../../etc/passwd", "\u202eevil", "\x00", "Queue-A", "UPPER",
    "1970-01-01T00:00:00", (datetime.now(UTC) + timedelta(days=30)).isoformat(), "2026-13-45", [], {}, [1, 2],
    {"op": "add"}, "k8s-exec", "plan-ok", "nvidia.com/gpu", "/spec/../x", "~2",
]
LOCATION = re.compile(r"(recommendations(\[\d+\])?|plan_id|created_at|catalog|window|notes|clusters|line \d+ column \d+|"
                      r"byte \d+|nested too deeply|a plan object)")


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def mutate(rng: random.Random, original: dict[str, Any], text: str) -> tuple[str, str]:
    """(operator name, mutant text), always different from the original in content."""
    while True:
        doc = copy.deepcopy(original)
        op = rng.choice(["delete", "replace", "replace", "duplicate", "wrap", "swap", "drop-action", "truncate",
                         "byte", "rename-key"])
        paths = [p for p in _paths(doc) if p]
        path = rng.choice(paths)
        parent, key = _at(doc, path[:-1]), path[-1]
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = copy.deepcopy(rng.choice(HOSTILE))
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        elif op == "wrap":
            parent[key] = [parent[key]]
        elif op == "swap" and isinstance(parent, list) and len(parent) > 1:
            other = rng.randrange(len(parent))
            parent[key], parent[other] = parent[other], parent[key]
        elif op == "drop-action":
            rec = rng.choice(doc["recommendations"])
            if rec["actions"]:
                rec["actions"].pop(rng.randrange(len(rec["actions"])))
        elif op == "rename-key" and isinstance(parent, dict):
            parent[f"{key}_"] = parent.pop(key)
        elif op in ("truncate", "byte"):
            i = rng.randrange(1, len(text) - 1)
            mutant = text[:i] if op == "truncate" else (
                text[:i] + rng.choice(["\udcff", "}", "{", '"', ",", "\\", "NaN"]) + text[i + 1:])
            try:
                same = _same_plan(json.loads(mutant), original)
            except ValueError:
                same = False
            if not same:
                return op, mutant
            continue
        mutant = json.dumps(doc, indent=2)
        if canonical(doc) != canonical(original) and not _same_plan(doc, original):
            return op, mutant


def _same_plan(doc: Any, original: dict[str, Any]) -> bool:
    """A mutant that only drops a field holding its default (``notes: []``) is the same plan."""
    try:
        return canonical(plan_to_json(plan_from_data(doc))) == canonical(original)
    except BadInput:
        return False


def _checksum(db: Path) -> str:
    with gpuinsight.open(db, read_only=True) as gi:
        rows = [gi.wh.sql(f"SELECT * FROM {t} ORDER BY ALL").to_dicts()
                for t in ("recommendations", "applied_actions", "reviewed_plans")]
    return hashlib.sha256(json.dumps(rows, default=str, sort_keys=True).encode()).hexdigest()


def test_mutated_plan_files_are_refused_naming_the_field(tmp_path: Path) -> None:
    db = tmp_path / "wh.duckdb"
    api = seeded()
    plan = Plan("plan-fuzz", datetime.now(UTC), "cat", (None, None), all_recs())
    attach_actions(plan, live_state(api))
    original_text = plan_text(plan)
    original = json.loads(original_text)
    with gpuinsight.open(db) as gi:
        record_review(gi.wh, plan, "plan.json")
    before = _checksum(db)
    rng = random.Random(SEED)
    codes: Counter[str] = Counter()
    operators: Counter[str] = Counter()
    located = emitted_ok = 0
    runner = CliRunner()
    with api:
        env = {"KUBECONFIG": str(api.write_kubeconfig(tmp_path))}
        for n in range(MUTANTS):
            op, text = mutate(rng, original, original_text)
            operators[op] += 1
            path = tmp_path / f"mutant-{n:03d}.json"
            path.write_text(text, encoding="utf-8", errors="surrogateescape")
            out = tmp_path / f"out-{n:03d}"
            start = len(api.requests)
            res = runner.invoke(main, ["recommend", "--plan", str(path), "--emit", str(out), "--apply",
                                       "--context", "fake", "--db", str(db)], env=env)
            codes[f"apply:{res.exit_code}"] += 1
            lines = [ln for ln in res.output.splitlines() if ln.strip()]
            assert res.exit_code == 2, (op, n, res.output)
            assert len(lines) == 1 and lines[0].startswith(f"gpuinsight: error: {path}"), (op, n, res.output)
            assert LOCATION.search(lines[0].split(str(path), 1)[1]), (op, n, lines[0])
            located += 1
            assert [r for r in api.requests[start:] if r.method != "GET"] == [], (op, n)
            assert not out.exists()
            # the same mutant emitted without review: refused cleanly, or written whole and inert
            if n % EMIT_EVERY:
                continue
            res = runner.invoke(main, ["recommend", "--plan", str(path), "--emit", str(out), "--format", "json"])
            codes[f"emit:{res.exit_code}"] += 1
            assert res.exit_code in (0, 2), (op, n, res.output)
            if res.exit_code == 2:
                assert not out.exists() and len(res.output.strip().splitlines()) == 1, (op, n, res.output)
                continue
            emitted_ok += 1
            for f in out.rglob("*.yaml"):
                assert len(list(yaml.safe_load_all(f.read_text()))) == 1, f
            assert subprocess.run(["sh", "-n", str(out / "steps.sh")], capture_output=True).returncode == 0
    after = _checksum(db)
    print(f"\nplan fuzz (seed {SEED}): {MUTANTS} mutants ({dict(sorted(operators.items()))}); exit codes "
          f"{dict(sorted(codes.items()))}; {located} refusals name file and field; {emitted_ok} emitted whole "
          f"without review; warehouse {'unchanged' if after == before else 'CHANGED'}")
    assert after == before
    assert MUTANTS >= 100 or os.environ.get("GPUINSIGHT_FUZZ_MUTANTS")


def test_a_formatting_only_change_is_the_reviewed_plan(tmp_path: Path) -> None:
    """Re-indenting or re-ordering keys is not an edit: the reviewed plan still applies."""
    api = seeded()
    plan = Plan("plan-format", datetime.now(UTC), "cat", (None, None), all_recs()[:1])
    attach_actions(plan, live_state(api))
    db = tmp_path / "wh.duckdb"
    with gpuinsight.open(db) as gi:
        record_review(gi.wh, plan, "plan.json")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(json.loads(plan_text(plan)), sort_keys=True, separators=(",", ":")))
    with api:
        env = {"KUBECONFIG": str(api.write_kubeconfig(tmp_path))}
        res = CliRunner().invoke(main, ["recommend", "--plan", str(path), "--apply", "--context", "fake",
                                        "--db", str(db)], env=env)
    assert res.exit_code == 0, res.output
    assert "plan-format: 1 applied" in res.output

"""Seeded mutation fuzzing of every file input (OpenMetrics, kubectl dumps in JSON and YAML, the
price catalog, the openb CSVs).

Each mutant is loaded in-process through the loader the CLI command runs, its exception mapped
by the CLI's own :func:`gpuinsight.cli.error_outcome`. The contract (docs/collectors.md, "Bad
input"): exit 0 or 2, never 1 and never a traceback; on 2 one line naming the file (and line or
item where there is one); after a refusal every table has the same rows and hashes. A handful
of mutants also go through the real ``gpuinsight`` command in a subprocess. The figures are
printed (run with ``-s`` to see them).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gpuinsight as gi
from gpuinsight.config import Config
from gpuinsight.warehouse import Warehouse
from tests.input_cases import KINDS, InputKind, fingerprint, outcome

SEED = 20261130
MUTANTS = {"openmetrics": 45, "dump-pods": 20, "dump-nodes": 15, "dump-podgroups": 15, "dump-queues": 15,
           "dump-vcjobs": 15, "prices": 65, "openb-nodes": 25, "openb-pods": 35}   # 250 per run
NASTY_NUMBERS = ["-4", "NaN", "Inf", "-Inf", "+Inf", "1e20", "1e400", "8Ei", "99999999999999999999999", "-0",
                 "1.5", "", "0x10", "nan", "1e-300", "-1", "4294967295", "9223372036854775794", "0",
                 "32503680000", "4096"]  # absurd but parseable: a timestamp in the year 3000, a GPU count
NASTY_LINES = ["", "   ", "# EOF", "}{", "\x00", "\ufeff", "a,b,c", "---", "kind: List", 'foo{a="1"} 1 2 3',
               "\udcff\udcfe", "items: 7", "- 1", "DCGM_FI_DEV_GPU_UTIL 5 5", ",,,,,,,,,,"]
NASTY_STRINGS = ["", "\udcff", "x" * 300, "<none>", "../..", "\n", '"', "{}", "1970-01-01T00:00:00Z"]
NASTY_JSON: list[Any] = [-4, 1e23, "8Ei", None, [], {}, "", True, "NaN", 2**70, -1, "-4", 0.5, "1970-01-01T00:00:00Z",
                         "2999-01-01T00:00:00Z", "4096", 4096]  # absurd but parseable: centuries ahead, GPUs per node
# Refusals of input that parses but would move figures without a word (docs/collectors.md, "Bad input")
CLASSES = {"one key, two contents": r"are the same \w+ \(.*\) with different content",
           "a time centuries ahead": r"is in the future", "an absurd count": r"out of range|not a plausible|too large"}
_NUMBER = re.compile(r"(?<![A-Za-z_])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_QUOTED = re.compile(r'"([^"\\\n]{0,60})"')


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


def _nudged(value: Any) -> Any:
    """A different value of the same kind (one that still loads)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "-b" if not value[-1:].isdigit() else value[:-1] + str((int(value[-1]) + 1) % 10)
    return value


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def mutate_json(text: str, rng: random.Random) -> str:
    """Set a random field of the document to a hostile value, or delete it; or put a time
    centuries ahead; or list an item twice, the copy changed in one field or not at all."""
    doc = json.loads(text)
    items = doc.get("items") if isinstance(doc, dict) else None
    op = rng.random()
    if isinstance(items, list) and items and op < 0.12:  # one key, two contents
        twin = json.loads(json.dumps(rng.choice(items)))
        inner = [p for p in _paths(twin) if p[0] != "metadata" or p[-1] not in ("uid", "name", "namespace")]
        leaves = [p for p in inner if not isinstance(_get(twin, p), dict | list)]
        if leaves and rng.random() < 0.7:
            path = rng.choice(leaves)
            _set(twin, path, _nudged(_get(twin, path)))
        items.insert(rng.randrange(len(items) + 1), twin)
        return json.dumps(doc, indent=1)
    times = [p for p in _paths(doc) if isinstance(p[-1], str) and p[-1].endswith(("Timestamp", "Time", "At"))]
    if times and op < 0.24:  # a time centuries ahead
        _set(doc, rng.choice(times), rng.choice(["2999-01-01T00:00:00Z", "2399-06-30T12:00:00+02:00"]))
        return json.dumps(doc, indent=1)
    paths = list(_paths(doc))
    if not paths:
        raise ValueError("nothing to mutate")
    path = rng.choice(paths)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if rng.random() < 0.25 and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = rng.choice(NASTY_JSON)
    return json.dumps(doc, indent=1)


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def mutate_text(text: str, rng: random.Random) -> str:
    if not text:
        return rng.choice(NASTY_LINES)
    nums = list(_NUMBER.finditer(text))
    op = rng.randrange(7)
    if op == 1 and not nums:
        op = 0
    if op == 0:  # one byte
        i = rng.randrange(len(text))
        return text[:i] + chr(rng.choice([0xDCFF, 0, 10, 32, 34, 44, 123, 125, rng.randrange(33, 127)])) + text[i + 1:]
    if op == 1:  # a number
        m = rng.choice(nums)
        return text[:m.start()] + rng.choice(NASTY_NUMBERS) + text[m.end():]
    if op == 2:  # truncated
        return text[:rng.randrange(len(text))]
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    if op == 3:
        del lines[i]
    elif op == 4:
        lines.insert(i, lines[rng.randrange(len(lines))])
    elif op == 5:
        lines.insert(i, rng.choice(NASTY_LINES))
    else:  # a quoted string
        quoted = list(_QUOTED.finditer(text))
        if quoted:
            m = rng.choice(quoted)
            return text[:m.start(1)] + rng.choice(NASTY_STRINGS) + text[m.end(1):]
        lines[i] = lines[i][::-1]
    return "\n".join(lines)


def mutant(kind: InputKind, seed_text: str, path: Path, rng: random.Random) -> str:
    """One or two mutations (structure-aware for JSON most of the time)."""
    text = seed_text
    for _ in range(1 + (rng.random() < 0.5)):
        if path.suffix == ".json" and rng.random() < 0.6:
            try:
                text = mutate_json(text, rng)
                continue
            except ValueError:  # an earlier mutation broke the JSON: mutate the text instead
                pass
        text = mutate_text(text, rng)
    return text


def _write(path: Path, text: str) -> None:
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))


def _located(message: str, path: Path) -> tuple[bool, bool]:
    """(names the file, names a line or an item in it)."""
    names_file = path.name in message or str(path.parent) in message
    where = re.search(rf"{re.escape(path.name)}(:\d+|: line \d+|: items? \d+)", message) is not None
    return names_file, where


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    shm = Path("/dev/shm")  # the warehouse commits on every load: keep that off the disk when we can
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path_factory.mktemp("fuzz")
        return
    folder = Path(tempfile.mkdtemp(prefix="gi-fuzz-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_fuzzed_file_inputs_exit_0_or_2_with_a_location_and_refusals_change_nothing(fuzz_dir: Path) -> None:
    rng = random.Random(SEED)
    cfg = Config(db_path=fuzz_dir / "w.duckdb", cluster="fuzz")
    codes: Counter[int] = Counter()
    per_kind: dict[str, Counter[int]] = {}
    named, located, unchanged, failures = 0, 0, 0, []
    classes: Counter[str] = Counter()
    with Warehouse(cfg.db_path) as wh:
        seeds: dict[str, tuple[Path, str]] = {}
        for name, kind in KINDS.items():
            path = kind.write_seed(fuzz_dir / "in" / name)
            seeds[name] = (path, path.read_text(encoding="utf-8"))
            assert outcome(kind, wh, cfg, path) == (0, ""), name
        before = fingerprint(wh)
        for name, n in MUTANTS.items():
            kind, (path, seed_text) = KINDS[name], seeds[name]
            per_kind[name] = Counter()
            for _ in range(n):
                _write(path, mutant(kind, seed_text, path, rng))
                code, message = outcome(kind, wh, cfg, path)
                codes[code] += 1
                per_kind[name][code] += 1
                if code == 2:
                    classes.update(c for c, pattern in CLASSES.items() if re.search(pattern, message))
                    after = fingerprint(wh)
                    names_file, where = _located(message, path)
                    named += names_file
                    located += where
                    unchanged += after == before
                    if "\n" in message or not names_file or after != before:
                        failures.append((name, message, after == before))
                    before = after
                elif code == 0:
                    before = fingerprint(wh)
                else:
                    failures.append((name, message, None))
            _write(path, seed_text)
    refused = codes[2]
    print(f"\nfuzz: {sum(codes.values())} mutants (seed {SEED}); exit codes {dict(sorted(codes.items()))}; "
          f"refusals naming the file {named}/{refused}, with a line or item {located}/{refused}; "
          f"warehouse unchanged after {unchanged}/{refused} refusals")
    for name, c in per_kind.items():
        print(f"  {name:<15} {dict(sorted(c.items()))}")
    print(f"  refusals of absurd but parseable input: {dict(sorted(classes.items()))}")
    assert sum(codes.values()) >= 250
    assert set(classes) == set(CLASSES), classes  # every class of silent-figure input was tried and refused
    assert not failures, failures[:5]
    assert set(codes) <= {0, 2} and refused > 100 and codes[0] > 20  # both outcomes are exercised


CLI_CASES = [  # (kind, edit of the seed, CLI arguments given the mutated path)
    ("prices", lambda t: t.replace("55.04", "1e400"), lambda p: ["collect", "prices", "--catalog", str(p)]),
    ("dump-queues", lambda t: t.replace("weight: 1", "weight: -1", 1),
     lambda p: ["collect", "kubernetes", "--from-dir", str(p.parent)]),
    ("openb-pods", lambda t: t.replace(",12000,", ",\udcff,"),
     lambda p: ["import", "alibaba-openb", "--pods", str(p), "--nodes", str(p.parent / "nodes.csv")]),
]


@pytest.mark.parametrize(("name", "edit", "args"), CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_mutants_through_the_real_command_give_the_in_process_outcome(
        fuzz_dir: Path, tmp_path: Path, name: str, edit: Any, args: Any) -> None:
    kind = KINDS[name]
    path = kind.write_seed(tmp_path / name)
    _write(path, edit(path.read_text()))
    db = tmp_path / "cli.duckdb"
    with gi.open(db) as g:  # opened as the command opens it (models built), then the mutant in-process
        expected = outcome(kind, g.wh, g.config, path)
        before = fingerprint(g.wh)
    exe = Path(sys.executable).with_name("gpuinsight")
    res = subprocess.run([str(exe), "--db", str(db), *args(path)], capture_output=True, text=True, timeout=120,
                         errors="surrogateescape")
    assert res.returncode == expected[0] == 2
    assert res.stderr.strip() == f"gpuinsight: error: {expected[1]}" and "Traceback" not in res.stderr
    with Warehouse(db) as wh:
        assert fingerprint(wh) == before

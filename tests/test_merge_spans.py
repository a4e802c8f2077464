"""merge_spans (the dimension upsert of the metrics loaders) against a plain reference on random
batches: first_seen the earliest, last_seen the latest, every other column the newest non-null
value (newest by last_seen; a batch row wins over a stored row it ties with)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from gpuinsight.sources.prom.store import merge_spans
from gpuinsight.warehouse import Warehouse

T0 = datetime(2026, 11, 1)
KEY = ["cluster", "node"]


def _rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        first = T0 + timedelta(hours=rng.randint(0, 40))
        out.append({"cluster": rng.choice(["a", "b"]), "node": f"n{rng.randint(0, 6)}",
                    "instance_type": rng.choice([None, "p5.48xlarge", "p4d.24xlarge"]),
                    "zone": rng.choice([None, "z1", "z2"]), "gpu_count": rng.choice([None, 4, 8]),
                    "first_seen": first, "last_seen": first + timedelta(hours=rng.choice([0, 1, 5]))})
    return out


def _reference(stored: list[dict[str, Any]], batch: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    out: dict[tuple, dict[str, Any]] = {}
    rows = [(r, 0, i) for i, r in enumerate(stored)] + [(r, 1, i) for i, r in enumerate(batch)]
    for r, _, _ in sorted(rows, key=lambda x: (x[0]["last_seen"], x[1], x[2])):  # oldest first, the batch after
        cur = out.setdefault((r["cluster"], r["node"]), dict(r))
        cur["first_seen"] = min(cur["first_seen"], r["first_seen"])
        cur["last_seen"] = max(cur["last_seen"], r["last_seen"])
        for c in ("instance_type", "zone", "gpu_count"):
            if r[c] is not None:
                cur[c] = r[c]
    return out


def test_merge_spans_keeps_the_newest_known_value_of_every_column(tmp_path: Path) -> None:
    cols = [*KEY, "instance_type", "zone", "gpu_count", "first_seen", "last_seen"]
    schema = {"gpu_count": pl.Int32, "first_seen": pl.Datetime("us"), "last_seen": pl.Datetime("us")}
    with Warehouse(tmp_path / "w.duckdb") as wh:
        for seed in range(30):
            rng = random.Random(seed)
            # the stored rows are one per key (what a merge leaves); a batch may repeat a key
            stored = list(_reference([], _rows(rng, rng.randint(0, 10))).values())
            batch = _rows(rng, rng.randint(1, 12))
            with wh.transaction() as con:
                con.execute("DELETE FROM nodes")
                if stored:
                    wh.merge("nodes", pl.DataFrame(stored, schema_overrides=schema), KEY, con=con)
                merge_spans(wh, con, "nodes", pl.DataFrame(batch, schema_overrides=schema), KEY)
            got = {(r["cluster"], r["node"]): r for r in wh.sql(f"SELECT {', '.join(cols)} FROM nodes").to_dicts()}
            want = _reference(stored, batch)
            assert got.keys() == want.keys(), seed
            for k, row in want.items():
                assert {c: got[k][c] for c in cols} == {c: row[c] for c in cols}, (seed, k)

"""A reviewed plan is exactly what runs; hostile plan files change nothing; emit is all or nothing.

* ``--save-plan`` records the plan's SHA-256 and content; ``--plan FILE --apply`` applies exactly
  the file's actions and refuses a file that differs from the reviewed one, naming where;
* every field of a loaded plan is validated (ids, names, types, times), and free text is written
  into shell and YAML only as comments flattened to one line or as quoted values: a hostile plan
  run through ``DRY_RUN=1 sh steps.sh`` executes nothing but the expected kubectl calls;
* ``--emit`` writes into a temporary directory renamed at the end.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
import subprocess
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpuinsight
from gpuinsight.actions import attach_actions, emit, load_plan, plan_to_json
from gpuinsight.errors import BadInput
from gpuinsight.plan import Plan
from gpuinsight.plan.io import plan_from_data
from gpuinsight.plan.store import check_reviewed, record_review
from tests.k8s_apply_server import live_state, seeded
from tests.test_actions_builders import binpack_rec, idle_rec, queue_rec, spot_rec

HOSTILE_TEXT = "ok\n$(touch PWNED)`touch PWNED`; touch PWNED\r\n---\nkind: Namespace\u2028# \x85x\u202e"
HOSTILE_CLUSTER = "east $(touch PWNED)`touch PWNED`; touch PWNED"


def reviewed_plan(plan_id: str = "plan-review") -> Plan:
    plan = Plan(plan_id, datetime.now(UTC), "cat", (None, None), [queue_rec(), binpack_rec(), idle_rec()])
    attach_actions(plan, live_state(seeded()), strict=True)
    return plan


def write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=1))
    return path


def test_apply_runs_exactly_the_reviewed_actions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = reviewed_plan()
    data = plan_to_json(plan)
    with seeded() as api, gpuinsight.open(tmp_path / "wh.duckdb") as gi:
        monkeypatch.setenv("KUBECONFIG", str(api.write_kubeconfig(tmp_path)))
        record_review(gi.wh, plan, "plan.json")
        # the reviewer deletes the binpack cordon and drain from the file
        edited = copy.deepcopy(data)
        binpack = next(r for r in edited["recommendations"] if r["rule"] == "binpack")
        binpack["actions"] = [a for a in binpack["actions"] if a["type"] not in ("cordon", "drain")]
        path = write(tmp_path / "edited.json", edited)
        with pytest.raises(BadInput, match=r"edited.json: not the plan reviewed .*recommendations\[1\]\.actions\[2\]: "
                                           r"removed; to apply an edited plan, record it"):
            check_reviewed(gi.wh, load_plan(path), str(path))
        # ... and records the edited file as reviewed: exactly its actions run, nothing rebuilt
        record_review(gi.wh, load_plan(path), str(path))
        check_reviewed(gi.wh, load_plan(path), str(path))
        text = gi.apply(gi.load_plan(path, check_review=True), contexts="fake", reviewed=True).text()
        assert "plan-review: 4 applied" in text
        assert api.get_obj("nodes", None, "h100-3")["spec"].get("unschedulable") is None, "not cordoned"
        assert api.get_obj("pods", "training", "llm-train-worker-0") is not None, "not evicted"
        assert api.get_obj("queues", None, "research")["spec"]["weight"] == 1
        assert api.get_obj("deployments", "research", "notebook")["spec"]["replicas"] == 0
        # a formatting-only difference is the same plan; a plan never saved for review is refused
        write(tmp_path / "compact.json", edited)
        (tmp_path / "compact.json").write_text(json.dumps(edited, separators=(",", ":"), sort_keys=True))
        check_reviewed(gi.wh, load_plan(tmp_path / "compact.json"), "compact.json")
        other = reviewed_plan("plan-other")
        with pytest.raises(BadInput, match="never saved for review"):
            check_reviewed(gi.wh, other, "other.json")


@pytest.mark.parametrize("edit, where", [
    (lambda d: d.update(plan_id="plan-x\n---\nkind: Namespace"), "plan_id"),
    (lambda d: d.update(plan_id="plan;rm -rf ~"), "plan_id"),
    (lambda d: d.update(plan_id="plan-review\n"), "plan_id"),  # a pattern matches the whole value
    (lambda d: d.update(plan_id="Plan-Review"), "plan_id"),  # ids are lower case ...
    (lambda d: d.update(plan_id="plan-20261130T2222Z"), "plan_id"),  # ... but for the exact old form
    (lambda d: d["recommendations"][0].update(queue="research\n"), r"recommendations\[0\]\.queue"),
    (lambda d: d["recommendations"][0].update(id="queue-1\n$(id)"), r"recommendations\[0\]\.id"),
    (lambda d: d["recommendations"][0].update(id="Queue-A"), r"recommendations\[0\]\.id"),
    (lambda d: d["recommendations"][2].update(namespace="research; touch x"), r"recommendations\[2\]\.namespace"),
    (lambda d: d["recommendations"][1]["actions"][3]["pods"][0].update(name="x$(reboot)"),
     r"recommendations\[1\]\.actions\[3\]\.pods\[0\]\.name"),
    (lambda d: d["recommendations"][1]["actions"][2].update(node="h100-3\n---"), r"recommendations\[1\]\.actions\[2\]\.node"),
    (lambda d: d["recommendations"][0]["actions"][0]["object"]["metadata"].update(name="a" * 254),
     r"recommendations\[0\]\.actions\[0\]\.object\.name: 254 characters"),
    (lambda d: d["recommendations"][0]["actions"][0]["object"]["metadata"].update(namespace="x"),
     r"actions\[0\]\.object\.namespace: Queue is cluster-scoped"),
    (lambda d: d["recommendations"][0]["actions"][0]["object"].update(kind="Secret", apiVersion="v1"),
     r"actions\[0\]\.object\.kind: 'v1' 'Secret' is not a kind gpuinsight changes"),
    (lambda d: d["recommendations"][0]["actions"][0].update(exec="sh"), r"actions\[0\]\.exec: unknown field"),
    (lambda d: d["recommendations"][0].update(monthly_savings_usd="12"), r"monthly_savings_usd: .12. is not a finite"),
    (lambda d: d["recommendations"][0].update(confidence=3), r"confidence: 3 is above 1"),
    (lambda d: d["recommendations"][0].update(extra=1), r"recommendations\[0\]\.extra: unknown field"),
    (lambda d: d["recommendations"][0]["actions"][0].update(recommendation="other"), r"actions\[0\]\.recommendation"),
    (lambda d: d["recommendations"][1]["actions"][2].update(phase="now"), r"actions\[2\]\.phase"),
    (lambda d: d.update(created_at=(datetime.now(UTC) + timedelta(days=2)).isoformat()), "created_at: .* is in the future"),
    (lambda d: d.update(created_at="yesterday"), "created_at: 'yesterday' is not an ISO-8601 time"),
    (lambda d: d["recommendations"].append(copy.deepcopy(d["recommendations"][0])), r"recommendations\[3\]\.id: .* twice"),
    (lambda d: d["recommendations"][0]["actions"].__setitem__(0, "kubectl delete ns prod"), r"actions\[0\]\.type"),
    (lambda d: d["recommendations"][1]["actions"][0].update(type="k8s-patch", patch=[{"op": "move", "path": "/a"}],
                                                            ref=d["recommendations"][1]["actions"][0]["ref"]),
     r"actions\[0\]\.(patch\[0\]\.op|object)"),
])
def test_every_field_of_a_loaded_plan_is_validated(tmp_path: Path, edit: Any, where: str) -> None:
    data = plan_to_json(reviewed_plan())
    edit(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data, default=str))
    with pytest.raises(BadInput, match=where) as info:
        load_plan(path)
    assert "\n" not in str(info.value) and str(info.value).startswith(str(path))


def test_new_plan_ids_are_lower_case_and_old_ones_still_load(tmp_path: Path) -> None:
    new = Plan.new_id(datetime(2026, 11, 30, 22, 22, 52, tzinfo=UTC))
    assert new == "plan-20261130-222252"
    assert Plan.new_id(datetime(2026, 11, 30, 23, 22, 52, tzinfo=timezone(timedelta(hours=1)))) == new  # UTC
    data = plan_to_json(reviewed_plan(new))
    assert load_plan(write(tmp_path / "new.json", data)).plan_id == new
    data["plan_id"] = "plan-20261130T222252Z"  # what older versions wrote into plan files
    assert load_plan(write(tmp_path / "old.json", data)).plan_id == "plan-20261130T222252Z"


def test_strict_json(tmp_path: Path) -> None:
    text = json.dumps(plan_to_json(reviewed_plan()))
    for bad, message in [(text.replace('"confidence": 0.5', '"confidence": NaN', 1), "NaN is not a JSON number"),
                         (text.replace('{"plan_id"', '{"plan_id": "plan-a", "plan_id"', 1), "appears twice"),
                         ("[" * 100_000, "nested too deeply"), (b"\xff\xfe{}", "not UTF-8")]:
        path = tmp_path / "p.json"
        path.write_bytes(bad if isinstance(bad, bytes) else bad.encode())
        with pytest.raises(BadInput, match=message):
            load_plan(path)


def _stub(bin_dir: Path, name: str, log: Path) -> None:
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\nprintf "%s\\0" "{name}" "$@" >> "{log}"\nprintf "\\n" >> "{log}"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_hostile_free_text_is_inert_in_steps_sh_and_yaml(tmp_path: Path) -> None:
    plan = reviewed_plan()
    spot = Plan("plan-spot", plan.created_at, None, (None, None), [spot_rec("eks-nodegroup")])
    state = live_state(seeded())
    state.node_pools["gpu-h100-od"] = {"name": "gpu-h100-od", "kind": "eks-nodegroup",
                                       "spec": {"clusterName": "prod", "scalingConfig": {"desiredSize": 3}}}
    attach_actions(spot, state, strict=True)
    plan.recommendations += spot.recommendations
    data = plan_to_json(plan)
    data["catalog"] = HOSTILE_TEXT
    data["notes"] = [HOSTILE_TEXT]
    data["clusters"] = [HOSTILE_CLUSTER]  # a cluster name is one line, but may hold anything else
    for rec in data["recommendations"]:
        rec["cluster"] = rec["target"]["cluster"] = HOSTILE_CLUSTER
        for action in rec["actions"]:
            action["cluster"] = HOSTILE_CLUSTER
        rec["title"] = HOSTILE_TEXT
        for action in rec["actions"]:
            action["description"] = HOSTILE_TEXT
            action["target"] = HOSTILE_TEXT
            if action["type"] in ("note", "refused"):
                action["message"] = HOSTILE_TEXT
    hostile = plan_from_data(data)  # free text is allowed: it is data, written out inertly
    top = tmp_path / "out"
    emit(hostile, top)
    for path in top.rglob("*.yaml"):
        docs = list(yaml.safe_load_all(path.read_text()))
        assert len(docs) == 1 and docs[0]["kind"] != "Namespace", path
    (out,) = [p for p in top.iterdir() if p.is_dir()]  # the cluster's folder: a slug of its name
    assert re.fullmatch(r"east-touch-pwned-touch-pwned-touch-pwned-[0-9a-f]{8}", out.name), out.name
    script = (out / "steps.sh").read_text()
    for line in [*script.splitlines(), *(top / "steps.sh").read_text().splitlines()]:
        assert "\r" not in line and "\u2028" not in line and "\x85" not in line
        if "PWNED" in line:
            assert line.startswith(("# ", "if step ", "CLUSTER='", "  echo '")), line
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name in ("kubectl", "aws", "touch"):
        _stub(bin_dir, name, log)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DRY_RUN": "1", "HOME": str(tmp_path)}
    res = subprocess.run(["sh", str(top / "steps.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "no kube context named for it" in res.stderr, "never the current context"
    assert not log.exists() and not list(tmp_path.rglob("PWNED"))
    env["KUBE_CONTEXT"] = "prod-east"
    res = subprocess.run(["sh", str(top / "steps.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert "(cluster east $(touch PWNED)`touch PWNED`; touch PWNED, context prod-east)" in res.stderr
    calls = [c.split("\0")[:-1] for c in log.read_text().splitlines()]
    assert {c[0] for c in calls} == {"kubectl"}, "only kubectl runs (no touch, no aws under DRY_RUN)"
    assert all(c[1:3] == ["--context", "prod-east"] for c in calls), "every kubectl call names the context"
    calls = [[c[0], *c[3:]] for c in calls]
    assert not list(tmp_path.rglob("PWNED"))
    assert all("--dry-run=server" in c or any("dryRun=All" in a for a in c) for c in calls)
    applies = [c for c in calls if c[1] == "apply"]
    assert [c[c.index("-k") + 1] for c in applies if "-k" in c] == ["01-config", "02-node-pool", "04-workload"]
    evictions = [c for c in calls if c[1] == "create"]
    assert [c[3].split("?")[0] for c in evictions] == [
        "/api/v1/namespaces/training/pods/llm-train-worker-0/eviction",
        "/api/v1/namespaces/training/pods/llm-train-worker-1/eviction"]
    for readme in ((out / "README.md").read_text(), (top / "README.md").read_text()):
        assert "\nkind: Namespace" not in readme and "\n---" not in readme
    assert "step 3 is not done by this script" in res.stderr  # the EKS group to copy by hand
    # for real: the script stops at the step to do by hand, and resumes after it
    log.unlink()
    env.pop("DRY_RUN")
    res = subprocess.run(["sh", str(top / "steps.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 3 and "then run: sh steps.sh 4" in res.stderr
    assert len(log.read_text().splitlines()) == 2  # steps 1 and 2
    res = subprocess.run(["sh", str(top / "steps.sh"), "4"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    calls = [c.split("\0")[:-1] for c in log.read_text().splitlines()][2:]
    assert calls[0][:5] == ["kubectl", "--context", "prod-east", "apply", "--server-side"]
    assert calls[0][-2:] == ["-k", "04-workload"]
    assert {c[0] for c in calls} == {"kubectl", "aws"} and not list(tmp_path.rglob("PWNED"))


def test_emit_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = reviewed_plan()
    long_name = "n" * 253  # a valid object name longer than a file name may be
    plan.recommendations[0].actions[0]["object"]["metadata"]["name"] = long_name
    plan.recommendations[0].actions[0]["ref"]["name"] = long_name
    written = emit(plan, tmp_path / "long")
    assert all(len(p.name) <= 255 for p in written)
    assert yaml.safe_load(next((tmp_path / "long" / "default" / "01-config").glob("*-queue-*.yaml")).read_text())[
        "metadata"]["name"] == long_name
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="is a file, not a directory"):
        emit(plan, tmp_path / "file" / "out")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("mine")
    with pytest.raises(BadInput, match="not empty and was not written by gpuinsight"):
        emit(plan, theirs)
    assert [p.name for p in theirs.iterdir()] == ["keep.txt"]
    # a failure half way leaves neither partial output nor a damaged earlier emission
    target = tmp_path / "plan-dir"
    emit(plan, target)
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    real_write = Path.write_text
    calls = {"n": 0}

    def failing(self: Path, *args: Any, **kwargs: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(28, "No space left on device")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing)
    with pytest.raises(BadInput, match="No space left on device"):
        emit(reviewed_plan("plan-second"), target)
    monkeypatch.undo()
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "long", "plan-dir", "theirs"], "no temp dirs left"
    emit(reviewed_plan("plan-second"), target)  # an earlier emission is replaced whole
    assert load_plan(target / "plan.json").plan_id == "plan-second"


def test_reviewed_plan_cli_round_trip_without_a_warehouse(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gpuinsight.cli import main

    path = write(tmp_path / "plan.json", plan_to_json(reviewed_plan()))
    res = CliRunner().invoke(main, ["recommend", "--plan", str(path), "--emit", str(tmp_path / "out"),
                                    "--only", "missing-id", "--db", str(tmp_path / "none.duckdb")])
    assert res.exit_code == 2 and "--only missing-id" in res.output
    res = CliRunner().invoke(main, ["recommend", "--plan", str(path), "--format", "json", "--emit",
                                    str(tmp_path / "out"), "--db", str(tmp_path / "none.duckdb")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "steps.sh").is_file() and not (tmp_path / "none.duckdb").exists()
    assert os.access(tmp_path / "out" / "steps.sh", os.X_OK)


def test_docs_list_every_prerequisite() -> None:
    from gpuinsight.actions.prereqs import PREREQUISITES

    docs = (Path(__file__).resolve().parents[1] / "docs" / "actions.md").read_text()
    for prereq in PREREQUISITES:
        assert f"### {prereq.title}\n\n{prereq.text}\n" in docs, prereq.key

"""Two clusters whose namespaces, workloads, nodes and queues share every name (the same stack
deployed in ``east`` and in ``west``), end to end:

* the plan has each finding of the one-cluster plan twice, once per cluster, with the same
  saving, ids unique across the plan and stable (``east``'s are what ``east`` alone gets);
* ``recommend`` prints each finding's cluster; plan files refuse a finding, target or action
  naming another cluster;
* ``recommend --emit`` writes a folder per cluster whose steps run in that cluster's context;
* ``recommend --apply`` and ``rollback`` change each cluster through its own context (two
  loopback API servers) and refuse a cluster with no context named, before any write;
* the report and chargeback give each cluster its own rows and the fleet their sum.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from gpuinsight.actions import Kube, apply_plan, load_plan
from gpuinsight.actions.audit import rows
from gpuinsight.api import GpuInsight
from gpuinsight.cli import main
from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.plan.io import plan_from_data, plan_to_json, validate_plan
from gpuinsight.warehouse import Warehouse
from tests.k8s_server import write_kubeconfig_for
from tests.test_apply_sample_fleet import (
    action_keys,
    assert_dry_runs_first,
    key_of,
    sample_cluster,
    snapshot,
    writes,
)

CLUSTERS = ("east", "west")
CONTEXTS = {"east": "ctx-east", "west": "ctx-west"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """One warehouse: the sample fleet loaded as ``east`` (planned alone), then again as ``west``."""
    db = tmp_path_factory.mktemp("two") / "fleet.duckdb"
    with GpuInsight(Config(db_path=db, cluster="east")) as gi:
        gi.load_sample()
        one = gi.recommend()
        one_charge = gi.query("chargeback", by="namespace")
        one_summary = gi.query("fleet_summary").row(0, named=True)
    with GpuInsight(Config(db_path=db, cluster="west")) as gi:
        gi.load_sample()
        two = gi.recommend()
        gi.store_plan(two)  # recommend only reads; storing the plan is a write of its own
    return SimpleNamespace(db=db, one=one, two=two, one_charge=one_charge, one_summary=one_summary)


def finding(r: Any, names: dict[str, str]) -> str:
    """A finding without its cluster: ids it names replaced by what they are about."""
    data = {k: v for k, v in r.to_dict().items() if k not in ("id", "cluster", "actions")}
    data["target"] = without_cluster(data["target"])
    text = json.dumps(data, sort_keys=True, default=str)
    for rid, name in names.items():
        text = text.replace(json.dumps(rid), json.dumps(name))
    return text


def without_cluster(value: Any) -> Any:
    """A target without the clusters it names (its own, a shared group's members')."""
    if isinstance(value, dict):
        return {k: without_cluster(v) for k, v in value.items() if k != "cluster"}
    if isinstance(value, list):
        return [without_cluster(v) for v in value]
    return value


def findings(recs: list[Any]) -> list[str]:
    names = {r.id: f"{r.rule}:{r.namespace}/{r.workload}/{r.node}/{r.queue}" for r in recs}
    return sorted(finding(r, names) for r in recs)


def actions_of(recs: list[Any]) -> list[str]:
    """The changes, without the cluster and finding they belong to."""
    drop = ("cluster", "recommendation")
    return sorted(json.dumps({k: v for k, v in a.items() if k not in drop}, sort_keys=True, default=str)
                  for r in recs for a in r.actions)


# -- the plan -------------------------------------------------------------------------------------
def test_the_same_stack_in_two_clusters_gives_each_finding_twice(fleet: SimpleNamespace) -> None:
    one, two = fleet.one, fleet.two
    assert one.recommendations and one.clusters == ["east"] and two.clusters == ["east", "west"]
    by = two.by_cluster()
    assert len(two.recommendations) == 2 * len(one.recommendations)
    for cluster in CLUSTERS:
        assert findings(by[cluster]) == findings(one.recommendations), cluster
        assert actions_of(by[cluster]) == actions_of(one.recommendations), cluster
        assert two.savings_by_cluster()[cluster] == one.total_monthly_savings_usd
    assert two.total_monthly_savings_usd == pytest.approx(2 * one.total_monthly_savings_usd, abs=0.01)
    ids = [r.id for r in two.recommendations]
    assert len(set(ids)) == len(ids), "ids unique across clusters"
    assert sorted(r.id for r in by["east"]) == sorted(r.id for r in one.recommendations), "ids are stable"
    for r in two.recommendations:
        assert r.target["cluster"] == r.cluster and r.to_dict()["cluster"] == r.cluster
        assert r.actions and {a["cluster"] for a in r.actions} == {r.cluster}
        assert not [a for a in r.actions if a["type"] == "refused"], r.id
    validate_plan(two)
    assert "savings per cluster: east $" in " ".join(two.notes)
    with Warehouse(fleet.db) as wh:  # stored with their cluster
        stored = dict(wh.sql("SELECT cluster, count(*) FROM recommendations WHERE plan_id = ? GROUP BY ALL",
                             [two.plan_id]).rows())
    assert stored == {"east": len(by["east"]), "west": len(by["west"])}


def test_a_plan_file_names_each_findings_cluster_and_refuses_a_mixed_one(fleet: SimpleNamespace) -> None:
    data = json.loads(json.dumps(plan_to_json(fleet.two), default=str))
    assert data["clusters"] == ["east", "west"]
    assert plan_from_data(data).savings_by_cluster() == fleet.two.savings_by_cluster()
    i = next(i for i, r in enumerate(data["recommendations"]) if r["cluster"] == "west" and r["actions"])
    edits = {
        "cluster": lambda r: r.pop("cluster"),
        "target.cluster": lambda r: r["target"].update(cluster="east"),
        "actions[0].cluster": lambda r: r["actions"][0].update(cluster="east"),
    }
    for field, edit in edits.items():
        bad = json.loads(json.dumps(data))
        edit(bad["recommendations"][i])
        with pytest.raises(BadInput, match=re.escape(f"recommendations[{i}].{field}")):
            plan_from_data(bad)
    bad = json.loads(json.dumps(data))
    bad["clusters"] = ["east"]
    with pytest.raises(BadInput, match=r"cluster: 'west' is not one of the plan's clusters"):
        plan_from_data(bad)


def test_recommend_prints_each_findings_cluster(fleet: SimpleNamespace) -> None:
    res = CliRunner().invoke(main, ["recommend", "--format", "json", "--db", str(fleet.db)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("["):])
    assert {r["cluster"] for r in out} == set(CLUSTERS) and list(out[0])[:3] == ["id", "rule", "cluster"]
    res = CliRunner().invoke(main, ["recommend", "--format", "csv", "--db", str(fleet.db)])
    assert res.output.splitlines()[0].startswith("id,rule,cluster,namespace")
    res = CliRunner().invoke(main, ["recommend", "--db", str(fleet.db)])
    assert res.exit_code == 0, res.output
    head = res.output.splitlines()[0]
    assert re.match(r"\s*saving/mo\s+rule\s+cluster\s+target", head), head
    per = f"per cluster: east ${fleet.one.total_monthly_savings_usd:,.0f}/month, west $"
    assert per in res.output and "cluster east:" in res.output and "cluster west:" in res.output


# -- emit -----------------------------------------------------------------------------------------
def _stub(bin_dir: Path, name: str, log: Path) -> None:
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\nprintf "%s\\0" "{name}" "$@" >> "{log}"\nprintf "\\n" >> "{log}"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_emit_writes_a_folder_per_cluster_each_step_in_its_context(fleet: SimpleNamespace, tmp_path: Path) -> None:
    """With each cluster's context named, the actions are built from its live objects and its
    steps run in that context."""
    out = tmp_path / "out"
    args = ["recommend", "--format", "json", "--emit", str(out), "--db", str(fleet.db)]
    apis = {"east": sample_cluster(), "west": sample_cluster()}
    with apis["east"], apis["west"]:
        env = {"KUBECONFIG": str(write_kubeconfig_for(tmp_path, {CONTEXTS[c]: api for c, api in apis.items()}))}
        res = CliRunner().invoke(main, [*args, "--context", "ctx-east"], env=env)  # one context, two clusters
        assert res.exit_code == 2 and "one kube context cannot stand for all of them" in res.output
        assert not out.exists()
        res = CliRunner().invoke(main, [*args, *(f"--context={c}={x}" for c, x in CONTEXTS.items())], env=env)
        assert res.exit_code == 0, res.output
        assert all(api.requests and not writes(api, 0) for api in apis.values()), "read, never written"
    assert sorted(p.name for p in out.iterdir()) == [".gpuinsight-plan", "README.md", "east", "plan.json",
                                                    "steps.sh", "west"]
    readme = (out / "README.md").read_text()
    assert "| east | `east/` |" in readme and "`ctx-west`" in readme
    east = {p.relative_to(out / "east"): p.read_text() for p in (out / "east").rglob("*") if p.is_file()}
    west = {p.relative_to(out / "west"): p.read_text() for p in (out / "west").rglob("*") if p.is_file()}
    assert east.keys() == west.keys() and len(east) > 10
    for rel, text in east.items():  # the same changes; the script and README name their cluster
        if rel.name not in ("steps.sh", "README.md"):
            assert text == west[rel], rel
    assert 'CONTEXT="${KUBE_CONTEXT:-ctx-east}"' in east[Path("steps.sh")]
    assert load_plan(out / "plan.json").clusters == ["east", "west"]

    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    _stub(bin_dir, "kubectl", log)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DRY_RUN": "1", "HOME": str(tmp_path)}
    res = subprocess.run(["sh", str(out / "steps.sh")], env={**env, "KUBE_CONTEXT": "ctx-east"},
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "KUBE_CONTEXT names one context" in res.stderr and not log.exists()
    res = subprocess.run(["sh", str(out / "steps.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "(cluster east, context ctx-east)" in res.stderr and "(cluster west, context ctx-west)" in res.stderr
    calls = [c.split("\0")[:-1] for c in log.read_text().splitlines()]
    per = {ctx: [c[3:] for c in calls if c[1:3] == ["--context", ctx]] for ctx in CONTEXTS.values()}
    assert len(per["ctx-east"]) + len(per["ctx-west"]) == len(calls), "every kubectl call names a context"
    assert per["ctx-east"] == per["ctx-west"] and per["ctx-east"], "the same steps in each cluster"
    assert calls[: len(per["ctx-east"])] == [["kubectl", "--context", "ctx-east", *c] for c in per["ctx-east"]]


# -- apply and rollback ---------------------------------------------------------------------------
def gpuinsight(args: list[str], kubeconfig: Path, code: int = 0) -> str:
    res = CliRunner().invoke(main, args, env={"KUBECONFIG": str(kubeconfig)}, catch_exceptions=False)
    assert res.exit_code == code, f"gpuinsight {' '.join(args)} -> {res.exit_code}\n{res.output}"
    return res.output


def test_apply_and_rollback_change_each_cluster_through_its_own_context(fleet: SimpleNamespace,
                                                                          tmp_path: Path) -> None:
    db_path = tmp_path / "fleet.duckdb"
    shutil.copyfile(fleet.db, db_path)
    db = ["--db", str(db_path)]
    apis = {"east": sample_cluster(), "west": sample_cluster()}
    before = {c: snapshot(api) for c, api in apis.items()}
    plan_file = tmp_path / "plan.json"
    with apis["east"], apis["west"]:
        kubeconfig = write_kubeconfig_for(tmp_path, {CONTEXTS[c]: api for c, api in apis.items()})
        both = [f"--context={c}={x}" for c, x in CONTEXTS.items()]
        gpuinsight(["recommend", "--save-plan", str(plan_file), "--format", "json", *db], kubeconfig)
        plan = load_plan(plan_file)
        start = {c: len(api.requests) for c, api in apis.items()}

        # refused before any request: one context for two clusters, or a cluster with none named
        out = gpuinsight(["recommend", "--plan", str(plan_file), "--apply", "--context", "ctx-east", *db],
                         kubeconfig, code=2)
        assert "the plan changes 2 clusters (east, west): one kube context cannot stand for all of them" in out
        out = gpuinsight(["recommend", "--plan", str(plan_file), "--apply", "--context", "east=ctx-east", *db],
                         kubeconfig, code=2)
        assert "cluster west: no kube context named for it" in out and "nothing was changed" in out
        out = gpuinsight(["recommend", "--apply", "--context", "west=ctx-west", *db], kubeconfig, code=2)
        assert "cluster east: no kube context named for it" in out  # a fresh plan alike
        assert all(len(api.requests) == start[c] for c, api in apis.items())

        # both contexts named: each cluster gets exactly its own findings' changes
        text = gpuinsight(["recommend", "--plan", str(plan_file), "--apply", *both, *db], kubeconfig)
        found = re.search(r"(plan-\S+): (\d+) applied; undo with", text)
        assert found and found[1] == plan.plan_id, text
        with Warehouse(db_path) as wh:
            audit = rows(wh, plan.plan_id)
        assert {r["status"] for r in audit} == {"applied"} and int(found[2]) == len(audit)
        assert {r["cluster"] for r in audit} == {"east", "west"}
        assert all(r["cluster"] == r["applied"]["action"]["cluster"] for r in audit)
        touched: dict[str, set[tuple[str, str | None, str]]] = {}
        for cluster, api in apis.items():
            log = writes(api, start[cluster])
            assert_dry_runs_first(log)
            planned = {k for r in audit if r["applied"]["action"]["cluster"] == cluster
                       for k in action_keys(r["applied"]["action"])}
            assert {key_of(api, p) for _, p, dry in log if not dry} == planned, cluster
            after = snapshot(api)
            touched[cluster] = {k for k in set(before[cluster]) | set(after) if before[cluster].get(k) != after.get(k)}
            assert touched[cluster] == planned
        assert touched["east"] == touched["west"] and touched["east"], "the same changes in each cluster"

        # rollback: refused without west's context (it changed west), then each restored
        start = {c: len(api.requests) for c, api in apis.items()}
        out = gpuinsight(["rollback", plan.plan_id, "--context", "east=ctx-east", *db], kubeconfig, code=2)
        assert "cluster west: no kube context named" in out
        assert all(len(api.requests) == start[c] for c, api in apis.items())
        gpuinsight(["rollback", plan.plan_id, *both, *db], kubeconfig)
        for cluster, api in apis.items():
            evicted = {k for r in audit if r["operation"] == "drain" and r["applied"]["action"]["cluster"] == cluster
                       for k in action_keys(r["applied"]["action"])}
            assert evicted and snapshot(api) == {k: v for k, v in before[cluster].items() if k not in evicted}


def test_applying_one_clusters_findings_needs_only_its_context(fleet: SimpleNamespace, tmp_path: Path) -> None:
    """The API with ``only`` one cluster's findings: one client for it is enough, the other
    cluster sees no request; another cluster's finding with no client is refused."""
    db_path = tmp_path / "fleet.duckdb"
    shutil.copyfile(fleet.db, db_path)
    plan = load_plan(json.loads(json.dumps(plan_to_json(fleet.two), default=str)))
    plan.plan_id = "plan-only-west"
    west_ids = [r.id for r in plan.recommendations if r.cluster == "west" and r.rule == "queue"]
    east_ids = [r.id for r in plan.recommendations if r.cluster == "east" and r.rule == "queue"]
    apis = {"east": sample_cluster(), "west": sample_cluster()}
    before = snapshot(apis["east"])
    with apis["east"], apis["west"], Warehouse(db_path) as wh:
        west = Kube(apis["west"].client())
        with pytest.raises(BadInput, match="cluster east: no kube context named"):
            apply_plan(plan, {"west": west}, wh, only=[*west_ids, *east_ids])
        result = apply_plan(plan, west, wh, only=west_ids)
        assert [s.status for s in result.steps] == ["applied"] * len(west_ids) and west_ids
        assert apis["east"].requests == [] and snapshot(apis["east"]) == before
        assert [a["cluster"] for r in rows(wh, "plan-only-west") for a in [r["applied"]["action"]]] == ["west"]


# -- report and chargeback ------------------------------------------------------------------------
def test_report_and_chargeback_per_cluster_and_for_the_fleet(fleet: SimpleNamespace, tmp_path: Path) -> None:
    with GpuInsight(Config(db_path=fleet.db)) as gi:
        charge = gi.query("chargeback", by="namespace")
        assert set(charge.get_column("cluster")) == set(CLUSTERS)
        for cluster in CLUSTERS:  # each cluster's rows are what it has alone
            mine = gi.query("chargeback", by="namespace", cluster=cluster)
            assert set(mine.get_column("cluster")) == {cluster}
            assert mine.height == charge.filter(pl.col("cluster") == cluster).height
            own = mine.sort("group").drop("cluster")
            ref = fleet.one_charge.sort("group").drop("cluster")
            assert own.get_column("group").to_list() == ref.get_column("group").to_list()
            assert own.get_column("total_usd").to_list() == pytest.approx(ref.get_column("total_usd").to_list())
            summary = gi.query("fleet_summary", cluster=cluster).row(0, named=True)
            assert summary["monthly_spend_usd"] == pytest.approx(fleet.one_summary["monthly_spend_usd"])
        whole = gi.query("fleet_summary").row(0, named=True)
        assert whole["monthly_spend_usd"] == pytest.approx(2 * fleet.one_summary["monthly_spend_usd"])
        assert charge.get_column("total_usd").sum() == pytest.approx(whole["total_usd"])

        html = gi.report(tmp_path / "fleet.html", plan=fleet.two).read_text()
        east = gi.report(tmp_path / "east.html", plan=fleet.two, cluster="east").read_text()
        with pytest.raises(BadInput, match="--cluster north: the warehouse holds no data of it"):
            gi.report(tmp_path / "north.html", plan=fleet.two, cluster="north")
    headings = re.findall(r"<h3>(By [^<]*)</h3>", html)
    assert headings[:5] == ["By cluster", "By namespace in cluster east", "By queue in cluster east",
                            "By namespace in cluster west", "By queue in cluster west"]
    assert "<th>cluster</th><th>target</th>" in html and "per cluster: east $" in html
    assert "report: east, west</title>" in html
    assert re.findall(r"<h3>(By [^<]*)</h3>", east)[:2] == ["By namespace", "By queue"]
    assert "report: east</title>" in east and "<th>cluster</th>" not in east
    spend = f"${fleet.one_summary['monthly_spend_usd']:,.0f} / month"
    assert spend in east and spend not in html
    n_east = sum(1 for r in fleet.two.recommendations if r.cluster == "east")
    assert east.count('<td class="rule">') == n_east and html.count('<td class="rule">') == 2 * n_east


def test_a_cluster_name_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["collect", "kubernetes", "--from-dir", str(tmp_path), "--db",
                                    str(tmp_path / "x.duckdb"), "--cluster", "east\nwest"])
    assert res.exit_code == 2 and "control or line-separator character" in res.output
    assert not (tmp_path / "x.duckdb").exists()


def test_the_heatmaps_cells_name_each_nodes_cluster_as_the_chart_does(fleet: SimpleNamespace) -> None:
    from polars.testing import assert_frame_equal

    from gpuinsight.reports.charts import heatmap_cells
    from gpuinsight.reports.frames import cluster_scoped

    with GpuInsight(Config(db_path=fleet.db)) as gi:
        for params in ({}, {"max_nodes": 9, "max_cells": 50}, {"cluster": "west", "max_nodes": 4}):
            cells = gi.query("gpu_heatmap_cells", **params)
            cut = {k: v for k, v in params.items() if k.startswith("max_")}
            mine = heatmap_cells(cluster_scoped(gi.query("gpu_heatmap", cluster=params.get("cluster")), "node"), **cut)
            assert_frame_equal(cells, mine, check_dtypes=False, check_exact=False, rel_tol=1e-9)
            assert all(n.startswith(("east / ", "west / ")) for n in cells["node"]) == ("cluster" not in params)

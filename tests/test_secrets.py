"""Secrets from the cluster are never persisted or printed.

Credentials are planted in the live objects a plan touches (env values, a credential-named
annotation and ConfigMap key, a ``--token=`` argument, the last-applied-configuration copy) and
the whole review-and-apply cycle runs against the loopback server: the printed diff and apply
output, the saved plan, the emitted directory, every warehouse table (``recommendations``,
``applied_actions``, ``reviewed_plans``) and the rollback output are scanned for them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

import gpuinsight
from gpuinsight.actions import attach_actions, diff_plan, emit
from gpuinsight.api import rollback_text
from gpuinsight.plan import Plan
from gpuinsight.plan.io import plan_text
from gpuinsight.plan.store import record_review
from tests.k8s_apply_server import ApplyKubeAPI, live_state, seeded
from tests.test_actions_builders import CRDS, all_recs


def plant(api: ApplyKubeAPI) -> list[str]:
    values = [f"PLANTED-{i:02d}-s3cr3t" for i in range(12)]
    with api.lock:
        objs = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
                for bucket in api.objects.values() for o in bucket}
    mig = objs[("Deployment", "prod-inference", "recsys-ranker")]
    sidecar, server = mig["spec"]["template"]["spec"]["containers"]
    server["env"] = [{"name": "DB_PASSWORD", "value": values[0]}, {"name": "UPSTREAM", "value": values[1]},
                     {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]
    sidecar["args"] = ["--listen=:8080", f"--token={values[2]}"]
    mig["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps({"env": values[3]}),
        "example.com/api-key": values[4]}
    objs[("Deployment", "research", "notebook")]["spec"]["template"]["spec"]["containers"][1]["env"] = [
        {"name": "JUPYTER_TOKEN", "value": values[5]}]
    for name in ("query-encoder", "embedder"):
        objs[("Deployment", "prod-search", name)]["spec"]["template"]["spec"]["containers"][0]["env"] = [
            {"name": "HF_TOKEN", "value": values[6]}]
    objs[("ConfigMap", "gpu-operator", "device-plugin-config")]["data"]["aws_secret_access_key"] = values[7]
    objs[("Node", None, "h100-1")]["metadata"]["annotations"] = {"example.com/bootstrap-token": values[8]}
    objs[("Job", "training", "llm-train")]["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "WANDB_API_KEY", "value": values[9]}]
    objs[("Queue", None, "research")]["metadata"]["annotations"] = {"example.com/password": values[10]}
    objs[("NodePool", None, "gpu-h100-od")]["spec"]["template"]["metadata"]["annotations"] = {
        "example.com/secret": values[11]}
    return values


def warehouse_text(gi: gpuinsight.GpuInsight) -> str:
    tables = [r[0] for r in gi.wh.sql("SELECT table_name FROM information_schema.tables").rows()]
    return "\n".join(json.dumps(gi.wh.sql(f'SELECT * FROM "{t}"').to_dicts(), default=str) for t in tables)


def test_planted_secrets_are_never_persisted_or_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = seeded(crd_dir=CRDS)
    planted = plant(api)
    with api, gpuinsight.open(tmp_path / "wh.duckdb") as gi:
        monkeypatch.setenv("KUBECONFIG", str(api.write_kubeconfig(tmp_path)))
        state = live_state(api)
        plan = Plan("plan-secrets", datetime.now(UTC), None, (None, None), all_recs())
        attach_actions(plan, state, strict=True)
        printed = [diff_plan(plan, state)]
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(plan_text(plan))
        record_review(gi.wh, plan, str(plan_file))
        emit(plan, tmp_path / "emitted")
        printed.append(gi.apply(gi.load_plan(plan_file, check_review=True), contexts="fake", reviewed=True).text())
        snapshot = warehouse_text(gi)
        printed.append(rollback_text(gi.rollback(plan.plan_id, contexts="fake")))
        outputs = {"printed": "\n".join(printed), "plan file": plan_file.read_text(),
                   "emitted": "\n".join(p.read_text() for p in (tmp_path / "emitted").rglob("*") if p.is_file()),
                   "warehouse after apply": snapshot, "warehouse after rollback": warehouse_text(gi)}
        # the secrets were really there to leak, and the rollback left them in place
        live = json.dumps(list(api.objects.values()))
        assert all(v in live for v in planted)
        assert "nvidia.com/mig-1g.10gb" in snapshot and "applied" in snapshot
    found = {name: [v for v in planted if v in text] for name, text in outputs.items()}
    scanned = sum(len(t) for t in outputs.values())
    print(f"\nsecrets scan: {len(planted)} planted values, {sum(map(len, found.values()))} found in "
          f"{scanned:,} characters of output, plan file, emitted files and warehouse tables")
    assert found == {name: [] for name in outputs}

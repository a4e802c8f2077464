"""Kueue as Volcano is: ClusterQueues, LocalQueues, ResourceFlavors and Workloads from dumps and
the live API (real published objects: Kueue's HAMi example and quick start), quota vs use per
ClusterQueue and flavor, the queue rule's nominalQuota changes (validated against Kueue's CRDs
and its webhook's rules), the Kueue table of the report, Kueue's own metrics, and on random
queues the floors: no proposal below a live Workload's need."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import gpuinsight as gi
from gpuinsight.actions import build_actions
from gpuinsight.actions.refs import Ref
from gpuinsight.actions.state import ClusterState
from gpuinsight.actions.validate import CrdSchemas, validate_action, validate_object
from gpuinsight.config import Config
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds import validate_finding
from gpuinsight.rules.kueue import kueue_findings
from gpuinsight.rules.queue import QueueRule
from gpuinsight.sources.k8s import MapContext
from gpuinsight.sources.k8s.kueue import clusterqueue_row, localqueue_row, resourceflavor_row, workload_row
from gpuinsight.sources.kubernetes import collect_live, load_dump_dir
from gpuinsight.sources.openmetrics import load_openmetrics
from gpuinsight.sources.prices import load_catalog
from gpuinsight.sql.rows import make_row
from tests.crds import KUEUE
from tests.k8s_server import FakeKubeAPI
from tests.prom_server import Series, backfill, prometheus_server, write_openmetrics
from tests.sharing_objects import T0, docs, kueue_hami_cluster, of_kind, v100_catalog, write_dump

CFG = Config(cluster="real")
CTX = MapContext(cluster="real", source="dump")
AS_OF = T0 + timedelta(hours=2)
SETTINGS = QueueRule.resolve_settings()
METRICS = Path(__file__).parent / "fixtures" / "real" / "kueue" / "cluster-queue-metrics-constructed.prom"


@pytest.fixture(scope="module")
def kueue_crds() -> CrdSchemas:
    return CrdSchemas(KUEUE)


def test_vendored_kueue_crds_are_the_cited_ones() -> None:
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in sorted(KUEUE.glob("*.yaml"))}
    assert digests == {"kueue.x-k8s.io_clusterqueues.yaml": "e0a5fc9b370c70f3",
                       "kueue.x-k8s.io_localqueues.yaml": "dd10ef8d3578e721",
                       "kueue.x-k8s.io_resourceflavors.yaml": "0241c2dbade80718"}


def test_real_kueue_objects_map_in_both_versions() -> None:
    hami = docs("kueue-hami.yaml")  # v1beta1
    cq = clusterqueue_row(of_kind(hami, "ClusterQueue")[0], CTX)
    assert cq["name"] == "hami-queue" and cq["cohort"] is None and cq["api_version"] == "kueue.x-k8s.io/v1beta1"
    assert cq["quotas"] == ('[{"borrowing_limit":null,"flavor":"hami-flavor","group":0,"lending_limit":null,'
                            '"nominal":20.0,"resource":"nvidia.com/gpu"},{"borrowing_limit":null,"flavor":"hami-flavor",'
                            '"group":0,"lending_limit":null,"nominal":300.0,"resource":"nvidia.com/gpucores"},'
                            '{"borrowing_limit":null,"flavor":"hami-flavor","group":0,"lending_limit":null,'
                            '"nominal":20480.0,"resource":"nvidia.com/gpumem"}]')
    assert resourceflavor_row(of_kind(hami, "ResourceFlavor")[0], CTX)["node_labels"] == '{"gpu":"on"}'
    lq = localqueue_row(of_kind(hami, "LocalQueue")[0], CTX)
    assert (lq["namespace"], lq["name"], lq["cluster_queue"]) == ("kueue-test", "user-queue", "hami-queue")
    quick = docs("kueue-quick-start-setup.yaml")  # v1beta2, CPU and memory only
    cq2 = clusterqueue_row(of_kind(quick, "ClusterQueue")[0], CTX)
    assert '"nominal":9.0,"resource":"cpu"' in cq2["quotas"] and '"nominal":9663676416.0' in cq2["quotas"]
    wl = workload_row(kueue_hami_cluster()["workloads"][0], CTX)
    assert (wl["state"], wl["cluster_queue"], wl["queue_name"], wl["owner_kind"]) == (
        "Admitted", "hami-queue", "user-queue", "Pod")


@pytest.fixture(scope="module", params=["dump", "live"])
def hami(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[gi.GpuInsight]:
    folder = tmp_path_factory.mktemp(request.param)
    objs = kueue_hami_cluster()
    quick = docs("kueue-quick-start-setup.yaml")  # a second, CPU-only ClusterQueue beside it
    objs["clusterqueues"] += of_kind(quick, "ClusterQueue")
    objs["resourceflavors"] += of_kind(quick, "ResourceFlavor")
    objs["localqueues"] += of_kind(quick, "LocalQueue")
    g = gi.open(folder / "w.duckdb")
    load_catalog(g.wh, CFG, v100_catalog(folder))
    if request.param == "live":
        with FakeKubeAPI().load(**objs) as api:
            report = collect_live(g.wh, CFG, kubeconfig=api.write_kubeconfig(folder))
        assert not any("kueue" in n for n in report.notes)
    else:
        load_dump_dir(g.wh, CFG, write_dump(folder / "dump", objs), observed_at=AS_OF)
    g.refresh()
    yield g
    g.close()


def test_hami_queue_gets_quota_vs_use_rows(hami: gi.GpuInsight) -> None:
    rows = {r["resource"]: r for r in hami.query("kueue_quota_usage").to_dicts() if r["cluster_queue"] == "hami-queue"}
    assert set(rows) == {"nvidia.com/gpu", "nvidia.com/gpucores", "nvidia.com/gpumem"}
    got = {k: (r["flavor"], r["nominal_quota"], r["used_p95"], r["largest_workload_need"], r["live_workloads"])
           for k, r in rows.items()}
    assert got == {"nvidia.com/gpu": ("hami-flavor", 20, 3, 1, 3), "nvidia.com/gpucores": ("hami-flavor", 300, 90, 30, 3),
                   "nvidia.com/gpumem": ("hami-flavor", 20480, 3072, 1024, 3)}
    # one nvidia.com/gpu of these pods holds 0.3 of a V100 (30 % of its cores)
    assert rows["nvidia.com/gpu"]["gpus_per_unit"] == pytest.approx(0.3)
    quick = [r for r in hami.query("kueue_quota_usage").to_dicts() if r["cluster_queue"] == "cluster-queue"]
    assert {r["resource"] for r in quick} == {"cpu", "memory"} and not any(r["gpu_resource"] for r in quick)


def test_hami_queue_finding_keeps_every_live_workload(hami: gi.GpuInsight, kueue_crds: CrdSchemas) -> None:
    recs = [r for r in hami.recommend().recommendations if r.rule == "queue"]
    assert [r.queue for r in recs] == ["hami-queue"]  # the CPU-only queue is not a GPU finding
    rec = recs[0]
    validate_finding(rec.to_dict(), "rec")
    assert rec.target == {"kind": "ClusterQueue", "name": "hami-queue", "cluster": "real"} and rec.cluster == "real"
    new = {q["resource"]: q["nominal_quota"] for q in rec.proposed["quotas"]}
    needs = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30, "nvidia.com/gpumem": 1024}
    held = {"nvidia.com/gpu": 3, "nvidia.com/gpucores": 90, "nvidia.com/gpumem": 3072}
    for resource, quota in new.items():
        assert quota >= needs[resource] and quota >= held[resource]  # every live Workload still fits, all at once
    assert new["nvidia.com/gpu"] < 20 and rec.monthly_savings_usd == 0
    # the change: the ClusterQueue's whole resourceGroups (atomic), valid for Kueue's CRD and webhook
    state = ClusterState.from_warehouse(hami.wh, "real")
    [action] = build_actions(rec, state)
    assert action["type"] == "k8s-apply" and action["object"]["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    groups = action["object"]["spec"]["resourceGroups"]
    assert groups[0]["coveredResources"] == ["nvidia.com/gpu", "nvidia.com/gpucores", "nvidia.com/gpumem"]
    assert [r["nominalQuota"] for r in groups[0]["flavors"][0]["resources"]] == [
        int(new["nvidia.com/gpu"]), int(new["nvidia.com/gpucores"]), int(new["nvidia.com/gpumem"])]
    assert validate_action(action, kueue_crds, state.get(Ref("ClusterQueue", None, "hami-queue"))) == []


def test_the_report_has_a_kueue_table(hami: gi.GpuInsight, tmp_path: Path) -> None:
    page = hami.report(tmp_path / "r.html").read_text(encoding="utf-8")
    assert '<table class="waste" data-by="ClusterQueue">' in page and ">hami-queue<" in page
    cb = {r["group"]: r for r in hami.query("chargeback", by="cluster_queue").to_dicts()}
    hours = hami.query("fleet_summary").row(0, named=True)["hours"]  # the live read's window ends now
    assert cb["hami-queue"]["gpu_hours"] == pytest.approx(0.9 * hours)


def test_kueue_webhook_rules_refuse_what_kueue_refuses(kueue_crds: CrdSchemas) -> None:
    cq = of_kind(docs("kueue-hami.yaml"), "ClusterQueue")[0]
    assert validate_object(cq, kueue_crds) == []
    bad = {**cq, "spec": {**cq["spec"], "resourceGroups": [{**cq["spec"]["resourceGroups"][0]}]}}
    res = bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"] = [
        {"name": "nvidia.com/gpucores", "nominalQuota": 300}, {"name": "nvidia.com/gpu", "nominalQuota": 20,
                                                               "lendingLimit": 30},
        {"name": "nvidia.com/gpumem", "nominalQuota": 20480}]
    errors = validate_object(bad, kueue_crds)
    assert any("must match the name in coveredResources (nvidia.com/gpu)" in e for e in errors)
    assert any("lendingLimit: must be nil when cohort is empty" in e for e in errors)
    assert any("lendingLimit: must be less than or equal to the nominalQuota" in e for e in errors)
    res[1]["nominalQuota"] = "lots"
    assert any("nominalQuota" in e for e in validate_object(bad, kueue_crds))  # the CRD's quantity pattern


def test_kueue_metrics_are_the_queues_use_where_collected(tmp_path: Path) -> None:
    objs = kueue_hami_cluster()
    g = gi.open(tmp_path / "w.duckdb")
    with g:
        load_dump_dir(g.wh, CFG, write_dump(tmp_path / "dump", objs), observed_at=AS_OF)
        report = load_openmetrics(g.wh, CFG, METRICS, default_ts=T0 + timedelta(minutes=30))
        assert report.rows.get("kueue_quota_samples") == 4  # the follower's series and the CPU queue's are left out
        g.refresh()
        rows = {r["resource"]: r for r in g.query("kueue_quota_usage").to_dicts()}
        assert {k: (r["source"], r["used_max"]) for k, r in rows.items()} == {
            "nvidia.com/gpu": ("metrics", 3), "nvidia.com/gpucores": ("metrics", 90),
            "nvidia.com/gpumem": ("metrics", 3072)}


def test_kueue_and_hami_metrics_through_a_real_prometheus(tmp_path: Path) -> None:
    """The same series scraped every 30 s for an hour (with the KSM lines placing a node, and a real
    HAMi vGPUmonitor scrape), read back by the collector's queries."""
    from gpuinsight.config import PrometheusConfig
    from gpuinsight.sources.openmetrics import parse_exposition
    from gpuinsight.sources.prometheus import PrometheusSource

    start = (T0 - datetime(1970, 1, 1)).total_seconds()
    ksm = Path(__file__).parent / "fixtures" / "real" / "ksm" / "exporter-pods-constructed.prom"
    hami = Path(__file__).parent / "fixtures" / "real" / "hami" / "vgpumonitor-legacy.prom"
    frame = parse_exposition(METRICS.read_bytes() + b"\n" + ksm.read_bytes() + b"\n" + hami.read_bytes(),
                             default_ts=T0)
    series = []
    for r in frame.iter_rows(named=True):
        labels = {k: v for k, v in r.items() if k not in ("metric", "ts", "value", "@line") and v is not None}
        series.append(Series(r["metric"], labels, [(start + 30 * i, r["value"]) for i in range(120)]))
    om = write_openmetrics(series, tmp_path / "kueue.om")
    with prometheus_server(backfill(om, tmp_path / "tsdb")) as url:
        cfg = Config(db_path=tmp_path / "p.duckdb", cluster="real", prometheus=PrometheusConfig(url=url))
        with gi.open(cfg.db_path) as g:
            PrometheusSource(cfg).collect(g.wh, T0, T0 + timedelta(hours=1), 300)
            rows = g.sql("SELECT resource, count(*), max(usage), max(nominal_quota) FROM kueue_quota_samples "
                         "WHERE cluster_queue = 'hami-queue' GROUP BY 1 ORDER BY 1").rows()
            hami_rows = g.sql("SELECT pod, count(*), max(gr_active) FROM gpu_samples WHERE gpu_uuid = "
                              "'GPU-59ab1128-3130-b95a-9870-4bd748926e97' GROUP BY 1").rows()
    assert hami_rows == [("gpu-cxeyttpu-5bc96fc469-8q2zb", 12, 0.0)]
    assert rows == [("nvidia.com/gpu", 12, 3.0, 20.0), ("nvidia.com/gpucores", 12, 90.0, None),
                    ("nvidia.com/gpumem", 12, 3072.0, None)]


# -- the rule on literal rows ----------------------------------------------------------------------

def row(**over: Any) -> Any:
    base = {"cluster": "c", "cluster_queue": "cq", "cohort": None, "flavor": "a100", "resource": "nvidia.com/gpu",
            "gpu_resource": True, "gpus_per_unit": 1.0, "nominal_quota": 32.0, "borrowing_limit": None,
            "lending_limit": None, "used_avg": 2.0, "used_p95": 4.0, "used_max": 12.0, "hours_used": 48,
            "source": "pods", "reserved_now": 4.0, "borrowed_now": None, "largest_workload_need": 8.0,
            "largest_pending_need": 0.0, "live_workloads": 2, "pending_workloads": 0, "api_version": "v1beta1"}
    return make_row("kueue_quota_usage", **{**base, **over})


def nominal(recs: list[Recommendation]) -> float:
    return recs[0].proposed["quotas"][0]["nominal_quota"]


def test_borrowing_covers_the_peak_only_in_a_cohort_with_room() -> None:
    alone = kueue_findings([row()], SETTINGS, {"c": 4.0})
    assert nominal(alone) == 15  # no cohort: the nominal quota is the ceiling, kept at peak 12 + 25 %
    shared = kueue_findings([row(cohort="research")], SETTINGS, {"c": 4.0})
    assert nominal(shared) == 8  # p95 4 + 25 % -> 5, raised to the live Workload's 8; peaks borrow
    assert "borrowing from cohort research covers the peaks" in shared[0].title
    tight = kueue_findings([row(cohort="research", borrowing_limit=2.0)], SETTINGS, {"c": 4.0})
    assert nominal(tight) == 15  # 8 + 2 cannot reach the peak of 12
    lending = kueue_findings([row(cohort="research", lending_limit=20.0)], SETTINGS, {"c": 4.0})
    assert lending[0].proposed["quotas"][0]["lending_limit"] == 8  # Kueue: lendingLimit <= nominalQuota


def test_a_pending_workload_that_can_never_be_admitted_raises_the_quota() -> None:
    recs = kueue_findings([row(nominal_quota=8.0, used_p95=8.0, used_max=8.0, largest_pending_need=16.0,
                               pending_workloads=1)], SETTINGS, {"c": 4.0})
    assert nominal(recs) == 16 and "can ever admit" in recs[0].title
    assert kueue_findings([row(nominal_quota=8.0, used_p95=8.0, used_max=8.0, largest_pending_need=16.0,
                               cohort="x")], SETTINGS, {"c": 4.0}) == []  # unlimited borrowing may admit it


@pytest.mark.parametrize("seed", range(40))
def test_random_kueue_queues_never_cut_below_a_live_workload(seed: int) -> None:
    rng = random.Random(seed)
    rows = []
    for q in range(rng.randint(1, 4)):
        cohort = rng.choice([None, None, f"co{seed}"])
        for fl in range(rng.randint(1, 2)):
            for res, per in (("nvidia.com/gpu", 1.0), ("nvidia.com/mig-1g.10gb", 1 / 7), ("nvidia.com/gpumem", None)):
                nominal_q = float(rng.choice([0, 2, 8, 16, 64, 20480]))
                p95 = rng.uniform(0, nominal_q * 1.2)
                peak = p95 * rng.uniform(1, 3)
                rows.append(row(cluster_queue=f"q{q}", flavor=f"f{fl}", resource=res, gpus_per_unit=per, cohort=cohort,
                                nominal_quota=nominal_q, used_p95=p95, used_max=peak,
                                borrowing_limit=rng.choice([None, 0.0, 4.0]) if cohort else None,
                                lending_limit=rng.choice([None, nominal_q / 2]) if cohort else None,
                                largest_workload_need=float(rng.randint(0, 40)),
                                reserved_now=rng.choice([None, float(rng.randint(0, 30))]),
                                largest_pending_need=float(rng.choice([0, rng.randint(0, 90)]))))
    by_key = {(r.cluster_queue, r.flavor, r.resource): r for r in rows}
    for rec in kueue_findings(rows, SETTINGS, {"c": 4.0}):
        validate_finding(rec.to_dict(), f"seed {seed}")
        for q in rec.proposed["quotas"]:
            r = by_key[(rec.queue, q["flavor"], q["resource"])]
            floor = max(r.largest_workload_need, r.reserved_now or 0)
            assert q["nominal_quota"] >= floor - 1e-9, (seed, q, r)
            if q["nominal_quota"] < r.nominal_quota:  # lowered: the peak still fits, by quota or borrowing
                reach = q["nominal_quota"] + (r.borrowing_limit if r.borrowing_limit is not None else
                                              (float("inf") if r.cohort else 0))
                assert reach >= r.used_max - 1e-9, (seed, q, r)
            if q.get("lending_limit") is not None:
                assert q["lending_limit"] <= q["nominal_quota"]


def test_reloading_the_kueue_dump_is_idempotent(tmp_path: Path) -> None:
    folder = write_dump(tmp_path / "dump", kueue_hami_cluster())
    tables = ("kueue_cluster_queues", "kueue_local_queues", "kueue_resource_flavors", "kueue_workloads", "pods",
              "nodes", "k8s_snapshots")
    with gi.open(tmp_path / "w.duckdb") as g:
        load_dump_dir(g.wh, CFG, folder, observed_at=AS_OF)
        before = {t: g.sql(f'SELECT * FROM "{t}" ORDER BY ALL').rows() for t in tables}
        load_dump_dir(g.wh, CFG, folder, observed_at=AS_OF)
        assert {t: g.sql(f'SELECT * FROM "{t}" ORDER BY ALL').rows() for t in tables} == before


def test_the_cluster_queue_change_applies_and_rolls_back(hami: gi.GpuInsight, tmp_path: Path) -> None:
    """Through the loopback API server that refuses what a real one refuses (Kueue's CRD schema on
    every write, the server-side dry run first), then rolled back."""
    from datetime import UTC

    from gpuinsight.actions import apply_plan, attach_actions, rollback
    from gpuinsight.actions.kube import Kube
    from gpuinsight.plan import Plan
    from tests.k8s_apply_server import ApplyKubeAPI, live_state

    [rec] = [r for r in hami.recommend().recommendations if r.rule == "queue"]
    api = ApplyKubeAPI(crd_dir=KUEUE, crds=("kueue-v1beta1",))
    api.add("clusterqueues", *of_kind(docs("kueue-hami.yaml"), "ClusterQueue"))
    with api, gi.open(tmp_path / "apply.duckdb") as g:
        plan = Plan("plan-kueue", datetime.now(UTC), "test", (None, None), [rec])
        state = live_state(api)
        state.cluster = rec.cluster
        attach_actions(plan, state, strict=True)
        apply_plan(plan, Kube(api.client()), g.wh)
        stored = api.objects[("kueue.x-k8s.io", "v1beta1", "clusterqueues")][0]
        quotas = {r["name"]: r["nominalQuota"] for r in stored["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
        assert quotas["nvidia.com/gpu"] == int(rec.proposed["quotas"][0]["nominal_quota"])
        assert any(r.query.get("dryRun") == ["All"] for r in api.requests if r.method == "PATCH")
        rollback(plan.plan_id, Kube(api.client()), g.wh)
        stored = api.objects[("kueue.x-k8s.io", "v1beta1", "clusterqueues")][0]
        assert stored["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 20

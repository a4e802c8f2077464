"""Unit economics (issue 24): inference servers' metrics through the file path and a real Prometheus,
cost per 1M tokens against a hand computation, and the invariants on random fleets."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from gpuinsight.config import Config, PrometheusConfig
from gpuinsight.errors import BadInput
from gpuinsight.sources.dcgm import POWER_LIMIT_W
from gpuinsight.sources.openmetrics import load_openmetrics, parse_exposition
from gpuinsight.sources.prices import load_catalog
from gpuinsight.sources.prometheus import PrometheusSource
from gpuinsight.sources.serving import bucket_quantile
from gpuinsight.sql import load_registry
from gpuinsight.warehouse import Warehouse
from tests.prom_server import Series, backfill, prometheus_server, write_openmetrics

REAL = Path(__file__).parent / "fixtures" / "real" / "serving"
T = datetime(2026, 11, 1)
T_S = 1793491200
SCRAPE_S = 30
# fixture -> (server read from it, model name it carries)
FIXTURES = {
    "vllm-v0-ibm-18.prom": ("vllm", "bigscience/bloom-560m"),
    "vllm-v0-production-stack-318.prom": ("vllm", "Qwen/Qwen2.5-Coder-32B-Instruct"),
    "vllm-v1-production-stack-617.prom": ("vllm", "zai-org/GLM-4.5"),
    "sglang-1853.prom": ("sglang", "/shared/public/elr-models/meta-llama/Llama-3.2-3B/5cc0ffe09ee49f7be6ca7c794ee6bd7245e84e60/"),
    "triton-trtllm-readme.prom": ("triton", "tensorrt_llm"),
    "tgi-datadog-payload.prom": ("tgi", ""),  # TGI names no model
}
INCREMENT = 7.0  # each scrape adds this to every counter and bucket (the tests' construction)


def _series(name: str, scrapes: int = 120) -> list[Series]:
    """A real scrape repeated every 30 s, scraped from pod `srv-0` in namespace `ml` (the labels a
    ServiceMonitor adds); counters and buckets grow by INCREMENT per scrape from their real value."""
    frame = parse_exposition((REAL / name).read_bytes(), default_ts=T)
    out = []
    for r in frame.iter_rows(named=True):
        labels = {k: v for k, v in r.items() if k not in ("metric", "ts", "value", "@line") and v is not None}
        grows = r["metric"].endswith(("_total", "_bucket", "_success", "_sum", "_count"))
        pts = [(T_S + SCRAPE_S * i, r["value"] + (INCREMENT * i if grows else 0.0)) for i in range(scrapes)]
        out.append(Series(r["metric"], {**labels, "namespace": "ml", "pod": "srv-0", "fixture": name}, pts))
    return out


def _file(tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.om"
    write_openmetrics(_series(name), path)
    return path


def _rows(wh: Warehouse) -> pl.DataFrame:
    return wh.sql("SELECT * FROM serving_samples ORDER BY server, model_name, ts")


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("serving-prom")
    om = write_openmetrics([s for n in FIXTURES for s in _series(n)], folder / "serving.om")
    with prometheus_server(backfill(om, folder / "tsdb")) as url:
        yield url


@pytest.mark.parametrize("name", list(FIXTURES))
def test_real_scrapes_load_through_the_file_path_and_a_real_prometheus(prom: str, tmp_path: Path, name: str) -> None:
    server, model = FIXTURES[name]
    cfg = Config(db_path=tmp_path / "file.duckdb", cluster="real")
    with Warehouse(cfg.db_path) as wh:
        load_openmetrics(wh, cfg, _file(tmp_path, name), step_s=300)
        file_rows = _rows(wh)
    pcfg = Config(db_path=tmp_path / "prom.duckdb", cluster="real", prometheus=PrometheusConfig(url=prom))
    with Warehouse(pcfg.db_path) as wh:
        report = PrometheusSource(pcfg, matchers={"fixture": name}).collect(wh, T, T + timedelta(hours=1), 300)
        assert report.rows.get("serving_samples")
        prom_rows = _rows(wh)
    for rows in (file_rows, prom_rows):
        assert rows.height, name
        assert set(rows["server"]) == {server} and set(rows["model_name"]) == {model}
        assert set(rows["namespace"]) == {"ml"} and set(rows["pod"]) == {"srv-0"}
    per_step = INCREMENT * 300 / SCRAPE_S  # a counter's increase over a whole step
    if name == "vllm-v0-ibm-18.prom":
        for rows in (file_rows, prom_rows):
            full = rows.filter(pl.col("prompt_tokens").is_not_null()).head(10)
            assert full["prompt_tokens"].to_list() == pytest.approx([per_step] * full.height, rel=0.12)
            assert full["generation_tokens"].to_list() == pytest.approx([per_step] * full.height, rel=0.12)
        # no +Inf bucket in the excerpt: no quantile is made up
        assert file_rows["ttft_p95_s"].null_count() == file_rows.height
    if name == "sglang-1853.prom":  # every new request lands in the first bucket (<= 5 s)
        for rows in (file_rows, prom_rows):
            p95 = rows["ttft_p95_s"].drop_nulls()
            assert p95.len() and all(0 < v <= 5.0 for v in p95)
    if name == "triton-trtllm-readme.prom":  # 1 of 6239 KV blocks used
        for rows in (file_rows, prom_rows):
            assert rows["kv_cache_usage"].drop_nulls().to_list()[0] == pytest.approx(1 / 6239)
            assert rows["requests"].drop_nulls().len()
    if name == "tgi-datadog-payload.prom":  # tokens from the length histograms' sums, ITL from TGI's own
        for rows in (file_rows, prom_rows):
            full = rows.filter(pl.col("prompt_tokens").is_not_null()).head(10)
            assert full.height and full["prompt_tokens"].to_list() == pytest.approx([per_step] * full.height, rel=0.12)
            assert full["generation_tokens"].to_list() == pytest.approx([per_step] * full.height, rel=0.12)
            assert rows["requests"].drop_nulls().len()
            # every new request lands in the first bucket (<= 0.15 ms per token)
            itl = rows["itl_p95_s"].drop_nulls()
            assert itl.len() and all(0 < v <= 0.00015 + 1e-12 for v in itl)
            assert rows["kv_cache_usage"].null_count() == rows.height  # TGI publishes no KV-cache use
    if name == "vllm-v1-production-stack-617.prom":
        for rows in (file_rows, prom_rows):
            assert rows["kv_cache_usage_max"].max() == pytest.approx(9.75010481363281e-06)


def test_a_scrape_without_a_pod_label_is_counted_not_attributed(tmp_path: Path) -> None:
    text = (REAL / "vllm-v0-ibm-18.prom").read_text()
    series = [Series(s.name, {k: v for k, v in s.labels.items() if k != "pod"}, s.points)
              for s in _series("vllm-v0-ibm-18.prom")]
    assert "model_name" in text
    path = write_openmetrics(series, tmp_path / "nopod.om")
    cfg = Config(db_path=tmp_path / "w.duckdb", cluster="real")
    with Warehouse(cfg.db_path) as wh:
        report = load_openmetrics(wh, cfg, path, step_s=300)
        assert wh.count("serving_samples") == 0
    assert any("without a pod label" in n for n in report.notes)


def test_bucket_quantile_is_prometheus_histogram_quantile() -> None:
    uppers = np.array([0.1, 0.5, 1.0, np.inf])
    assert bucket_quantile(0.5, uppers, np.array([10.0, 20.0, 30.0, 40.0])) == pytest.approx(0.5)
    assert bucket_quantile(0.25, uppers, np.array([10.0, 20.0, 30.0, 40.0])) == pytest.approx(0.1)
    assert bucket_quantile(0.95, uppers, np.array([0.0, 0.0, 0.0, 10.0])) == 1.0  # the highest finite bound
    assert bucket_quantile(0.5, uppers, np.zeros(4)) is None
    assert bucket_quantile(0.5, np.array([0.1, 0.5]), np.array([1.0, 2.0])) is None  # no +Inf bucket


# -- cost per 1M tokens on a literal table ----------------------------------------------------------

def _fleet_text(hours: int, pods: list[dict], seed: int | None = None) -> str:
    """One exposition: nodes (kube-state-metrics), GPU pods on them, DCGM per GPU, and vLLM counters
    per serving pod (a literal number of tokens per scrape). 300 s scrapes."""
    lines: list[str] = []
    n = hours * 12 + 1
    nodes = sorted({p["node"] for p in pods if p["node"]})
    for node in nodes:
        for i in range(n):
            t = T_S + 300 * i
            lines.append(f'kube_node_info{{node="{node}",provider_id="aws:///us-east-1a/i-{node}"}} 1 {t}')
            lines.append(f'kube_node_labels{{node="{node}",label_node_kubernetes_io_instance_type="p5.4xlarge",'
                         f'label_karpenter_sh_capacity_type="on-demand",label_topology_kubernetes_io_zone="us-east-1a"}} 1 {t}')
            lines.append(f'kube_node_status_capacity{{node="{node}",resource="nvidia_com_gpu",unit="integer"}} 1 {t}')
    for j, p in enumerate(pods):
        uid = f"uid-{j}"
        for i in range(p["start"], p["end"]):
            t = T_S + 300 * i
            who = f'namespace="{p["ns"]}",pod="{p["pod"]}",uid="{uid}"'
            if p["node"]:
                lines.append(f'kube_pod_info{{{who},node="{p["node"]}",created_by_kind="ReplicaSet",'
                             f'created_by_name="{p["workload"]}-x"}} 1 {t}')
                lines.append(f'kube_pod_owner{{{who},owner_kind="ReplicaSet",owner_name="{p["workload"]}-x"}} 1 {t}')
                lines.append(f'kube_pod_container_resource_requests{{{who},container="c",node="{p["node"]}",'
                             f'resource="nvidia_com_gpu",unit="integer"}} 1 {t}')
                lines.append(f'kube_pod_start_time{{{who}}} {T_S + 300 * p["start"]} {t}')
                lines.append(f'kube_pod_status_phase{{{who},phase="Running"}} 1 {t}')
                gpu = f'gpu="0",UUID="GPU-{p["node"]}",modelName="NVIDIA H100 80GB HBM3",Hostname="{p["node"]}"'
                lines.append(f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{gpu},namespace="{p["ns"]}",pod="{p["pod"]}"}} 0.4 {t}')
                lines.append(f'DCGM_FI_DEV_POWER_USAGE{{{gpu},namespace="{p["ns"]}",pod="{p["pod"]}"}} {p.get("watts", 300)} {t}')
            k = i - p["start"]
            srv = f'model_name="{p["model"]}",namespace="{p["ns"]}",pod="{p["pod"]}"'
            lines.append(f'vllm:prompt_tokens_total{{{srv}}} {p["prompt"] * k} {t}')
            lines.append(f'vllm:generation_tokens_total{{{srv}}} {p["gen"] * k} {t}')
    owners = {(p["ns"], p["workload"]) for p in pods}
    for ns, wl in owners:
        for i in range(n):
            lines.append(f'kube_replicaset_owner{{namespace="{ns}",replicaset="{wl}-x",owner_kind="Deployment",'
                         f'owner_name="{wl}"}} 1 {T_S + 300 * i}')
    return "\n".join(lines) + "\n"


def _warehouse(tmp: Path, text: str) -> Warehouse:
    cfg = Config(db_path=tmp / "w.duckdb", cluster="c1")
    wh = Warehouse(cfg.db_path)
    load_catalog(wh, cfg)
    path = tmp / "fleet.prom"
    path.write_text(text)
    load_openmetrics(wh, cfg, path, step_s=300)
    registry = load_registry()
    with wh.transaction() as con:
        registry.refresh(con)
    return wh


def test_cost_per_million_tokens_equals_a_hand_computation(tmp_path: Path) -> None:
    """One vLLM pod on a one-GPU p5.4xlarge (6.88 $/h in the shipped catalog) for two hours, 30,000
    prompt and 12,000 generated tokens per 5-minute step; and a pod on no GPU node that reports tokens."""
    pods = [{"ns": "chat", "pod": "chat-1", "workload": "chat", "node": "n1", "start": 0, "end": 25,
             "model": "m8b", "prompt": 30000, "gen": 12000},
            {"ns": "chat", "pod": "cpu-proxy", "workload": "proxy", "node": None, "start": 0, "end": 25,
             "model": "m8b", "prompt": 1000, "gen": 1000}]
    with _warehouse(tmp_path, _fleet_text(2, pods)) as wh:
        ue = load_registry().run(wh.con, "unit_economics").to_dicts()
        hourly = load_registry().run(wh.con, "serving_hourly")
    assert len(ue) == 1
    row = ue[0]
    # by hand: 24 counted steps (the 25th sample ends the 24th), 2 h held at 6.88 $/h
    prompt, gen = 24 * 30000, 24 * 12000
    cost = 2 * 6.88
    assert row["workload"] == "chat" and row["model_name"] == "m8b"
    assert row["prompt_tokens"] == prompt and row["generation_tokens"] == gen
    assert row["cost_usd"] == pytest.approx(cost)
    assert row["usd_per_1m_tokens"] == pytest.approx(cost / (prompt + gen) * 1e6)
    assert row["usd_per_1m_prompt_tokens"] == pytest.approx(cost / prompt * 1e6)
    assert row["usd_per_1m_generated_tokens"] == pytest.approx(cost / gen * 1e6)
    assert row["tokens_per_hour"] == pytest.approx((prompt + gen) / 2)
    assert row["gr_active_avg"] == pytest.approx(0.4)
    # the CPU pod's tokens are kept, never priced nor attributed to a GPU workload
    proxy = hourly.filter(pl.col("workload") == "cpu-proxy")
    assert proxy.height and not proxy["held_gpu"].any() and proxy["cost_usd"].null_count() == proxy.height


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_fleets_tokens_only_on_pods_holding_gpus_and_energy_within_power(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    pods = []
    for j in range(rng.randint(3, 6)):
        start = rng.randint(0, 20)
        pods.append({"ns": rng.choice(["a", "b"]), "pod": f"p{j}", "workload": f"w{j % 3}",
                     "node": rng.choice([f"n{j}", None]), "start": start, "end": rng.randint(start + 2, 37),
                     "model": rng.choice(["m1", "m2"]), "prompt": rng.randint(0, 5000), "gen": rng.randint(0, 5000),
                     "watts": rng.choice([60.0, 300.0, 699.0])})
    with _warehouse(tmp_path, _fleet_text(3, pods)) as wh:
        reg = load_registry()
        hourly = reg.run(wh.con, "serving_hourly")
        alloc = reg.run(wh.con, "allocation_hourly")
        held = {(r["namespace"], r["workload"], r["hour"]) for r in alloc.to_dicts()}
        for r in hourly.filter(pl.col("held_gpu")).to_dicts():
            assert (r["namespace"], r["workload"], r["hour"]) in held, r
        for r in hourly.filter(~pl.col("held_gpu")).to_dicts():
            assert r["cost_usd"] is None and r["gpu_hours"] == 0
        ue = reg.run(wh.con, "unit_economics")
        gpu_pods = {(p["ns"], p["workload"]) for p in pods if p["node"]}
        assert {(r["namespace"], r["workload"]) for r in ue.to_dicts()} <= gpu_pods
        # energy per GPU within its power limit x the hours it was measured
        energy = reg.run(wh.con, "energy_hourly")
        per_node = energy.group_by("node").agg(pl.col("energy_kwh").sum())
        measured = wh.sql("SELECT node, sum(step_s) / 3600.0 AS h FROM (SELECT DISTINCT node, ts, step_s FROM gpu_samples) "
                          "GROUP BY node").to_dicts()
        hours = {r["node"]: r["h"] for r in measured}
        for node, kwh in per_node.iter_rows():
            assert kwh <= POWER_LIMIT_W["H100-80GB"] * hours[node] / 1000 + 1e-9


def test_cost_per_token_is_on_the_share_of_the_gpu_each_pod_held(tmp_path: Path) -> None:
    """Kueue's HAMi example: three replicas of one Deployment, each holding 30 % of a V100's cores
    (2 $ per GPU-hour): the deployment's tokens cost 0.9 of a GPU between them, not three GPUs and
    not one (the share model of pod_gpu_shares, issue 21, is what unit_economics prices)."""
    from tests.sharing_objects import T0 as HAMI_T0
    from tests.sharing_objects import kueue_hami_cluster
    from tests.test_gpu_shares import CFG, open_fleet

    g = open_fleet(tmp_path, kueue_hami_cluster())
    with g:
        held = g.sql("SELECT namespace, pod, workload, gpus FROM pod_gpu_allocations ORDER BY pod").rows()
        assert len(held) == 3 and all(gpus == pytest.approx(0.3) for *_, gpus in held)
        start = int(HAMI_T0.timestamp())
        lines = []
        for ns, pod, _, _ in held:
            for i in range(25):  # two hours of 5-minute scrapes, 1,000 prompt and 500 generated tokens each
                lines.append(f'vllm:prompt_tokens_total{{model_name="m",namespace="{ns}",pod="{pod}"}} {1000 * i} '
                             f"{start + 300 * i}")
                lines.append(f'vllm:generation_tokens_total{{model_name="m",namespace="{ns}",pod="{pod}"}} {500 * i} '
                             f"{start + 300 * i}")
        path = tmp_path / "vllm.prom"
        path.write_text("\n".join(lines) + "\n")
        load_openmetrics(g.wh, CFG, path, step_s=300)
        g.refresh()
        (row,) = g.query("unit_economics").to_dicts()
        hours = g.query("fleet_summary").row(0, named=True)["hours"]
    assert row["workload"] == held[0][2] and row["gpu_hours"] == pytest.approx(0.9 * hours)
    assert row["cost_usd"] == pytest.approx(0.9 * hours * 2.0)
    tokens = 3 * 24 * 1500
    assert row["tokens"] == tokens
    assert row["usd_per_1m_tokens"] == pytest.approx(0.9 * hours * 2.0 / tokens * 1e6)


def test_a_tgis_scrape_is_not_taken_for_tgi(tmp_path: Path) -> None:
    """IBM's TGIS publishes tgi_* names of its own (a method label holding quotes and braces): it
    parses, and none of its series is read as Hugging Face TGI's tokens or latency."""
    path = _file(tmp_path, "tgis-ibm-18.prom")
    cfg = Config(db_path=tmp_path / "w.duckdb", cluster="real")
    with Warehouse(cfg.db_path) as wh:
        with pytest.raises(BadInput, match="no dcgm-exporter, kube-state-metrics or inference-server series"):
            load_openmetrics(wh, cfg, path, step_s=300)
        assert wh.count("serving_samples") == 0


def test_energy_rates_are_set_per_region_from_the_api_and_a_csv(tmp_path: Path) -> None:
    """energy_by prices a node's kWh at its region's rate ('*' for regions not listed); a rate is set
    per region (API), or from a CSV (CLI), where a bad row is refused with its line and changes nothing."""
    from click.testing import CliRunner

    import gpuinsight as gi
    from gpuinsight.cli import main

    pods = [{"ns": "chat", "pod": "chat-1", "workload": "chat", "node": "n1", "start": 0, "end": 13,
             "model": "m", "prompt": 10, "gen": 10, "watts": 500.0}]
    _warehouse(tmp_path, _fleet_text(1, pods)).close()
    db = tmp_path / "w.duckdb"
    with gi.open(db) as g:
        (row,) = g.query("energy_by", by="namespace").filter(pl.col("group") == "chat").to_dicts()
        kwh = row["energy_kwh"]
        assert kwh == pytest.approx(0.5 * 13 * 300 / 3600)  # 500 W for 13 five-minute steps
        assert row["usd"] == pytest.approx(kwh * 0.0892)  # us-east-1: EIA 2023, Virginia industrial
        g.set_energy_rate("us-east-1", 0.25, 0.1, source="our contract")
        (row,) = g.query("energy_by", by="namespace").filter(pl.col("group") == "chat").to_dicts()
        assert (row["usd"], row["kg_co2e"]) == (pytest.approx(kwh * 0.25), pytest.approx(kwh * 0.1))
        with pytest.raises(BadInput, match="usd_per_kwh 250.0 is not a rate"):
            g.set_energy_rate("us-east-1", 250.0, 0.1)
    good = tmp_path / "rates.csv"
    good.write_text("region,usd_per_kwh,kg_co2e_per_kwh,source\nus-east-1,0.12,0.3,tariff 2026\n*,0.2,0.5,\n")
    res = CliRunner().invoke(main, ["collect", "energy-rates", "--csv", str(good), "--db", str(db)])
    assert res.exit_code == 0, res.output
    bad = tmp_path / "bad.csv"
    bad.write_text("region,usd_per_kwh,kg_co2e_per_kwh\nus-east-1,0.5,0.3\neu-west-1,0.1,379\n")
    res = CliRunner().invoke(main, ["collect", "energy-rates", "--csv", str(bad), "--db", str(db)])
    assert res.exit_code == 2 and f"{bad}:3: kg_co2e_per_kwh 379.0 is not a rate" in res.output
    with gi.open(db) as g:
        rates = {r["region"]: r for r in g.sql("SELECT * FROM energy_rates").to_dicts()}
        (row,) = g.query("energy_by", by="namespace").filter(pl.col("group") == "chat").to_dicts()
    assert (rates["us-east-1"]["usd_per_kwh"], rates["us-east-1"]["source"]) == (0.12, "tariff 2026")
    assert rates["*"]["usd_per_kwh"] == 0.2 and rates["eu-west-1"]["kg_co2e_per_kwh"] == 0.2786  # unchanged
    assert row["usd"] == pytest.approx(kwh * 0.12)


def test_buckets_without_an_upper_bound_give_no_quantile(tmp_path: Path) -> None:
    """A histogram's bucket series without `le` (not valid OpenMetrics, but seen in hand-made
    files) give no latency quantile, as histogram_quantile ignores them; the counters beside
    them still load."""
    lines = []
    for k in range(5):
        ts = T_S + 60 * k
        lines += [f'vllm:time_to_first_token_seconds_bucket{{namespace="a",pod="p",model_name="m"}} {k * 3} {ts}',
                  f'vllm:prompt_tokens_total{{namespace="a",pod="p",model_name="m"}} {k * 10} {ts}',
                  f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",Hostname="n"}} 5 {ts}']
    path = tmp_path / "m.om"
    path.write_text("\n".join(lines) + "\n# EOF\n")
    cfg = Config(db_path=tmp_path / "w.duckdb", cluster="t")
    with Warehouse(cfg.db_path) as wh:
        load_openmetrics(wh, cfg, path)
        rows = wh.sql("SELECT prompt_tokens, ttft_p50_s, ttft_p95_s FROM serving_samples ORDER BY ts").rows()
    assert rows == [(10.0, None, None)] * 4

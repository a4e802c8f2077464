"""PrometheusSource against a real Prometheus (backfilled with promtool), plus fault injection."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuinsight.config import Config, PrometheusConfig
from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.sources.prom.client import redact_url
from gpuinsight.sources.prom.promql import quote, selector, uuid_shards
from gpuinsight.sources.prometheus import PrometheusSource
from gpuinsight.warehouse import Warehouse
from tests.prom_server import FaultProxy, SmallFleet, backfill, prometheus_server

T0 = datetime(2026, 11, 1)
T_END = datetime(2026, 11, 1, 6)
TABLES = ("gpu_samples", "gpus", "pods", "nodes", "gpu_hourly", "clusters")
ROOT = Path(__file__).resolve().parents[1]


def cfg_for(tmp_path: Path, url: str, name: str = "w", **prom: object) -> Config:
    return Config(db_path=tmp_path / f"{name}.duckdb", cluster="test",
                  prometheus=PrometheusConfig(url=url, **prom))  # type: ignore[arg-type]


def counts(wh: Warehouse) -> dict[str, int]:
    return {t: wh.count(t) for t in TABLES}


def gpu_hours(wh: Warehouse) -> dict[tuple[str, str], float]:
    rows = wh.sql("SELECT namespace, pod, sum(step_s) / 3600 FROM gpu_samples WHERE pod <> '' GROUP BY ALL").rows()
    return {(r[0], r[1]): r[2] for r in rows}


@pytest.fixture(scope="module")
def reference(prom_small: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """Row counts of one clean collection of the whole window."""
    tmp = tmp_path_factory.mktemp("ref")
    cfg = cfg_for(tmp, prom_small)
    with Warehouse(cfg.db_path) as wh:
        PrometheusSource(cfg).collect(wh, T0, T_END, 300)
        return counts(wh)


@pytest.fixture
def proxy(prom_small: str) -> Iterator[FaultProxy]:
    p = FaultProxy(prom_small)
    yield p
    p.close()


def test_collect_small_fleet_matches_truth(prom_small: str, small_fleet: SmallFleet, tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, "http://alice:s3cret@" + prom_small.removeprefix("http://"), bearer_token="tok-123")
    with Warehouse(cfg.db_path) as wh:
        report = PrometheusSource(cfg).collect(wh, T0, T_END, 300)
        # every pod's GPU time, including the gap, the vanished node, MIG and the reused name
        assert gpu_hours(wh) == small_fleet.gpu_hours(300)
        # the three NaN readings are dropped on the server, one by one, and counted
        assert ("DCGM_FI_DEV_GPU_UTIL: dropped 3 reading(s) that are not measurements (3 NaN/Inf, DCGM blank "
                "sentinel or outside 0..100 %, dropped on the server)") in report.notes
        s = {(r[0], r[1]): r for r in wh.sql(
            "SELECT gpu_uuid, mig_instance, node, mig_profile, gr_active, gr_active_max, gpu_util, fb_used_max_mib "
            "FROM gpu_samples WHERE ts = '2026-11-01 00:10:00'").rows()}
        assert s[("GPU-cccc0000-0000-0000-0000-000000000000", 1)][2:] == ("gpu-h100-1", "3g.40gb", 0.2, 0.2, None, 9000.0)
        assert s[("GPU-dddd0000-0000-0000-0000-000000000000", -1)][2:5] == ("gpu-l4-1", "", 0.5)  # util/100
        assert s[("GPU-eeee0000-0000-0000-0000-000000000000", -1)][2] == "gpu-a10g-1"
        idle = wh.sql("SELECT DISTINCT gpu_uuid, mig_instance FROM gpu_samples WHERE pod = ''").rows()
        assert sorted(idle) == [("GPU-aaaa1111-0000-0000-0000-000000000000", -1),
                                ("GPU-cccc0000-0000-0000-0000-000000000000", 2),
                                ("GPU-dddd0000-0000-0000-0000-000000000000", -1)]
        pods = {r[0]: r[1:] for r in wh.sql(
            "SELECT uid, name, workload_kind, workload, gpu_request, mig_profile, phase, queue FROM pods").rows()}
        assert set(pods) == {"uid-train-0", "uid-infer", "uid-job0-a", "uid-job0-b", "uid-nb", "uid-pend"}  # no CPU pod
        assert pods["uid-job0-a"] == ("job-0", "VolcanoJob", "vj", 1.0, None, "Failed", "research")
        assert pods["uid-job0-b"][5] == "Running" and pods["uid-infer"][1:5] == ("Deployment", "infer", 0.0, "3g.40gb")
        nodes = {r[0]: r[1:] for r in wh.sql("SELECT node, capacity_type, gpu_count, last_seen FROM nodes").rows()}
        assert nodes["gpu-h100-1"][:2] == ("spot", 8) and nodes["gpu-a10g-1"][2] == datetime(2026, 11, 1, 3, 55)
        state = wh.sql("SELECT scope, status, cursor, details FROM ingest_state").row(0)
    assert state[:3] == (redact_url(prom_small), "complete", T_END)
    assert "s3cret" not in str(state) and "tok-123" not in str(state)


def test_rerun_is_idempotent_and_cursor_is_incremental(prom_small: str, reference: dict[str, int],
                                                        tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, prom_small)
    with Warehouse(cfg.db_path) as wh:
        src = PrometheusSource(cfg)
        src.collect(wh, T0, T0 + timedelta(hours=3), 300)
        assert wh.sql("SELECT cursor FROM ingest_state").item() == T0 + timedelta(hours=3)
        src.collect(wh, None, T_END, 300)  # resumes from the cursor minus the lag
        assert src.last_plan["chunks"] == 1 and counts(wh) == reference
        src.collect(wh, T0, T_END, 300)  # the same window again: same rows
        assert counts(wh) == reference


def test_duckdb_memory_is_capped_while_collecting_then_restored(prom_small: str, tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, prom_small)
    with Warehouse(cfg.db_path) as wh:
        def limit(name: str = "memory_limit") -> str:
            return str(wh.con.execute(f"SELECT current_setting('{name}')").fetchall()[0][0])

        seen: list[str] = []
        thresholds: list[str] = []
        wal = cfg.db_path.with_name(cfg.db_path.name + ".wal")

        def committed(batch: object, rows: object) -> None:
            seen.append(limit())
            thresholds.append(limit("checkpoint_threshold"))

        src = PrometheusSource(cfg, on_commit=committed)
        default, default_threshold = limit(), limit("checkpoint_threshold")
        src.collect(wh, T0, T0 + timedelta(hours=1), 300)
        assert seen == ["244.1 MiB"] and limit() == default  # 256 MB while loading; the default after
        # chunks commit without checkpointing; the collection checkpoints once it is whole
        assert thresholds == ["244.1 MiB"] and limit("checkpoint_threshold") == default_threshold == "16.0 MiB"
        assert not wal.exists() or wal.stat().st_size == 0
        for chosen in ("3GB", "100MB"):  # a limit someone set survives collections (a lower one is kept)
            wh.con.execute(f"SET memory_limit='{chosen}'")
            before = limit()
            for _ in range(3):
                src.collect(wh, T0, T0 + timedelta(hours=1), 300)
            assert limit() == before and seen[-1] == ("244.1 MiB" if chosen == "3GB" else before)


def test_raw_mode_and_sharding_give_the_same_allocation(prom_small: str, small_fleet: SmallFleet,
                                                        tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, prom_small, concurrency=3)
    with Warehouse(cfg.db_path) as wh:
        src = PrometheusSource(cfg, points_per_query=10, points_per_batch=1)
        report = src.collect(wh, T0, T_END, 300)
        assert src.last_plan["shards"] > 2 and src.last_plan["chunks"] == 6
        assert gpu_hours(wh) == small_fleet.gpu_hours(300)
        # six chunks see the same GPUs, pods and nodes: the summary counts each once
        for table in ("gpus", "pods", "nodes"):
            assert report.rows[table] == wh.sql(f"SELECT count(*) FROM {table}").item() > 0, table
    cfg = cfg_for(tmp_path, prom_small, name="raw")
    with Warehouse(cfg.db_path) as wh:
        PrometheusSource(cfg).collect(wh, T0, T_END, 30, raw=True)
        assert gpu_hours(wh) == small_fleet.gpu_hours(30)
        assert wh.sql("SELECT count(*) FROM gpu_samples WHERE gr_active_max IS DISTINCT FROM gr_active").item() == 0


def test_matchers_are_quoted_never_pasted(prom_small: str, tmp_path: Path) -> None:
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    assert selector("m", [("cluster", "=", '"} or vector(1) #')]) == 'm{cluster="\\"} or vector(1) #"}'
    with pytest.raises(BadInput, match="not a valid Prometheus label name"):
        selector("m", [('x"}', "=", "1")])
    assert len(uuid_shards(4, True)) == 9 and uuid_shards(1, True) == [[]]
    cfg = cfg_for(tmp_path, prom_small)
    with Warehouse(cfg.db_path) as wh:
        # the hostile value matches nothing (it was quoted): a collection that maps nothing is refused
        with pytest.raises(BadInput, match="no dcgm-exporter or kube-state-metrics series gpuinsight reads"):
            PrometheusSource(cfg, matchers={"cluster": '"} or vector(1) #'}).collect(wh, T0, T_END, 300)
        assert wh.count("gpu_samples") == 0


def test_5xx_is_retried_then_gives_a_clear_failure(proxy: FaultProxy, reference: dict[str, int],
                                                   tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, proxy.url, retries=3)
    proxy.only_path, proxy.fail_next = "/api/v1/query_range", 3
    with Warehouse(cfg.db_path) as wh:
        PrometheusSource(cfg).collect(wh, T0, T_END, 300)
        assert counts(wh) == reference and proxy.fail_next == 0
    cfg = cfg_for(tmp_path, proxy.url, name="fail", retries=1)
    proxy.fail_next = 100
    with Warehouse(cfg.db_path) as wh:
        with pytest.raises(RuntimeFailure, match=r"over_time.*gave up after 2 attempts \(HTTP 503: unavailable: upstream unavailable\)"):
            PrometheusSource(cfg).collect(wh, T0, T_END, 300)
        assert wh.count("gpu_samples") == 0
        assert wh.sql("SELECT status FROM ingest_state").item() == "failed"


def test_stalled_server_times_out(proxy: FaultProxy, tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, proxy.url, retries=1, timeout_s=0.5)
    proxy.stall_s = 2.0
    started = time.monotonic()
    with Warehouse(cfg.db_path) as wh, pytest.raises(RuntimeFailure, match=r"gave up after 2 attempts \(timed out\)"):
        PrometheusSource(cfg).collect(wh, T0, T_END, 300)
    assert time.monotonic() - started < 10


def test_non_prometheus_answers_are_bad_input(proxy: FaultProxy, tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, proxy.url)
    proxy.only_path, proxy.content_type, proxy.body = "/api/v1/query_range", "text/html", b"<html>login</html>"
    with Warehouse(cfg.db_path) as wh, pytest.raises(BadInput, match=r"_over_time\(.*not Prometheus JSON"):
        PrometheusSource(cfg).collect(wh, T0, T_END, 300)


_KILLED_RUN = """
import sys
from datetime import datetime
from pathlib import Path
from gpuinsight.config import Config, PrometheusConfig
from gpuinsight.sources.prometheus import PrometheusSource
from gpuinsight.warehouse import Warehouse
cfg = Config(db_path=Path(sys.argv[1]), cluster="test", prometheus=PrometheusConfig(url=sys.argv[2]))
def committed(batch, rows):
    print("COMMITTED", batch.end.isoformat(), flush=True)
with Warehouse(cfg.db_path) as wh:
    PrometheusSource(cfg, points_per_batch=1, on_commit=committed).collect(
        wh, datetime(2026, 11, 1), datetime(2026, 11, 1, 6), 300)
print("DONE", flush=True)
"""


def test_killed_collection_leaves_consistent_warehouse_and_resumes(proxy: FaultProxy, reference: dict[str, int],
                                                                   tmp_path: Path) -> None:
    db = tmp_path / "killed.duckdb"
    proxy.delay_s = 0.05  # slow enough that the kill lands mid-run
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, str(db), proxy.url], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    committed = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("COMMITTED"):
                committed.append(datetime.fromisoformat(line.split()[1]))
            if len(committed) == 2:
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    proxy.delay_s = 0
    cfg = cfg_for(tmp_path, proxy.url, name="killed")
    with Warehouse(cfg.db_path) as wh:
        cursor, status = wh.sql("SELECT cursor, status FROM ingest_state").row(0)
        assert status == "running" and cursor >= committed[-1]
        dup = wh.sql("SELECT count(*) FROM (SELECT 1 FROM gpu_samples GROUP BY cluster, gpu_uuid, mig_instance, ts "
                     "HAVING count(*) > 1)").item()
        assert dup == 0 and wh.sql("SELECT max(ts) FROM gpu_samples").item() < cursor
        n_steps = wh.sql("SELECT count(DISTINCT ts) FROM gpu_samples").item()
        assert n_steps == (cursor - T0) / timedelta(minutes=5)  # whole chunks only
        PrometheusSource(cfg).collect(wh, None, T_END, 300)  # the next run completes it
        assert counts(wh) == reference
        assert wh.sql("SELECT status FROM ingest_state").item() == "complete"


def test_sample_fleet_round_trip(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The generator's fleet, served by a real Prometheus, gives its ground-truth GPU-hours; the
    series-frame route stores the same tables (serving, energy, cAdvisor, MIG, shared GPUs)."""
    import gpuinsight.sources.prometheus as prometheus
    from tests.samplegen import FleetSpec, write_sample

    root = tmp_path_factory.mktemp("sample-fleet")
    spec = FleetSpec(days=0.5)
    write_sample(root, spec, gzip=False)
    truth = json.loads((root / "ground_truth.json").read_text())
    tsdb = backfill(root / "metrics.om", root / "tsdb")
    cfg = Config(db_path=root / "w.duckdb", cluster=spec.cluster)
    with prometheus_server(tsdb) as url, Warehouse(cfg.db_path) as wh:
        cfg = cfg.with_(prometheus=PrometheusConfig(url=url))
        start = spec.start.replace(tzinfo=None)
        PrometheusSource(cfg).collect(wh, start, start + timedelta(days=spec.days), spec.interval_s)
        got = dict(wh.sql("""
            WITH pw AS (SELECT DISTINCT namespace, name, workload FROM pods)
            SELECT s.namespace || '/' || pw.workload, sum(s.step_s) / 3600.0
            FROM gpu_samples s JOIN pw ON pw.namespace = s.namespace AND pw.name = s.pod
            GROUP BY ALL""").rows())
        columnar = stored(wh)
        signals_match_the_file_path(wh, root / "metrics.om", cfg.with_(db_path=root / "file.duckdb"))
        monkeypatch.setattr(prometheus, "dcgm_rows", wide_rows)
        with Warehouse(root / "frames.duckdb") as frames_wh:
            SeriesFramePath(cfg.with_(db_path=root / "frames.duckdb")).collect(
                frames_wh, start, start + timedelta(days=spec.days), spec.interval_s)
            assert_same_tables(columnar, stored(frames_wh))
    step_h = spec.interval_s / 3600
    wanted: dict[str, float] = {}  # a Ray cluster's groups are one workload
    for w in truth["workloads"]:
        key = f"{w['namespace']}/{w['workload']}"
        wanted[key] = wanted.get(key, 0.0) + (w["allocated_gpu_hours_sampled"] or w["allocated_mig_instance_hours_sampled"])
    for key, want in wanted.items():
        assert abs(got.get(key, 0.0) - want) <= step_h + 1e-9, (key, got.get(key), want)


def signals_match_the_file_path(wh: Warehouse, om: Path, file_cfg: Config) -> None:
    """PCIe RX, the pods' CPU requests and cAdvisor's CPU rate arrive through Prometheus as they do
    from the file, and the input-starved, checkpoint and topology findings come out the same."""
    from gpuinsight.rules.engine import evaluate_rules
    from gpuinsight.sources.openmetrics import load_openmetrics
    from gpuinsight.sql import load_registry

    cpu = "SELECT namespace, pod, ts, cpu_cores FROM pod_cpu_samples WHERE pod LIKE 'resnet50%' ORDER BY ts"
    rx = "SELECT gpu_uuid, ts, pcie_rx_bps, pcie_tx_max_bps FROM gpu_samples WHERE pcie_rx_bps IS NOT NULL ORDER BY ALL"
    req = "SELECT name, cpu_request FROM pods WHERE name LIKE 'resnet50%' ORDER BY name"
    with Warehouse(file_cfg.db_path) as file_wh:
        load_openmetrics(file_wh, file_cfg, om)
        want_cpu, want_rx, want_req = (file_wh.sql(q).rows() for q in (cpu, rx, req))
    got_cpu = {r[:3]: r[3] for r in wh.sql(cpu).rows()}
    assert want_cpu and len(got_cpu) >= len(want_cpu) - 1  # the last step's counter sample lies past the window
    for *key, cores in want_cpu:
        if tuple(key) in got_cpu:
            assert got_cpu[tuple(key)] == pytest.approx(cores, rel=1e-4), key  # rate() extrapolates by the 1 ms shift
    assert wh.sql(rx).rows() == want_rx and wh.sql(req).rows() == want_req == [("resnet50-train-trainer-0", 8.0)]
    registry = load_registry()
    with wh.transaction() as con:
        registry.refresh(con)
    frames = {}
    from gpuinsight.rules.engine import needed_frames

    for name in needed_frames():
        frames[name] = registry.run(wh.con, name)
    found = {(r.rule, r.workload): r for r in evaluate_rules(frames)}
    starved = found[("input_starved", "resnet50-train")]
    assert starved.proposed["cause"] == "cpu" and starved.evidence["burst_period_min"] == 30.0
    intervals = {r["workload"]: r["interval_median_s"] for r in frames["workload_checkpoint_signal"].to_dicts()}
    assert intervals["mistral-lora"] == 1200 and intervals["llama-sft"] == 1800  # PCIe TX bursts, pushed-down max
    # the racks are HyperNodes in the kubectl dump, not in the metrics: from Prometheus alone the
    # gang's two nodes share only a zone, no node has room for it, and nothing is claimed
    assert ("topology", "bert-ddp") not in found


def test_bulk_decoder_equals_orjson_decoder() -> None:
    import orjson

    from gpuinsight.sources.prom.client import fast_matrix, matrix_of

    body = (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"x\\"values\\":[]]",'
            b'"b":"{\\"metric\\":1}"},"values":[[1793491200,"0.5"],[1793491500.5,"NaN"]]},'
            b'{"metric":{},"values":[[1793491200,"+Inf"]]}]}}')
    fast = fast_matrix(body)
    slow = matrix_of(orjson.loads(body)["data"]["result"])
    assert fast is not None and fast.labels == slow.labels and fast.lens.tolist() == slow.lens.tolist() == [2, 1]
    assert fast.ts.equals(slow.ts) and fast.values.equals(slow.values) and fast.warnings == []
    frame = fast.series_frame("m", 300)
    assert frame.equals(slow.series_frame("m", 300)) and frame["a"].to_list()[0] == 'x"values":[]]'
    assert frame["value"].is_nan().to_list() == [False, True, False] and frame["value"][2] == float("inf")
    # warnings and VictoriaMetrics' isPartial are read on the bulk path too
    warned = fast_matrix(body[:-1] + b',"warnings":["partial response"]}')
    assert warned is not None and warned.warnings == ["partial response"] and warned.points == 3
    vm = fast_matrix(body.replace(b'"success",', b'"success","isPartial":true,'))
    assert vm is not None and vm.warnings and vm.warnings[0].startswith("isPartial")
    for cut in (20, 60, len(body) - 3, len(body) - 1):  # cut short anywhere: never a silent answer
        assert fast_matrix(body[:cut]) is None
    # every spelling of a float Prometheus writes reads as the full decoder reads it, bit for bit;
    # a value that is not a number is left to the full decoder
    spellings = [b"-Inf", b"NaN", b"+Inf", b"0", b"-0", b"1e-05", b"3.0000000000000004", b"1.7976931348623157e+308",
                 b"5e-324", b"12345678901234567890", b"0.1"]
    points = b",".join(b'[%d.999,"%s"]' % (1793491200 + 300 * i, v) for i, v in enumerate(spellings))
    many = b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[' + points + b"]}]}}"
    fast, slow = fast_matrix(many), matrix_of(orjson.loads(many)["data"]["result"])
    assert fast is not None and fast.ts.equals(slow.ts)
    assert fast.values.to_numpy().tobytes() == slow.values.to_numpy().tobytes()
    assert fast_matrix(body.replace(b'"0.5"', b'"x"')) is None and fast_matrix(body.replace(b'"0.5"', b'""')) is None


def test_columnar_rows_equal_the_series_frame_transform(prom_small: str) -> None:
    """The DCGM bulk path gives exactly the rows and counts dcgm_samples gives from long series
    frames: identities, node resolution and hints, readings that are not measurements."""
    from polars.testing import assert_frame_equal

    from gpuinsight.sources.gpu_nodes import NodeDirectory
    from gpuinsight.sources.prom.client import PromClient
    from gpuinsight.sources.prom.columnar import dcgm_rows, is_dcgm
    from gpuinsight.sources.prom.frames import concat_series
    from gpuinsight.sources.series import TransformStats, dcgm_samples

    def both(answers: list) -> tuple:
        got, want = TransformStats(), TransformStats()
        # a directory that knows one node: a Hostname naming it places the GPU, another is a hint
        rows = dcgm_rows(answers, "c", 300, got, NodeDirectory(known={"n1"}))
        slow = dcgm_samples(concat_series([m.series_frame(q.metric, q.shift_s, q.keep) for q, m in answers]),
                            "c", 300, stats=want, nodes=NodeDirectory(known={"n1"}))
        key = ["ts", "gpu_uuid", "mig_instance", "namespace", "pod"]
        fast = rows.wide().select(slow.columns)
        assert rows.rows["label_id"].n_unique() == rows.labels.height  # every label set has rows
        assert_frame_equal(fast.sort(key), slow.sort(key), check_exact=False)
        assert got.dropped.counts == want.dropped.counts
        assert got.unidentified_series == want.unidentified_series
        # (which hint a GPU's unmatched entry keeps when its rows disagree is not defined on either path)
        assert (got.matched, got.unmatched.keys()) == (want.matched, want.unmatched.keys())
        return fast, got

    cfg = Config(cluster="c", prometheus=PrometheusConfig(url=prom_small))
    src = PrometheusSource(cfg, points_per_query=10, points_per_batch=1)  # sharded, 6 chunks
    t0, t1 = src.grid(T0, T_END, 300)
    client = PromClient(cfg.prometheus)
    chunks = src.plan(t0, t1, 300, raw=False)
    rows, stats = both([(q, client.query_range(q)) for q in chunks[0] if is_dcgm(q)])
    # 6 GPU entities x 12 steps; the step holding the NaNs (not read again here: no refiner)
    assert rows.height == 12 * 6 and stats.dropped.counts == {("DCGM_FI_DEV_GPU_UTIL", "nonfinite"): 1}
    seen = TransformStats()
    for seed in range(40):
        _, got = both(random_dcgm_answers(seed))
        for k, n in got.dropped.counts.items():
            seen.dropped.counts[k] = seen.dropped.counts.get(k, 0) + n
        seen.unidentified_series |= got.unidentified_series
    assert {why for _, why in seen.dropped.counts} == {"nonfinite", "blank", "range"}
    assert seen.unidentified_series  # the random mixes hold series without a GPU identity


def random_dcgm_answers(seed: int) -> list:
    """DCGM answers over random label mixes: every spelling, sharing, MIG, dropped labels, NaN."""
    import numpy as np
    import polars as pl

    from gpuinsight.sources.prom.frames import Matrix
    from gpuinsight.sources.prom.promql import DCGM_LABELS, Query

    rng = np.random.default_rng(seed)
    pick = lambda *xs: xs[int(rng.integers(len(xs)))]  # noqa: E731
    gpus = []
    for g in range(int(rng.integers(1, 6))):
        ident = {pick("UUID", "uuid"): f"GPU-{g:04d}", "gpu": pick(str(g % 2), str(g % 2), "nvswitch0"),
                 "modelName": pick("NVIDIA A100", "NVIDIA L4")}
        host = pick("Hostname", "hostname", "node", None)
        if host:
            ident[host] = pick("n1", "n2")
        if rng.random() < 0.3:
            ident |= {"GPU_I_ID": pick("1", "2"), "GPU_I_PROFILE": pick("1g.10gb", "3g.40gb")}
        gpus.append(ident)
    holders = [{}, {"pod": "dcgm-exporter-x", "namespace": "gpu-operator"},
               {"pod": "dcgm-exporter-x", "namespace": "gpu-operator", "exported_pod": "p1", "exported_namespace": "a",
                "exported_container": "c2"},
               {"pod": "p1", "namespace": "a", "container": "c1"}, {"pod": "p1", "namespace": "a", "container": "c0"},
               {"pod_name": "p2", "pod_namespace": "b", "container_name": "c"}, {"pod": "p3", "namespace": "a"}]
    metrics = ["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE:max", "DCGM_FI_DEV_GPU_UTIL",
               "dcgm_fi_dev_fb_used", "dcgm_fi_dev_fb_used:max", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
               "DCGM_FI_PROF_GR_ENGINE_ACTIVE:min", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_TX_BYTES:max",
               "dcgm_fi_prof_nvlink_rx_bytes"]
    start, step, steps = 1793491499.999, 300, int(rng.integers(1, 8))
    answers = []
    for metric in rng.choice(metrics, size=int(rng.integers(1, len(metrics) + 1)), replace=False):
        labels, lens, ts, values = [], [], [], []
        for _ in range(int(rng.integers(1, 9))):
            # ``instance`` is dropped on arrival: two series may then share every kept label
            labels.append({**pick(*gpus), **pick(*holders), "instance": str(rng.integers(3)), "__name__": str(metric)})
            at = sorted(rng.choice(steps, size=int(rng.integers(1, steps + 1)), replace=False))
            lens.append(len(at))
            ts += [start + step * i for i in at]
            # NaN/Inf, DCGM's blank sentinel, a value outside every range, and below it
            values += [pick(float("nan"), float("inf"), 7.0, 2147483632.0, -3.0, 1e6) if rng.random() < 0.15
                       else float(rng.integers(0, 5)) for _ in at]
        m = Matrix(labels, np.array(lens), pl.Series(ts, dtype=pl.Float64), pl.Series(values, dtype=pl.Float64))
        answers.append((Query("x", str(metric), start, start + step * steps, step, step - 0.001, DCGM_LABELS), m))
    return answers


class SeriesFramePath(PrometheusSource):
    """The collector on the series-frame route the other paths take: every answer a long series
    frame with every point, the chunk's frames in one, DCGM rows by ``dcgm_samples``, pods and
    nodes by ``ksm_rows`` over the whole frame (as the collector did before it went columnar)."""

    def _fetch(self, q):  # type: ignore[no-untyped-def]
        from gpuinsight.sources.prom.columnar import is_dcgm
        from gpuinsight.sources.prom.refine import spot

        m = self.client.query_range(q)
        if is_dcgm(q):
            return m, m.label_frame(q.keep), spot(q, m) if self.refiner is not None else None
        return m.without_labels(), m.series_frame(q.metric, q.shift_s, q.keep), None

    def _ksm(self, answers):  # type: ignore[no-untyped-def]
        from gpuinsight.sources.prom.frames import concat_series

        series = concat_series([f.result()[1] for _, f in answers])
        self.directory.add_series(series)
        return series, None, None  # pods and nodes: _load_one's ksm_rows(series)


def wide_rows(answers, cluster, step, stats, nodes, node_labels, labels):  # type: ignore[no-untyped-def]
    """``dcgm_rows`` as the series-frame route makes them: ``dcgm_samples`` over long frames."""
    from gpuinsight.sources.prom.frames import concat_series
    from gpuinsight.sources.series import dcgm_samples

    series = concat_series([m.series_frame(q.metric, q.shift_s, q.keep) for q, m in answers])
    return dcgm_samples(series, cluster, step, stats=stats, nodes=nodes, node_labels=node_labels)


def stored(wh: Warehouse) -> dict[str, list[tuple]]:
    """Every table's rows in order (the cursor and counts of ingest_state; not the times of runs)."""
    tables = wh.sql("SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                    "AND table_name NOT IN ('ingest_state', 'schema_version') ORDER BY 1").to_series().to_list()
    got = {t: wh.sql(f'SELECT * FROM "{t}" ORDER BY ALL').rows() for t in tables}
    got["ingest_state"] = wh.sql("SELECT source, scope, cursor, status, rows_loaded FROM ingest_state").rows()
    return got


def assert_same_tables(columnar: dict[str, list[tuple]], frames: dict[str, list[tuple]]) -> None:
    assert columnar["gpu_sample_facts"] and columnar["pods"] and columnar["nodes"] and columnar["gpus"]
    assert columnar.keys() == frames.keys()
    differ = [table for table, rows in frames.items() if columnar[table] != rows]
    assert not differ, differ


def test_collection_equals_the_series_frame_route(prom_small: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The columnar route (each transform the frame of its own answers, the DCGM answers straight
    into label sets and integer keys) stores what the series-frame route stores: every table, row
    for row, over several chunks and shards, readings read again, re-collection included."""
    import gpuinsight.sources.prometheus as prometheus

    def collect(kind: type[PrometheusSource], name: str) -> tuple[dict[str, list[tuple]], list[str]]:
        cfg = cfg_for(tmp_path, prom_small, name)
        with Warehouse(cfg.db_path) as wh:
            notes = []
            for since in (T0, T0 + timedelta(hours=2)):  # then a re-collection of the last 4 hours
                src = kind(cfg, points_per_query=200, points_per_batch=400)
                notes += src.collect(wh, since, T_END, 300).notes
            return stored(wh), notes

    columnar, columnar_notes = collect(PrometheusSource, "columnar")
    monkeypatch.setattr(prometheus, "dcgm_rows", wide_rows)
    frames, frame_notes = collect(SeriesFramePath, "frames")
    assert_same_tables(columnar, frames)
    assert columnar_notes == frame_notes


def test_a_bad_declaration_is_refused_in_its_chunk(small_fleet: SmallFleet, tmp_path: Path) -> None:
    """A kube-state-metrics value no cluster produces (a pod created in the year 3e12), served from
    the fourth hour on, is one-line bad input naming the series; the chunks before it stay loaded
    with their cursor, nothing of its chunk is."""
    from dataclasses import replace

    from tests.prom_server import write_openmetrics

    late = T0.timestamp() + 3 * 3600
    series = [replace(s, points=[(t, 1e20 if t >= late else v) for t, v in s.points])
              if s.name == "kube_pod_created" and s.labels.get("exported_pod") == small_fleet_pod(small_fleet) else s
              for s in small_fleet.series]
    om = write_openmetrics(series, tmp_path / "bad.om")
    with prometheus_server(backfill(om, tmp_path / "tsdb")) as url:
        cfg = cfg_for(tmp_path, url)
        with Warehouse(cfg.db_path) as wh:
            with pytest.raises(BadInput) as err:
                PrometheusSource(cfg, points_per_batch=1).collect(wh, T0, T_END, 300)
            message = str(err.value)
            assert "\n" not in message and message.startswith("prometheus: kube_pod_created{") and \
                "1e+20: time is not a plausible unix time" in message, message
            cursor, status = wh.sql("SELECT cursor, status FROM ingest_state").row(0)
            assert status == "failed" and T0 < cursor <= datetime.fromtimestamp(late, UTC).replace(tzinfo=None)
            assert wh.sql("SELECT max(ts) FROM gpu_samples").item() < cursor


def small_fleet_pod(fleet: SmallFleet) -> str:
    """A pod of the small fleet (the first one kube_pod_created names)."""
    return next(s.labels["exported_pod"] for s in fleet.series if s.name == "kube_pod_created")

"""Alibaba openb trace import: the real trace (row counts, GPU sums) and bad CSVs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.sources.alibaba import OPENB_CLUSTER, OPENB_EPOCH, import_openb
from gpuinsight.warehouse.db import Warehouse

# the default pod list and the GPU node list ship in sample_data/openb; the other two files are
# vendored in tests/fixtures/traces (both cited in their SOURCES)
TRACE = Path(__file__).resolve().parents[1] / "sample_data" / "openb"
MORE = Path(__file__).resolve().parent / "fixtures" / "traces" / "alibaba-gpu-v2023-openb"
CFG = Config(cluster="prod")


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[Warehouse]:
    w = Warehouse(tmp_path / "wh.duckdb")
    yield w
    w.close()


def one(w: Warehouse, sql: str) -> Any:
    return w.sql(sql).rows()[0]


def test_import_real_trace(wh: Warehouse) -> None:
    wh.con.execute("INSERT INTO pods (cluster, uid, namespace, name) VALUES ('prod', 'keep-me', 'a', 'b')")
    report = import_openb(wh, CFG, TRACE / "openb_pod_list_default.csv", TRACE / "openb_node_list_gpu_node.csv")
    assert report.rows == {"nodes": 1213, "pods": 8152}
    assert one(wh, f"SELECT count(*), sum(gpu_count) FROM nodes WHERE cluster = '{OPENB_CLUSTER}'") == (1213, 6212)
    # re-import with every node (CPU-only ones too) replaces the cluster's rows
    import_openb(wh, CFG, TRACE / "openb_pod_list_default.csv", MORE / "openb_node_list_all_node.csv")
    assert one(wh, "SELECT count(*), count(gpu_model), sum(gpu_count) FROM nodes") == (1523, 1213, 6212)
    models = dict(wh.sql("SELECT gpu_model, count(*) FROM nodes WHERE gpu_count > 0 GROUP BY ALL").rows())
    assert models["G2"] == 549 and models["T4"] == 387 + 17 and models["V100M32"] == 30
    pods = one(wh, f"SELECT count(*), round(sum(gpu_request)), count(*) FILTER (gpu_request > 0 AND gpu_request < 1) "
                   f"FROM pods WHERE cluster = '{OPENB_CLUSTER}'")
    assert pods == (8152, 6087, 3078)  # SOURCES.md: about 6,087 GPUs requested, 3,078 fractional pods
    phases = dict(wh.sql(f"SELECT phase, count(*) FROM pods WHERE cluster = '{OPENB_CLUSTER}' GROUP BY ALL").rows())
    assert phases == {"Running": 5193, "Failed": 1870, "Pending": 897, "Succeeded": 192}
    first = one(wh, "SELECT created, scheduled, finished, gpu_requests, labels FROM pods WHERE uid = 'openb-pod-0001'")
    assert first[0] == first[1] == OPENB_EPOCH + timedelta(seconds=427061) and first[2] == OPENB_EPOCH + timedelta(
        seconds=12902960)
    assert json.loads(first[3]) == {"gpu_milli": 460, "num_gpu": 1} and json.loads(first[4]) == {"qos": "LS"}
    assert one(wh, "SELECT count(*) FROM pods WHERE phase = 'Pending' AND scheduled IS NULL") == (897,)
    assert one(wh, "SELECT count(*) FROM pods WHERE cluster = 'prod'") == (1,)  # other clusters untouched


def test_import_variant_without_times(wh: Warehouse) -> None:
    import_openb(wh, CFG, MORE / "openb_pod_list_multigpu50.head200.csv", TRACE / "openb_node_list_gpu_node.csv")
    assert one(wh, "SELECT count(*), count(created), count(phase) FROM pods")[1:] == (0, 0)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("pods", "message"), [
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1024,1,500\np2,1000,1024,two,1000\n",
     r"pods\.csv:3: num_gpu: expected an integer, got 'two'"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1024,1,1500\n", r"pods\.csv:2: gpu_milli: 1500 is out of range"),
    ("name,cpu_milli,memory_mib,num_gpu\np1,1000,1024,1\n", r"pods\.csv:1: missing column\(s\) gpu_milli"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1024\n", r"pods\.csv:2: expected 5 fields"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,pod_phase\np1,1000,1024,1,1000,Sleeping\n",
     r"pods\.csv:2: pod_phase: unknown phase 'Sleeping'"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1,1,0,0\np1,1,1,0,0\n", r"pods\.csv:3: duplicate pod p1"),
])
def test_bad_pod_csv(wh: Warehouse, tmp_path: Path, pods: str, message: str) -> None:
    nodes = _write(tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,786432,8,V100M32\n")
    with pytest.raises(BadInput, match=message):
        import_openb(wh, CFG, _write(tmp_path / "pods.csv", pods), nodes)
    assert one(wh, "SELECT count(*) FROM nodes") == (0,)


def test_bad_node_csv_and_small_import(wh: Warehouse, tmp_path: Path) -> None:
    pods = _write(tmp_path / "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                  "creation_time,deletion_time,scheduled_time\n"
                  "p1,4000,15258,1,220,,BE,Running,100,400,105\np2,8000,1024,2,1000,V100M16|V100M32,LS,Succeeded,0,60,1\n")
    bad = _write(tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,786432,8,\n")
    with pytest.raises(BadInput, match=r"nodes\.csv:2: model is empty on a node with 8 GPUs"):
        import_openb(wh, CFG, pods, bad)
    good = _write(tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,786432,8,V100M32\n"
                  "c1,32000,262144,0,\n")
    import_openb(wh, CFG, pods, good)
    assert wh.sql("SELECT uid, gpu_request, phase, finished FROM pods ORDER BY uid").rows() == [
        ("p1", 0.22, "Running", datetime(2023, 1, 1, 0, 6, 40)), ("p2", 2.0, "Succeeded", datetime(2023, 1, 1, 0, 1))]
    ann = json.loads(one(wh, "SELECT annotations FROM pods WHERE uid = 'p2'")[0])
    assert ann == {"cpu_milli": 8000, "gpu_spec": ["V100M16", "V100M32"], "memory_mib": 1024}
    cap = json.loads(one(wh, "SELECT capacity FROM nodes WHERE node = 'n1'")[0])
    assert cap == {"cpu": 96.0, "memory": 786432 * 2.0**20, "nvidia.com/gpu": 8.0}

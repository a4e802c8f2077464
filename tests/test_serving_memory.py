"""Reserved memory is not used memory (issue 24, docs/rules.md "Serving memory"): an inference
server sized on the KV cache it used, never below what an under-stated KV size allows; the server
setting that makes the size true, patched into real published Deployments and validated; vLLM's
cache configuration through the file path and a real Prometheus."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuinsight.actions.builders import server_memory
from gpuinsight.actions.model import ActionError, patch_paths
from gpuinsight.actions.patching import json_patch, restore_ops, snapshot_fields
from gpuinsight.actions.validate import validate_object
from gpuinsight.config import Config, PrometheusConfig
from gpuinsight.plan import Recommendation
from gpuinsight.plan.kinds.server_memory import ServerMemory
from gpuinsight.rules.common import Targets
from gpuinsight.rules.consolidation_plan import demand_size
from gpuinsight.rules.serving import MIB, server_setting, serving_size
from gpuinsight.sources.openmetrics import load_openmetrics
from gpuinsight.sources.prometheus import PrometheusSource
from gpuinsight.sql.rows import make_row
from gpuinsight.warehouse import Warehouse
from tests.prom_server import backfill, prometheus_server, write_openmetrics
from tests.test_serving import T, _series

REAL = Path(__file__).parent / "fixtures" / "real"
T0 = Targets(0.10, 0.80, 0.90, 8, kv_headroom=0.5, min_kv_hours=12, server_context_mib=1024)
H100 = 81559.0          # an H100-80GB as DCGM reports it (used + free)
SLICE_3G = 40 * 998.0   # a 3g.40gb instance, as the rules take it


def facts(**kw: Any) -> Any:
    base = {"server": "vllm", "kv_cache_peak": 0.04, "kv_hours": 48, "gpu_memory_utilization": 0.9,
            "kv_cache_memory_bytes": None, "num_gpu_blocks": 27520, "block_size": 16, "cache_dtype": "auto",
            "kv_cache_bytes_annotations": ["53.75Gi"]}
    return make_row("serving_memory", **{**base, **kw})


def row(fb: float = 73940.0, **kw: Any) -> tuple[Any, Any]:
    """A serving workload's ``workload_gpu_profile`` row and its ``serving_memory`` row."""
    return (make_row("workload_gpu_profile", fb_max_mib=fb, peak_p95=0.12, gr_p95=0.12, sm_p95=0.1), facts(**kw))


# -- the size ---------------------------------------------------------------------------------------

def test_a_reserved_vllm_is_sized_on_the_kv_cache_it_used() -> None:
    """By hand: R = 73,940 MiB reserved, K = 53.75 GiB = 55,040 MiB, peak use 4 %: keep 6 % of K."""
    size = serving_size(*row(), T0)
    assert size is not None and size.basis == "kv_cache"
    kept = 0.04 * 1.5
    budget = (73940 - (1 - kept) * 55040) * 1.1
    assert size.budget_mib == pytest.approx(budget)
    assert size.mem_mib == pytest.approx(budget + 1024)  # the device also holds the server's CUDA context
    assert demand_size(*row(), T0)[0] == pytest.approx(budget + 1024)
    assert size.evidence["kv_cache_size_source"] == "annotation gpuinsight.io/kv-cache-bytes"
    setting = server_setting(size, SLICE_3G, H100)
    assert setting is not None and setting["flag"] == "--gpu-memory-utilization" and setting["mode"] == "set"
    assert setting["value"] == math.ceil(budget / SLICE_3G * 1000) / 1000
    assert setting["value"] * SLICE_3G >= budget  # rounded up: never less than it needs
    ServerMemory(**setting).check(ServerMemory(**setting).to_dict(), "proposed.server_memory")
    # the same GPU (MPS, time-slicing): reserving less of it is the change too
    same = server_setting(size, H100, H100)
    assert same is not None and same["value"] == math.ceil(budget / H100 * 1000) / 1000


@pytest.mark.parametrize(("change", "why"), [
    ({"kv_cache_bytes_annotations": None}, "size in bytes is not known"),
    ({"kv_cache_bytes_annotations": ["lots"]}, "is not a quantity: ignored"),
    ({"kv_cache_bytes_annotations": ["200Gi"]}, "exceeds the framebuffer used"),
    ({"kv_hours": 3}, "measured for 3 h"),
    ({"kv_cache_peak": None, "server": "tgi"}, "tgi publishes no KV-cache use"),
    ({"server": "sglang"}, "not one gpuinsight sizes down"),
    ({"server": "vllm,sglang"}, "not one gpuinsight sizes down"),
])
def test_without_a_stated_kv_size_or_a_measured_use_the_framebuffer_maximum_stays(change: dict[str, Any],
                                                                                   why: str) -> None:
    size = serving_size(*row(**change), T0)
    assert size is not None and size.basis == "framebuffer"
    reserve = 1024 if size.server in ("vllm", "tgi") else 0
    assert size.mem_mib == pytest.approx(73940 * 1.1 + reserve)
    assert why in size.evidence["memory_basis_why"] or why in str(size.evidence.get("kv_cache_note"))
    if change.get("kv_cache_bytes_annotations") == ["lots"]:
        assert "is not a quantity: ignored" in size.evidence["kv_cache_note"]


def test_other_work_is_sized_on_its_framebuffer_and_an_unmoved_server_keeps_its_setting() -> None:
    plain = make_row("workload_gpu_profile", fb_max_mib=9000.0, peak_p95=0.1)
    assert serving_size(plain, None, T0) is None and demand_size(plain, None, T0)[0] == pytest.approx(9900)
    framebuffer = serving_size(*row(kv_cache_bytes_annotations=None), T0)
    assert server_setting(framebuffer, H100, H100) is None  # same device, same reservation
    sglang = serving_size(*row(server="sglang"), T0)
    scale = server_setting(sglang, SLICE_3G, H100)
    assert scale is not None and scale["mode"] == "scale" and scale["flag"] == "--mem-fraction-static"
    assert scale["value"] == pytest.approx(H100 / SLICE_3G, abs=1e-4)


def test_vllm_sized_in_bytes_gets_its_kv_bytes_set() -> None:
    """--kv-cache-memory-bytes: vLLM reports the KV size exactly and ignores the memory fraction."""
    size = serving_size(*row(kv_cache_memory_bytes=40 * 2**30, kv_cache_bytes_annotations=None), T0)
    assert size is not None and size.basis == "kv_cache" and size.kv_bytes_setting
    assert size.evidence["kv_cache_size_source"] == "vLLM kv_cache_memory_bytes"
    assert size.mem_mib == pytest.approx(size.budget_mib)  # an absolute size: no share to ask, no reserve
    setting = server_setting(size, SLICE_3G, H100)
    assert setting is not None and setting["flag"] == "--kv-cache-memory-bytes"
    assert setting["value"] == math.ceil(40 * 2**30 * 0.06)


@pytest.mark.parametrize("seed", range(3))
def test_an_under_stated_kv_size_never_sizes_below_what_the_server_needs(seed: int) -> None:
    """Safe before clever, on random servers: whatever KV size is stated at or below the true one,
    the size is at least the reservation less the KV cache not used at peak (the true need) and
    never above the plain framebuffer sizing; a smaller stated size never gives a smaller need."""
    rng = random.Random(seed)
    for _ in range(200):
        reserved, peak = rng.uniform(8_000, 190_000), rng.choice([0.0, 1.0, rng.random()])
        true_kv = reserved * rng.uniform(0.05, 0.95)
        stated = true_kv * rng.uniform(0.01, 1.0)
        t = Targets(0.10, 0.80, 0.90, 8, kv_headroom=rng.uniform(0.0, 2.0), min_kv_hours=12, server_context_mib=1024)
        size = serving_size(*row(reserved, kv_cache_peak=peak, kv_cache_bytes_annotations=[str(int(stated * MIB))]), t)
        assert size is not None and size.basis == "kv_cache"
        need = reserved - (1 - peak) * true_kv
        assert size.budget_mib >= need * 1.1 - 1e-6
        assert size.budget_mib <= reserved * 1.1 + 1e-6
        smaller = serving_size(*row(reserved, kv_cache_peak=peak,
                                   kv_cache_bytes_annotations=[str(int(stated * 0.5 * MIB))]), t)
        assert smaller is not None and smaller.budget_mib >= size.budget_mib - 1e-6
        setting = server_setting(size, SLICE_3G, H100)
        assert setting is not None and setting["value"] * SLICE_3G >= size.budget_mib - 1e-6


# -- the setting, patched into real Deployments --------------------------------------------------

def _deployment(name: str) -> dict[str, Any]:
    return yaml.safe_load((REAL / "k8s" / name).read_text())


def _rec(setting: dict[str, Any]) -> Recommendation:
    return Recommendation(rule="mig", title="t", namespace="ns", workload="w", id="mig-test",
                          proposed={"mig_profile": "3g.40gb", "server_memory": setting})


def _setting(flag: str = "--gpu-memory-utilization", mode: str = "set", value: float = 0.613,
             server: str = "vllm") -> dict[str, Any]:
    return {"server": server, "flag": flag, "mode": mode, "value": value, "device_mib": 39920,
            "device_mib_before": 81559, "basis": "kv_cache"}


def _patched(dep: dict[str, Any], setting: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    ops, done = server_memory.spec_ops(_rec(setting), "/spec/template/spec", dep["spec"]["template"]["spec"])
    assert done
    after = json_patch(dep, ops)
    assert validate_object(after) == []
    return after, ops


def test_a_published_vllm_deployment_gets_its_fraction_replaced_in_place() -> None:
    """aws-samples' Qwen3-32B Deployment passes --gpu-memory-utilization=0.95 in its args."""
    dep = _deployment("aws-genai-qwen3-32b-fp8-deployment.yaml")
    after, ops = _patched(dep, _setting())
    args = after["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--gpu-memory-utilization=0.613" in args and "--gpu-memory-utilization=0.95" not in args
    assert len(args) == len(dep["spec"]["template"]["spec"]["containers"][0]["args"])
    assert {"op": "test", "path": "/spec/template/spec/containers/0/args/3",
            "value": "--gpu-memory-utilization=0.95"} in ops
    # a drifted workload fails the patch rather than being changed blind
    drifted = yaml.safe_load(yaml.safe_dump(dep))
    drifted["spec"]["template"]["spec"]["containers"][0]["args"][3] = "--gpu-memory-utilization=0.8"
    with pytest.raises(Exception, match="test"):
        json_patch(drifted, ops)


def test_a_shell_string_command_is_refused_with_what_to_do() -> None:
    """vLLM's own Kubernetes guide runs `/bin/sh -c "vllm serve ..."`: no flag to patch safely."""
    dep = _deployment("vllm-docs-mistral-7b-deployment.yaml")
    with pytest.raises(ActionError, match="shell string.*--gpu-memory-utilization=0.613.*by hand"):
        server_memory.spec_ops(_rec(_setting()), "/spec/template/spec", dep["spec"]["template"]["spec"])


def test_separate_and_absent_flags_and_sglang_bytes() -> None:
    dep = _deployment("aws-genai-qwen3-32b-fp8-deployment.yaml")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    # the flag and its value as two arguments (the underscore spelling vLLM also takes)
    container["args"] = ["--model", "m", "--gpu_memory_utilization", "0.40"]
    after, _ = _patched(dep, _setting())
    assert after["spec"]["template"]["spec"]["containers"][0]["args"] == ["--model", "m", "--gpu_memory_utilization",
                                                                         "0.613"]
    # no flag: appended (TGI's launcher reads the CLI before its CUDA_MEMORY_FRACTION variable)
    container["args"] = ["--model-id", "m"]
    after, _ = _patched(dep, _setting("--cuda-memory-fraction", server="tgi"))
    assert after["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == ["--cuda-memory-fraction", "0.613"]
    del container["args"]
    container["command"] = ["vllm", "serve", "m"]
    after, _ = _patched(dep, _setting())
    assert after["spec"]["template"]["spec"]["containers"][0]["args"] == ["--gpu-memory-utilization", "0.613"]
    # SGLang keeps its static bytes on the smaller device: 0.4 x 81,559 / 39,920
    container["command"], container["args"] = ["python3", "-m", "sglang.launch_server"], ["--mem-fraction-static", "0.4"]
    after, _ = _patched(dep, _setting("--mem-fraction-static", "scale", round(81559 / 39920, 4), "sglang"))
    assert after["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "0.817"
    container["args"] = ["--mem-fraction-static", "0.6"]  # 1.23 of the slice: it does not fit
    with pytest.raises(ActionError, match="not a share of the device"):
        server_memory.spec_ops(_rec(_setting("--mem-fraction-static", "scale", 2.043, "sglang")),
                               "/spec/template/spec", dep["spec"]["template"]["spec"])
    container["args"] = ["--gpu-memory-utilization", "lots"]
    with pytest.raises(ActionError, match="not a number"):
        server_memory.spec_ops(_rec(_setting()), "/spec/template/spec", dep["spec"]["template"]["spec"])


# -- vLLM's cache configuration, collected ---------------------------------------------------------

CONFIG_FIXTURES = {"vllm-v1-cache-config-28924.prom": (0.65, 9271.0), "vllm-v0-cache-config-3100.prom": (0.9, 24188.0)}


@pytest.fixture(scope="module")
def config_prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("cache-config-prom")
    om = write_openmetrics([s for n in CONFIG_FIXTURES for s in _series(n)], folder / "config.om")
    with prometheus_server(backfill(om, folder / "tsdb")) as url:
        yield url


@pytest.mark.parametrize("name", list(CONFIG_FIXTURES))
def test_vllm_cache_config_loads_through_the_file_path_and_a_real_prometheus(config_prom: str, tmp_path: Path,
                                                                          name: str) -> None:
    fraction, blocks = CONFIG_FIXTURES[name]
    cfg = Config(db_path=tmp_path / "file.duckdb", cluster="real")
    path = write_openmetrics(_series(name), tmp_path / f"{name}.om")
    with Warehouse(cfg.db_path) as wh:
        load_openmetrics(wh, cfg, path, step_s=300)
        file_rows = wh.sql("SELECT * FROM serving_config").to_dicts()
    pcfg = Config(db_path=tmp_path / "prom.duckdb", cluster="real", prometheus=PrometheusConfig(url=config_prom))
    with Warehouse(pcfg.db_path) as wh:
        report = PrometheusSource(pcfg, matchers={"fixture": name}).collect(wh, T, T + timedelta(hours=1), 300)
        assert report.rows.get("serving_config")
        prom_rows = wh.sql("SELECT * FROM serving_config").to_dicts()
    for rows in (file_rows, prom_rows):
        assert len(rows) == 1, rows
        r = rows[0]
        assert (r["namespace"], r["pod"], r["server"]) == ("ml", "srv-0", "vllm")
        assert r["gpu_memory_utilization"] == fraction and r["num_gpu_blocks"] == blocks and r["block_size"] == 16
        assert r["kv_cache_memory_bytes"] is None and r["cache_dtype"] == "auto"  # "None" is unset


@pytest.mark.parametrize("args", [["Qwen/Qwen3-32B-FP8", "--gpu-memory-utilization=0.95"],
                                  ["--gpu-memory-utilization", "0.40"], ["--model", "m"], None])
def test_a_rollback_puts_the_arguments_back_as_they_were(args: list[str] | None) -> None:
    """A list element replaced is restored in place (not inserted), an appended flag removed."""
    dep = _deployment("aws-genai-qwen3-32b-fp8-deployment.yaml")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    if args is None:
        del container["args"]
    else:
        container["args"] = args
    after, ops = _patched(dep, _setting())
    snap = snapshot_fields(dep, patch_paths(ops))
    assert json_patch(after, restore_ops(snap, after)) == dep

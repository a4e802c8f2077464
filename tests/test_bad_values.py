"""Values that would move every figure: refused naming file and line (or object and field), exit 2,
warehouse unchanged; telemetry readings out of range are dropped by the documented rule instead."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuinsight.cli import error_outcome
from gpuinsight.config import Config
from gpuinsight.errors import RuntimeFailure
from gpuinsight.sources.openmetrics import load_openmetrics
from gpuinsight.sources.prices import _one_line, load_aws
from gpuinsight.warehouse import Warehouse
from tests.input_cases import KINDS, T_S, fingerprint, outcome


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Warehouse, Config]]:
    """A warehouse holding every seed input, so 'unchanged' is checked against real rows."""
    folder = tmp_path_factory.mktemp("bad-values")
    cfg = Config(db_path=folder / "w.duckdb", cluster="c")
    with Warehouse(cfg.db_path) as wh:
        for name, kind in KINDS.items():
            code, msg = outcome(kind, wh, cfg, kind.write_seed(folder / "seed" / name))
            assert code == 0, (name, msg)
        yield wh, cfg


def _sub(old: str, new: str, count: int = 1) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, count)
    return edit


FIRST_TS = f" {T_S}\n"
CASES: list[tuple[str, str, Callable[[str], str], str]] = [
    # OpenMetrics: declarations and timestamps
    ("om-1970", "openmetrics", _sub(FIRST_TS, " 5\n"), r"metrics\.om:2: timestamp '5' is not a plausible time"),
    ("om-1e20-ts", "openmetrics", _sub(FIRST_TS, " 1e20\n"), r"metrics\.om:2: timestamp '1e20' is not a plausible"),
    ("om-nan-ts", "openmetrics", _sub(FIRST_TS, " NaN\n"), r"metrics\.om:2: timestamp 'NaN' is not a plausible"),
    ("om-eof", "openmetrics", lambda t: t + 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x"} 1 1793491200\n',
     r"metrics\.om:\d+: content after `# EOF`"),
    ("om-blank", "openmetrics", lambda t: " \n\t\n", r"metrics\.om:1: no samples"),
    ("om-utf8", "openmetrics", _sub("train-0", "tr\udcffin-0"), r"metrics\.om:\d+: not UTF-8 text \(byte 0xff"),
    ("om-request-neg", "openmetrics", _sub('unit="integer"} 1 ', 'unit="integer"} -4 '),
     r"metrics\.om:\d+: kube_pod_container_resource_requests\{.*\} -4\.0: GPU resource value is not a whole"),
    ("om-request-nan", "openmetrics", _sub('unit="integer"} 1 ', 'unit="integer"} NaN '),
     r"metrics\.om:\d+: kube_pod_container_resource_requests.* nan: GPU resource value"),
    ("om-request-1e23", "openmetrics", _sub('unit="integer"} 1 ', 'unit="integer"} 1e23 '),
     r"metrics\.om:\d+: kube_pod_container_resource_requests.* 1e\+23: GPU resource value"),
    ("om-created-1e20", "openmetrics", _sub("} 1793480000 ", "} 1e20 "),
     r"metrics\.om:\d+: kube_pod_created\{.*\} 1e\+20: time is not a plausible unix time"),
    # kubectl dumps
    ("dump-request-neg", "dump-pods", _sub('"nvidia.com/gpu": "1"', '"nvidia.com/gpu": "-4"'),
     r"pods\.json: item 0 \(ml/worker-0\): spec\.containers\[0\]\.resources\.requests\.nvidia\.com/gpu: '-4' is not a valid"),
    ("dump-request-nan", "dump-pods", _sub('"nvidia.com/gpu": "1"', '"nvidia.com/gpu": "NaN"'),
     r"pods\.json: item 0 \(ml/worker-0\): spec\.containers\[0\]\.resources\.requests\.nvidia\.com/gpu: not a Kubernetes quantity"),
    ("dump-request-inf", "dump-pods", _sub('"nvidia.com/gpu": "1"', '"nvidia.com/gpu": 1e999'),
     r"pods\.json: line 29 col 27: number is infinity"),  # JSON has no infinity: refused by the parser
    ("dump-request-1e23", "dump-pods", _sub('"nvidia.com/gpu": "1"', '"nvidia.com/gpu": "1e23"'),
     r"pods\.json: item 0 \(ml/worker-0\): .*nvidia\.com/gpu: '1e23' is not a plausible number of GPU devices"),
    ("dump-mig-8Ei", "dump-pods", _sub('"nvidia.com/gpu": "1"', '"nvidia.com/mig-1g.10gb": "8Ei"'),
     r"pods\.json: item 0 \(ml/worker-0\): .*nvidia\.com/mig-1g\.10gb: '8Ei' is not a plausible number of GPU devices"),
    ("dump-1970", "dump-pods", _sub('"creationTimestamp": "2026-11-01T00:00:00Z"', '"creationTimestamp": "1970-01-01T00:00:00Z"'),
     r"pods\.json: item 0 \(ml/worker-0\): metadata\.creationTimestamp: implausible time: 1970-01-01T00:00:00 is before 2000"),
    ("dump-queue-weight", "dump-queues", _sub("weight: 1", "weight: -1"),
     r"queues\.yaml: item 0 \(root-eng-prod\): spec\.weight: -1 is out of range \(1\.\.65535\)"),
    ("dump-min-member", "dump-podgroups", _sub('"minMember": 4', '"minMember": -4'),
     r"podgroups\.json: item 0 \(ml/tf-pg\): spec\.minMember: -4 is out of range"),
    ("dump-replicas-2**80", "dump-vcjobs", _sub("replicas: 3", "replicas: 1208925819614629174706176"),
     r"vcjobs\.yaml: item 0 \(tensorflow-benchmark-gpu\): spec\.tasks\[1\]\.replicas: 12089258196146291747\d* is out of "
     r"range"),
    ("dump-no-kind", "dump-nodes", _sub('"kind": "Node",', "", 1),
     r"nodes\.json: item 0 \(ip-10-32-136-67\.eu-west-1\.compute\.internal\): kind: missing \(expected Node\)"),
    # price catalog
    ("prices-utf8", "prices", _sub("A10G", "A1\udcffG"), r"catalog\.csv:2: not UTF-8 text \(byte 0xff\)"),
    ("prices-count-2**70", "prices", _sub(",8,", ",1180591620717411303424,"),
     r"catalog\.csv:3: gpu_count: expected a whole number 0\.\.64"),
    ("prices-1e20", "prices", _sub("55.04", "1e20"), r"catalog\.csv:3: on_demand_usd_per_hour: '1e20' is not a plausible"),
    # openb trace
    ("openb-utf8", "openb-nodes", _sub("P100", "P1\udcff0"), r"nodes\.csv:2: not UTF-8 text"),
    ("openb-int-2**80", "openb-pods", _sub(",12000,", ",1208925819614629174706176,"),
     r"pods\.csv:2: cpu_milli: 12089258196146291747\d* is out of range"),
    ("openb-time-1e400", "openb-pods", _sub(",0,12537496,0", ",1e400.0,12537496,0"),
     r"pods\.csv:2: creation_time: expected an integer, got '1e400\.0'"),
]


def _write(path: Path, text: str) -> None:
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))


@pytest.mark.parametrize(("case", "kind", "edit", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_value_is_refused_naming_where_and_changes_nothing(
        loaded: tuple[Warehouse, Config], tmp_path: Path, case: str, kind: str,
        edit: Callable[[str], str], expected: str) -> None:
    wh, cfg = loaded
    k = KINDS[kind]
    path = k.write_seed(tmp_path / "in")
    _write(path, edit(path.read_text()))
    before = fingerprint(wh)
    code, message = outcome(k, wh, cfg, path)
    assert code == 2, (case, message)
    assert "\n" not in message and re.search(expected, message), message
    assert fingerprint(wh) == before


def test_out_of_range_readings_are_dropped_by_the_documented_rule_with_counts(tmp_path: Path) -> None:
    """Utilisation 250 %, activity -3, negative framebuffer and 1e20 W are not measurements: the
    load keeps every other reading, drops these and says how many (docs/collectors.md)."""
    k = KINDS["openmetrics"]
    path = k.write_seed(tmp_path / "in")
    text = path.read_text()
    gpu0 = 'UUID="GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b"'
    for name, good, bad in (("DCGM_FI_DEV_GPU_UTIL", "55", "250"), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0.42", "-3"),
                            ("DCGM_FI_DEV_FB_USED", "30000", "-5"), ("DCGM_FI_DEV_POWER_USAGE", "410.5", "1e20")):
        line = next(ln for ln in text.split("\n") if ln.startswith(name) and gpu0 in ln)
        text = text.replace(line, line.replace(f"}} {good} ", f"}} {bad} "), 1)
    path.write_text(text)
    cfg = Config(db_path=tmp_path / "w.duckdb", cluster="c")
    with Warehouse(cfg.db_path) as wh:
        report = load_openmetrics(wh, cfg, path)
        row = wh.sql("SELECT count(*), max(gpu_util), min(gr_active), min(fb_used_mib), max(power_w) FROM gpu_samples "
                     f"WHERE gpu_uuid = '{gpu0[6:-1]}'").row(0)
    assert row == (6, 55.0, 0.42, 30000.0, 410.5)
    notes = " | ".join(report.notes)
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED"):
        assert f"{name}: dropped 1 reading(s) that are not measurements (1 outside" in notes
    assert "DCGM_FI_DEV_POWER_USAGE: dropped 1 reading(s) that are not measurements (1 DCGM blank sentinel" in notes


class _Html500(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        body = (b"<html>\n<head><title>500 Internal Server Error</title></head>\n<body>\n"
                b"<center><h1>500 Internal Server Error</h1></center>\n<hr><center>nginx</center>\n</body>\n</html>\n")
        self.send_response(500)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


def test_an_aws_500_html_page_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_MAX_ATTEMPTS": "1",
                 "AWS_RETRY_MODE": "standard", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(k, v)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Html500)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg = Config(db_path=tmp_path / "w.duckdb")
        with Warehouse(cfg.db_path) as wh, pytest.raises(RuntimeFailure) as err:
            load_aws(wh, cfg, "us-east-1", endpoint_url=f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    code, message = error_outcome(err.value)
    assert code == 1 and "\n" not in message and "<" not in message, message
    assert message == "AWS describe_instance_types: 500: Internal Server Error"
    # an error body botocore passes through as it came (a proxy's page) loses its markup and lines
    page = (b"<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n<center><h1>502 Bad Gateway</h1></center>\n"
            b"</body>\n</html>\n").decode()
    assert _one_line(page) == "502 Bad Gateway 502 Bad Gateway"

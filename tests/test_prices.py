"""Price catalogs: the shipped default, user CSVs, bad rows, and AWS (moto + a Price List fake)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuinsight.config import Config
from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.sources import prices
from gpuinsight.warehouse.db import Warehouse
from tests.crds import REFERENCE as REFERENCE_DIR

CFG = Config(cluster="test")
REFERENCE = REFERENCE_DIR / "aws-gpu-prices.csv"


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[Warehouse]:
    w = Warehouse(tmp_path / "wh.duckdb")
    yield w
    w.close()


def rows(w: Warehouse, sql: str) -> list[tuple[Any, ...]]:
    return w.sql(sql).rows()


# -- CSV catalogs -----------------------------------------------------------------------------

def test_default_catalog(wh: Warehouse) -> None:
    report = prices.load_catalog(wh, CFG)
    assert report.rows == {"prices": 29}
    meta = rows(wh, "SELECT DISTINCT catalog, region, as_of FROM prices")
    assert meta == [("aws-us-east-1-2026-07-20", "us-east-1", date(2026, 7, 20))]
    assert rows(wh, "SELECT count(*) FROM prices WHERE spot_usd_per_hour IS NOT NULL") == [(0,)]
    assert rows(wh, "SELECT gpu_model, gpu_count, on_demand_usd_per_hour FROM prices "
                    "WHERE instance_type IN ('p5.48xlarge', 'p4d.24xlarge', 'p4de.24xlarge', 'p5en.48xlarge') "
                    "ORDER BY instance_type") == [
        ("A100-40GB", 8, 21.957642), ("A100-80GB", 8, 27.44705), ("H100-80GB", 8, 55.04), ("H200-141GB", 8, 63.296)]
    models = {r[0] for r in rows(wh, "SELECT DISTINCT gpu_model FROM prices")}
    assert models == {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "A10G", "L4", "L40S"}
    assert rows(wh, "SELECT count(*) FROM prices WHERE instance_type = 'p5e.48xlarge'") == [(0,)]
    assert "no spot price" in report.notes[0]


def test_default_catalog_matches_reference() -> None:
    import csv

    ref = {r["instance_type"]: r for r in csv.DictReader(REFERENCE.open())}
    frame, _ = prices.read_catalog(prices.default_catalog_path())
    for r in frame.iter_rows(named=True):
        src = ref[r["instance_type"]]
        assert r["on_demand_usd_per_hour"] == pytest.approx(float(src["on_demand_usd_per_hour_us_east_1"]))
        assert r["gpu_count"] == int(src["gpu_count"])
    assert set(ref) - set(frame["instance_type"]) == {"p5e.48xlarge"}  # no public price


def test_custom_catalog_with_empty_spot(wh: Warehouse, tmp_path: Path) -> None:
    path = tmp_path / "onprem-2026.csv"
    path.write_text(
        "instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour,owner\n"
        "dgx-h100,NVIDIA H100 80GB HBM3,8,30.5,,infra\n"
        "g6.xlarge,L4,1,0.80,0.31,infra\n"
        ",A100,,1.75,\n", encoding="utf-8")
    prices.load_catalog(wh, CFG, path)
    got = rows(wh, "SELECT catalog, instance_type, gpu_model, gpu_count, on_demand_usd_per_hour, spot_usd_per_hour "
                   "FROM prices ORDER BY instance_type")
    assert got == [("onprem-2026", "", "A100-80GB", 1, 1.75, None),
                   ("onprem-2026", "dgx-h100", "H100-80GB", 8, 30.5, None),
                   ("onprem-2026", "g6.xlarge", "L4", 1, 0.8, 0.31)]
    # a catalog is a snapshot: reloading a shorter file drops the rows it no longer has
    path.write_text("instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour\n"
                    "g6.xlarge,L4,1,0.81,\n", encoding="utf-8")
    prices.load_catalog(wh, CFG, path)
    prices.load_catalog(wh, CFG)
    assert rows(wh, "SELECT catalog, count(*) FROM prices GROUP BY ALL ORDER BY 1") == [
        ("aws-us-east-1-2026-07-20", 29), ("onprem-2026", 1)]


@pytest.mark.parametrize(("body", "message"), [
    ("instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour\nx,L4,1,0.8,\ny,L4,1,cheap,\n",
     r"bad\.csv:3: on_demand_usd_per_hour: not a number: 'cheap'"),
    ("instance_type,gpu_model,gpu_count,on_demand_usd_per_hour\nx,L4,1,0.8\n",
     r"bad\.csv:1: missing column\(s\) spot_usd_per_hour"),
    ("instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour\nx,L4,1,0.8,\nx,L4,1,0.9,\n",
     r"bad\.csv:3: duplicate row for x \(first at line 2\)"),
    ("instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour\nx,L4,1.5,0.8,\n",
     r"bad\.csv:2: gpu_count: expected a whole number"),
    ("instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour\nx,L4,1,0.8\n",
     r"bad\.csv:2: expected 5 fields"),
    ("instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour\nx,L4,1,,0.3\n",
     r"bad\.csv:2: on_demand_usd_per_hour is empty"),
])
def test_bad_catalog_rows(wh: Warehouse, tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(BadInput, match=message):
        prices.load_catalog(wh, CFG, path)
    assert rows(wh, "SELECT count(*) FROM prices") == [(0,)]


# -- AWS --------------------------------------------------------------------------------------

def test_spot_average_is_time_weighted_per_zone() -> None:
    start, end = datetime(2026, 7, 1), datetime(2026, 7, 3)
    history = [
        {"InstanceType": "g6.xlarge", "AvailabilityZone": "a", "SpotPrice": "0.40", "Timestamp": datetime(2026, 6, 20)},
        {"InstanceType": "g6.xlarge", "AvailabilityZone": "a", "SpotPrice": "0.20", "Timestamp": datetime(2026, 7, 2)},
        {"InstanceType": "g6.xlarge", "AvailabilityZone": "b", "SpotPrice": "0.50", "Timestamp": datetime(2026, 7, 1)},
        {"InstanceType": "g6.xlarge", "AvailabilityZone": "a", "SpotPrice": "9.99", "Timestamp": datetime(2026, 6, 1)},
    ]
    # zone a: 0.40 for a day, 0.20 for a day -> 0.30; zone b: 0.50 -> mean 0.40
    assert prices.spot_averages(history, start, end) == {"g6.xlarge": pytest.approx(0.40)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _product(itype: str, usd: str) -> str:
    return json.dumps({
        "product": {"productFamily": "Compute Instance",
                    "attributes": {"instanceType": itype, "regionCode": "us-east-1", "operatingSystem": "Linux"}},
        "terms": {"OnDemand": {"X.JRTCKXETXF": {"priceDimensions": {"X.JRTCKXETXF.6YS6EN2CT7": {
            "unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}},
    })


class FakePricing:
    """The Price List API's GetProducts (JSON 1.1), one product per page."""

    def __init__(self, catalog: dict[str, str], *, deny: bool = False) -> None:
        self.catalog, self.deny, self.requests = catalog, deny, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.headers.get("X-Amz-Target"), body, self.headers.get("Authorization", "")))
                status, reply = outer.answer(body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.deny:
            return 400, {"__type": "AccessDeniedException", "message": "not allowed"}
        wanted = next(f["Value"].split(",") for f in body["Filters"] if f["Field"] == "instanceType")
        hits = [_product(t, self.catalog[t]) for t in wanted if t in self.catalog]
        start = int(body.get("NextToken") or 0)
        more = start + 1 < len(hits)
        return 200, {"FormatVersion": "aws_v1", "PriceList": hits[start:start + 1],
                     **({"NextToken": str(start + 1)} if more else {})}


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws_env(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATESTONLY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "moto-secret-do-not-store")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return moto_url


ON_DEMAND = {"p5.48xlarge": "55.0400000000", "g6.xlarge": "0.8048000000", "p4d.24xlarge": "21.9576420000",
             "g6e.xlarge": "1.8610000000", "g4ad.xlarge": "0.3785000000"}


def test_load_aws_on_demand_fake_and_spot_moto(wh: Warehouse, aws_env: str) -> None:
    pricing = FakePricing(ON_DEMAND)
    try:
        report = prices.load_aws(wh, CFG, "us-east-1", endpoint_url=aws_env, pricing_endpoint_url=pricing.url)
    finally:
        pricing.server.shutdown()
    got = rows(wh, "SELECT instance_type, gpu_model, gpu_count, on_demand_usd_per_hour, spot_usd_per_hour, region "
                   "FROM prices ORDER BY instance_type")
    # moto quotes every spot price as 0.00001; AMD g4ad is not an NVIDIA type and never asked for
    assert got == [("g6.xlarge", "L4", 1, 0.8048, 0.00001, "us-east-1"),
                   ("g6e.xlarge", "L40S", 1, 1.861, 0.00001, "us-east-1"),
                   ("p4d.24xlarge", "A100-40GB", 8, 21.957642, 0.00001, "us-east-1"),
                   ("p5.48xlarge", "H100-80GB", 8, 55.04, 0.00001, "us-east-1")]
    catalog = rows(wh, "SELECT DISTINCT catalog, source FROM prices")[0]
    assert catalog[0].startswith("aws-us-east-1-") and "DescribeSpotPriceHistory" in catalog[1]
    filters = {f["Field"]: (f["Type"], f["Value"]) for f in pricing.requests[0][1]["Filters"]}
    assert filters["regionCode"] == ("TERM_MATCH", "us-east-1") and filters["tenancy"] == ("TERM_MATCH", "Shared")
    assert filters["instanceType"][0] == "ANY_OF" and "g4ad.xlarge" not in filters["instanceType"][1]
    assert all(t == "AWSPriceListService.GetProducts" for t, _, _ in pricing.requests)
    assert len(pricing.requests) > len({json.dumps(b["Filters"]) for _, b, _ in pricing.requests})  # paged
    assert any("no on-demand price" in n for n in report.notes)
    dump = str(rows(wh, "SELECT * FROM prices")) + str(rows(wh, "SELECT * FROM ingest_state"))
    assert "moto-secret" not in dump and "AKIATESTONLY" not in dump


def test_load_aws_errors_are_one_line(wh: Warehouse, aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pricing = FakePricing(ON_DEMAND, deny=True)
    try:
        with pytest.raises(RuntimeFailure, match="AWS get_products: AccessDeniedException: not allowed"):
            prices.load_aws(wh, CFG, "us-east-1", endpoint_url=aws_env, pricing_endpoint_url=pricing.url)
    finally:
        pricing.server.shutdown()
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(RuntimeFailure, match="no credentials"):
        prices.load_aws(wh, CFG, "us-east-1", endpoint_url=aws_env)
    assert rows(wh, "SELECT count(*) FROM prices") == [(0,)]


def test_spot_window_reaches_moto(aws_env: str) -> None:
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=aws_env)
    end = datetime(2026, 7, 8)
    history = ec2.describe_spot_price_history(InstanceTypes=["p5.48xlarge"], ProductDescriptions=["Linux/UNIX"],
                                              StartTime=end - timedelta(days=7), EndTime=end)["SpotPriceHistory"]
    assert history and {h["InstanceType"] for h in history} == {"p5.48xlarge"}
    # moto's records predate the window: they are the price in effect at its start
    assert prices.spot_averages(history, (end - timedelta(days=7)), end) == {"p5.48xlarge": pytest.approx(1e-5)}

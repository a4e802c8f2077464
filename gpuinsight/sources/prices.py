"""Price catalogs -> ``prices``: a CSV (the shipped AWS default or the user's own), or AWS.

CSV columns (design.md): ``instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,
spot_usd_per_hour``; other columns are ignored except the optional metadata columns
``catalog``, ``region``, ``as_of``, ``source`` and ``gpu_memory_mib`` (disambiguates a bare
"A100"). An empty ``instance_type`` makes a per-GPU-model row (price per GPU-hour); an empty
spot price means unknown (NULL). A catalog is a snapshot: loading it replaces its rows.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from gpuinsight.config import Config
from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.gpumodels import canonical_gpu_model
from gpuinsight.paths import package_data_dir
from gpuinsight.sources.base import LoadContract, LoadReport
from gpuinsight.sources.dcgm import MAX_FB_MIB
from gpuinsight.textfile import csv_records
from gpuinsight.warehouse.db import Warehouse

CONTRACT = LoadContract(
    table="prices", primary_key=("catalog", "instance_type", "gpu_model"), write_disposition="replace",
    description="one catalog per load; its rows are replaced as a whole",
)
REQUIRED = ("instance_type", "gpu_model", "gpu_count", "on_demand_usd_per_hour", "spot_usd_per_hour")
DEFAULT_CATALOG_FILE = "default_price_catalog.csv"

SCHEMA: dict[str, pl.DataType] = {
    "catalog": pl.Utf8(), "instance_type": pl.Utf8(), "gpu_model": pl.Utf8(), "gpu_count": pl.Int32(),
    "on_demand_usd_per_hour": pl.Float64(), "spot_usd_per_hour": pl.Float64(), "region": pl.Utf8(),
    "source": pl.Utf8(), "as_of": pl.Date(), "loaded_at": pl.Datetime("us"),
}


def default_catalog_path() -> Path:
    return package_data_dir() / DEFAULT_CATALOG_FILE


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


def _number(text: str, column: str, where: str, *, required: bool) -> float | None:
    text = text.strip()
    if not text:
        if required:
            raise BadInput(f"{where}: {column} is empty")
        return None
    try:
        value = float(text.lstrip("$"))
    except ValueError:
        raise BadInput(f"{where}: {column}: not a number: {text!r}") from None
    if value != value or value < 0 or value == float("inf"):
        raise BadInput(f"{where}: {column}: must be a non-negative number, got {text[:40]!r}")
    if column.endswith("usd_per_hour") and value > MAX_USD_PER_HOUR:
        raise BadInput(f"{where}: {column}: {text[:40]!r} is not a plausible hourly price (0..{MAX_USD_PER_HOUR:,.0f})")
    return value


def _same(values: set[str], column: str, path: Path) -> str | None:
    values.discard("")
    if len(values) > 1:
        raise BadInput(f"{path}: column {column} must hold one value for the whole catalog, got {sorted(values)}")
    return values.pop() if values else None


MAX_GPUS_PER_INSTANCE = 64       # the largest GPU instance types hold 8-16; 64 leaves room for rack-scale rows
MAX_USD_PER_HOUR = 10_000.0      # ten times the dearest GPU instance of any cloud; above it a price is a typo


def read_catalog(path: Path) -> tuple[pl.DataFrame, dict[str, str | None]]:
    """Parse and validate a catalog CSV: (rows, metadata {catalog, region, as_of, source})."""
    rows: list[dict[str, object]] = []
    meta: dict[str, set[str]] = {"catalog": set(), "region": set(), "as_of": set(), "source": set()}
    seen: dict[tuple[str, str], int] = {}
    for line, where, record in csv_records(path, REQUIRED):
        instance_type = record["instance_type"].strip()
        memory = _number(record.get("gpu_memory_mib") or "", "gpu_memory_mib", where, required=False)
        if memory is not None and memory > MAX_FB_MIB:
            raise BadInput(f"{where}: gpu_memory_mib: {memory:g} is more than any GPU holds")
        model = canonical_gpu_model(record["gpu_model"].strip(), memory)
        if not model:
            raise BadInput(f"{where}: gpu_model is empty")
        count_text = record["gpu_count"].strip()
        if count_text:
            count = _number(count_text, "gpu_count", where, required=True)
            if count is None or not float(count).is_integer() or count > MAX_GPUS_PER_INSTANCE:
                raise BadInput(f"{where}: gpu_count: expected a whole number 0..{MAX_GPUS_PER_INSTANCE}, "
                               f"got {count_text[:40]!r}")
        elif instance_type:
            raise BadInput(f"{where}: gpu_count is empty")
        else:
            count = 1.0  # per-GPU-model row: price per GPU-hour
        key = (instance_type, model)
        if key in seen:
            raise BadInput(f"{where}: duplicate row for {instance_type or model!s} (first at line {seen[key]})")
        seen[key] = line
        for column in meta:
            meta[column].add((record.get(column) or "").strip())
        rows.append({
            "instance_type": instance_type,
            "gpu_model": model,
            "gpu_count": int(count),
            "on_demand_usd_per_hour": _number(record["on_demand_usd_per_hour"], "on_demand_usd_per_hour",
                                              where, required=True),
            "spot_usd_per_hour": _number(record["spot_usd_per_hour"], "spot_usd_per_hour", where,
                                         required=False),
        })
    if not rows:
        raise BadInput(f"{path}: no price rows")
    info = {column: _same(values, column, path) for column, values in meta.items()}
    if info["as_of"]:
        try:
            date.fromisoformat(info["as_of"])
        except ValueError:
            raise BadInput(f"{path}: as_of: not a date (YYYY-MM-DD): {info['as_of']!r}") from None
    return pl.DataFrame(rows), info


def write_catalog(wh: Warehouse, frame: pl.DataFrame, catalog: str, *, region: str | None, source: str,
                  as_of: date) -> int:
    out = frame.with_columns(
        pl.lit(catalog).alias("catalog"), pl.lit(region, pl.Utf8).alias("region"),
        pl.lit(source).alias("source"), pl.lit(as_of).alias("as_of"), pl.lit(_now()).alias("loaded_at"),
    ).select([pl.col(c).cast(t) for c, t in SCHEMA.items()])
    return wh.replace_where("prices", out, "catalog = ?", [catalog])


def load_catalog(wh: Warehouse, cfg: Config, path: Path | None = None) -> LoadReport:
    """Load a catalog CSV (default: the shipped AWS us-east-1 on-demand catalog)."""
    path = Path(path) if path is not None else default_catalog_path()
    frame, info = read_catalog(path)
    catalog = info["catalog"] or path.stem
    as_of = (date.fromisoformat(info["as_of"]) if info["as_of"]
             else datetime.fromtimestamp(path.stat().st_mtime, UTC).date())
    source = info["source"] or f"catalog file {path.name}"
    report = LoadReport(source=f"prices:{catalog}")
    report.add("prices", write_catalog(wh, frame, catalog, region=info["region"], source=source, as_of=as_of))
    unknown_spot = frame.filter(pl.col("spot_usd_per_hour").is_null()).height
    if unknown_spot:
        report.notes.append(f"{catalog}: {unknown_spot} of {frame.height} rows have no spot price (unknown)")
    return report


def catalog_gpu_facts(con: Any) -> dict[str, tuple[str, int]]:
    """instance type -> (GPU model, GPU count) from every catalog loaded in the warehouse (the
    most recently loaded wins), for nodes whose labels do not name their GPUs."""
    rows = con.execute(
        "SELECT instance_type, gpu_model, gpu_count FROM prices WHERE instance_type <> '' AND gpu_count > 0 "
        "ORDER BY loaded_at NULLS FIRST").fetchall()
    return {r[0]: (r[1], int(r[2])) for r in rows}


@functools.cache
def instance_gpu_facts() -> dict[str, tuple[str, int]]:
    """instance type -> (canonical GPU model, GPU count) from the shipped catalog."""
    frame, _ = read_catalog(default_catalog_path())
    return {r["instance_type"]: (r["gpu_model"], r["gpu_count"]) for r in frame.iter_rows(named=True)}


# -- AWS ----------------------------------------------------------------------------------------

PRICING_REGION = "us-east-1"  # the Price List API is served from a few regions; this one has all
_PRICING_FILTERS = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
                    "capacitystatus": "Used"}
_CHUNK = 20


def _aws_call(what: str, fn: Any, **kwargs: Any) -> Any:
    """Run one AWS call (or paginator), turning botocore errors into one-line failures."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return fn(**kwargs)
    except NoCredentialsError:
        raise RuntimeFailure(f"AWS {what}: no credentials found (environment, profile or instance role)") from None
    except ClientError as exc:
        err = exc.response.get("Error", {})
        status = (exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        code = err.get("Code") or (f"HTTP {status}" if status else "error")
        message = _one_line(str(err.get("Message") or ""))
        raise RuntimeFailure(f"AWS {what}: {code}: {message}".rstrip(": ")) from None
    except BotoCoreError as exc:
        raise RuntimeFailure(f"AWS {what}: {type(exc).__name__}: {_one_line(str(exc))}") from None


def _one_line(text: str, limit: int = 200) -> str:
    """An error body on one line: an HTML error page (a proxy's or the endpoint's 5xx) loses its
    tags, whitespace collapses, and it is cut at ``limit`` characters."""
    text = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", text)
    text = re.sub(r"<[^>]+>", " ", text)
    text = " ".join(html.unescape(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _paginate(client: Any, op: str, key: str, **kwargs: Any) -> list[Any]:
    def run() -> list[Any]:
        return [x for page in client.get_paginator(op).paginate(**kwargs) for x in page.get(key, [])]

    return _aws_call(op, run)


def nvidia_instance_types(ec2: Any) -> dict[str, tuple[str, int]]:
    """instance type -> (canonical GPU model, GPU count) from EC2 DescribeInstanceTypes."""
    out: dict[str, tuple[str, int]] = {}
    # every NVIDIA family on EC2 is a p* or g* type (p3..p6, g4dn..g6e, g5g, gr6)
    families = [{"Name": "instance-type", "Values": ["p*", "g*"]}]
    for it in _paginate(ec2, "describe_instance_types", "InstanceTypes", Filters=families):
        gpus = (it.get("GpuInfo") or {}).get("Gpus") or []
        if not gpus or str(gpus[0].get("Manufacturer", "")).upper() != "NVIDIA":
            continue
        g = gpus[0]
        model = canonical_gpu_model(g.get("Name"), (g.get("MemoryInfo") or {}).get("SizeInMiB"))
        out[it["InstanceType"]] = (model or str(g.get("Name")), int(sum(x.get("Count", 0) for x in gpus)))
    return out


def _chunks(items: list[str]) -> Iterable[list[str]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i:i + _CHUNK]


def on_demand_prices(pricing: Any, region: str, types: list[str]) -> dict[str, float]:
    """Linux / shared tenancy on-demand USD per hour per instance type (Price List API)."""
    import orjson

    prices: dict[str, float] = {}
    for chunk in _chunks(types):
        filters = [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in _PRICING_FILTERS.items()]
        filters += [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
                    {"Type": "ANY_OF", "Field": "instanceType", "Value": ",".join(chunk)}]
        for item in _paginate(pricing, "get_products", "PriceList", ServiceCode="AmazonEC2", Filters=filters,
                              FormatVersion="aws_v1"):
            doc = orjson.loads(item) if isinstance(item, str | bytes) else item
            itype = ((doc.get("product") or {}).get("attributes") or {}).get("instanceType")
            for term in ((doc.get("terms") or {}).get("OnDemand") or {}).values():
                for dim in (term.get("priceDimensions") or {}).values():
                    usd = float((dim.get("pricePerUnit") or {}).get("USD") or 0)
                    if itype in chunk and usd > 0 and str(dim.get("unit", "Hrs")).startswith("Hr"):
                        prices[itype] = min(usd, prices.get(itype, usd))
    return prices


def spot_averages(history: Iterable[dict[str, Any]], start: datetime, end: datetime) -> dict[str, float]:
    """Time-weighted mean spot price per instance type over [start, end], averaged over zones.

    A record holds from its timestamp until the zone's next record; the last record before
    ``start`` (AWS returns it) is the price in effect at ``start``."""
    series: dict[tuple[str, str], list[tuple[datetime, float]]] = {}
    for rec in history:
        ts = rec["Timestamp"]
        ts = ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts
        series.setdefault((rec["InstanceType"], rec.get("AvailabilityZone", "")), []).append(
            (ts, float(rec["SpotPrice"])))
    per_type: dict[str, list[float]] = {}
    for (itype, _zone), points in series.items():
        points.sort()
        total = weight = 0.0
        for i, (ts, price) in enumerate(points):
            lo = max(ts, start)
            hi = min(points[i + 1][0] if i + 1 < len(points) else end, end)
            if hi > lo:
                seconds = (hi - lo).total_seconds()
                total += price * seconds
                weight += seconds
        if weight:
            per_type.setdefault(itype, []).append(total / weight)
    return {t: sum(v) / len(v) for t, v in per_type.items()}


def fetch_aws_prices(region: str, *, endpoint_url: str | None, pricing_endpoint_url: str | None,
                     since_days: float) -> tuple[pl.DataFrame, list[str]]:
    import boto3

    session = boto3.session.Session()
    ec2 = session.client("ec2", region_name=region, endpoint_url=endpoint_url)
    pricing = session.client("pricing", region_name=PRICING_REGION, endpoint_url=pricing_endpoint_url)
    facts = nvidia_instance_types(ec2)
    if not facts:
        raise RuntimeFailure(f"AWS ec2 describe_instance_types: no NVIDIA GPU instance types in {region}")
    types = sorted(facts)
    on_demand = on_demand_prices(pricing, region, types)
    end = _now()
    start = end - timedelta(days=since_days)
    history: list[dict[str, Any]] = []
    for chunk in _chunks(types):
        history += _paginate(ec2, "describe_spot_price_history", "SpotPriceHistory", InstanceTypes=chunk,
                             ProductDescriptions=["Linux/UNIX"], StartTime=start, EndTime=end)
    spot = spot_averages(history, start, end)
    rows = [{"instance_type": t, "gpu_model": facts[t][0], "gpu_count": facts[t][1],
             "on_demand_usd_per_hour": on_demand[t], "spot_usd_per_hour": spot.get(t)}
            for t in types if t in on_demand]
    notes = []
    if not rows:
        raise RuntimeFailure(f"AWS pricing get_products: no on-demand Linux prices for GPU instances in {region}")
    no_price = [t for t in types if t not in on_demand]
    if no_price:
        notes.append(f"no on-demand price in {region} for {len(no_price)} GPU instance type(s): "
                     + ", ".join(no_price[:8]) + (" ..." if len(no_price) > 8 else ""))
    no_spot = [r["instance_type"] for r in rows if r["spot_usd_per_hour"] is None]
    if no_spot:
        notes.append(f"no spot price history in {region} for {len(no_spot)} type(s) (spot = unknown)")
    return pl.DataFrame(rows, schema={"instance_type": pl.Utf8, "gpu_model": pl.Utf8, "gpu_count": pl.Int32,
                                      "on_demand_usd_per_hour": pl.Float64,
                                      "spot_usd_per_hour": pl.Float64}), notes


def load_aws(wh: Warehouse, cfg: Config, region: str, *, endpoint_url: str | None = None,
             pricing_endpoint_url: str | None = None, since_days: float = 7) -> LoadReport:
    """On-demand prices from the AWS Price List API and spot prices averaged over ``since_days``
    from EC2 DescribeSpotPriceHistory, for every NVIDIA GPU instance type in ``region``.

    ``endpoint_url`` overrides both endpoints (e.g. a local emulator); ``pricing_endpoint_url``
    only the Price List one. Credentials come from boto3's usual chain and are never stored."""
    if since_days <= 0:
        raise BadInput(f"since_days must be positive, got {since_days}")
    frame, notes = fetch_aws_prices(region, endpoint_url=endpoint_url,
                                    pricing_endpoint_url=pricing_endpoint_url or endpoint_url,
                                    since_days=since_days)
    today = _now().date()
    catalog = f"aws-{region}-{today.isoformat()}"
    source = (f"AWS Price List API (Linux, shared tenancy, on-demand) + EC2 DescribeSpotPriceHistory "
              f"(Linux/UNIX, time-weighted mean over {since_days:g} days and zones)")
    report = LoadReport(source=f"prices:{catalog}", notes=notes)
    report.add("prices", write_catalog(wh, frame, catalog, region=region, source=source, as_of=today))
    return report

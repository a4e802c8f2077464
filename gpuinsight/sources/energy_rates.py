"""What a kWh costs and emits per region (``energy_rates``): the prices energy is valued at.

The table ships with defaults (migration 018; their sources in docs/models.md, "Energy"): a grid
carbon intensity per AWS region, and an electricity price only where one is published for the
region's location (EIA's average industrial price of the US state that hosts the region); every
other region, and ``*`` (any region not listed), carries a placeholder price to be set. Users set
their own, one region at a time (:func:`set_energy_rate`) or from a CSV
(:func:`load_energy_rates`: columns ``region,usd_per_kwh,kg_co2e_per_kwh`` and an optional
``source``). A row replaces the region's row; other regions keep theirs.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from gpuinsight.errors import BadInput
from gpuinsight.sources.base import LoadReport
from gpuinsight.textfile import csv_records
from gpuinsight.warehouse.db import Warehouse

REQUIRED = ("region", "usd_per_kwh", "kg_co2e_per_kwh")
KEY = ["region"]
SCHEMA: dict[str, pl.DataType] = {"region": pl.Utf8(), "usd_per_kwh": pl.Float64(), "kg_co2e_per_kwh": pl.Float64(),
                                  "source": pl.Utf8()}
# Bounds that catch a unit slip, not a real rate: retail electricity is priced in cents per kWh
# (a few dollars per kWh would be a price per MWh typed as per kWh); the most carbon-intensive
# grids (coal-fired) emit about 1 kg CO2e per kWh, so more than 2 is grams typed as kilograms.
MAX_USD_PER_KWH = 5.0
MAX_KG_CO2E_PER_KWH = 2.0


def check_rate(region: str, usd_per_kwh: float, kg_co2e_per_kwh: float, where: str) -> None:
    if not region or len(region) > 64 or any(c.isspace() for c in region):
        raise BadInput(f"{where}: region {region[:40]!r} is not a region name (e.g. us-east-1, or * for any other)")
    for name, value, top in (("usd_per_kwh", usd_per_kwh, MAX_USD_PER_KWH),
                             ("kg_co2e_per_kwh", kg_co2e_per_kwh, MAX_KG_CO2E_PER_KWH)):
        if not math.isfinite(value) or value < 0 or value > top:
            raise BadInput(f"{where}: {name} {value!r} is not a rate between 0 and {top:g} (per kWh)")


def set_energy_rate(wh: Warehouse, region: str, usd_per_kwh: float, kg_co2e_per_kwh: float,
                    source: str | None = None) -> None:
    """Set one region's rate (``*``: every region not listed)."""
    check_rate(region, float(usd_per_kwh), float(kg_co2e_per_kwh), f"energy rate {region!r}")
    frame = pl.DataFrame([{"region": region, "usd_per_kwh": float(usd_per_kwh),
                           "kg_co2e_per_kwh": float(kg_co2e_per_kwh), "source": source or "set by user"}],
                         schema=SCHEMA)
    wh.merge("energy_rates", frame, KEY)


def read_energy_rates(path: Path) -> pl.DataFrame:
    """Parse and check a rates CSV: one row per region, every error as ``FILE:LINE: ...``."""
    rows: list[dict[str, object]] = []
    seen: dict[str, int] = {}
    for line, where, record in csv_records(path, REQUIRED):
        region = record["region"].strip()
        values = []
        for column in ("usd_per_kwh", "kg_co2e_per_kwh"):
            text = record[column].strip()
            try:
                values.append(float(text))
            except ValueError:
                raise BadInput(f"{where}: {column}: not a number: {text[:40]!r}") from None
        check_rate(region, values[0], values[1], where)
        if region in seen:
            raise BadInput(f"{where}: duplicate region {region!r} (first at line {seen[region]})")
        seen[region] = line
        rows.append({"region": region, "usd_per_kwh": values[0], "kg_co2e_per_kwh": values[1],
                     "source": (record.get("source") or "").strip() or f"rates file {path.name}"})
    if not rows:
        raise BadInput(f"{path}: no rates")
    return pl.DataFrame(rows, schema=SCHEMA)


def load_energy_rates(wh: Warehouse, path: Path) -> LoadReport:
    """Set the rates of every region the CSV lists (all or none: a bad row changes nothing)."""
    frame = read_energy_rates(Path(path))
    report = LoadReport(source=f"energy rates:{Path(path).name}")
    report.add("energy_rates", wh.merge("energy_rates", frame, KEY))
    return report

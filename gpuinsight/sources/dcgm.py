"""The dcgm-exporter fields gpuinsight reads: every generation's names, units, the range a real
reading can take, and DCGM's "blank" sentinels.

One table serves the file parser, the server-side filter of the Prometheus queries and the
transform, so a reading is kept or dropped by the same rule on every path (docs/collectors.md,
"Readings that are not measurements"):

* NaN and +-Inf are not readings.
* DCGM reports "blank / not found / not supported / not permissioned" as huge sentinels
  (``DCGM_FT_INT32_BLANK`` = 0x7ffffff0 and the three after it, ``DCGM_FT_INT64_BLANK`` =
  0x7ffffffffffffff0 and the three after it, ``DCGM_FT_FP64_BLANK`` = 2**47 and the three after
  it, in DCGM's ``dcgm_fields.h``). Exporters that do not skip them publish them as values; NVML's
  "not available" 0xffffffff shows up the same way. Every one of them is at least
  :data:`BLANK_FLOOR`, far above any real reading of the fields below.
* A reading outside the field's physical range (a ratio outside 0..1, a percentage outside
  0..100, negative memory or power, memory above the GPU's memory, power far above the board's
  power limit, an interconnect rate above any link's bandwidth) is a glitch of the counter, not a
  measurement.
* The interconnect rates (PCIe, NVLink; bytes per second) are the one kind of field whose real
  readings pass :data:`BLANK_FLOOR` (2.1 GB/s is an ordinary PCIe transfer). They are INT64
  fields in DCGM, whose blanks (``DCGM_FT_INT64_BLANK`` and up, 9.2e18) lie far above the
  field's ceiling: for them a reading is blank only above the ceiling too.

Such readings are dropped one by one and counted in the load notes; they never fail a load,
because real exporters emit them (dcgm-exporter README's own example shows a
``9223372036854775794``; NVIDIA/DCGM issue #199 reports ``4294967295`` in ``DCGM_FI_DEV_GPU_UTIL``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from gpuinsight.gpumodels import MEMORY_MIB

INT32_BLANK = 0x7FFFFFF0
INT64_BLANK = 0x7FFFFFFFFFFFFFF0
FP64_BLANK = 140737488355328.0
BLANK_FLOOR = float(INT32_BLANK)  # the smallest sentinel; no real reading of these fields comes near it

# Ceilings used where the GPU model is unknown (and on the server, which cannot tell models
# apart in one filter): above the largest NVIDIA GPU of 2026 (288 GB, about 1.4 kW board power)
# with headroom, and far below any sentinel.
MAX_FB_MIB = 512 * 1024.0
MAX_POWER_W = 3000.0
# Board power limits (W, the SXM variant where a model has several), for the per-GPU ceiling:
# DCGM_FI_DEV_POWER_USAGE is an average over the driver's sampling window, which the board's
# power capping keeps near the limit; 1.5x the limit is out of physical reach.
POWER_LIMIT_W: dict[str, float] = {
    "B200": 1000, "GH200": 1000, "H200-141GB": 700, "H100-80GB": 700, "H100-96GB": 700, "H100-NVL-94GB": 400,
    "H800-80GB": 700, "A100-80GB": 400, "A100-40GB": 400, "A800-80GB": 400, "A30": 165, "A10G": 300, "A10": 150,
    "L40S": 350, "L4": 72, "T4": 70, "V100": 300,
}
POWER_HEADROOM = 1.5
MEMORY_HEADROOM = 1.02  # MiB rounding of used + free + reserved
RATIO_TOLERANCE = 1e-6
# Interconnect ceilings (bytes/s, one direction), twice the fastest link of 2026: PCIe 6.0 x16
# moves 128 GB/s per direction, NVLink 5 (B200) 900 GB/s per GPU per direction.
MAX_PCIE_BPS = 256e9
MAX_NVLINK_BPS = 1.8e12


@dataclass(frozen=True)
class Field:
    """One DCGM field: its canonical name, the ``gpu_samples`` column, unit and valid range."""

    name: str
    column: str
    unit: str
    lo: float
    hi: float
    max_column: str | None = None   # the column of its per-step maximum, if the rules need peaks
    aliases: tuple[str, ...] = ()   # other generations' names (1.x compatibility names)
    min_column: str | None = None   # the column of its per-step minimum (a stall inside a busy step)

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, self.name.lower(), *self.aliases)

    def range_text(self) -> str:
        return f"{self.lo:g}..{self.hi:g} {self.unit}".strip()


FIELDS: tuple[Field, ...] = (
    Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gr_active", "", 0.0, 1.0 + RATIO_TOLERANCE, "gr_active_max",
          min_column="gr_active_min"),
    Field("DCGM_FI_PROF_SM_ACTIVE", "sm_active", "", 0.0, 1.0 + RATIO_TOLERANCE, "sm_active_max"),
    # dcgm-exporter 1.x (etc/1.x-compatibility-metrics.csv) published the same fields under these names
    Field("DCGM_FI_DEV_GPU_UTIL", "gpu_util", "%", 0.0, 100.0, None, ("dcgm_gpu_utilization",)),
    Field("DCGM_FI_DEV_FB_USED", "fb_used_mib", "MiB", 0.0, MAX_FB_MIB, "fb_used_max_mib", ("dcgm_fb_used",)),
    Field("DCGM_FI_DEV_FB_FREE", "fb_free_mib", "MiB", 0.0, MAX_FB_MIB, None, ("dcgm_fb_free",)),
    Field("DCGM_FI_DEV_POWER_USAGE", "power_w", "W", 0.0, MAX_POWER_W, None, ("dcgm_power_usage",)),
    # Gauges in bytes per second (dcgm-exporter PR #88; some counters CSVs still call them
    # counters). The deprecated DCGM_FI_DEV_PCIE_{RX,TX}_THROUGHPUT are in KB/s: not aliases.
    Field("DCGM_FI_PROF_PCIE_RX_BYTES", "pcie_rx_bps", "B/s", 0.0, MAX_PCIE_BPS),
    Field("DCGM_FI_PROF_PCIE_TX_BYTES", "pcie_tx_bps", "B/s", 0.0, MAX_PCIE_BPS, "pcie_tx_max_bps"),
    Field("DCGM_FI_PROF_NVLINK_RX_BYTES", "nvlink_rx_bps", "B/s", 0.0, MAX_NVLINK_BPS),
)
BY_SPELLING: dict[str, Field] = {s: f for f in FIELDS for s in f.spellings}
BY_COLUMN: dict[str, Field] = {f.column: f for f in FIELDS}
MAX_SUFFIX = ":max"
MIN_SUFFIX = ":min"
DROPPED_SUFFIX = ":dropped"
DCGM_LIKE_PATTERN = r"(?i)^dcgm_"
_DCGM_LIKE = re.compile(r"^dcgm_", re.IGNORECASE)


def base_name(metric: str) -> str:
    """``NAME`` of a series frame ``metric`` (``NAME``, ``NAME:max`` or ``NAME:min``)."""
    return metric.removesuffix(MAX_SUFFIX).removesuffix(MIN_SUFFIX)


def field_of(metric: str) -> Field | None:
    """The field a series frame ``metric`` stands for (``NAME``, ``NAME:max`` or ``NAME:min``), or None."""
    return BY_SPELLING.get(base_name(metric))


def is_dcgm_like(metric: str) -> bool:
    """Anything an exporter of the DCGM family publishes (every generation starts with dcgm_)."""
    return bool(_DCGM_LIKE.match(metric))


def column_map() -> dict[str, str]:
    """Series frame ``metric`` -> ``gpu_samples`` column, for every spelling and the ``:max`` /
    ``:min`` rows."""
    out: dict[str, str] = {}
    for spelling, f in BY_SPELLING.items():
        out[spelling] = f.column
        if f.max_column:
            out[spelling + MAX_SUFFIX] = f.max_column
        if f.min_column:
            out[spelling + MIN_SUFFIX] = f.min_column
    return out


def column_bounds() -> dict[str, tuple[float, float]]:
    """``gpu_samples`` column (value, max and min columns) -> the field's valid range."""
    out: dict[str, tuple[float, float]] = {}
    for f in FIELDS:
        for c in (f.column, f.max_column, f.min_column):
            if c:
                out[c] = (f.lo, f.hi)
    return out


def memory_ceiling(model: str | None) -> float:
    memory = MEMORY_MIB.get(model or "")
    return memory * MEMORY_HEADROOM if memory else MAX_FB_MIB


def power_ceiling(model: str | None) -> float:
    limit = POWER_LIMIT_W.get(model or "")
    return limit * POWER_HEADROOM if limit else MAX_POWER_W


def reading_class(value: pl.Expr, lo: pl.Expr, hi: pl.Expr) -> pl.Expr:
    """``None`` for a reading to keep, else why it is dropped: nonfinite | blank | range."""
    return (pl.when(~value.is_finite()).then(pl.lit("nonfinite"))
            .when((value >= BLANK_FLOOR) & (value > hi)).then(pl.lit("blank"))
            .when((value < lo) | (value > hi)).then(pl.lit("range"))
            .otherwise(pl.lit(None, dtype=pl.Utf8)))


@dataclass
class Dropped:
    """Readings dropped per field and reason (counted for the load notes)."""

    counts: dict[tuple[str, str], int]

    def total(self) -> int:
        return sum(self.counts.values())

    def notes(self) -> list[str]:
        """One note per field: what was dropped and why."""
        by_field: dict[str, dict[str, int]] = {}
        for (name, why), n in self.counts.items():
            if n:
                by_field.setdefault(name, {})[why] = by_field.setdefault(name, {}).get(why, 0) + n
        out = []
        for name in sorted(by_field):
            parts = by_field[name]
            f = BY_SPELLING.get(name)
            rng = f.range_text() if f else ""
            words = {"nonfinite": "NaN/Inf", "blank": "DCGM blank sentinel (>= 2147483632)",
                     "range": f"outside {rng} or the GPU's physical maximum",
                     "server": f"NaN/Inf, DCGM blank sentinel or outside {rng}, dropped on the server"}
            detail = ", ".join(f"{n:,} {words.get(why, why)}" for why, n in sorted(parts.items()))
            out.append(f"{name}: dropped {sum(parts.values()):,} reading(s) that are not measurements ({detail})")
        return out

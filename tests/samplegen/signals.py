"""Utilisation signals of the sample fleet, computed on demand for a block of cells x samples.

Noise is counter-based (a splitmix64 hash of seed, salt, device and sample index), so a value
depends only on (seed, device, sample): frames, OpenMetrics and ground truth agree exactly
whatever chunking each of them uses.  Values are rounded here (ratios to 4 decimals, MiB and
GPU_UTIL to integers, watts to 0.1) so every output carries the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .fleet import Fleet
from .spec import IDLE, WORKLOADS, Profile

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_PARAMS = ("gr_base", "gr_amp", "gr_peak_h", "gr_smooth", "gr_white", "gr_lo", "gr_hi", "sm_ratio",
           "fb_base", "fb_smooth", "fb_white", "fb_lo", "fb_hi", "burst_p", "burst_lo", "burst_hi",
           "quiet_from_h", "quiet_to_h", "quiet_days", "quiet_after_h",
           "cycle_s", "cycle_busy_s", "stall_level", "rx_busy", "rx_stall", "tx_base", "ckpt_s", "ckpt_tx",
           "cpu_busy", "cpu_stall")
_PROFILES: list[Profile] = [w.profile for w in WORKLOADS] + [IDLE]
_TABLE = {p: np.array([getattr(pr, p) for pr in _PROFILES], dtype=np.float64) for p in _PARAMS}
IDLE_PROFILE = len(WORKLOADS)
_KNOT_S = 1800  # spacing of the slowly varying noise and of notebook burst blocks


def _mix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _M1
        x = x ^ (x >> np.uint64(27))
        x = x * _M2
        return x ^ (x >> np.uint64(31))


def _hash(seed: int, salt: int, dev: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """uint64 hash of (seed, salt, device, index) for every device x index."""
    with np.errstate(over="ignore"):
        base = _mix(np.uint64(seed * 1_000_003 + salt) * _GOLD + dev.astype(np.uint64))
        return _mix(base[:, None] ^ (idx.astype(np.uint64)[None, :] * _GOLD))


def _to_float(u: np.ndarray) -> np.ndarray:
    """uint64 values below 2**63 -> float64 (through an int64 view: much faster than from uint64)."""
    return u.view(np.int64).astype(np.float64)


def _uniform(h: np.ndarray) -> np.ndarray:
    return _to_float(h >> np.uint64(11)) * (1.0 / 9007199254740992.0)


def _white(seed: int, salt: int, dev: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Triangular noise in (-1, 1) per device x sample."""
    h = _hash(seed, salt, dev, k)
    return (_to_float(h & np.uint64(0xFFFFFFFF)) + _to_float(h >> np.uint64(32))) * (1.0 / 4294967296.0) - 1.0


def _smooth(seed: int, salt: int, dev: np.ndarray, k: np.ndarray, knot: int) -> np.ndarray:
    """Value noise in [-1, 1]: uniform knots every `knot` samples, linearly interpolated."""
    kn = k // knot
    base = int(kn[0])
    knots = _uniform(_hash(seed, salt, dev, np.arange(base, int(kn[-1]) + 2))) * 2.0 - 1.0
    frac = ((k % knot) / knot)[None, :]
    i0 = kn - base
    return knots[:, i0] * (1.0 - frac) + knots[:, i0 + 1] * frac


@dataclass
class Values:
    """DCGM values for the devices of a block of cells x samples (arrays shaped devices x samples)."""

    d0: int  # first device row
    k0: int  # first sample index
    holder: np.ndarray  # pod row, -1 = unallocated
    gap: np.ndarray  # True = no sample (exporter down)
    gr: np.ndarray
    sm: np.ndarray
    util: np.ndarray  # NaN on MIG instances
    fb: np.ndarray
    fb_free: np.ndarray
    power: np.ndarray
    pcie_rx: np.ndarray  # bytes/s
    pcie_tx: np.ndarray  # bytes/s
    cpu: np.ndarray  # cores the holder pod uses (the same on each of its GPUs)


def cell_values(fleet: Fleet, c0: int, c1: int, k0: int, k1: int) -> Values:
    """Compute the DCGM values of cells [c0, c1) at samples [k0, k1)."""
    sp = fleet.spec
    seed = sp.seed
    d0, d1 = int(fleet.dev_offsets[c0]), int(fleet.dev_offsets[c1])
    dv = fleet.devices.slice(d0, d1 - d0)
    dev = dv["hash_id"].to_numpy().astype(np.uint64)
    k = np.arange(k0, k1, dtype=np.int64)
    holder = fleet.holders(c0, c1, k0, k1)
    prof = np.where(holder >= 0, fleet.pod_profile[np.maximum(holder, 0)], IDLE_PROFILE)
    par = {name: arr[prof] for name, arr in _TABLE.items()}
    hour = ((sp.start_s + k * sp.interval_s) % 86400) / 3600.0
    knot = max(1, round(_KNOT_S / sp.interval_s))

    gr = (par["gr_base"]
          + par["gr_amp"] * np.cos(2 * np.pi * (hour[None, :] - par["gr_peak_h"]) / 24.0)
          + par["gr_smooth"] * _smooth(seed, 1, dev, k, knot)
          + par["gr_white"] * _white(seed, 2, dev, k))
    lo, hi = par["gr_lo"], par["gr_hi"]
    if (par["burst_p"] > 0).any():
        block = (k * sp.interval_s) // _KNOT_S
        hb = _hash(seed, 3, dev, np.arange(block[0], block[-1] + 1))[:, block - block[0]]
        ub = _uniform(hb)
        u2 = _to_float(hb & np.uint64(0xFFFFFFFF)) * (1.0 / 4294967296.0)
        level = par["burst_lo"] + (par["burst_hi"] - par["burst_lo"]) * u2
        burst = (ub < par["burst_p"]) & (((k * sp.interval_s) % _KNOT_S) < _KNOT_S // 2)[None, :]
        gr = np.where(burst, level + 0.04 * _white(seed, 4, dev, k), gr)
        lo, hi = np.where(burst, 0.0, lo), np.where(burst, 1.0, hi)
    # input starvation: the cycle's stall phase drops the GPU to stall_level
    t = (sp.start_s + k * sp.interval_s).astype(np.float64)[None, :]
    cycle = par["cycle_s"]
    busy = np.where(cycle > 0, np.mod(t, np.maximum(cycle, 1.0)) < par["cycle_busy_s"], True)
    gr = np.where(busy, gr, par["stall_level"] + 0.003 * np.abs(_white(seed, 10, dev, k)))
    quiet = _quiet(par, sp.start_s, sp.interval_s, k)
    if quiet is not None:  # the GPU does nothing: a loaded model or context, no work
        gr = np.where(quiet, 0.001 + 0.0008 * _white(seed, 10, dev, k), gr)
        lo, hi = np.where(quiet, 0.0, lo), np.where(quiet, 1.0, hi)
    gr = np.round(np.clip(gr, lo, hi), 4)
    sm = np.round(np.clip(gr * par["sm_ratio"] * (1.0 + 0.04 * _white(seed, 5, dev, k)), 0.0, 1.0), 4)
    fb = np.round(np.clip(par["fb_base"] + par["fb_smooth"] * _smooth(seed, 6, dev, k, knot)
                          + par["fb_white"] * _white(seed, 7, dev, k), par["fb_lo"], par["fb_hi"]))
    fb_free = dv["fb_total"].to_numpy()[:, None] - fb
    is_mig = dv["mig_instance"].to_numpy() >= 0
    util = np.round(np.clip(gr * 104.0 + 1.5 * _white(seed, 8, dev, k), 0.0, 100.0)) * (gr > 0)
    util[is_mig] = np.nan

    idle_w = dv["idle_w"].to_numpy()[:, None]
    max_w = dv["max_w"].to_numpy()[:, None]
    x = np.clip(0.3 * gr + 0.75 * sm, 0.0, 1.0) + 0.004 * (fb > 0)
    noise = _white(seed, 9, dev, k)
    mig_rows = np.flatnonzero(is_mig)
    if mig_rows.size:
        # one physical GPU: every instance series repeats the parent's power draw
        grp = mig_rows.reshape(-1, 7)
        x[grp] = x[grp].mean(axis=1, keepdims=True)
        noise[grp] = noise[grp[:, :1]]
    power = np.round(idle_w + (max_w - idle_w) * x + 0.006 * max_w * noise, 1)
    rx = np.round(np.where(busy, par["rx_busy"], par["rx_stall"]) * (1.0 + 0.05 * _white(seed, 11, dev, k)))
    ckpt = par["ckpt_s"]
    burst = (ckpt > 0) & (np.mod(t, np.maximum(ckpt, 1.0)) < sp.interval_s)
    tx = np.round(par["tx_base"] * (1.0 + 0.05 * _white(seed, 12, dev, k)) + np.where(burst, par["ckpt_tx"], 0.0))
    cpu = np.round(np.where(busy, par["cpu_busy"], par["cpu_stall"]) * (1.0 + 0.03 * _white(seed, 13, dev, k)), 3)
    return Values(d0, k0, holder, fleet.gap_mask(c0, c1, k0, k1), gr, sm, util, fb, fb_free, power, rx, tx, cpu)


def _quiet(par: dict[str, np.ndarray], start_s: int, interval_s: int, k: np.ndarray) -> np.ndarray | None:
    """Where a profile's quiet window, weekdays or end applies (None when no profile has any)."""
    qf, qt, days, after = par["quiet_from_h"], par["quiet_to_h"], par["quiet_days"], par["quiet_after_h"]
    if not ((qf != qt).any() or (days > 0).any() or np.isfinite(after).any()):
        return None
    t = start_s + k * interval_s
    hour = ((t % 86400) / 3600.0)[None, :]
    weekday = ((t // 86400 + 3) % 7)[None, :]  # 1970-01-01 was a Thursday; Monday = 0
    daily = np.where(qf <= qt, (hour >= qf) & (hour < qt), (hour >= qf) | (hour < qt)) & (qf != qt)
    weekly = ((days.astype(np.int64) >> weekday) & 1) == 1
    ended = ((k * interval_s) / 3600.0)[None, :] >= after
    return daily | weekly | ended


def cell_blocks(fleet: Fleet, steps: int, budget: int = 2_000_000) -> list[tuple[int, int]]:
    """Split the cells into blocks of about `budget` device-samples for `steps` samples."""
    n = fleet.spec.cell_count
    per_cell = int(fleet.dev_offsets[1] - fleet.dev_offsets[0])
    size = max(1, budget // max(1, per_cell * steps))
    return [(c, min(n, c + size)) for c in range(0, n, size)]

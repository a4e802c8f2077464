"""OpenMetrics / Prometheus text exposition files -> series frames -> warehouse.

This is the demo path (``sample_data/metrics.om.gz``) and the offline path for a scrape
someone saved with ``curl``. The parser is vectorised: one regex over all lines in polars,
and the label blocks, which repeat once per sample, are parsed once per distinct block.

Timestamps are optional (a missing one takes ``default_ts``). OpenMetrics writes seconds and
the Prometheus text format milliseconds; they are told apart per line by magnitude, since
1e11 seconds is the year 5138 and 1e11 milliseconds is 1973. A timestamp that is not a number,
not finite, before 2000 or in the future is bad input naming the line; so is anything after
OpenMetrics' ``# EOF``. Every sample keeps its line number (column :data:`LINE`) so later checks
can name it too.
"""

from __future__ import annotations

import gzip
import re
import zlib
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.sources.base import LoadContract, LoadReport
from gpuinsight.sources.dcgm import BY_SPELLING
from gpuinsight.sources.plausible import EARLIEST_S, latest_s
from gpuinsight.sources.prom.frames import TS, empty_series, to_naive_utc
from gpuinsight.sources.series import LINE, SeriesBatch, load_series, validate_series
from gpuinsight.textfile import decode_utf8
from gpuinsight.warehouse.db import Warehouse

CONTRACTS = (
    LoadContract("gpu_samples", ("cluster", "gpu_uuid", "mig_instance", "ts", "namespace", "pod"), cursor="ts",
                 description="DCGM samples from a saved exposition file"),
    LoadContract("pods", ("cluster", "uid"), description="kube-state-metrics pod series"),
    LoadContract("nodes", ("cluster", "node"), description="kube-state-metrics node series"),
)
DEFAULT_STEP_S = 30  # dcgm-exporter's default collect interval, for files with one sample per series

_LABELS = r'\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\}'
_LINE = (
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?P<labels>" + _LABELS + r")?"
    r"[ \t]+(?P<value>[^ \t#]+)(?:[ \t]+(?P<ts>[^ \t#]+))?[ \t]*(?:#.*)?$"
)
_TAIL = r"[ \t]+[^ \t{}\"#]+(?:[ \t]+[^ \t{}\"#]+)?[ \t]*$"
_KEY = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{.*\})?$", re.S)
_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_UNESCAPE = re.compile(r"\\(.)")


def _unescape(value: str) -> str:
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value) if "\\" in value else value


def _parse_labels(block: str) -> dict[str, str] | None:
    """``{a="1",b="x\\"y"}`` -> dict; None when the block is not well formed."""
    inner = block[1:-1].strip()
    out: dict[str, str] = {}
    pos = 0
    while pos < len(inner):
        m = _PAIR.match(inner, pos)
        if m is None or m.end() == pos:
            return None
        out[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return out


def parse_exposition(data: bytes | str, *, name: str = "<input>", default_ts: datetime | None = None) -> pl.DataFrame:
    """Parse exposition text into a series frame; any malformed line -> BadInput ``NAME:LINE: what``."""
    text = decode_utf8(data, name) if isinstance(data, bytes) else data
    lines = pl.DataFrame({"line": text.split("\n")}).with_row_index("lineno", offset=1)
    if "\r" in text:
        lines = lines.with_columns(pl.col("line").str.strip_chars_end("\r"))
    line = pl.col("line")
    eof = lines.filter(line.str.strip_chars() == "# EOF")
    if eof.height:
        end = int(eof["lineno"][0])
        after = lines.filter((pl.col("lineno") > end) & (line.str.strip_chars().str.len_bytes() > 0))
        if after.height:
            _fail(name, after.row(0, named=True), "content after `# EOF` (the end of an OpenMetrics exposition)")
        lines = lines.filter(pl.col("lineno") < end)
    body = lines.filter((line.str.len_bytes() > 0) & ~line.str.starts_with("#"))
    if body.height == 0:
        return empty_series()
    # Fast path: value and timestamp are the last tokens (a regex anchored at the end runs
    # backwards over a few bytes); what precedes them is the series key `name{labels}`,
    # which repeats once per sample and is parsed once per distinct key, in Python.
    parts = body.with_columns(line.str.extract(_TAIL, 0).alias("tail"))
    parts = parts.with_columns(line.str.strip_suffix(pl.col("tail")).str.strip_chars_end().alias("key"),
                               pl.col("tail").str.strip_chars().str.replace_all("\t", " ", literal=True)
                               .str.split_exact(" ", 1).alias("vt")).unnest("vt")
    parts = parts.rename({"field_0": "value", "field_1": "ts"}).drop("tail")
    keys: dict[str, dict[str, str] | None] = {}
    for key in parts.get_column("key").drop_nulls().unique().to_list():
        keys[key] = _parse_key(key)
    slow = parts.filter(pl.col("key").is_null() | pl.col("key").replace_strict(
        {k: v is None for k, v in keys.items()}, default=True, return_dtype=pl.Boolean))
    if slow.height:
        parts = pl.concat([parts.join(slow.select("lineno"), on="lineno", how="anti"), _slow_path(slow, name, keys)])
    parts = parts.with_columns(pl.col("value").cast(pl.Float64, strict=False).alias("v"),
                               pl.col("ts").cast(pl.Float64, strict=False).alias("t"))
    bad = parts.filter(pl.col("v").is_null())
    if bad.height:
        _fail(name, _with_line(bad, lines), f"value {bad['value'][0]!r} is not a number")
    bad = parts.filter(pl.col("t").is_null() & pl.col("ts").is_not_null())
    if bad.height:
        _fail(name, _with_line(bad, lines), f"timestamp {bad['ts'][0]!r} is not a number")
    seconds = pl.when(pl.col("t").abs() >= 1e11).then(pl.col("t") / 1000.0).otherwise(pl.col("t"))
    bad = parts.filter(pl.col("t").is_not_null() & ~seconds.is_between(EARLIEST_S, latest_s()).fill_null(False))
    if bad.height:
        _fail(name, _with_line(bad, lines), f"timestamp {bad['ts'][0]!r} is not a plausible time "
                                            "(before 2000, in the future, or not finite)")
    ts_us = (seconds * 1_000_000).round(0).cast(pl.Int64)
    if default_ts is not None:
        default_us = int((to_naive_utc(default_ts) - datetime(1970, 1, 1)).total_seconds() * 1_000_000)
        ts_us = ts_us.fill_null(default_us)
    elif parts["t"].null_count():
        _fail(name, _with_line(parts.filter(pl.col("t").is_null()), lines),
              "sample has no timestamp and no default was given")
    table = pl.DataFrame([{**v, "_key": k} for k, v in keys.items() if v is not None], infer_schema_length=None)
    samples = parts.select("key", ts_us.cast(TS).alias("ts"), pl.col("v").alias("value"),
                           pl.col("lineno").cast(pl.Int64).alias(LINE))
    out = samples.join(table, left_on="key", right_on="_key", how="left").drop("key")
    return out.select("metric", "ts", "value", *[c for c in out.columns if c not in ("metric", "ts", "value")])


def _parse_key(key: str) -> dict[str, str] | None:
    """``name{a="1"}`` -> {"metric": name, "a": "1"}; None when not well formed."""
    m = _KEY.match(key)
    if m is None:
        return None
    labels = _parse_labels(m.group(2)) if m.group(2) else {}
    if labels is None:
        return None
    out = {(f"label_{k}_" if k in ("metric", "ts", "value") else k): v for k, v in labels.items() if v != ""}
    out["metric"] = m.group(1)
    return out


def _slow_path(slow: pl.DataFrame, name: str, keys: dict[str, dict[str, str] | None]) -> pl.DataFrame:
    """Lines the fast path could not split (exemplars, odd spacing): the full line regex."""
    slow = slow.filter(~pl.col("line").str.contains(r"^\s*(#.*)?$"))  # blank or indented comment
    full = slow.select("lineno", "line", pl.col("line").str.extract_groups(_LINE).alias("m")).unnest("m")
    bad = full.filter(pl.col("name").is_null())
    if bad.height:
        _fail(name, bad.row(0, named=True), "not a sample line (expected `name{labels} value [timestamp]`)")
    full = full.with_columns((pl.col("name") + pl.col("labels").fill_null("")).alias("key"))
    for key, lineno in full.group_by("key").agg(pl.col("lineno").min()).iter_rows():
        if keys.get(key) is None:
            keys[key] = _parse_key(key)
            if keys[key] is None:
                raise BadInput(f"{name}:{lineno}: malformed label set in {key[:120]}")
    return full.select("lineno", "line", "key", "value", "ts")


def _with_line(frame: pl.DataFrame, lines: pl.DataFrame) -> dict[str, object]:
    row = frame.row(0, named=True)
    if "line" not in row:
        row["line"] = lines["line"][int(row["lineno"]) - 1]
    return row


def _fail(name: str, row: dict[str, object], what: str) -> None:
    raise BadInput(f"{name}:{row['lineno']}: {what}: {str(row['line'])[:120]!r}")


def read_exposition(path: str | Path, *, default_ts: datetime | None = None) -> pl.DataFrame:
    """Read a plain or gzip-compressed exposition file into a series frame."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror})") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadInput(f"{path}: corrupt gzip data ({str(exc).splitlines()[0][:120]})") from None
    if not raw or raw.isspace():  # isspace stops at the first other byte; strip() would copy the file
        raise BadInput(f"{path}:1: no samples (the file is empty or only whitespace)")
    if default_ts is None:
        mtime = path.stat().st_mtime  # the file was written at scrape time
        if EARLIEST_S <= mtime <= latest_s():
            default_ts = datetime.fromtimestamp(mtime, UTC).replace(tzinfo=None)
    return parse_exposition(raw, name=str(path), default_ts=default_ts)


def infer_step_s(series: pl.DataFrame) -> int:
    """The scrape interval: the most common gap between consecutive samples of a DCGM series."""
    names = set(BY_SPELLING)
    s = series.filter(pl.col("metric").is_in(names))
    if s.height < 2:
        return DEFAULT_STEP_S
    labels = [c for c in s.columns if c not in ("ts", "value", LINE)]
    diffs = s.sort("ts").select(pl.col("ts").diff().over(labels).dt.total_seconds().alias("d"))["d"]
    diffs = diffs.filter(diffs > 0)
    if diffs.len() == 0:
        return DEFAULT_STEP_S
    return int(diffs.mode().min())


def load_openmetrics(
    wh: Warehouse, cfg: Config, path: str | Path, *, default_ts: datetime | None = None, step_s: int | None = None
) -> LoadReport:
    """Load one exposition file: parsed completely first, so a bad file writes nothing."""
    path = Path(path)
    series = read_exposition(path, default_ts=default_ts)
    validate_series(series, str(path))  # every refusal before anything (ingest_state included) is written
    step = int(step_s or infer_step_s(series))
    window = (series["ts"].min(), series["ts"].max()) if series.height else None
    batch = SeriesBatch(series, step, start=window[0] if window else None, end=window[1] if window else None)
    report = load_series(wh, cfg, [batch], source="openmetrics", scope=str(path.resolve()), window=window,
                         details={"step_s": step, "file": path.name}, origin=path.name)
    report.notes.insert(0, f"{path.name}: {series.height:,} samples, step {step}s")
    return report

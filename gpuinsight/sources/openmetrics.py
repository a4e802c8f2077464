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
import io
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, AnyStr

import polars as pl

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.sources.base import LoadContract, LoadReport
from gpuinsight.sources.dcgm import BY_SPELLING
from gpuinsight.sources.gpu_nodes import NodeDirectory
from gpuinsight.sources.plausible import EARLIEST_S, latest_s
from gpuinsight.sources.prom.frames import TS, empty_series, first_label, to_naive_utc
from gpuinsight.sources.prom.ksm import (
    check_ksm_values,
    ksm_nodes,
    ksm_pods,
)
from gpuinsight.sources.series import (
    LINE,
    SeriesBatch,
    TransformStats,
    check_maps_something,
    dcgm_samples,
    gpu_facts,
    load_series,
    server_dropped,
    transform_groups,
)
from gpuinsight.textfile import decode_utf8
from gpuinsight.warehouse.db import Warehouse

CONTRACTS = (
    LoadContract("gpu_samples", ("cluster", "gpu_uuid", "mig_instance", "ts", "namespace", "pod"), cursor="ts",
                 description="DCGM samples from a saved exposition file"),
    LoadContract("pods", ("cluster", "uid"), description="kube-state-metrics pod series"),
    LoadContract("nodes", ("cluster", "node"), description="kube-state-metrics node series"),
)
DEFAULT_STEP_S = 30  # dcgm-exporter's default collect interval, for files with one sample per series
# Text parsed at a time: the parser's memory follows this, not the file's size (docs/performance.md).
CHUNK_BYTES = 1 << 20
SOURCE = "openmetrics"
# DCGM samples transformed at a time (GPU by GPU): bounds that step's memory (docs/performance.md).
DCGM_POINTS_PER_PART = 100_000
SID = "@series"  # a sample's series, a row of Exposition.series ('@' keeps it apart from any label)

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


@dataclass
class Exposition:
    """A parsed exposition kept columnar: each distinct series (label set) once and its samples
    as flat columns, as the Prometheus path keeps a range answer (``prom/frames.Matrix``).

    ``series``: :data:`SID`, ``metric`` and one Utf8 column per label, a row per series in order of
    first appearance; ``samples``: :data:`SID`, ``ts``, ``value`` and :data:`LINE`, in line order.
    """

    series: pl.DataFrame
    samples: pl.DataFrame

    @property
    def height(self) -> int:
        return self.samples.height

    def frame(self, ids: pl.Series | None = None, *, categorical: bool = False) -> pl.DataFrame:
        """The long series frame (every label on every sample) of all series, or of the series
        ``ids`` only, then without the labels none of them has; in line order. ``categorical``:
        the labels as pl.Categorical (for transforms that read them through ``frames.lab`` or only
        compare and group them, as every transform of a file's series does)."""
        if self.samples.height == 0:
            return empty_series()
        series, samples = self.series, self.samples
        if ids is not None:
            series = series.filter(pl.col(SID).is_in(ids.implode()))
            samples = samples.filter(pl.col(SID).is_in(ids.implode()))
        labels = [c for c in series.columns if c not in (SID, "metric") and series[c].null_count() < series.height]
        table = self.series.select("metric", *labels)  # row i is series i
        if categorical:  # a label repeated on every sample costs 4 bytes, not a 16-byte string view
            table = table.with_columns(pl.col(labels).cast(pl.Categorical))
        out = pl.concat([samples.select("ts", "value", LINE), table.gather(samples.get_column(SID))], how="horizontal")
        return out.select("metric", "ts", "value", LINE, *labels)


class _Parser:
    """Exposition text fed in pieces of whole lines -> :class:`Exposition`.

    One regex pass over the lines of a piece in polars; the series key ``name{labels}``, which
    repeats once per sample, is parsed once per distinct key for the whole file, in Python.
    """

    def __init__(self, name: str, default_ts: datetime | None) -> None:
        self.name = name
        self.default_us = None if default_ts is None else \
            int((to_naive_utc(default_ts) - datetime(1970, 1, 1)).total_seconds() * 1_000_000)
        self.parsed: dict[str, dict[str, str] | None] = {}  # key text -> labels (None: malformed)
        self.ids: dict[str, int] = {}                        # key text -> series id
        self.by_labels: dict[tuple[tuple[str, str], ...], int] = {}  # label set -> series id
        self.label_sets: list[dict[str, str]] = []
        self.parts: list[pl.DataFrame] = []
        self.after_eof = False

    def feed(self, text: str, first_line: int) -> None:
        """Parse the lines of ``text`` (numbered from ``first_line``); any malformed line -> BadInput."""
        name = self.name
        lines = pl.DataFrame({"line": text.split("\n")}).with_row_index("lineno", offset=first_line)
        if "\r" in text:
            lines = lines.with_columns(pl.col("line").str.strip_chars_end("\r"))
        line = pl.col("line")
        blank = line.str.strip_chars().str.len_bytes() == 0
        if self.after_eof:
            after = lines.filter(~blank)
            if after.height:
                _fail(name, after.row(0, named=True), "content after `# EOF` (the end of an OpenMetrics exposition)")
            return
        eof = lines.filter(line.str.strip_chars() == "# EOF")
        if eof.height:
            end = int(eof["lineno"][0])
            after = lines.filter((pl.col("lineno") > end) & ~blank)
            if after.height:
                _fail(name, after.row(0, named=True), "content after `# EOF` (the end of an OpenMetrics exposition)")
            lines = lines.filter(pl.col("lineno") < end)
            self.after_eof = True
        body = lines.filter((line.str.len_bytes() > 0) & ~line.str.starts_with("#"))
        if body.height == 0:
            return
        # Fast path: value and timestamp are the last tokens (a regex anchored at the end runs
        # backwards over a few bytes); what precedes them is the series key `name{labels}`.
        parts = body.with_columns(line.str.extract(_TAIL, 0).alias("tail"))
        parts = parts.with_columns(line.str.strip_suffix(pl.col("tail")).str.strip_chars_end().alias("key"),
                                   pl.col("tail").str.strip_chars().str.replace_all("\t", " ", literal=True)
                                   .str.split_exact(" ", 1).alias("vt")).unnest("vt")
        parts = parts.rename({"field_0": "value", "field_1": "ts"}).drop("tail")
        malformed = []
        for key in parts.get_column("key").drop_nulls().unique().to_list():
            if key not in self.parsed:
                self.parsed[key] = _parse_key(key)
            if self.parsed[key] is None:
                malformed.append(key)
        slow = parts.filter(pl.col("key").is_null() | pl.col("key").is_in(malformed))
        if slow.height:
            parts = pl.concat([parts.join(slow.select("lineno"), on="lineno", how="anti"),
                               _slow_path(slow, name, self.parsed)]).sort("lineno")
            if parts.height == 0:  # only blank lines and indented comments
                return
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
        if self.default_us is not None:
            ts_us = ts_us.fill_null(self.default_us)
        elif parts["t"].null_count():
            _fail(name, _with_line(parts.filter(pl.col("t").is_null()), lines),
                  "sample has no timestamp and no default was given")
        ids = {key: self._series_id(key) for key in parts.get_column("key").unique(maintain_order=True).to_list()}
        self.parts.append(parts.select(pl.col("key").replace_strict(ids, return_dtype=pl.UInt32).alias(SID),
                                       ts_us.cast(TS).alias("ts"), pl.col("v").alias("value"),
                                       pl.col("lineno").cast(pl.Int64).alias(LINE)))

    def _series_id(self, key: str) -> int:
        """One id per label set, however its key is spelled (label order, spacing, empty values)."""
        sid = self.ids.get(key)
        if sid is None:
            labels = self.parsed[key]
            assert labels is not None  # malformed keys were refused
            sid = self.by_labels.setdefault(tuple(sorted(labels.items())), len(self.label_sets))
            if sid == len(self.label_sets):
                self.label_sets.append(labels)
            self.ids[key] = sid
        return sid

    def result(self) -> Exposition:
        sets = self.label_sets
        names = ["metric", *(n for n in dict.fromkeys(k for labels in sets for k in labels) if n != "metric")]
        series = pl.DataFrame([pl.Series(SID, range(len(sets)), dtype=pl.UInt32),
                               *(pl.Series(n, [labels.get(n) for labels in sets], dtype=pl.Utf8) for n in names)])
        samples = pl.concat(self.parts) if self.parts else pl.DataFrame(
            schema={SID: pl.UInt32, "ts": TS, "value": pl.Float64, LINE: pl.Int64})
        self.parts = []
        return Exposition(series, samples)


def _pieces(read: Callable[[int], AnyStr], size: int) -> Iterator[AnyStr]:
    """What ``read`` gives, cut into pieces of whole lines of ``size`` or more (the newline
    after each piece dropped; the last piece runs to the end): text shorter than ``size`` is
    one piece."""
    rest = read(0)
    newline = b"\n" if isinstance(rest, bytes) else "\n"
    held = None  # a piece, yielded once more text follows it
    while block := read(size):
        block = rest + block
        cut = block.rfind(newline)  # type: ignore[arg-type]
        if cut < 0:
            rest = block
            continue
        if held is not None:
            yield held
        held, rest = block[:cut], block[cut + 1:]
    yield rest if held is None else held + newline + rest  # type: ignore[operator]


def _parse_pieces(pieces: Iterable[bytes | str], name: str, default_ts: datetime | None) -> Exposition:
    parser = _Parser(name, default_ts)
    first = 1
    for piece in pieces:
        text = decode_utf8(piece, name, first_line=first) if isinstance(piece, bytes) else piece
        parser.feed(text, first)
        first += text.count("\n") + 1
    return parser.result()


def parse_exposition(data: bytes | str, *, name: str = "<input>", default_ts: datetime | None = None,
                     chunk_bytes: int | None = None) -> pl.DataFrame:
    """Parse exposition text into a series frame; any malformed line -> BadInput ``NAME:LINE: what``."""
    stream = io.BytesIO(data) if isinstance(data, bytes) else io.StringIO(data)
    return _parse_pieces(_pieces(stream.read, chunk_bytes or CHUNK_BYTES), name, default_ts).frame()


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
        row["line"] = lines.filter(pl.col("lineno") == row["lineno"])["line"][0]
    return row


def _fail(name: str, row: dict[str, object], what: str) -> None:
    raise BadInput(f"{name}:{row['lineno']}: {what}: {str(row['line'])[:120]!r}")


def scan_exposition(path: str | Path, *, default_ts: datetime | None = None,
                    chunk_bytes: int | None = None) -> Exposition:
    """Read a plain or gzip-compressed exposition file, ``chunk_bytes`` of text at a time: the
    text is never held whole, only the parsed samples and each distinct series once."""
    path = Path(path)
    try:
        raw = path.open("rb")
        gzipped = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror})") from exc
    content = False  # anything but whitespace seen

    def read(n: int) -> bytes:
        nonlocal content
        block = stream.read(n)
        content = content or (bool(block) and not block.isspace())  # isspace stops at the first other byte
        return block

    stream: IO[bytes] = gzip.GzipFile(fileobj=raw) if gzipped else raw
    with raw, stream:
        try:
            expo = _parse_pieces(_pieces(read, chunk_bytes or CHUNK_BYTES), str(path), default_ts or _mtime(path))
        except (OSError, EOFError, zlib.error) as exc:
            if not gzipped or isinstance(exc, OSError) and exc.strerror:
                raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from exc
            raise BadInput(f"{path}: corrupt gzip data ({str(exc).splitlines()[0][:120]})") from None
    if not content:
        raise BadInput(f"{path}:1: no samples (the file is empty or only whitespace)")
    return expo


def _mtime(path: Path) -> datetime | None:
    mtime = path.stat().st_mtime  # the file was written at scrape time
    return datetime.fromtimestamp(mtime, UTC).replace(tzinfo=None) if EARLIEST_S <= mtime <= latest_s() else None


def read_exposition(path: str | Path, *, default_ts: datetime | None = None,
                    chunk_bytes: int | None = None) -> pl.DataFrame:
    """Read a plain or gzip-compressed exposition file into a series frame."""
    return scan_exposition(path, default_ts=default_ts, chunk_bytes=chunk_bytes).frame()


def infer_step_s(expo: Exposition) -> int:
    """The scrape interval: the most common gap between consecutive samples of a DCGM series."""
    dcgm = expo.series.filter(pl.col("metric").is_in(list(BY_SPELLING))).get_column(SID)
    s = expo.samples.filter(pl.col(SID).is_in(dcgm.implode()))
    if s.height < 2:
        return DEFAULT_STEP_S
    diffs = s.sort("ts").select(pl.col("ts").diff().over(SID).dt.total_seconds().alias("d"))["d"]
    diffs = diffs.filter(diffs > 0)
    if diffs.len() == 0:
        return DEFAULT_STEP_S
    return int(diffs.mode().min())


def load_openmetrics(
    wh: Warehouse, cfg: Config, path: str | Path, *, default_ts: datetime | None = None, step_s: int | None = None
) -> LoadReport:
    """Load one exposition file: parsed completely first, so a bad file writes nothing.

    The file is read in pieces and kept columnar (:class:`Exposition`); each transform gets the
    long frame of only the series it reads (DCGM; kube-state-metrics pods; nodes; the rest), with
    the labels as categoricals, so memory follows the largest of them, not the file's text.
    """
    path = Path(path)
    expo = scan_exposition(path, default_ts=default_ts)
    where = str(path)
    groups = _groups(expo.series)
    # every refusal before anything (ingest_state included) is written, as validate_series does
    check_ksm_values(expo.frame(groups["checked"], categorical=True), where, LINE)
    check_maps_something(expo.series, where)
    step = int(step_s or infer_step_s(expo))
    window = (expo.samples["ts"].min(), expo.samples["ts"].max()) if expo.height else None
    n_samples = expo.height
    stats, directory = TransformStats(origin=path.name), NodeDirectory()

    def batches() -> Iterator[SeriesBatch]:  # asked for once load_series has read the warehouse's nodes
        # as ksm_rows makes them, each from its own series
        pods = ksm_pods(expo.frame(groups["pods"], categorical=True), cfg.cluster, source=SOURCE,
                        notes=stats.ksm_notes)
        nodes = ksm_nodes(expo.frame(groups["nodes"], categorical=True), cfg.cluster, notes=stats.ksm_notes,
                          facts=gpu_facts(wh))
        directory.add_series(expo.frame(groups["placements"], categorical=True))
        server_dropped(expo.frame(groups["server_dropped"]), stats)
        # GPU by GPU in parts (a GPU's series all in one): dcgm_samples' rows, counts and notes
        # do not depend on how the GPUs are split
        parts = [dcgm_samples(expo.frame(ids, categorical=True), cfg.cluster, step, stats=stats, nodes=directory,
                              node_labels=cfg.node_labels) for ids in _gpu_parts(expo, groups["dcgm"])]
        samples = pl.concat(parts).sort(["ts", "gpu_uuid", "mig_instance"]) if len(parts) > 1 else parts[0]
        del parts
        # cAdvisor, Kueue, HAMi, serving, DCGM energy: 36 label columns on 140,000 samples of the
        # demo's file, mostly nulls, cost 4 bytes each as categoricals, 16 as strings
        rest = expo.frame(groups["rest"], categorical=True)
        expo.samples = expo.samples.clear()  # all made into frames and rows: not held while they load
        yield SeriesBatch(rest, step, start=window[0] if window else None, end=window[1] if window else None,
                          samples=samples, pods=pods, nodes=nodes)

    report = load_series(wh, cfg, batches(), source=SOURCE, scope=str(path.resolve()), window=window,
                         details={"step_s": step, "file": path.name}, origin=path.name, stats=stats,
                         directory=directory)
    report.notes.insert(0, f"{path.name}: {n_samples:,} samples, step {step}s")
    return report


def _gpu_parts(expo: Exposition, ids: pl.Series) -> list[pl.Series]:
    """``ids`` (DCGM series) in parts of about :data:`DCGM_POINTS_PER_PART` samples, the series of
    one GPU (``UUID``/``uuid``; those without one together) in the same part."""
    series = expo.series.filter(pl.col(SID).is_in(ids.implode()))
    per_series = expo.samples.filter(pl.col(SID).is_in(ids.implode())).group_by(SID).len()
    gpus = series.select(SID, first_label(series, "UUID", "uuid").alias("_gpu")).join(per_series, on=SID) \
        .group_by("_gpu", maintain_order=True).agg(pl.col(SID), pl.col("len").sum())
    parts: list[pl.Series] = []
    held: list[pl.Series] = []
    points = 0
    for members, n in gpus.select(SID, "len").iter_rows():
        held.append(pl.Series(SID, members, dtype=pl.UInt32))
        points += n
        if points >= DCGM_POINTS_PER_PART:
            parts.append(pl.concat(held))
            held, points = [], 0
    if held or not parts:
        parts.append(pl.concat(held) if held else ids)
    return parts


def _groups(series: pl.DataFrame) -> dict[str, pl.Series]:
    """The ids of the series each transform reads (:func:`transform_groups`)."""
    groups = transform_groups(series.get_column("metric").unique().to_list())
    return {group: series.filter(pl.col("metric").is_in(list(names))).get_column(SID)
            for group, names in groups.items()}

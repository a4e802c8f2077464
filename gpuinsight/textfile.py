"""User input files as text: bytes that are not UTF-8 are bad input naming file and line.

Every reader of a file a person gives (CSV, OpenMetrics, kubectl dumps, plan files) decodes it
here, so they all refuse the same bytes with the same one-line message; CSV files (price
catalogs, energy rates) are also split into checked records here.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from pathlib import Path

from gpuinsight.errors import BadInput


def decode_utf8(data: bytes, name: str, *, error: type[BadInput] = BadInput, first_line: int = 1) -> str:
    """``data`` as text (a leading byte-order mark dropped); else ``error("NAME:LINE: not UTF-8 text (byte 0xNN)")``.

    ``first_line`` > 1: ``data`` is a later piece of a file (whole lines, read in chunks) starting
    at that line; a byte-order mark there is not the file's and is kept."""
    try:
        return data.decode("utf-8-sig" if first_line == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + first_line
        raise error(f"{name}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def utf8_text(path: Path, *, error: type[BadInput] = BadInput) -> str:
    """A text file's content (:func:`decode_utf8`); a file that cannot be read is bad input too."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    return decode_utf8(data, str(path), error=error)


def csv_records(path: Path, required: Sequence[str]) -> Iterator[tuple[int, str, dict[str, str]]]:
    """The rows of a CSV file with a header, as ``(line, "FILE:LINE", record)``: header names
    stripped, blank rows skipped; a missing required column, a row with the wrong number of
    fields and a malformed file are bad input naming file and line."""
    with io.StringIO(utf8_text(path), newline="") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in required if c not in header]
        if missing:
            raise BadInput(f"{path}:1: missing column(s) {', '.join(missing)} (need {','.join(required)})")
        reader.fieldnames = header
        try:
            for record in reader:
                where = f"{path}:{reader.line_num}"
                if None in record or any(record.get(c) is None for c in required):
                    raise BadInput(f"{where}: expected {len(header)} fields")
                if any((v or "").strip() for v in record.values()):
                    yield reader.line_num, where, record
        except csv.Error as exc:
            raise BadInput(f"{path}:{reader.line_num}: {exc}") from None

"""A progress line on stderr for long work: shown on a terminal, silent otherwise.

Whether it shows is the caller's decision (``Config.progress``, set by the CLI when stderr is
a terminal), so batch jobs and pipes get clean output.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any, TextIO


class Progress:
    def __init__(self, enabled: bool, *, stream: TextIO | None = None, width: int = 30) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.width = width
        self.start: datetime | None = None
        self.end: datetime | None = None
        self._shown = False

    def window(self, start: datetime | None, end: datetime | None) -> Progress:
        self.start, self.end = start, end
        return self

    def stage(self, text: str) -> None:
        self._write(f"{text}...")

    def at(self, when: datetime | None, rows: int | None = None) -> None:
        """Work is complete up to ``when`` (within the window set by :meth:`window`)."""
        if when is None:
            return
        if self.start is None:
            self.start = when
        frac = 0.0
        if self.end is not None and self.end > self.start:
            frac = min(1.0, max(0.0, (when - self.start) / (self.end - self.start)))
        bar = "#" * round(frac * self.width)
        extra = f", {rows:,} rows" if rows is not None else ""
        self._write(f"[{bar:<{self.width}}] {frac:4.0%} up to {when:%Y-%m-%d %H:%M}{extra}")

    def on_commit(self, batch: Any, rows: dict[str, int]) -> None:
        """Callback shape of the Prometheus source: called after each batch commits."""
        self.at(getattr(batch, "end", None), sum(rows.values()) if rows else None)

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\n")
            self.stream.flush()
        self._shown = False

    def _write(self, text: str) -> None:
        if not self.enabled:
            return
        self.stream.write("\r\033[K" + text)
        self.stream.flush()
        self._shown = True

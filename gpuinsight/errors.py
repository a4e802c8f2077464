"""Error types that map to the CLI's exit codes (design.md: 1 runtime failure, 2 bad input)."""

from __future__ import annotations


class GpuInsightError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class BadInput(GpuInsightError):
    """Malformed or inconsistent input: a file, a series, a flag value. Exit code 2.

    The message must say what and where (file:line, series, field) in one line.
    """

    exit_code = 2


class RuntimeFailure(GpuInsightError):
    """Something outside our control failed (server down, permission denied). Exit code 1."""

    exit_code = 1


class NotFound(BadInput):
    """A named thing (query, rule, plan) does not exist."""

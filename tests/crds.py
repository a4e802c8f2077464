"""Where the tests find CRDs and reference files: copies vendored in this repository
(tests/fixtures/reference, tests/fixtures/kuberay and tests/fixtures/kueue, each with a SOURCES.md
naming its origin), so a clone alone runs its whole suite."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REFERENCE = FIXTURES / "reference"
VENDORED = FIXTURES / "kuberay"
KUEUE = FIXTURES / "kueue"
CRD_DIRS = (REFERENCE, VENDORED, KUEUE)

"""Where the tests find CRDs: the shared reference copies and the KubeRay and Kueue CRDs vendored
here (tests/fixtures/kuberay, tests/fixtures/kueue, with their SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"
VENDORED = Path(__file__).resolve().parent / "fixtures" / "kuberay"
KUEUE = Path(__file__).resolve().parent / "fixtures" / "kueue"
CRD_DIRS = (REFERENCE, VENDORED, KUEUE)

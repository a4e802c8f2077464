"""What a command imports: no seconds of CPU for parts of other packages it never uses
(gpuinsight/imports.py). Each check runs in a fresh interpreter: this one has imported everything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(code: str, tmp_path: Path) -> list[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_talking_to_a_cluster_does_not_import_the_validator(tmp_path: Path) -> None:
    """The kubernetes client comes without the validator (and jsonschema) its unused dynamic
    module would load, and the validator stays importable for validation."""
    code = f"""
import sys
from gpuinsight.errors import BadInput
from gpuinsight.sources.kubernetes import api_client
try:
    api_client("nosuch", {str(tmp_path / "kubeconfig")!r})
except BadInput:
    pass
assert "kubernetes.client" in sys.modules and "kubernetes.config" in sys.modules
print(sorted(m for m in ("kubernetes_validate", "jsonschema") if m in sys.modules))
"""
    assert _run(code, tmp_path) == ["[]"]  # not imported, and no placeholder left in sys.modules


def test_the_command_line_skips_the_iri_grammars_and_charts_still_validate(tmp_path: Path) -> None:
    """rfc3987-syntax (installed with Jupyter) compiles its grammars when jsonschema is imported:
    a command does without them, and Altair still validates chart specs (a bad one is refused)."""
    code = """
import sys
from click.testing import CliRunner
from gpuinsight.cli import main
assert "jsonschema" not in sys.modules
assert CliRunner().invoke(main, ["query"]).exit_code == 0  # lists the models
import altair as alt, polars as pl  # as the report does, after the command started
print(sys.modules.get("rfc3987_syntax") is None, "rfc3987_syntax" in sys.modules)
alt.Chart(pl.DataFrame({"x": [1]})).mark_bar().encode(x="x:Q").to_dict()
try:
    alt.Chart(pl.DataFrame({"x": [1]})).mark_bar(opacity="lots").to_dict()
except Exception as exc:
    print(type(exc).__name__)
"""
    assert _run(code, tmp_path) == ["True", "True", "SchemaValidationError"]


def test_polars_lazy_numpy_is_resolved_before_worker_threads(tmp_path: Path) -> None:
    """polars resolves its lazy numpy proxy on first use; two collector threads doing that at
    once failed with "'module' object does not support item assignment" (numpy's own
    ``_globals`` shadows the proxy's). The race is made certain here by holding the first
    resolver back while the others finish; resolved up front, the same threads all succeed."""
    code = """
import sys, threading, time
import polars as pl
import numpy
from polars import _dependencies as deps
from gpuinsight.sources.prom.frames import resolve_polars_lazy_imports

calls = []
real_import = deps.import_module
def held_back_import(name, *args):
    calls.append(name)
    module = real_import(name, *args)
    time.sleep(0.3 if len(calls) == 1 else 0)
    return module
deps.import_module = held_back_import

def build(errors):
    try:
        pl.Series(numpy.arange(3))
    except TypeError as exc:
        errors.append(str(exc))

def race():
    errors = []
    first = threading.Thread(target=build, args=(errors,))
    first.start()
    time.sleep(0.1)
    others = [threading.Thread(target=build, args=(errors,)) for _ in range(4)]
    for t in others:
        t.start()
    for t in [first, *others]:
        t.join()
    return errors

if sys.argv[1:] == ["resolve"]:
    resolve_polars_lazy_imports()
print(getattr(deps.numpy, "__lazy__", False), len(race()))
"""
    def run(*argv: str) -> list[str]:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env,
                             timeout=120, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    lazy, failed = run()
    assert lazy == "True" and int(failed) >= 1  # the race as the collector met it
    assert run("resolve") == ["False", "0"]

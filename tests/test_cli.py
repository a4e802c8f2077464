"""The CLI: every command documented (help text and README), exit codes, query listing."""

from __future__ import annotations

import re
from pathlib import Path

import click
from click.testing import CliRunner

from gpuinsight.cli import main
from gpuinsight.sql import load_registry

ROOT = Path(__file__).resolve().parents[1]


def all_commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in sorted(group.commands.items()):
        full = f"{prefix}{name}"
        out.append((full, cmd))
        if isinstance(cmd, click.Group):
            out.extend(all_commands(cmd, full + " "))
    return out


def test_every_command_has_help_and_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for name, cmd in all_commands(main):
        assert (cmd.help or "").strip(), f"{name} has no help"
        if not isinstance(cmd, click.Group):
            assert f"gpuinsight {name}" in readme, f"README does not document `gpuinsight {name}`"
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.help, f"{name} {param.opts} has no help"


def test_help_works_everywhere() -> None:
    runner = CliRunner()
    for name, _ in all_commands(main):
        res = runner.invoke(main, [*name.split(), "--help"])
        assert res.exit_code == 0, (name, res.output)


def test_every_query_is_documented() -> None:
    docs = (ROOT / "docs" / "models.md").read_text() + (ROOT / "README.md").read_text()
    for name in load_registry().names():
        q = load_registry().get(name)
        assert q.grain and q.description
        assert re.search(rf"`{name}`", docs), f"query {name} is not mentioned in docs/models.md or README"


def test_bad_usage_and_bad_input_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["query", "--db", str(tmp_path / "none.duckdb"), "fleet_summary"]).exit_code == 2
    assert runner.invoke(main, ["no-such-command"]).exit_code == 2
    res = runner.invoke(main, ["collect", "prometheus", "--db", str(tmp_path / "x.duckdb"), "--url", "http://127.0.0.1:9",
                               "--step", "five minutes"])
    assert res.exit_code == 2 and "--step" in res.output
    res = runner.invoke(main, ["recommend", "--db", str(tmp_path / "x.duckdb"), "--set", "idle.colour=1"])
    assert res.exit_code == 2 and "unknown setting" in res.output

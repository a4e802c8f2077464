"""The ``recommend`` and ``rollback`` commands' output and modes (kept out of cli.py)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import click
import yaml

from gpuinsight.api import GpuInsight
from gpuinsight.errors import BadInput
from gpuinsight.rules.base import Plan


def load_settings(config_file: Path | None, sets: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    settings: dict[str, dict[str, Any]] = {}
    if config_file:
        try:
            data = yaml.safe_load(config_file.read_text())
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f":{mark.line + 1}" if mark else ""
            raise BadInput(f"{config_file}{where}: not valid YAML/JSON") from exc
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise BadInput(f"{config_file}: expected {{rule: {{setting: value}}}}")
        settings = {k: dict(v) for k, v in data.items()}
    for item in sets:
        key, sep, value = item.partition("=")
        rule, dot, name = key.partition(".")
        if not sep or not dot:
            raise BadInput(f"--set {item!r}: expected rule.setting=value")
        settings.setdefault(rule, {})[name] = value
    return settings


def plan_table(plan: Plan) -> str:
    if not plan.recommendations:
        return "no recommendations"
    rows = [("saving/mo", "rule", "target", "confidence", "title")]
    for r in plan.recommendations:
        target = r.queue if r.rule == "queue" else (r.node if r.rule == "binpack" else f"{r.namespace}/{r.workload}")
        rows.append((f"${r.monthly_savings_usd:,.0f}", r.rule, str(target), f"{r.confidence:.2f}", r.title))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(row[i].ljust(widths[i]) if i else row[i].rjust(widths[i]) for i in range(4)) + "  " + row[4]
             for row in rows]
    lines.insert(1, "-" * min(160, sum(widths) + 8 + 40))
    lines.append(f"total: ${plan.total_monthly_savings_usd:,.0f}/month from {len(plan.recommendations)} "
                 f"recommendation(s); prices from {plan.catalog or 'no catalog'}; plan {plan.plan_id}")
    return "\n".join(lines)


def plan_csv(plan: Plan) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["id", "rule", "namespace", "workload", "node", "queue", "title", "monthly_savings_usd",
                "confidence"])
    for r in plan.recommendations:
        w.writerow([r.id, r.rule, r.namespace or "", r.workload or "", r.node or "", r.queue or "", r.title,
                    f"{r.monthly_savings_usd:.2f}", f"{r.confidence:.3f}"])
    return buf.getvalue()


def run_recommend(gi: GpuInsight, *, fmt: str, config_file: Path | None, sets: tuple[str, ...],
                  emit_dir: Path | None, do_apply: bool, context: str | None, save_plan: Path | None = None,
                  plan_file: Path | None = None, only: list[str] | None = None) -> None:
    if plan_file is not None:
        if config_file or sets:
            raise BadInput("--plan uses a reviewed plan: --config and --set do not apply")
        from gpuinsight.actions import load_plan

        plan = load_plan(plan_file)  # invalid fields: BadInput naming the field
    else:
        plan = gi.recommend(load_settings(config_file, sets))
        from gpuinsight.sources.gpu_nodes import unmatched_note

        summary = gi.query("fleet_summary")
        note = unmatched_note(summary.row(0, named=True)) if summary.height else None
        if note:  # node-level rules cannot see those GPUs: say so (stderr keeps json/yaml/csv clean)
            plan.notes.append(note)
            click.echo(f"note: {note}", err=True)
    if save_plan is not None:
        from gpuinsight.actions import plan_to_json

        save_plan.write_text(json.dumps(plan_to_json(plan), indent=2, default=str) + "\n")
        click.echo(f"wrote plan {plan.plan_id} to {save_plan}", err=True)
    if fmt == "json":
        click.echo(json.dumps(plan.to_json_obj(), indent=2, default=str))
    elif fmt == "yaml":
        click.echo(yaml.safe_dump(json.loads(json.dumps(plan.to_json_obj(), default=str)), sort_keys=False))
    elif fmt == "csv":
        click.echo(plan_csv(plan), nl=False)
    else:
        click.echo(plan_table(plan))
        if plan.recommendations and not do_apply:
            # what would change, against the live cluster (--context) or the recorded state
            from gpuinsight.actions.cli_glue import diff_from_cli

            click.echo("\n" + diff_from_cli(gi, plan, context=context, live=context is not None))
    if emit_dir is not None:
        from gpuinsight.actions.emit import emit

        written = emit(plan, emit_dir)
        click.echo(f"wrote {len(written)} file(s) to {emit_dir}", err=fmt != "table")
    if do_apply:
        from gpuinsight.actions.cli_glue import apply_from_cli

        click.echo(apply_from_cli(gi, plan, context=context, only=only), err=fmt != "table")


def run_rollback(gi: GpuInsight, plan_id: str, *, context: str | None) -> None:
    from gpuinsight.actions.cli_glue import rollback_from_cli

    click.echo(rollback_from_cli(gi, plan_id, context=context))

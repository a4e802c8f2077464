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
from gpuinsight.rules.base import Plan, target_of

Contexts = str | dict[str, str] | None


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
    """The plan as a table; with several clusters each finding names its cluster and the total
    is given per cluster too."""
    if not plan.recommendations:
        return "no recommendations"
    several = len(plan.clusters) > 1
    head = ("saving/mo", "rule", *(("cluster",) if several else ()), "target", "confidence")
    rows = [(*head, "title")]
    for r in plan.recommendations:
        rows.append((f"${r.monthly_savings_usd:,.0f}", r.rule, *((r.cluster,) if several else ()), target_of(r),
                     f"{r.confidence:.2f}", r.title))
    n = len(head)
    widths = [max(len(row[i]) for row in rows) for i in range(n)]
    lines = ["  ".join(row[i].ljust(widths[i]) if i else row[i].rjust(widths[i]) for i in range(n)) + "  " + row[n]
             for row in rows]
    lines.insert(1, "-" * min(160, sum(widths) + 2 * n + 40))
    lines.append(f"total: ${plan.total_monthly_savings_usd:,.0f}/month from {len(plan.recommendations)} "
                 f"recommendation(s); prices from {plan.catalog or 'no catalog'}; plan {plan.plan_id}")
    if several:
        lines.append("per cluster: " + ", ".join(f"{c} ${v:,.0f}/month" for c, v in plan.savings_by_cluster().items()))
    return "\n".join(lines)


def plan_csv(plan: Plan) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["id", "rule", "cluster", "namespace", "workload", "node", "queue", "title", "monthly_savings_usd",
                "confidence"])
    for r in plan.recommendations:
        w.writerow([r.id, r.rule, r.cluster, r.namespace or "", r.workload or "", r.node or "", r.queue or "",
                    r.title, f"{r.monthly_savings_usd:.2f}", f"{r.confidence:.3f}"])
    return buf.getvalue()


def plan_from_cli(gi: GpuInsight, *, config_file: Path | None, sets: tuple[str, ...],
                  plan_file: Path | None) -> Plan:
    """The plan a command works on: a reviewed plan file (``--plan``), else the rules run with
    the settings of ``--config`` and ``--set`` (shared by ``recommend`` and ``report``)."""
    if plan_file is not None:
        if config_file or sets:
            raise BadInput("--plan uses a reviewed plan: --config and --set do not apply")
        from gpuinsight.actions import load_plan

        return load_plan(plan_file)  # every field checked: BadInput naming the field
    plan = gi.recommend(load_settings(config_file, sets))
    from gpuinsight.sources.gpu_nodes import unmatched_note

    summary = gi.query("fleet_summary")
    note = unmatched_note(summary.row(0, named=True)) if summary.height else None
    if note:  # node-level rules cannot see those GPUs: say so (stderr keeps json/yaml/csv clean)
        plan.notes.append(note)
        click.echo(f"note: {note}", err=True)
    return plan


def _print_plan(plan: Plan, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(plan.to_json_obj(), indent=2, default=str))
    elif fmt == "yaml":
        click.echo(yaml.safe_dump(json.loads(json.dumps(plan.to_json_obj(), default=str)), sort_keys=False))
    elif fmt == "csv":
        click.echo(plan_csv(plan), nl=False)
    else:
        click.echo(plan_table(plan))


def _check_only(plan: Plan, only: list[str] | None) -> set[str] | None:
    if not only:
        return None
    unknown = sorted(set(only) - {r.id for r in plan.recommendations})
    if unknown:
        raise BadInput(f"--only {unknown[0]}: plan {plan.plan_id} has no such recommendation")
    return set(only)


def _emit(plan: Plan, emit_dir: Path, fmt: str, only: set[str] | None, context: Contexts = None) -> None:
    from gpuinsight.actions.emit import emit

    written = emit(plan, emit_dir, only=only, contexts=context)
    click.echo(f"wrote plan {plan.plan_id} to {emit_dir} ({len(written)} files, a folder per cluster; run it with "
               f"`sh {emit_dir / 'steps.sh'}`, README.md says what each step does and the kube context each "
               f"cluster needs)", err=fmt != "table")


def _save(gi: GpuInsight, plan: Plan, save_plan: Path) -> None:
    """Write the plan file atomically and record it as the reviewed version of this plan id."""
    import os
    import tempfile

    from gpuinsight.actions.planio import plan_text, record_review

    text = plan_text(plan)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{save_plan.name[:100]}.", dir=save_plan.parent or Path("."))
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, save_plan)
    except OSError as exc:
        raise BadInput(f"{save_plan}: cannot write the plan: {exc.strerror}") from None
    from gpuinsight.rules.engine import store_plan

    with gi.wh.writing():  # the review record and the plan, in one commit
        digest = record_review(gi.wh, plan, str(save_plan))
        store_plan(gi.wh, plan)
    click.echo(f"wrote plan {plan.plan_id} to {save_plan} (sha256 {digest}); after review apply exactly it with "
               f"`gpuinsight recommend --plan {save_plan} --apply`", err=True)


def cluster_option_values(values: tuple[str, ...] | list[str] | str | None, flag: str) -> Contexts:
    """``--context``/``--from-dir``: one value (a plan of one cluster) or CLUSTER=VALUE each."""
    from gpuinsight.actions.clusters import parse_cluster_option

    return parse_cluster_option(values, flag)


def dump_dirs(values: tuple[str, ...] | list[str] | None) -> Contexts:
    """``--from-dir DIR`` or ``--from-dir CLUSTER=DIR`` (each an existing folder)."""
    parsed = cluster_option_values(values, "--from-dir")
    for folder in ([parsed] if isinstance(parsed, str) else list((parsed or {}).values())):
        if not Path(folder).is_dir():
            raise BadInput(f"--from-dir {folder}: not a directory of kubectl dumps")
    return parsed


def run_recommend(gi: GpuInsight, *, fmt: str, config_file: Path | None, sets: tuple[str, ...],
                  emit_dir: Path | None, do_apply: bool, context: Contexts, save_plan: Path | None = None,
                  plan_file: Path | None = None, only: list[str] | None = None,
                  from_dir: Contexts = None) -> None:
    """``recommend``: a fresh plan from the rules, or a reviewed plan file (``plan_file``).

    A fresh plan's actions are built from the live clusters named by ``context`` (one context
    for a plan of one cluster, else {cluster: context}), from kubectl dumps with ``from_dir``,
    else from what the warehouse recorded. A reviewed plan's actions are used as they are; with
    ``do_apply`` the file must be exactly the one recorded by ``--save-plan``.
    """
    from gpuinsight.actions import prepare_plan
    from gpuinsight.actions.cli_glue import apply_from_cli, apply_reviewed_from_cli, kubes_for, reviewed_state
    from gpuinsight.actions.diff import diff_plan
    from gpuinsight.actions.planio import check_reviewed

    if plan_file is not None and from_dir:
        raise BadInput("--plan uses a reviewed plan: --from-dir does not apply")
    plan = plan_from_cli(gi, config_file=config_file, sets=sets, plan_file=plan_file)
    if plan_file is not None and do_apply:
        check_reviewed(gi.wh, plan, str(plan_file))
    wanted = _check_only(plan, only)
    state = None
    if not do_apply and (fmt == "table" or save_plan is not None or emit_dir is not None):
        clusters = {r.cluster for r in plan.recommendations}
        kube = kubes_for(context, clusters) if context else None
        if plan_file is None:  # actions built against the best state there is
            state = prepare_plan(plan, gi.wh, kube=kube, dump_dir=from_dir)
        elif fmt == "table":
            state = reviewed_state(plan, gi.wh, kube=kube)
    if save_plan is not None:
        _save(gi, plan, save_plan)
    _print_plan(plan, fmt)
    if fmt == "table" and plan.recommendations and state is not None:
        click.echo("\n" + diff_plan(plan, state))
    if emit_dir is not None:
        _emit(plan, emit_dir, fmt, wanted, context)
    if do_apply:
        glue = apply_reviewed_from_cli if plan_file is not None else apply_from_cli
        click.echo(glue(gi, plan, context=context, only=only), err=fmt != "table")


def run_plan_offline(plan_file: Path, *, fmt: str, emit_dir: Path | None, only: list[str] | None = None) -> None:
    """``recommend --plan FILE`` without --apply, --save-plan or --context: print or emit it, no warehouse."""
    from gpuinsight.actions import load_plan

    plan = load_plan(plan_file)
    wanted = _check_only(plan, only)
    _print_plan(plan, fmt)
    if emit_dir is not None:
        _emit(plan, emit_dir, fmt, wanted)


def run_rollback(gi: GpuInsight, plan_id: str, *, context: Contexts, force: bool = False) -> None:
    from gpuinsight.actions.cli_glue import rollback_from_cli

    click.echo(rollback_from_cli(gi, plan_id, context=context, force=force))

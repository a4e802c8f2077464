"""Command line: a thin layer over :mod:`gpuinsight.api`.

Exit codes (design.md): 0 success, 1 runtime failure, 2 bad usage or bad input. Errors are
one line on stderr; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from gpuinsight.config import DEFAULT_CLUSTER, Config, PrometheusConfig
from gpuinsight.errors import BadInput, GpuInsightError, RuntimeFailure
from gpuinsight.sources.plausible import time_problem

F = TypeVar("F", bound=Callable[..., Any])


def error_outcome(exc: BaseException) -> tuple[int, str]:
    """The exit code and the one-line message the CLI gives for an exception (also what the
    fuzz tests check in-process): 2 for bad input, 1 for anything else."""
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, PermissionError)) and exc.filename is not None:
        exc = BadInput(f"{exc.filename}: {exc.strerror}")
    code = exc.exit_code if isinstance(exc, GpuInsightError) else 1
    text = " ".join(str(exc).split()) or type(exc).__name__  # one line, whatever the message held
    return code, text[:1000]


def _fail(exc: BaseException, debug: bool) -> None:
    if debug:
        import traceback

        traceback.print_exception(exc)
    code, text = error_outcome(exc)
    click.echo(f"gpuinsight: error: {text}", err=True)
    sys.exit(code)


def handle_errors(fn: F) -> F:
    """Turn exceptions into one-line messages and the design's exit codes."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        debug = bool(ctx.find_root().params.get("debug"))
        try:
            return fn(*args, **kwargs)
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except GpuInsightError as exc:
            _fail(exc, debug)
        except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            _fail(exc, debug)
        except BrokenPipeError:  # output piped into head & co.
            sys.exit(0)
        except KeyboardInterrupt:
            click.echo("gpuinsight: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:  # a bug or an unexpected failure: still one line
            _fail(exc, debug)

    return wrapper  # type: ignore[return-value]


def db_option(fn: F) -> F:
    return click.option(
        "--db",
        "db",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Warehouse file (default: $GPUINSIGHT_DB, else ./gpuinsight.duckdb).",
    )(fn)


def _cluster_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from gpuinsight.plan.schema import cluster_name

    try:
        cluster_name(value, "--cluster")
    except BadInput as exc:
        raise click.BadParameter(str(exc).removeprefix("--cluster: ")) from None
    return value


def cluster_option(fn: F) -> F:
    return click.option("--cluster", default=DEFAULT_CLUSTER, show_default=True, callback=_cluster_name,
                        help="Cluster name stored with every row loaded (the cluster its findings name).")(fn)


def make_config(db: Path | None, **changes: Any) -> Config:
    ctx = click.get_current_context()
    root = ctx.find_root().params
    return Config.from_env(db or root.get("db"), progress=sys.stderr.isatty(), debug=bool(root.get("debug")),
                           **changes)


def open_gi(db: Path | None, *, create: bool = False, need_data: bool = False, write: bool = False,
            **changes: Any):  # noqa: ANN201 - GpuInsight, imported lazily
    """The warehouse at ``db``: for reading (shared with other readers; models a newer version
    changed are rebuilt first where the file can be written), or with ``write`` for a command
    that changes it (it waits for other processes to let go of the file, and holds it). Only the
    commands that load data (demo, collect, import) pass ``create``: the others refuse a missing
    file (exit 2) instead of creating an empty one, and with ``need_data`` an existing but empty
    one too."""
    from gpuinsight.api import GpuInsight

    # the loading commands (create) rebuild stale models in their own write session, so a load
    # that fails leaves the file exactly as it was
    gi = GpuInsight(make_config(db, **changes), create=create, read_only=not write, upgrade=not write,
                    rebuild_stale=not create)
    if need_data and gi.is_empty():
        gi.close()
        raise BadInput(f"the warehouse at {gi.config.db_path} is empty: nothing collected yet "
                       f"(run gpuinsight demo or collect first)")
    return gi


def parse_time(value: str | None, *, default: datetime | None = None) -> datetime | None:
    """ISO-8601 or relative (``7d``, ``12h``) before now; returned as naive UTC."""
    if value is None:
        return default
    from gpuinsight.sql.registry import parse_duration

    try:
        return datetime.now(UTC).replace(tzinfo=None) - parse_duration(value)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise BadInput(f"time {value!r}: use ISO-8601 (2026-11-01T00:00Z) or a relative like 7d") from exc
    return dt.astimezone(UTC).replace(tzinfo=None) if dt.tzinfo else dt


def key_values(items: tuple[str, ...], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise BadInput(f"{flag} {item!r}: expected K=V")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def window_days(value: str | None) -> float | None:
    if value is None:
        return None
    from gpuinsight.sql.registry import parse_duration

    try:
        return parse_duration(value).total_seconds() / 86400
    except ValueError as exc:
        raise BadInput(f"--window {value!r}: use a duration like 7d or 36h") from exc


def _encodes(text: str) -> bool:
    """Can stdout (PYTHONIOENCODING, the locale) carry ``text``?"""
    try:
        text.encode(sys.stdout.encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def emit_frame(frame: Any, fmt: str) -> None:
    import polars as pl

    assert isinstance(frame, pl.DataFrame)
    if fmt == "csv":
        text = frame.write_csv()
    elif fmt == "json":
        text = frame.write_json() + "\n"
    else:
        # box-drawing borders where the output encoding has them, ASCII ones elsewhere (latin-1)
        borders = {} if _encodes("┌─┬┐│╞═╡") else {"tbl_formatting": "ASCII_FULL_CONDENSED"}
        with pl.Config(tbl_rows=200, tbl_cols=40, fmt_str_lengths=60, tbl_width_chars=200,
                       tbl_hide_dataframe_shape=True, **borders):  # type: ignore[arg-type]
            text = str(frame) + "\n"
    if not _encodes(text):
        bad = next(ch for ch in text if not _encodes(ch))
        raise BadInput(f"the output holds {bad!r}, which the output encoding {sys.stdout.encoding} cannot "
                       "write (set PYTHONIOENCODING=utf-8)")
    click.echo(text, nl=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Warehouse file for every sub-command (a sub-command's own --db wins).")
@click.version_option(package_name="gpuinsight")
def main(debug: bool, db: Path | None) -> None:
    """GPU cost and utilization analytics for Kubernetes.

    Collect DCGM metrics and scheduling history into DuckDB, see where GPU money goes,
    and get (and safely apply) changes that save it.
    """
    from gpuinsight.imports import without_iri_grammars

    without_iri_grammars()  # seconds of CPU for formats no schema here uses (gpuinsight/imports.py)


# -- demo --------------------------------------------------------------------------------------
@main.command()
@click.option("--db", "db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Warehouse file (default: $GPUINSIGHT_DB, else OUT/demo.duckdb).")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=Path("gpuinsight-demo"),
              show_default=True, help="Folder for report.html and recommendations.json.")
@click.option("--sample", "sample", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="A generated fleet folder (default: the embedded sample_data/).")
@click.option("--replace", is_flag=True,
              help="Replace the data of a warehouse that holds more than an earlier demo loaded (applied actions "
                   "and reviewed plans are kept).")
@handle_errors
def demo(db: Path | None, out: Path, sample: Path | None, replace: bool) -> None:
    """Build a warehouse from the embedded sample fleet, write a report and recommendations."""
    from gpuinsight.demo import run_demo

    summary = run_demo(make_config(db, default_db=out / "demo.duckdb"), out, sample, replace=replace)
    click.echo(summary)


# -- collect -----------------------------------------------------------------------------------
@main.group()
def collect() -> None:
    """Pull metrics, scheduling history and prices into the warehouse."""


@collect.command("prometheus")
@db_option
@cluster_option
@click.option("--url", required=True, help="Prometheus-compatible base URL (Prometheus, Thanos, Mimir, VictoriaMetrics).")
@click.option("--since", default=None, help="Start: ISO-8601 or relative (7d). Default: the stored cursor, else 1d.")
@click.option("--until", default=None, help="End: ISO-8601 or relative. Default: now.")
@click.option("--step", default="5m", show_default=True, help="Rollup step; PromQL reduces samples to it on the server.")
@click.option("--raw", is_flag=True, help="Pull raw samples instead of server-side rollups.")
@click.option("--bearer-token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="File holding a bearer token (never logged or stored).")
@click.option("--basic-auth-user", default=None, help="Basic auth user; password from $GPUINSIGHT_PROM_PASSWORD.")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), default=None, help="CA bundle for TLS.")
@click.option("--insecure", is_flag=True, help="Skip TLS verification.")
@click.option("--header", "headers", multiple=True, help="Extra header K=V (e.g. X-Scope-OrgID=team for Mimir).")
@click.option("--concurrency", default=4, show_default=True, help="Concurrent range queries.")
@click.option("--match", "matches", multiple=True,
              help="Label matcher K=V added to every query (e.g. cluster=prod-a on a multi-cluster Thanos).")
@click.option("--allow-partial", is_flag=True,
              help="Load chunks the server answered only partially (Thanos/Mimir warnings) instead of leaving "
                   "them for a later run (exit 1).")
@handle_errors
def collect_prometheus(db: Path | None, cluster: str, url: str, since: str | None, until: str | None, step: str,
                       raw: bool, bearer_token_file: Path | None, basic_auth_user: str | None,
                       ca_file: str | None, insecure: bool, headers: tuple[str, ...], concurrency: int,
                       matches: tuple[str, ...], allow_partial: bool) -> None:
    """Pull dcgm-exporter and kube-state-metrics history (idempotent, incremental)."""
    import os

    from gpuinsight.sql.registry import parse_duration

    hdrs = key_values(headers, "--header")
    matchers = key_values(matches, "--match")
    token = bearer_token_file.read_text().strip() if bearer_token_file else None
    basic = (basic_auth_user, os.environ.get("GPUINSIGHT_PROM_PASSWORD", "")) if basic_auth_user else None
    try:
        step_s = int(parse_duration(step).total_seconds())
    except ValueError as exc:
        raise BadInput(f"--step {step!r}: use a duration like 60s, 5m, 1h") from exc
    prom = PrometheusConfig(url=url, bearer_token=token, basic_auth=basic, ca_file=ca_file,
                            insecure_skip_verify=insecure, headers=hdrs, concurrency=concurrency, matchers=matchers,
                            allow_partial=allow_partial)
    with open_gi(db, create=True, write=True, cluster=cluster, prometheus=prom) as gi:
        start = parse_time(since)
        end = parse_time(until, default=datetime.now(UTC).replace(tzinfo=None))
        report = gi.collect_prometheus(start, end, step_s, raw=raw)  # type: ignore[arg-type]
        click.echo(report.summary())
        for note in report.notes:
            click.echo(f"note: {note}")
        if report.incomplete:
            raise RuntimeFailure(report.incomplete)


@collect.command("kubernetes")
@db_option
@cluster_option
@click.option("--context", default=None, help="kubeconfig context (default: current, or in-cluster).")
@click.option("--from-dir", "from_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Folder of kubectl JSON/YAML dumps instead of a live cluster.")
@click.option("--as-of", "as_of", default=None,
              help="When the dumps were taken (ISO-8601 or relative like 2h; default: their files' time).")
@handle_errors
def collect_kubernetes(db: Path | None, cluster: str, context: str | None, from_dir: Path | None,
                       as_of: str | None) -> None:
    """Scheduling state from a live cluster (read-only) or from kubectl dumps."""
    if context and from_dir:
        raise BadInput("--context and --from-dir are exclusive")
    if as_of and not from_dir:
        raise BadInput("--as-of dates kubectl dumps: give it with --from-dir (a live read is dated now)")
    taken = parse_time(as_of)
    if taken is not None and (problem := time_problem(taken)):
        raise BadInput(f"--as-of {as_of!r}: {problem}")
    with open_gi(db, create=True, write=True, cluster=cluster) as gi:
        report = gi.collect_kubernetes(context=context, from_dir=from_dir, as_of=taken)
        click.echo(report.summary())
        for note in report.notes:
            click.echo(f"note: {note}")


@collect.command("prices")
@db_option
@click.option("--catalog", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Price catalog CSV (default: the shipped AWS us-east-1 catalog).")
@click.option("--aws", "aws_region", default=None, help="Pull on-demand and spot prices from AWS for REGION.")
@handle_errors
def collect_prices(db: Path | None, catalog: Path | None, aws_region: str | None) -> None:
    """Load a price catalog (on-demand and spot, per instance type or GPU model)."""
    if catalog and aws_region:
        raise BadInput("--catalog and --aws are exclusive")
    with open_gi(db, create=True, write=True) as gi:
        click.echo(gi.collect_prices(catalog=catalog, aws_region=aws_region).summary())


@collect.command("energy-rates")
@db_option
@click.option("--csv", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="CSV with region,usd_per_kwh,kg_co2e_per_kwh[,source] (region * = any region not listed).")
@handle_errors
def collect_energy_rates(db: Path | None, path: Path) -> None:
    """Set what a kWh costs and emits per region (the rates GPU energy is valued at)."""
    with open_gi(db, create=True, write=True) as gi:
        click.echo(gi.collect_energy_rates(path).summary())


# -- import ------------------------------------------------------------------------------------
@main.group("import")
def import_() -> None:
    """Load public GPU cluster traces."""


@import_.command("alibaba-openb")
@db_option
@click.option("--pods", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="openb_pod_list_*.csv")
@click.option("--nodes", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="openb_node_list_*.csv")
@handle_errors
def import_openb(db: Path | None, pods: Path, nodes: Path) -> None:
    """Load the Alibaba GPU trace (openb, ATC'23) scheduling history."""
    with open_gi(db, create=True, write=True) as gi:
        click.echo(gi.import_alibaba_openb(pods, nodes).summary())


# -- simulate ----------------------------------------------------------------------------------
@main.command()
@click.option("--pods", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="Pod list CSV (openb format).")
@click.option("--nodes", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="Node list CSV (openb format).")
@click.option("--policy", default="gpuinsight", show_default=True,
              help="first-fit, best-fit, gpu-packing, gpu-clustering, dot-product, random, fgd, gpuinsight.")
@click.option("--seed", default=42, show_default=True, help="Seed of the pod sampling (as the paper: 42..51).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format.")
@handle_errors
def simulate(pods: Path, nodes: Path, policy: str, seed: int, fmt: str) -> None:
    """What-if replay of a scheduling trace under a placement policy (FGD paper metrics)."""
    from gpuinsight.api import GpuInsight

    result = GpuInsight.simulate(pods, nodes, policy, seed=seed)
    click.echo(json.dumps(result.to_dict(), indent=2, default=str) if fmt == "json" else result.format_table())


# -- query -------------------------------------------------------------------------------------
@main.command()
@db_option
@click.argument("name", required=False)
@click.option("--param", "params", multiple=True, help="k=v, repeatable (see `gpuinsight query` for each model's).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="Output format.")
@handle_errors
def query(db: Path | None, name: str | None, params: tuple[str, ...], fmt: str) -> None:
    """Run one named SQL model; with no NAME, list the models."""
    if not name:  # the catalog comes from queries/, no warehouse needed
        from gpuinsight.api import model_catalog

        emit_frame(model_catalog(), fmt)
        return
    with open_gi(db) as gi:
        if gi.is_empty():
            click.echo(f"note: the warehouse at {gi.config.db_path} is empty: nothing collected yet", err=True)
        kv: dict[str, str] = {}
        for p in params:
            if "=" not in p:
                raise BadInput(f"--param {p!r}: expected k=v")
            k, v = p.split("=", 1)
            kv[k.strip()] = v
        frame = gi.query(name, **kv)
    emit_frame(frame, fmt)  # after letting go of the file: a reader of a slow pipe holds up no writer


# -- recommend / rollback ----------------------------------------------------------------------
def rule_settings_options(fn: F) -> F:
    """--config FILE and --set rule.setting=value (recommend and report take the same)."""
    fn = click.option("--set", "sets", multiple=True,
                      help="rule.setting=value, repeatable (see `gpuinsight rules`).")(fn)
    return click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                        default=None, help="YAML/JSON file of rule settings: {rule: {setting: value}}.")(fn)


@main.command()
@db_option
@click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml", "csv"]), default="table", show_default=True,
              help="Output format (json is the fixed recommendation interface).")
@rule_settings_options
@click.option("--emit", "emit_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write the changes as YAML (one file per object + kustomization.yaml).")
@click.option("--apply", "do_apply", is_flag=True, help="Change the cluster (server-side dry run first).")
@click.option("--context", "context", multiple=True,
              help="kubeconfig context for --apply, the live diff and --emit: CONTEXT for a plan of one cluster, "
                   "or CLUSTER=CONTEXT for each cluster (repeatable). A cluster with changes and no context is "
                   "refused.")
@click.option("--window", default=None, help="Judge only the last N of data, e.g. 7d (default: everything loaded).")
@click.option("--save-plan", "save_plan", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the plan (id, time, recommendations with their actions) to a file for review.")
@click.option("--plan", "plan_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Use a reviewed plan file instead of running the rules (with --apply: apply exactly it).")
@click.option("--only", "only", multiple=True,
              help="With --apply or --emit: only these recommendation ids (repeatable).")
@click.option("--from-dir", "from_dir", multiple=True,
              help="kubectl dumps to build the actions from (workload specs the warehouse does not keep): DIR for "
                   "a plan of one cluster, or CLUSTER=DIR for each cluster (repeatable).")
@handle_errors
def recommend(db: Path | None, fmt: str, config_file: Path | None, sets: tuple[str, ...], emit_dir: Path | None,
              do_apply: bool, context: tuple[str, ...], window: str | None, save_plan: Path | None,
              plan_file: Path | None, only: tuple[str, ...], from_dir: tuple[str, ...]) -> None:
    """Run the rules: findings with evidence and monthly savings; optionally emit or apply."""
    import contextlib
    import io

    from gpuinsight.api import finding_ids
    from gpuinsight.plan.render import render

    contexts = parse_cluster_option(context, "--context")
    dumps = dump_dirs(from_dir)
    if only and not (do_apply or emit_dir):
        raise BadInput("--only goes with --apply or --emit")
    if plan_file is not None and (config_file or sets):
        raise BadInput("--plan uses a reviewed plan: --config and --set do not apply")
    if plan_file is not None and from_dir:
        raise BadInput("--plan uses a reviewed plan: --from-dir does not apply")
    settings = None if plan_file is not None else rule_settings(config_file, sets)  # bad usage, whatever the db holds
    if plan_file is not None and not do_apply and save_plan is None and not contexts:
        # print or emit a plan file: no warehouse needed
        from gpuinsight.plan.io import load_plan

        plan = load_plan(plan_file)
        finding_ids(plan, only)
        click.echo(render(plan, fmt), nl=fmt != "csv")
        if emit_dir is not None:
            _emitted(plan, emit_dir, fmt, only, None)
        return
    writes = do_apply or save_plan is not None  # the plan store and the audit trail
    # a reader prints once it has let go of the file (a reader stuck on a full pipe would hold up
    # writers); a writer's output goes out as it happens
    output = io.StringIO()
    with open_gi(db, need_data=plan_file is None, write=writes, window_days=window_days(window)) as gi, \
            contextlib.redirect_stdout(output) if not writes else contextlib.nullcontext():
        if plan_file is not None:
            plan = gi.load_plan(plan_file, check_review=do_apply)
        else:
            with gi.reusing_answers():  # the plan's coverage note read fleet_summary already
                plan = gi.recommend(settings)
                note = gi.coverage_note()
            if note:  # stderr keeps json/yaml/csv clean
                click.echo(f"note: {note}", err=True)
        finding_ids(plan, only)
        state = None
        if not do_apply and (fmt == "table" or save_plan is not None or emit_dir is not None):
            if plan_file is None:  # actions built against the best state there is
                state = gi.prepare(plan, contexts=contexts, dumps=dumps)
            elif fmt == "table":
                state = gi.reviewed_state(plan, contexts=contexts)
        if save_plan is not None:
            digest = gi.save_plan(plan, save_plan)
            click.echo(f"wrote plan {plan.plan_id} to {save_plan} (sha256 {digest}); after review apply exactly it "
                       f"with `gpuinsight recommend --plan {save_plan} --apply`", err=True)
        click.echo(render(plan, fmt), nl=fmt != "csv")
        if fmt == "table" and plan.recommendations and state is not None:
            click.echo("\n" + gi.diff(plan, state))
        if emit_dir is not None:
            _emitted(plan, emit_dir, fmt, only, contexts)
        if do_apply:
            applied = gi.apply(plan, contexts=contexts, only=list(only) or None, reviewed=plan_file is not None)
            click.echo(applied.text(), err=fmt != "table")
    click.echo(output.getvalue(), nl=False)


def _emitted(plan: Any, emit_dir: Path, fmt: str, only: tuple[str, ...], contexts: Any) -> None:
    from gpuinsight.api import GpuInsight

    written = GpuInsight.emit(plan, emit_dir, only=only or None, contexts=contexts)
    click.echo(f"wrote plan {plan.plan_id} to {emit_dir} ({len(written)} files, a folder per cluster; run it with "
               f"`sh {emit_dir / 'steps.sh'}`, README.md says what each step does and the kube context each "
               f"cluster needs)", err=fmt != "table")


def rule_settings(config_file: Path | None, sets: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``--config FILE`` and ``--set rule.setting=value``, checked against the rules (bad usage)."""
    from gpuinsight.rules.engine import resolve_all
    from gpuinsight.rules.settings import read_settings

    settings = read_settings(config_file, sets)
    resolve_all(settings)
    return settings


def dump_dirs(values: tuple[str, ...]) -> str | dict[str, str] | None:
    """``--from-dir DIR`` or ``--from-dir CLUSTER=DIR`` (each an existing folder)."""
    parsed = parse_cluster_option(values, "--from-dir")
    for folder in ([parsed] if isinstance(parsed, str) else list((parsed or {}).values())):
        if not Path(folder).is_dir():
            raise BadInput(f"--from-dir {folder}: not a directory of kubectl dumps")
    return parsed


def parse_cluster_option(values: tuple[str, ...] | str | None, flag: str) -> str | dict[str, str] | None:
    from gpuinsight.actions.clusters import parse_cluster_option as parse

    return parse(values, flag)


@main.command()
@db_option
@click.argument("plan_id")
@click.option("--context", "context", multiple=True,
              help="kubeconfig context: CONTEXT when the apply changed one cluster, or CLUSTER=CONTEXT for each "
                   "cluster it changed (repeatable).")
@click.option("--force", is_flag=True,
              help="Restore a field even where it changed again after the apply (overwrites that later change).")
@handle_errors
def rollback(db: Path | None, plan_id: str, context: tuple[str, ...], force: bool) -> None:
    """Revert what an apply changed, newest change first, each change in its own cluster."""
    from gpuinsight.api import rollback_text

    contexts = parse_cluster_option(context, "--context")
    with open_gi(db, write=True) as gi:
        result = gi.rollback(plan_id, contexts=contexts, force=force)
    click.echo(rollback_text(result))


@main.command()
@handle_errors
def rules() -> None:
    """List the rules and their settings (defaults and help)."""
    from gpuinsight.rules.registry import SETTING_GROUPS

    for rule in SETTING_GROUPS:
        click.echo(f"{rule.name}: {rule.summary}")
        for s in rule.settings:
            click.echo(f"  {rule.name}.{s.name} = {s.default!r} {s.describe()}  {s.help}")


# -- report / export ---------------------------------------------------------------------------
@main.command()
@db_option
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="HTML file to write.")
@click.option("--png", "png_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write each chart as PNG and SVG here.")
@click.option("--upload", default=None, help="s3://bucket/prefix to upload the report to.")
@click.option("--s3-endpoint-url", default=None, help="S3-compatible endpoint for --upload (MinIO and the like).")
@click.option("--window", default=None, help="Only the last N of data, e.g. 7d (default: everything loaded).")
@click.option("--cluster", default=None,
              help="The report of this cluster alone (default: the whole fleet, its tables grouped by cluster).")
@rule_settings_options
@click.option("--plan", "plan_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Render this plan (from `recommend --save-plan`) instead of running the rules.")
@handle_errors
def report(db: Path | None, out: Path, png_dir: Path | None, upload: str | None, s3_endpoint_url: str | None,
           window: str | None, cluster: str | None, config_file: Path | None, sets: tuple[str, ...],
           plan_file: Path | None) -> None:
    """The waste & savings report: one self-contained HTML file. Its findings are the plan given
    (--plan), the rules run with the settings given (--config/--set), else the newest stored plan
    when it judged the window shown (else the rules run now): the report's notes say which."""
    settings = rule_settings(config_file, sets) if config_file or sets else None
    if plan_file is not None and settings is not None:
        raise BadInput("--plan uses a reviewed plan: --config and --set do not apply")
    with open_gi(db, need_data=True, s3_endpoint_url=s3_endpoint_url, window_days=window_days(window)) as gi, \
            gi.reusing_answers():  # the rules' models feed the charts too
        if plan_file is not None:
            plan, warning = gi.plan_file_to_render(plan_file)
            if warning:
                click.echo(f"gpuinsight: warning: {warning}", err=True)
        else:
            plan = gi.plan_to_render(settings)
            click.echo(f"note: {plan.notes[0]}", err=True)
        path = gi.report(out, plan=plan, png_dir=png_dir, upload=upload, cluster=cluster)
        click.echo(f"wrote {path}")


@main.command()
@db_option
@click.option("--to", "dest", required=True, help="Folder or s3://bucket/prefix.")
@click.option("--full", is_flag=True, help="Write every day partition, not only those whose rows changed.")
@handle_errors
def export(db: Path | None, dest: str, full: bool) -> None:
    """Write warehouse tables as hive-partitioned Parquet (by cluster and day); a day partition
    already there with the same rows is left as it is."""
    with open_gi(db, need_data=True) as gi:
        for line in gi.export(dest, full=full):
            click.echo(line)


if __name__ == "__main__":  # pragma: no cover
    main()

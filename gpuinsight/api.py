"""The facade: one object that owns the pipeline, over one warehouse.

    import gpuinsight as gi
    g = gi.open("fleet.duckdb")
    g.load(KubernetesDumps(Path("dumps/")))          # or collect_prometheus(...), load_sample()
    g.query("waste_breakdown", by="namespace")
    plan = g.recommend()                              # the rules (pure) over the models
    print(g.diff(plan, g.prepare(plan)))              # actions against what the warehouse knows
    g.report(Path("report.html"), plan=plan)

It loads (every :class:`~gpuinsight.sources.base.Source` through the one write path, each write
checked against the source's loading contracts), plans (:mod:`gpuinsight.rules.engine` evaluates;
this object fetches the frames, attaches the actions and stores), emits, applies, diffs, rolls
back, reports, exports and simulates. The CLI (:mod:`gpuinsight.cli`) is a thin layer over the
same methods: it parses options and prints what they return.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.plan import Plan
from gpuinsight.sources.base import ContractGuard, LoadReport, Source
from gpuinsight.sql import QueryRegistry, load_registry
from gpuinsight.sql.incremental import IncrementalModels
from gpuinsight.warehouse import Warehouse

if TYPE_CHECKING:
    from gpuinsight.actions.audit import ApplyResult
    from gpuinsight.actions.state import ClusterState
    from gpuinsight.simulate import SimulationResult
    from gpuinsight.warehouse.writes import WriteSession

# what --context / --from-dir give: one value for a plan of one cluster, or {cluster: value}
Contexts = str | Mapping[str, str] | None


@dataclass
class Applied:
    """What an apply did: the diff it was checked against, and each step's outcome."""

    diff: str
    result: ApplyResult

    def text(self) -> str:
        """As ``recommend --apply`` prints it: the diff, a line per step, the outcome and how to undo it."""
        lines = [self.diff, ""] + [f"{s.seq:>3} {s.status:<12} {s.operation:<10} {s.target}" for s in self.result.steps]
        undo = f"; undo with: gpuinsight rollback {self.result.plan_id}" if self.result.steps else ""
        return "\n".join([*lines, self.result.summary() + undo])


def rollback_text(result: ApplyResult) -> str:
    """What a rollback did, as ``gpuinsight rollback`` prints it: a line per step, then the outcome."""
    lines = [f"{s.seq:>3} {s.status:<12} {s.operation:<10} {s.target}: {s.message}" for s in result.steps]
    return "\n".join([*lines, result.summary()])


def _tell(message: str) -> None:
    """Why a command waits (another process holds the warehouse): on stderr, whatever the output."""
    print(f"gpuinsight: {message}", file=sys.stderr, flush=True)


class GpuInsight:
    """The warehouse with its models. ``read_only`` opens it for reading (other readers go on
    alongside; a writer waits until it is closed); otherwise it holds the file until closed, and
    every load goes through the one write path (:meth:`writing`). ``upgrade`` (the CLI's readers)
    lets a read-only open migrate the schema and rebuild stale models first, briefly as a writer,
    when the file can be written; ``rebuild_stale=False`` leaves that to a writer about to load
    (its session rebuilds them anyway)."""

    def __init__(self, config: Config, *, read_only: bool = False, create: bool = True,
                 upgrade: bool = False, rebuild_stale: bool = True) -> None:
        self.config = config
        if not create and not Path(config.db_path).exists():
            raise BadInput(f"no warehouse at {config.db_path} (run gpuinsight demo or collect first)")
        self.registry: QueryRegistry = load_registry()
        self.models = IncrementalModels(self.registry)  # the last write session's model rebuild
        self._answers: dict[str, pl.DataFrame] | None = None  # see reusing_answers()
        self.wh = self._open(read_only)
        status = self._status()
        if status != "current" and not read_only and rebuild_stale:
            # built by another version of the models (or never), or left stale by an interrupted
            # load: rebuild before answering
            self.refresh()
            status = "current"
        elif status != "current" and upgrade:
            status = self._upgrade()
        self._stale: str | None = None if status == "current" else status

    def _open(self, read_only: bool) -> Warehouse:
        return Warehouse(self.config.db_path, read_only=read_only, memory_limit=self.config.memory_limit,
                         lock_timeout_s=self.config.lock_timeout_s, on_wait=_tell)

    def _status(self) -> str:
        """The models' status (:meth:`QueryRegistry.status`), ``outdated`` too when the file's
        schema is older than this version's (a read-only open does not migrate)."""
        from gpuinsight.warehouse.migrations import migration_files, schema_version

        if self.wh.read_only and schema_version(self.wh.con) < max(v for v, _, _ in migration_files()):
            return "outdated"
        return self.registry.status(self.wh.con)

    def _upgrade(self) -> str:
        """Migrate and rebuild as a writer, then reopen for reading; on a file that cannot be
        written, stay as it is (queries then say why they cannot answer)."""
        from gpuinsight.warehouse.db import NotWritable

        self.wh.close()
        try:
            writer = self._open(read_only=False)
        except NotWritable:
            self.wh = self._open(read_only=True)
            return self._status()
        try:
            if self.registry.status(writer.con) != "current":  # another process may have done it
                with writer.writing(IncrementalModels(self.registry)):
                    pass
        finally:
            writer.close()
        self.wh = self._open(read_only=True)
        return self._status()

    # -- reading ---------------------------------------------------------------------------
    def query(self, name: str, **params: Any) -> pl.DataFrame:
        """Run one named SQL model from ``queries/`` with bound parameters.

        With ``config.window_days`` set, models that take ``since`` get the start of the last
        N days of data unless the caller passes ``since`` itself: reports and rules then look
        at the same window.
        """
        q = self.registry.get(name)
        if self._stale and self.wh.count("nodes"):
            why = ("its models predate data an interrupted load committed" if self._stale == "stale"
                   else "its models were built by another gpuinsight version (or never)")
            raise BadInput(f"{self.config.db_path}: {why}; open it where it can be written once "
                           "(e.g. `gpuinsight query fleet_summary`) to rebuild them")
        if self.config.window_days and "since" not in params and any(p.name == "since" for p in q.params):
            params["since"] = self._window_start()
        key = repr((name, sorted(params.items())))
        if self._answers is not None and key in self._answers:
            return self._answers[key]
        with self.wh._lock:
            answer = self.registry.run(self.wh.con, name, **params)
        if self._answers is not None:
            self._answers[key] = answer
        return answer

    @contextlib.contextmanager
    def reusing_answers(self) -> Iterator[None]:
        """Within this block a model asked again with the same parameters gets the first answer
        instead of running again: for one reading of the data that asks for the same model twice
        (a report runs the rules, then draws the charts from the same per-workload profile, the
        costliest model). Loading or ``refresh`` inside the block forgets the answers."""
        if self._answers is not None:  # nested: the outer block owns the answers
            yield
            return
        self._answers = {}
        try:
            yield
        finally:
            self._answers = None

    def _window_start(self) -> datetime | None:
        from datetime import timedelta

        w = self.registry.run(self.wh.con, "analysis_window")
        end = w["window_end"].max() if w.height else None
        if end is None or not self.config.window_days:
            return None
        return end - timedelta(days=self.config.window_days)

    def sql(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> pl.DataFrame:
        """Ad-hoc SQL against the warehouse (bind values with ``?`` or ``$name``)."""
        return self.wh.sql(sql, params)

    def queries(self) -> pl.DataFrame:
        """The catalog of SQL models: name, grain, parameters, description."""
        return model_catalog(self.registry)

    def is_empty(self) -> bool:
        """Nothing collected yet: no node of any cluster (every fleet source loads nodes)."""
        return self.wh.count("nodes") == 0

    def refresh(self, *, full: bool = False) -> list[str]:
        """Bring the materialized models up to date with the loaded data, atomically (a write
        session that loads nothing): only what loads changed since the last refresh
        (:mod:`gpuinsight.sql.incremental`), or everything from scratch with ``full``."""
        with self.writing(full=full) as session:
            pass
        return session.rebuilt

    @contextlib.contextmanager
    def writing(self, *, full: bool = False) -> Iterator[WriteSession]:
        """The one write path: what the block loads, the model rebuild (of what the block changed;
        everything with ``full``), one commit, a checkpoint (:mod:`gpuinsight.warehouse.writes`).
        Answers kept by :meth:`reusing_answers` are forgotten."""
        if self._answers is not None:
            self._answers.clear()
        if self.wh.session is None:  # a session opened inside another joins it: the outer one rebuilds
            self.models = IncrementalModels(self.registry, full=full)
        with self.wh.writing(self.models) as session:
            yield session
        if session.rebuilt:  # this (outermost) session rebuilt them
            self._stale = None

    # -- loading ---------------------------------------------------------------------------
    def load(self, source: Source) -> Any:
        """Load ``source`` in one write session (joining one under way): every write it makes is
        checked against its loading contracts (table, key, write disposition), the models are
        rebuilt, and the warehouse is committed and checkpointed before this returns. Returns the
        source's load report(s)."""
        guard = ContractGuard(source.name, source.contracts)
        with self.writing() as session:
            outer, session.guard = session.guard, guard
            try:
                return source.load(self.wh, self.config)
            finally:
                session.guard = outer

    def load_sample(self, folder: Path | None = None) -> list[LoadReport]:
        """Load a generated fleet (``sample_data/`` by default): metrics, dumps, prices."""
        from gpuinsight.sources.loaders import SampleFleet

        return self.load(SampleFleet(folder))  # type: ignore[no-any-return]

    def collect_prometheus(
        self, since: datetime | None, until: datetime | None, step_s: int = 300, *, raw: bool = False
    ) -> LoadReport:
        from gpuinsight.progress import Progress
        from gpuinsight.sources.loaders import PrometheusHistory

        progress = Progress(self.config.progress).window(since, until)
        try:
            return self.load(PrometheusHistory(since, until, step_s, raw, on_commit=progress.on_commit))  # type: ignore[no-any-return]
        finally:
            progress.close()

    def collect_kubernetes(self, *, context: str | None = None, from_dir: Path | None = None,
                           as_of: datetime | None = None) -> LoadReport:
        """A live read (``context``) or kubectl dumps (``from_dir``, taken at ``as_of``: default
        their files' modification time)."""
        from gpuinsight.sources.loaders import KubernetesDumps, KubernetesLive

        if from_dir is not None:
            return self.load(KubernetesDumps(Path(from_dir), as_of))  # type: ignore[no-any-return]
        return self.load(KubernetesLive(context))  # type: ignore[no-any-return]

    def collect_prices(self, *, catalog: Path | None = None, aws_region: str | None = None) -> LoadReport:
        from gpuinsight.sources.loaders import AwsPrices, PriceCatalog

        if aws_region:
            return self.load(AwsPrices(aws_region))  # type: ignore[no-any-return]
        return self.load(PriceCatalog(catalog))  # type: ignore[no-any-return]

    def set_energy_rate(self, region: str, usd_per_kwh: float, kg_co2e_per_kwh: float, *,
                        source: str | None = None) -> None:
        """What a kWh costs and emits in ``region`` (the node's zone without its letter, e.g.
        ``us-east-1``; ``*`` for every region not listed): ``energy_by`` prices energy with it."""
        from gpuinsight.sources.energy_rates import set_energy_rate

        with self._rates_session():
            set_energy_rate(self.wh, region, usd_per_kwh, kg_co2e_per_kwh, source)

    def collect_energy_rates(self, path: Path) -> LoadReport:
        """Set the rates of the regions a CSV lists (``region,usd_per_kwh,kg_co2e_per_kwh[,source]``)."""
        from gpuinsight.sources.energy_rates import load_energy_rates

        with self._rates_session():
            return load_energy_rates(self.wh, Path(path))

    @contextlib.contextmanager
    def _rates_session(self) -> Iterator[None]:
        """A write session for the energy rates: no materialized model reads them (``energy_by``
        prices at query time), so the models are rebuilt only if they were stale anyway."""
        if self._stale:
            with self.writing():
                yield
            return
        if self._answers is not None:
            self._answers.clear()
        with self.wh.writing():
            yield

    def import_alibaba_openb(self, pods: Path, nodes: Path) -> LoadReport:
        from gpuinsight.sources.loaders import AlibabaOpenb

        return self.load(AlibabaOpenb(Path(pods), Path(nodes)))  # type: ignore[no-any-return]

    # -- deciding --------------------------------------------------------------------------
    def rule_frames(self, names: Iterable[str] | None = None) -> dict[str, pl.DataFrame]:
        """The models the rules read (every one a plan needs, by default), as this warehouse
        answers them over the configured window."""
        from gpuinsight.rules.engine import needed_frames

        return {name: self.query(name) for name in sorted(needed_frames() if names is None else names)}

    def recommend(self, settings: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
        """Run the rules (``settings``: {rule: {setting: value}}, else the configured ones): a
        plan whose findings carry their actions as built from what the warehouse recorded (no
        cluster is contacted), with a note when GPUs measured are on no known node. Not stored
        (:meth:`store_plan`)."""
        from gpuinsight.actions.prepare import actions_from_warehouse
        from gpuinsight.rules.engine import make_plan, resolve_all

        settings = settings or self.config.rule_settings
        resolve_all(settings)  # bad settings fail before any query runs
        plan = make_plan(self.rule_frames(), settings)
        actions_from_warehouse(self.wh, plan)
        note = self.coverage_note()
        if note:  # node-level rules cannot see those GPUs
            plan.notes.append(note)
        return plan

    def coverage_note(self) -> str | None:
        """GPUs DCGM measured that are on no node of the inventory (None when there are none)."""
        from gpuinsight.sources.gpu_nodes import unmatched_note

        summary = self.query("fleet_summary")
        return unmatched_note(summary.row(0, named=True)) if summary.height else None

    def store_plan(self, plan: Plan) -> None:
        """Keep the plan in the warehouse (``plans`` and its ``recommendations``): a write."""
        from gpuinsight.plan.store import store_plan

        with self.wh.writing():
            store_plan(self.wh, plan)

    def stored_plan(self, plan_id: str | None = None) -> Plan | None:
        """The plan stored under ``plan_id`` (default: the newest), or None."""
        from gpuinsight.plan.store import stored_plan

        return stored_plan(self.wh, plan_id)

    def save_plan(self, plan: Plan, path: Path) -> str:
        """Write the plan file for review (atomically) and record it, with the plan, as the
        reviewed version of its id, in one write; returns its SHA-256 (``recommend --save-plan``)."""
        import os
        import tempfile

        from gpuinsight.plan.io import plan_text
        from gpuinsight.plan.store import record_review, store_plan

        text = plan_text(plan)
        path = Path(path)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:100]}.", dir=path.parent or Path("."))
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except OSError as exc:
            raise BadInput(f"{path}: cannot write the plan: {exc.strerror}") from None
        with self.wh.writing():  # the review record and the plan, in one commit
            digest = record_review(self.wh, plan, str(path))
            store_plan(self.wh, plan)
        return digest

    def load_plan(self, path: Path, *, check_review: bool = False) -> Plan:
        """A plan file, every field checked (BadInput naming the field); with ``check_review``,
        refused unless it is exactly the plan saved for review under its id here."""
        from gpuinsight.plan.io import load_plan
        from gpuinsight.plan.store import check_reviewed

        plan = load_plan(path)
        if check_review:
            check_reviewed(self.wh, plan, str(path))
        return plan

    def plan_file_to_render(self, path: Path) -> tuple[Plan, str | None]:
        """A plan file to render as a report, and a warning: refused when it is not the plan saved
        for review under its id (an edited saving would be shown as the tool's figure; ``--apply``
        refuses it too); one never saved here is rendered with a warning (also in its notes)."""
        from gpuinsight.plan.store import check_reviewed, was_reviewed

        plan = self.load_plan(path)
        if was_reviewed(self.wh, plan):
            check_reviewed(self.wh, plan, str(path))
            return plan, None
        note = (f"plan {plan.plan_id} ({Path(path).name}) was never saved for review in this warehouse: its figures "
                "are the file's own, not checked against a reviewed plan")
        plan.notes.append(note)
        return plan, note

    def plan_to_render(self, settings: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
        """The plan a report renders when given none: the newest stored plan when it judged the
        window the report shows (same start and end; a stored plan of another window, or of
        other data, would not match the charts), else the rules run now with ``settings`` (the
        configured ones by default), not stored; the report's notes say which and why. Given
        ``settings``, the rules always run."""
        stored = None if settings else self.stored_plan()
        window = self.query("analysis_window")
        now = (window["window_start"].min(), window["window_end"].max()) if window.height else (None, None)
        if stored is not None and tuple(_naive(t) for t in stored.window) == tuple(_naive(t) for t in now):
            stored.notes.insert(0, f"findings of plan {stored.plan_id}, stored {_when(stored.created_at)} "
                                   "(the rules did not run for this report)")
            return stored
        plan = self.recommend(settings)
        if settings:
            why = "the rules ran for this report with the settings given"
        elif stored is None:
            why = ("no plan is stored in this warehouse (`recommend --save-plan`, `--apply` and `demo` store one): "
                   "the rules ran for this report with the configured settings")
        else:
            why = (f"the newest stored plan, {stored.plan_id}, judged {_when(stored.window[0])} to "
                   f"{_when(stored.window[1])}, not this report's window: the rules ran for this report")
        plan.notes.insert(0, why + f"; its plan {plan.plan_id} is not stored")
        return plan

    # -- acting ----------------------------------------------------------------------------
    def prepare(self, plan: Plan, *, contexts: Contexts = None, dumps: Contexts = None) -> dict[str, ClusterState]:
        """Rebuild every finding's actions against the best state of its cluster there is: live
        objects (``contexts``: its kube context), kubectl dumps (``dumps``: a folder), else what
        the warehouse recorded; returns the state of each cluster to diff against."""
        from gpuinsight.actions.clients import kubes_for
        from gpuinsight.actions.prepare import prepare_plan

        clusters = {r.cluster for r in plan.recommendations}
        kube = kubes_for(contexts, clusters) if contexts else None
        return prepare_plan(plan, self.wh, kube=kube, dump_dir=dumps)

    def reviewed_state(self, plan: Plan, *, contexts: Contexts = None) -> dict[str, ClusterState]:
        """The state a reviewed plan's actions are shown against (its actions are not rebuilt):
        live where a context is given, else as the warehouse recorded it."""
        from gpuinsight.actions.clients import kubes_for
        from gpuinsight.actions.prepare import reviewed_state

        kube = kubes_for(contexts, {r.cluster for r in plan.recommendations}) if contexts else None
        return reviewed_state(plan, self.wh, kube=kube)

    @staticmethod
    def diff(plan: Plan, states: Mapping[str, ClusterState]) -> str:
        """Every finding with its actions, each as a diff against its cluster's state."""
        from gpuinsight.actions.diff import diff_plan

        return diff_plan(plan, states)

    @staticmethod
    def emit(plan: Plan, folder: Path, *, only: Iterable[str] | None = None,
             contexts: Contexts = None) -> list[Path]:
        """Write the plan's changes (or those of the findings in ``only``) as files under
        ``folder``, a folder per cluster, with ``steps.sh`` naming each cluster's kube context."""
        from gpuinsight.actions.emit import emit

        return emit(plan, folder, only=finding_ids(plan, only),
                    contexts=dict(contexts) if isinstance(contexts, Mapping) else contexts)

    def apply(self, plan: Plan, *, contexts: Contexts = None, only: Iterable[str] | None = None,
              reviewed: bool = False, max_age: timedelta = timedelta(hours=24)) -> Applied:
        """Change the clusters: a fresh plan's actions are rebuilt from the live objects first, a
        reviewed plan's (``reviewed``: loaded with :meth:`load_plan` ``check_review``) applied
        exactly as they are; server-side dry run of everything, then each change, recorded for
        :meth:`rollback`. Each cluster the chosen findings change needs its context."""
        from gpuinsight.actions import audit
        from gpuinsight.actions.apply import apply_plan
        from gpuinsight.actions.builders import ordered_actions
        from gpuinsight.actions.clients import eks_for, kubes_to_apply
        from gpuinsight.actions.diff import diff_plan
        from gpuinsight.actions.prepare import prepare_plan, reviewed_state

        wanted = finding_ids(plan, only)
        chosen = sorted(wanted) if wanted else None
        kubes = kubes_to_apply(plan, contexts, chosen)
        states = reviewed_state(plan, self.wh, kube=kubes) if reviewed else prepare_plan(plan, self.wh, kube=kubes)
        text = diff_plan(plan, states)
        actions = ordered_actions(plan, wanted)
        result = audit.recorded(self.wh, lambda: apply_plan(plan, kubes, self.wh, eks=eks_for(self.wh, actions),
                                                            max_age=max_age, only=chosen))
        return Applied(text, result)

    def rollback(self, plan_id: str, *, contexts: Contexts = None, force: bool = False) -> ApplyResult:
        """Revert what an apply of ``plan_id`` changed, newest first, each change through its own
        cluster's context (``force``: also a field that changed again since)."""
        from gpuinsight.actions import audit
        from gpuinsight.actions.apply import rollback
        from gpuinsight.actions.clients import eks_for, kubes_for
        from gpuinsight.actions.clusters import action_cluster

        rows = audit.rows(self.wh, plan_id, ("applied",))
        actions = [r["applied"].get("action") or {} for r in rows]
        kube_clusters = {action_cluster(a) for a in actions if a.get("type") != "aws-eks"}
        kubes = kubes_for(contexts, kube_clusters, required=kube_clusters) if kube_clusters and contexts else None
        return audit.recorded(self.wh, lambda: rollback(plan_id, kubes, self.wh, eks=eks_for(self.wh, actions),
                                                        force=force))

    # -- reporting, exporting, simulating --------------------------------------------------
    def report(self, out: Path, *, plan: Plan | None = None, png_dir: Path | None = None,
               upload: str | None = None, cluster: str | None = None) -> Path:
        """Write the waste & savings report of the whole fleet, or of ``cluster`` alone; its
        findings are ``plan``, else :meth:`plan_to_render`'s."""
        from gpuinsight.reports.html import write_report

        with self.reusing_answers():  # the rules' models feed the charts too
            plan = plan if plan is not None else self.plan_to_render()
            return write_report(self, Path(out), plan=plan, png_dir=png_dir, upload=upload, cluster=cluster)

    def export(self, dest: str, *, full: bool = False) -> Iterator[str]:
        """Write the warehouse's tables as hive-partitioned Parquet (by cluster and day) to a folder
        or ``s3://bucket/prefix``: the day partitions whose rows changed since they were written
        there (every one with ``full``); yields a line per table."""
        from gpuinsight.warehouse.export import export_tables

        yield from export_tables(self.wh, dest, full=full)

    @staticmethod
    def simulate(pods: Path, nodes: Path, policy: str, *, seed: int = 42) -> SimulationResult:
        """What-if replay of a scheduling trace (openb CSVs) under a placement policy: needs no
        warehouse. A bad trace or policy is bad input."""
        from gpuinsight import simulate as sim

        try:
            return sim.run_simulation(pods, nodes, policy, seed=seed)
        except (sim.TraceError, ValueError) as exc:
            raise BadInput(str(exc)) from exc

    def close(self) -> None:
        self.wh.close()

    def __enter__(self) -> GpuInsight:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def finding_ids(plan: Plan, only: Iterable[str] | None) -> set[str] | None:
    """``only`` as a set of the plan's finding ids (BadInput naming one it does not have)."""
    if not only:
        return None
    wanted = set(only)
    unknown = sorted(wanted - {r.id for r in plan.recommendations})
    if unknown:
        raise BadInput(f"--only {unknown[0]}: plan {plan.plan_id} has no such recommendation")
    return wanted


def _naive(t: Any) -> Any:
    from datetime import UTC

    return t.astimezone(UTC).replace(tzinfo=None) if isinstance(t, datetime) and t.tzinfo else t


def _when(t: Any) -> str:
    return t.strftime("%Y-%m-%d %H:%M UTC") if isinstance(t, datetime) else str(t)


def model_catalog(registry: QueryRegistry | None = None) -> pl.DataFrame:
    """The SQL models (name, grain, parameters, description): needs no warehouse."""
    registry = registry or load_registry()
    rows = [
        {
            "name": q.name,
            "grain": q.grain,
            "params": ", ".join(p.name for p in q.params),
            "materialized": q.materialize,
            "description": q.description,
        }
        for q in (registry.get(n) for n in registry.names())
    ]
    return pl.DataFrame(rows)


def open(path: str | Path | None = None, *, config: Config | None = None, read_only: bool = False,  # noqa: A001
         create: bool = True) -> GpuInsight:
    """Open (creating and migrating if needed, unless ``create=False``) a warehouse file."""
    cfg = config or Config.from_env(path)
    if path is not None and config is not None:
        cfg = cfg.with_(db_path=Path(path))
    return GpuInsight(cfg, read_only=read_only, create=create)

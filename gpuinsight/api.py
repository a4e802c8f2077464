"""The notebook face: one object over the warehouse, the SQL models, the rules and reports.

    import gpuinsight as gi
    wh = gi.open("fleet.duckdb")
    wh.query("waste_breakdown", by="namespace")

The CLI is a thin layer over the same methods.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.sources.base import LoadReport
from gpuinsight.sql import QueryRegistry, load_registry
from gpuinsight.warehouse import Warehouse

if TYPE_CHECKING:
    from gpuinsight.rules.base import Plan
    from gpuinsight.warehouse.writes import WriteSession


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
                with writer.writing(self.registry):
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

    def refresh(self) -> list[str]:
        """Rebuild the materialized models from the loaded data, atomically (a write session that
        loads nothing)."""
        with self.writing() as session:
            pass
        return session.rebuilt

    @contextlib.contextmanager
    def writing(self) -> Iterator[WriteSession]:
        """The one write path: what the block loads, the model rebuild, one commit, a checkpoint
        (:mod:`gpuinsight.warehouse.writes`). Answers kept by :meth:`reusing_answers` are
        forgotten."""
        if self._answers is not None:
            self._answers.clear()
        with self.wh.writing(self.registry) as session:
            yield session
        if session.rebuilt:  # this (outermost) session rebuilt them
            self._stale = None

    # -- loading ---------------------------------------------------------------------------
    def load_sample(self, folder: Path | None = None) -> list[LoadReport]:
        """Load a generated fleet (``sample_data/`` by default): metrics, dumps, prices."""
        from gpuinsight.sources.sample_dir import load_sample_dir

        with self.writing():
            return load_sample_dir(self.wh, self.config, folder)

    def collect_prometheus(
        self, since: datetime, until: datetime, step_s: int = 300, *, raw: bool = False
    ) -> LoadReport:
        from gpuinsight.progress import Progress
        from gpuinsight.sources.prometheus import PrometheusSource

        progress = Progress(self.config.progress).window(since, until)
        source = PrometheusSource(self.config, matchers=dict(self.config.prometheus.matchers) or None,
                                  on_commit=progress.on_commit)
        try:
            with self.writing():
                return source.collect(self.wh, since, until, step_s, raw=raw)
        finally:
            progress.close()

    def collect_kubernetes(self, *, context: str | None = None, from_dir: Path | None = None,
                           as_of: datetime | None = None) -> LoadReport:
        """A live read (``context``) or kubectl dumps (``from_dir``, taken at ``as_of``: default
        their files' modification time)."""
        from gpuinsight.sources import kubernetes

        with self.writing():
            if from_dir is not None:
                return kubernetes.load_dump_dir(self.wh, self.config, Path(from_dir), observed_at=as_of)
            return kubernetes.collect_live(self.wh, self.config, context=context)

    def collect_prices(self, *, catalog: Path | None = None, aws_region: str | None = None) -> LoadReport:
        from gpuinsight.sources import prices

        with self.writing():
            if aws_region:
                return prices.load_aws(self.wh, self.config, aws_region)
            return prices.load_catalog(self.wh, self.config, catalog)

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
        from gpuinsight.sources.alibaba import import_openb

        with self.writing():
            return import_openb(self.wh, self.config, Path(pods), Path(nodes))

    # -- deciding and acting ---------------------------------------------------------------
    def recommend(self, settings: dict[str, dict[str, Any]] | None = None) -> Plan:
        """Run the rules: a plan, not stored (see :meth:`store_plan`)."""
        from gpuinsight.rules.engine import run_rules

        return run_rules(self, settings or self.config.rule_settings)

    def store_plan(self, plan: Plan) -> None:
        """Keep the plan's recommendations in the warehouse (``recommendations``): a write."""
        from gpuinsight.rules.engine import store_plan

        with self.wh.writing():
            store_plan(self.wh, plan)

    def report(self, out: Path, *, plan: Plan | None = None, png_dir: Path | None = None,
               upload: str | None = None, cluster: str | None = None) -> Path:
        """Write the waste & savings report of the whole fleet, or of ``cluster`` alone; its
        findings are ``plan`` (e.g. ``self.recommend(settings)``), else the rules run with the
        configured settings."""
        from gpuinsight.reports.html import write_report

        return write_report(self, Path(out), plan=plan, png_dir=png_dir, upload=upload, cluster=cluster)

    def close(self) -> None:
        self.wh.close()

    def __enter__(self) -> GpuInsight:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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

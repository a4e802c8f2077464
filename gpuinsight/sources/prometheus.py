"""Collect dcgm-exporter and kube-state-metrics history from a Prometheus-compatible API.

Plan of one collection (details in docs/collectors.md):

1. Resolve the window: ``since`` defaults to the stored cursor minus a lag (late samples and
   out-of-order ingestion get re-read), else a week back. Evaluation times are multiples of
   ``step`` since the epoch, so every run puts samples on the same grid and re-runs replace
   rows instead of adding near-duplicates.
2. Discover which DCGM metric spellings exist and how many GPU series there are.
3. Split the grid into time chunks (no series over ``max_points_per_series`` points, and a
   bounded number of points per batch) and, for very large fleets, shard each query by the
   GPU UUID's first hex digit.
4. Fetch chunks concurrently, load them strictly in time order: one transaction per chunk
   holds its samples, inventory, pods, nodes, hourly rollup and the advanced cursor. A run
   killed at any point leaves whole chunks and a cursor that matches them.
5. A chunk with a partial answer (a store that did not answer: ``warnings``/``isPartial``)
   is not loaded and holds the cursor where it is, so the next incremental run re-reads
   it; the run goes on, reports the chunks it left out and ends ``incomplete`` (the CLI
   exits 1). ``PrometheusConfig.allow_partial`` loads such chunks, with a note, instead.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

from gpuinsight.config import Config
from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.sources import energy, serving
from gpuinsight.sources.base import LoadContract, LoadReport
from gpuinsight.sources.dcgm import BY_SPELLING
from gpuinsight.sources.gpu_nodes import NodeDirectory
from gpuinsight.sources.prom import promql
from gpuinsight.sources.prom.client import PromClient, partial_warnings
from gpuinsight.sources.prom.columnar import dcgm_rows, is_dcgm
from gpuinsight.sources.prom.frames import (
    Matrix,
    concat_series,
    empty_series,
    epoch_s,
    from_epoch_s,
    resolve_polars_lazy_imports,
    to_naive_utc,
)
from gpuinsight.sources.prom.generations import probe_generations
from gpuinsight.sources.prom.ksm import SPAN_SERIES, check_ksm_values, ksm_nodes, ksm_pods
from gpuinsight.sources.prom.promql import Matcher, Query
from gpuinsight.sources.prom.refine import Refiner, spot
from gpuinsight.sources.prom.store import checkpoints_deferred, get_state, set_state
from gpuinsight.sources.series import (
    SeriesBatch,
    TransformStats,
    gpu_facts,
    load_series,
    server_dropped,
    transform_groups,
)
from gpuinsight.warehouse.db import Warehouse, memory_capped

SOURCE = "prometheus"
# An answer, and what can be made of it alone: the series frame of a kube-state-metrics answer;
# the label frame of a DCGM one (a row per series) and its points to read again (refine.spot).
Made = tuple[Matrix, pl.DataFrame, np.ndarray | None]
CONTRACTS = (
    LoadContract("gpu_samples", ("cluster", "gpu_uuid", "mig_instance", "ts", "namespace", "pod"), cursor="ts",
                 lag=timedelta(minutes=10), description="dcgm-exporter, per-step avg/max"),
    LoadContract("gpus", ("cluster", "gpu_uuid"), description="GPU inventory from DCGM labels"),
    LoadContract("pods", ("cluster", "uid"), description="kube-state-metrics pod series"),
    LoadContract("nodes", ("cluster", "node"), description="kube-state-metrics node series"),
)
DEFAULT_LOOKBACK = timedelta(days=7)
MIN_STEPS_PER_CHUNK = 12
EPS_S = 0.001
MAX_SHARDS = 16
# DuckDB's memory while chunks stream in (docs/performance.md): its block cache would
# otherwise grow with the table being appended to.
DUCKDB_MEMORY = "256MB"
# DuckDB's checkpoint threshold while chunks stream in: each chunk still commits on its own, but
# its commit no longer checkpoints (a chunk logs more than DuckDB's 16 MB), only every this much
# of log (docs/performance.md: a day of 1,000 GPUs logs about 160 MB, model refresh included).
# Bounded: a killed run's log is replayed at the next open, and un-checkpointed blocks stay in memory.
CHECKPOINT_THRESHOLD = "256MB"


class PrometheusSource:
    """``PrometheusSource(cfg).collect(wh, since, until, step_s)``; see the module docstring.

    ``matchers`` are extra label equality matchers put on every selector (e.g. the
    ``cluster`` external label of a Thanos/Mimir holding several clusters); they are quoted,
    never pasted. ``points_per_batch`` / ``points_per_query`` bound memory per transaction
    and per HTTP answer (the collector's peak memory follows ``points_per_batch``, not the
    fleet: docs/performance.md).
    """

    def __init__(
        self,
        cfg: Config,
        *,
        matchers: dict[str, str] | None = None,
        points_per_batch: int = 750_000,
        points_per_query: int = 1_000_000,
        lag: timedelta = CONTRACTS[0].lag,
        on_commit: Callable[[SeriesBatch, dict[str, int]], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.pcfg = cfg.prometheus
        self.matchers: list[Matcher] = [(k, "=", v) for k, v in sorted((matchers or {}).items())]
        promql.selector("up", self.matchers)  # validates label names up front
        self.points_per_batch = points_per_batch
        self.points_per_query = points_per_query
        self.lag = lag
        self.on_commit = on_commit
        self.client = PromClient(self.pcfg, pool_size=max(self.pcfg.concurrency, 2),
                                 allow_partial=self.pcfg.allow_partial)
        # the cursor is per shard: clusters collected from one Thanos/Mimir with --match each
        # resume from their own point
        self.scope = self.client.where + (promql.selector(None, self.matchers) if self.matchers else "")
        self.generation_notes: list[str] = []
        self.serving_names: list[str] = []
        self.refiner: Refiner | None = None
        self.refused: list[str] = []  # windows of chunks left out for a partial answer
        self.plan_notes: list[str] = []
        # one collection's counts and node evidence, shared with load_series
        self.stats = TransformStats()
        self.directory = NodeDirectory()
        self.facts: dict[str, tuple[str, int]] = {}

    # -- the window ------------------------------------------------------------------------
    def resolve_window(
        self, wh: Warehouse, since: datetime | None, until: datetime | None, step_s: int
    ) -> tuple[int, int]:
        """Evaluation grid bounds (unix seconds, multiples of step)."""
        if step_s < 1 or int(step_s) != step_s:
            raise BadInput(f"--step: {step_s!r} is not a whole number of seconds >= 1")
        end = to_naive_utc(until) if until else datetime.now(UTC).replace(tzinfo=None)
        if since is None:
            state = get_state(wh, SOURCE, self.scope)
            window = (state or {}).get("details", {}).get("window") or [None]
            if state and state["cursor"] is not None:
                start = state["cursor"] - self.lag
            elif state and state["status"] != "complete" and window[0]:
                start = datetime.fromisoformat(window[0])  # an interrupted first run: finish it
            else:
                start = end - DEFAULT_LOOKBACK
        else:
            start = to_naive_utc(since)
        return self.grid(start, end, step_s)

    @staticmethod
    def grid(since: datetime, until: datetime, step_s: int) -> tuple[int, int]:
        """First and last evaluation time for rows covering [since, until)."""
        since, until = to_naive_utc(since), to_naive_utc(until)
        if since >= until:
            raise BadInput(f"--since {since.isoformat()} is not before --until {until.isoformat()}")
        # Row r stands for [r, r + step) and is evaluated at r + step; the last row ends at or
        # before ``until`` (a partial step is left for the next run).
        t0 = math.floor(epoch_s(since) / step_s) * step_s + step_s
        t1 = math.floor(epoch_s(until) / step_s) * step_s
        return t0, t1

    # -- planning --------------------------------------------------------------------------
    def plan(self, t0: int, t1: int, step: int, raw: bool) -> list[list[Query]]:
        """Queries per chunk, in time order."""
        names, warnings = self.client.metric_names(list(BY_SPELLING), t0 - step, t1, self.matchers)
        self._planning_answer("which DCGM fields exist", warnings)
        generations = probe_generations(self.client, names, t0 - step, t1, step, self.matchers)
        self._planning_answer("which exporter generations are scraped", generations.warnings)
        self.generation_notes = generations.notes()
        n_series, lowercase_uuid = self._count_gpu_series(names, t0 - step, t1)
        want_max = {n: BY_SPELLING[n].max_column is not None for n in names}
        n_queries = sum(promql.queries_per_field(n, raw) for n in names)
        per_step = max(1, n_series) * max(1, n_queries)
        steps = max(MIN_STEPS_PER_CHUNK, self.points_per_batch // per_step)
        steps = min(steps, self.pcfg.max_points_per_series)
        n_shards = min(MAX_SHARDS, math.ceil(n_series * steps / self.points_per_query)) if n_series else 1
        shards = promql.uuid_shards(n_shards, lowercase_uuid)
        dcgm = [pair for shard in shards for n in names
                for pair in promql.dcgm_exprs(n, step, [*self.matchers, *shard], raw=raw, want_max=want_max[n])]
        keep = promql.DCGM_LABELS | set(self.cfg.node_labels)
        pod_key = generations.pod_key
        self.refiner = None if raw else Refiner(self.client, self.matchers, generations.resolution_s, step, keep)
        extra = self._serving_and_energy(t0 - step, t1, step, generations.resolution_s)
        chunks = []
        # Evaluating 1 ms before each grid point makes the window [t - step, t) in effect, under
        # both the closed range selectors of Prometheus 2.x and the left-open ones of 3.x: a
        # sample exactly on a boundary lands in one row, the one starting at its timestamp.
        shift = step - EPS_S
        for a, b in promql.chunk_grid(t0, t1, step, steps):
            qs = [Query(e, m, a - EPS_S, b - EPS_S, step, shift, keep=keep) for e, m in dcgm]
            qs += [Query(e, m, a - EPS_S, b - EPS_S, step, shift)
                   for e, m in (*promql.ksm_step_exprs(step, self.matchers, pod_key),
                                *promql.kueue_exprs(step, self.matchers))]
            qs.append(promql.container_cpu_query(a - EPS_S, b - EPS_S, step, shift, generations.resolution_s,
                                                 self.matchers))
            qs += [Query(e, m, b - EPS_S, b - EPS_S, step, shift)
                   for e, m in promql.ksm_chunk_exprs(b - a + step, self.matchers, pod_key)]
            # counters and histograms are read one scrape interval late (their increase over the step
            # needs the sample at its end), gauges like the DCGM fields
            late = generations.resolution_s
            qs += [Query(e, m, a - EPS_S + (late if is_late else 0), b - EPS_S + (late if is_late else 0), step,
                         shift + (late if is_late else 0), keep=keep_labels) for e, m, is_late, keep_labels in extra]
            chunks.append(qs)
        self.last_plan = {"dcgm_metrics": names, "serving_metrics": self.serving_names, "gpu_series": n_series,
                          "steps_per_chunk": steps,
                          "chunks": len(chunks), "shards": len(shards), "queries": sum(len(c) for c in chunks),
                          **generations.details()}
        return chunks

    def _serving_and_energy(self, start: int, end: int, step: int, resolution_s: int,
                            ) -> list[tuple[str, str, bool, frozenset[str]]]:
        """(expr, metric, evaluated late, labels kept) for the inference servers' metrics and the
        DCGM energy counter present in the window (sources/serving.py, sources/energy.py)."""
        wanted = sorted(serving.SERIES_NAMES | {energy.COUNTER, serving.CONFIG_INFO})
        present, warnings = self.client.metric_names(wanted, start, end, self.matchers)
        self._planning_answer("which inference-server metrics exist", warnings)
        self.serving_names = [n for n in present if n != energy.COUNTER]
        out: list[tuple[str, str, bool, frozenset[str]]] = []
        for name in self.serving_names:
            if name == serving.CONFIG_INFO:
                e, metric = serving.config_expr(step, self.matchers)
                out.append((e, metric, False, serving.KEEP_LABELS | frozenset(serving.CONFIG_LABELS)))
                continue
            for m in serving.BY_NAME[name]:
                out += [(e, metric, late, serving.KEEP_LABELS)
                        for e, metric, late in serving.serving_exprs(m, step, resolution_s, self.matchers)]
        if energy.COUNTER in present:
            e, metric = energy.energy_expr(step, resolution_s, self.matchers)
            out.append((e, metric, True, energy.KEEP_LABELS))
        return out

    def _count_gpu_series(self, names: list[str], start: int, end: int) -> tuple[int, bool]:
        """GPU entities (GPU or MIG instance) in the window, and whether any uses ``uuid``."""
        probe = [n for n in names if n.upper() == "DCGM_FI_DEV_FB_USED"] or names[:1]
        if not probe:
            return 0, False
        match = promql.selector(None, [("__name__", "=~", "|".join(probe)), *self.matchers])
        series, warnings = self.client.series(match, start, end)
        self._planning_answer("how many GPU series there are", warnings)
        lowercase = any("uuid" in s and "UUID" not in s for s in series)
        return len(series), lowercase

    def _planning_answer(self, what: str, warnings: list[str]) -> None:
        """A partial answer while planning would leave whole fields or shards out: stop."""
        partial = partial_warnings(warnings)
        if not partial:
            return
        if not self.pcfg.allow_partial:
            raise RuntimeFailure(f"{self.scope}: partial answer to {what} ({_brief(partial)}); nothing loaded: "
                                 "re-run when the server is whole, or pass --allow-partial")
        self.plan_notes.append(f"accepted a partial answer to {what} (--allow-partial): {_brief(partial)}")

    # -- the run ---------------------------------------------------------------------------
    def collect(
        self, wh: Warehouse, since: datetime | None = None, until: datetime | None = None,
        step_s: int = 300, raw: bool = False,
    ) -> LoadReport:
        step = int(step_s)
        t0, t1 = self.resolve_window(wh, since, until, step)
        window = (from_epoch_s(t0 - step), from_epoch_s(t1))
        if t1 < t0:
            report = LoadReport(source=SOURCE, window=window)
            report.notes.append("window shorter than one step: nothing to collect")
            return report
        self.refused, self.plan_notes = [], []
        chunks = self.plan(t0, t1, step, raw)
        details = {"step_s": step, "raw": raw, "prometheus": {**self.pcfg.redacted(), "url": self.client.where},
                   "plan": self.last_plan}
        self.stats, self.directory, self.facts = TransformStats(), NodeDirectory(), gpu_facts(wh)
        with memory_capped(wh, DUCKDB_MEMORY), checkpoints_deferred(wh, CHECKPOINT_THRESHOLD):
            report = load_series(wh, self.cfg, self._batches(chunks, step), source=SOURCE, scope=self.scope,
                                 window=window, details=details, on_commit=self.on_commit, stats=self.stats,
                                 directory=self.directory)
        report.notes[:0] = self.plan_notes
        report.notes.extend(self.generation_notes)
        if self.refiner is not None and self.refiner.refined_steps:
            report.notes.append(f"{self.refiner.refined_steps:,} GPU-steps showed a reading that is not a measurement "
                                "and were read again with the filter")
        if self.refused:
            state = get_state(wh, SOURCE, self.scope) or {}
            cursor = state.get("cursor")
            report.incomplete = (
                f"{self.scope}: partial answers for {len(self.refused)} of {len(chunks)} chunks (first "
                f"{self.refused[0]}) were not loaded; the cursor stays at "
                f"{cursor.isoformat() if cursor else 'the window start'} so the next run re-reads them "
                "(--allow-partial loads partial data instead)")
        if not self.last_plan["dcgm_metrics"]:
            report.notes.append("no dcgm-exporter series in the window (is dcgm-exporter scraped by this server?)")
        if not self.refused and not any(report.rows.get(t) for t in ("gpu_samples", "pods", "nodes", "serving_samples",
                                                                      "serving_config")):
            where = " matching " + ",".join(f"{k}={v!r}" for k, _, v in self.matchers) if self.matchers else ""
            set_state(wh, SOURCE, self.scope, status="failed", details={**details, "error": "nothing mapped"})
            raise BadInput(f"{self.scope}: no dcgm-exporter or kube-state-metrics series gpuinsight reads in the "
                           f"window{where}")
        report.notes.append(f"{self.last_plan['queries']} queries in {self.last_plan['chunks']} chunks, "
                            f"{self.client.bytes_read / 1e6:.1f} MB read")
        return report

    def _batches(self, chunks: list[list[Query]], step: int) -> Iterator[SeriesBatch]:
        """Fetch ahead concurrently; yield chunks strictly in time order.

        kube-state-metrics answers are asked first and made into pods and nodes (another
        thread) while the DCGM answers of the chunk are still on the wire.
        """
        resolve_polars_lazy_imports()
        # ``concurrency`` requests in flight (the client's limit) plus two workers decoding.
        pool = ThreadPoolExecutor(max_workers=max(1, self.pcfg.concurrency) + 2, thread_name_prefix="prom")
        ksm_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prom-ksm")
        pending: deque[tuple[Query, list[Query], list[Future[Made]]]] = deque()
        todo = iter(chunks)
        held = False
        try:
            while True:
                # Two chunks in flight keep the server busy while one loads, with bounded memory.
                while len(pending) < 2:
                    qs = next(todo, None)
                    if qs is None:
                        break
                    span = qs[0]  # the chunk's grid: a DCGM query, else a per-step KSM one (plan's order)
                    qs = [q for q in qs if not is_dcgm(q)] + [q for q in qs if is_dcgm(q)]
                    pending.append((span, qs, [pool.submit(self._fetch, q) for q in qs]))
                if not pending:
                    return
                span, qs, futures = pending.popleft()
                # pods and nodes while the DCGM answers arrive (not earlier: one chunk's
                # transforms at a time bounds the memory)
                ksm = ksm_pool.submit(self._ksm, [(q, f) for q, f in zip(qs, futures, strict=True) if not is_dcgm(q)])
                answers = [(q, *f.result()) for q, f in zip(qs, futures, strict=True)]
                del futures  # the answers live only until they are rows (not while those load)
                rest, pods, nodes = ksm.result()  # before the DCGM rows: one transform at a time
                del ksm
                start, end = from_epoch_s(round(span.start) - step), from_epoch_s(round(span.end))
                batch = self._batch(answers, step, start, end)
                if batch.advance_cursor:  # a batch left out has nothing to load
                    batch.series, batch.pods, batch.nodes = rest, pods, nodes
                del rest, pods, nodes
                held = held or not batch.advance_cursor
                batch.advance_cursor = not held  # nothing after a left-out chunk moves the cursor
                yield batch
        finally:
            for _, _, futures in pending:
                for f in futures:
                    f.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            ksm_pool.shutdown(wait=True, cancel_futures=True)

    def _ksm(self, answers: list[tuple[Query, Future[Made]]]) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        """The chunk's series frames other than DCGM's: each transform gets the frame of only the
        answers it reads (:func:`transform_groups`). Declarations no cluster makes are refused
        first (bad input naming the series); returns the rest (cAdvisor, Kueue, HAMi, serving,
        energy) and the pods and nodes rows; the nodes and pod placements join the evidence for
        placing the chunk's GPUs."""
        groups = transform_groups(q.metric for q, _ in answers)

        def of(group: str) -> pl.DataFrame:
            # waits for the group's own answers only: the transforms start once the
            # kube-state-metrics answers are in, while the others (energy, serving, cAdvisor,
            # which only the loads read) are still on the wire
            return concat_series([f.result()[1] for q, f in answers if q.metric in groups[group]])

        check_ksm_values(of("checked"), SOURCE)
        self.directory.add_series(of("placements"))
        pods = ksm_pods(of("pods"), self.cfg.cluster, source=SOURCE, notes=self.stats.ksm_notes)
        nodes = ksm_nodes(of("nodes"), self.cfg.cluster, notes=self.stats.ksm_notes, facts=self.facts)
        return of("rest"), pods, nodes

    def _fetch(self, q: Query) -> Made:
        """One answer and what can be made of it alone (:data:`Made`), in the fetch workers while
        others are on the wire. A DCGM answer keeps its label sets: the refiner reads them, and
        its rows wait for the chunk's nodes (:func:`dcgm_rows`). Any other answer becomes its
        series frame (kube-state-metrics' labels categorical; of an info series read at every
        step, each series' first and last point: :data:`~gpuinsight.sources.prom.ksm.SPAN_SERIES`)."""
        m = self.client.query_range(q)
        if is_dcgm(q):
            m.times_us(q.shift_s)  # kept on the answer for its rows (dcgm_rows) and the refiner
            return m, m.label_frame(q.keep), spot(q, m) if self.refiner is not None else None
        ksm = not transform_groups([q.metric])["rest"]
        read = m.ends() if q.metric in SPAN_SERIES else m
        return m.without_labels(), read.series_frame(q.metric, q.shift_s, q.keep, categorical=ksm), None

    def _batch(self, answers: list[tuple[Query, Matrix, pl.DataFrame, np.ndarray | None]], step: int,
               start: datetime, end: datetime) -> SeriesBatch:
        window = f"{start.isoformat()}..{end.isoformat()}"
        dcgm = [(q, m) for q, m, _, _ in answers if is_dcgm(q)]
        labels: list[pl.DataFrame | None] = [lf for q, _, lf, _ in answers if is_dcgm(q)]
        spots = [s if s is not None else np.zeros(0, dtype=np.int64) for q, _, _, s in answers if is_dcgm(q)]
        warnings = [w for _, m, _, _ in answers for w in m.warnings]
        answers.clear()
        dropped: list[pl.DataFrame] = []
        if self.refiner is not None and (self.pcfg.allow_partial or not partial_warnings(warnings)):
            # steps showing a reading that is not a measurement: read again, filtered
            refined, dropped = self.refiner.refine(dcgm, spots)
            warnings += [w for _, m in refined[len(dcgm):] for w in m.warnings]
            labels += [None] * (len(refined) - len(dcgm))  # the re-read answers: same label sets, own rows
            dcgm = refined
        partial = partial_warnings(warnings)
        if partial and not self.pcfg.allow_partial:
            self.refused.append(window)
            return SeriesBatch(empty_series(), step, start=start, end=end, advance_cursor=False,
                               notes=[f"partial answer for {window}, not loaded: {_brief(partial)}"])
        notes = [f"accepted a partial answer for {window} (--allow-partial): {_brief(partial)}"] if partial else []
        for frame in dropped:
            server_dropped(frame, self.stats)
        samples = dcgm_rows(dcgm, self.cfg.cluster, step, self.stats, self.directory, self.cfg.node_labels, labels)
        del dcgm, labels
        return SeriesBatch(empty_series(), step, start=start, end=end, notes=notes, samples=samples)


def _brief(warnings: list[str]) -> str:
    """Distinct warnings on one line, each cut to a readable length."""
    distinct = list(dict.fromkeys(" ".join(w.split())[:160] for w in warnings))
    more = f" (+{len(distinct) - 3} more)" if len(distinct) > 3 else ""
    return "; ".join(distinct[:3]) + more

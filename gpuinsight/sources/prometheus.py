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
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import polars as pl

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.sources.base import LoadContract, LoadReport
from gpuinsight.sources.dcgm import BY_SPELLING
from gpuinsight.sources.prom import promql
from gpuinsight.sources.prom.client import PromClient
from gpuinsight.sources.prom.frames import concat_series, epoch_s, from_epoch_s, to_naive_utc
from gpuinsight.sources.prom.generations import probe_generations
from gpuinsight.sources.prom.promql import Matcher, Query
from gpuinsight.sources.prom.refine import Refiner
from gpuinsight.sources.prom.store import get_state, set_state
from gpuinsight.sources.series import SeriesBatch, load_series
from gpuinsight.warehouse.db import Warehouse

SOURCE = "prometheus"
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


class PrometheusSource:
    """``PrometheusSource(cfg).collect(wh, since, until, step_s)``; see the module docstring.

    ``matchers`` are extra label equality matchers put on every selector (e.g. the
    ``cluster`` external label of a Thanos/Mimir holding several clusters); they are quoted,
    never pasted. ``points_per_batch`` / ``points_per_query`` bound memory per transaction
    and per HTTP answer.
    """

    def __init__(
        self,
        cfg: Config,
        *,
        matchers: dict[str, str] | None = None,
        points_per_batch: int = 1_500_000,
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
        self.client = PromClient(self.pcfg, pool_size=max(self.pcfg.concurrency, 2))
        # the cursor is per shard: clusters collected from one Thanos/Mimir with --match each
        # resume from their own point
        self.scope = self.client.where + (promql.selector(None, self.matchers) if self.matchers else "")
        self.generation_notes: list[str] = []
        self.refiner: Refiner | None = None

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
        names = self.client.metric_names(list(BY_SPELLING), t0 - step, t1, self.matchers)
        generations = probe_generations(self.client, names, t0 - step, t1, step, self.matchers)
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
        chunks = []
        # Evaluating 1 ms before each grid point makes the window [t - step, t) in effect, under
        # both the closed range selectors of Prometheus 2.x and the left-open ones of 3.x: a
        # sample exactly on a boundary lands in one row, the one starting at its timestamp.
        shift = step - EPS_S
        for a, b in promql.chunk_grid(t0, t1, step, steps):
            qs = [Query(e, m, a - EPS_S, b - EPS_S, step, shift, keep=keep) for e, m in dcgm]
            qs += [Query(e, m, a - EPS_S, b - EPS_S, step, shift)
                   for e, m in promql.ksm_step_exprs(step, self.matchers, pod_key)]
            qs.append(promql.container_cpu_query(a - EPS_S, b - EPS_S, step, shift, generations.resolution_s,
                                                 self.matchers))
            qs += [Query(e, m, b - EPS_S, b - EPS_S, step, shift)
                   for e, m in promql.ksm_chunk_exprs(b - a + step, self.matchers, pod_key)]
            chunks.append(qs)
        self.last_plan = {"dcgm_metrics": names, "gpu_series": n_series, "steps_per_chunk": steps,
                          "chunks": len(chunks), "shards": len(shards), "queries": sum(len(c) for c in chunks),
                          **generations.details()}
        return chunks

    def _count_gpu_series(self, names: list[str], start: int, end: int) -> tuple[int, bool]:
        """GPU entities (GPU or MIG instance) in the window, and whether any uses ``uuid``."""
        probe = [n for n in names if n.upper() == "DCGM_FI_DEV_FB_USED"] or names[:1]
        if not probe:
            return 0, False
        match = promql.selector(None, [("__name__", "=~", "|".join(probe)), *self.matchers])
        series = self.client.series(match, start, end)
        lowercase = any("uuid" in s and "UUID" not in s for s in series)
        return len(series), lowercase

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
        chunks = self.plan(t0, t1, step, raw)
        details = {"step_s": step, "raw": raw, "prometheus": {**self.pcfg.redacted(), "url": self.client.where}, "plan": self.last_plan}
        batches = self._batches(chunks, step)
        if self.refiner is not None:  # steps showing a reading that is not a measurement: read again, filtered
            batches = self.refiner.refine_all(batches)
        report = load_series(wh, self.cfg, batches, source=SOURCE, scope=self.scope,
                             window=window, details=details, on_commit=self.on_commit)
        report.notes.extend(self.generation_notes)
        if self.refiner is not None and self.refiner.refined_steps:
            report.notes.append(f"{self.refiner.refined_steps:,} GPU-steps showed a reading that is not a measurement "
                                "and were read again with the filter")
        if not self.last_plan["dcgm_metrics"]:
            report.notes.append("no dcgm-exporter series in the window (is dcgm-exporter scraped by this server?)")
        if not any(report.rows.get(t) for t in ("gpu_samples", "pods", "nodes")):
            where = " matching " + ",".join(f"{k}={v!r}" for k, _, v in self.matchers) if self.matchers else ""
            set_state(wh, SOURCE, self.scope, status="failed", details={**details, "error": "nothing mapped"})
            raise BadInput(f"{self.scope}: no dcgm-exporter or kube-state-metrics series gpuinsight reads in the "
                           f"window{where}")
        report.notes.append(f"{self.last_plan['queries']} queries in {self.last_plan['chunks']} chunks, "
                            f"{self.client.bytes_read / 1e6:.1f} MB read")
        return report

    def _batches(self, chunks: list[list[Query]], step: int) -> Iterator[SeriesBatch]:
        """Fetch ahead concurrently; yield chunks strictly in time order."""
        pool = ThreadPoolExecutor(max_workers=max(1, self.pcfg.concurrency), thread_name_prefix="prom")
        pending: deque[tuple[list[Query], list[Future[pl.DataFrame]]]] = deque()
        todo = iter(chunks)
        try:
            while True:
                # Two chunks in flight keep the server busy while one loads, with bounded memory.
                while len(pending) < 2:
                    qs = next(todo, None)
                    if qs is None:
                        break
                    pending.append((qs, [pool.submit(self.client.query_range, q) for q in qs]))
                if not pending:
                    return
                qs, futures = pending.popleft()
                frames = [f.result() for f in futures]
                start, end = round(qs[0].start), round(qs[0].end)
                yield SeriesBatch(concat_series(frames), step, start=from_epoch_s(start - step),
                                  end=from_epoch_s(end))
        finally:
            for _, futures in pending:
                for f in futures:
                    f.cancel()
            pool.shutdown(wait=True, cancel_futures=True)


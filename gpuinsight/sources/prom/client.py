"""HTTP to the Prometheus API (Prometheus, Thanos, Mimir, VictoriaMetrics) and columnar decoding.

The connection is prometheus-api-client's ``PrometheusConnect`` (its session carries the URL,
auth, TLS and headers), but range data does not go through its pandas path: we call
``/api/v1/query_range`` on the same session and decode the answer straight into a columnar
:class:`~gpuinsight.sources.prom.frames.Matrix` (label sets once per series, points as two
float columns), never a Python object per point.

Reliability (docs/collectors.md, "Failures"):

* 5xx, 429, timeouts, connection errors, bodies cut short (``IncompleteRead``, a connection
  closed mid-body) and answers that are not valid JSON are retried with the same bounded
  backoff; after the last attempt the run stops with a one-line runtime failure.
* Partial answers are never taken silently: ``partial_response=false`` (Thanos) and
  ``deny_partial_response=1`` (VictoriaMetrics) ask the server to fail instead, and whatever
  ``warnings`` (or VictoriaMetrics' ``isPartial``) an answer still carries come back with it
  for the caller to judge (see :func:`partial_warnings`).
* At most ``concurrency`` requests are in flight; decoding happens outside that limit, so a
  worker decodes one answer while the next is on the wire.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.csv as pa_csv
import requests
from prometheus_api_client import PrometheusConnect
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from gpuinsight.config import PrometheusConfig
from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.sources.prom.frames import Matrix
from gpuinsight.sources.prom.promql import Matcher, Query, regex_literal, selector

T = TypeVar("T")
Params = list[tuple[str, Any]]

# Asked of every read unless partial answers are allowed: Thanos' query API and
# VictoriaMetrics' vmselect then fail a query a store could not answer instead of leaving
# its data out. Prometheus and Mimir ignore parameters they do not know.
NO_PARTIAL: Params = [("partial_response", "false"), ("deny_partial_response", "1")]
# PromQL annotations about the query itself (Prometheus >= 2.50), not about missing data.
_INFO_PREFIX = "PromQL info:"


def redact_url(url: str) -> str:
    """The URL without user:password, query or fragment: safe for logs and ``ingest_state``."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def partial_warnings(warnings: Sequence[str]) -> list[str]:
    """The warnings that may mean data is missing: all of them but PromQL's ``info`` notes.

    Thanos and Mimir report a store or ingester that did not answer as a warning on an
    otherwise successful answer; so does Prometheus when a remote-read endpoint fails.
    """
    return [w for w in warnings if not w.startswith(_INFO_PREFIX)]


class _Retry(Exception):  # noqa: N818 (control flow, never escapes this module)
    """A transient failure: try again after the backoff."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PromClient:
    def __init__(self, pcfg: PrometheusConfig, *, pool_size: int = 10, allow_partial: bool = False) -> None:
        if not pcfg.url:
            raise BadInput("Prometheus: no URL given (--url)")
        parts = urlsplit(pcfg.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadInput(f"Prometheus URL {redact_url(pcfg.url)!r}: expected http(s)://host[:port][/path]")
        self.cfg = pcfg
        self.base = pcfg.url.rstrip("/")
        self.where = redact_url(pcfg.url)
        self.extra: Params = [] if allow_partial else list(NO_PARTIAL)
        headers = dict(pcfg.headers)
        # Prometheus gzips JSON at a cost of more CPU than sending it plain costs on a LAN
        # (measured: 3-4x the query time for big answers); a user header still wins.
        if not any(k.lower() == "accept-encoding" for k in headers):
            headers["Accept-Encoding"] = "identity"
        if pcfg.bearer_token:
            headers["Authorization"] = f"Bearer {pcfg.bearer_token}"
        auth = pcfg.basic_auth
        if auth is None and parts.username:
            auth = (parts.username, parts.password or "")
        # Retries are ours (bounded, with backoff, and a clear message at the end), so the
        # library's urllib3 retry is switched off.
        # read=False re-raises a read timeout as itself rather than as a "max retries" error.
        no_retry = Retry(total=0, read=False, raise_on_status=False)
        self.prom = PrometheusConnect(url=self.base, headers=headers, disable_ssl=pcfg.insecure_skip_verify,
                                      auth=auth, retry=no_retry, timeout=pcfg.timeout_s)
        self.session: requests.Session = self.prom._session
        if pcfg.ca_file and not pcfg.insecure_skip_verify:
            self.session.verify = pcfg.ca_file
        self.session.mount(self.base, HTTPAdapter(pool_connections=2, pool_maxsize=max(pool_size, 2), max_retries=no_retry))
        self.headers = headers
        self.auth = auth
        self.in_flight = threading.BoundedSemaphore(max(1, pcfg.concurrency))
        # One dict per distinct kept label set: the DCGM fields of a GPU share it, across
        # queries and chunks (bounded; cleared when full). Answers that keep every label
        # (kube-state-metrics: a different set per metric, per pod) do not use it.
        self.label_sets: dict[tuple[frozenset[str] | None, bytes], dict[str, str]] = {}
        self.bytes_read = 0
        self.attempts_retried = 0

    # -- raw calls -------------------------------------------------------------------------
    def fetch(self, path: str, params: Params, what: str, decode: Callable[[bytes], T]) -> T:
        """GET ``path`` and decode the body, retrying transient failures (bounded, backoff)."""
        cfg = self.cfg
        last = ""
        for attempt in range(cfg.retries + 1):
            if attempt:
                self.attempts_retried += 1
                time.sleep(min(8.0, cfg.backoff_s * 2 ** attempt) * (0.75 + 0.5 * random.random()))
            try:
                body = self._get(path, [*params, *self.extra], what)
                return decode(body)
            except _Retry as exc:
                last = exc.reason
        raise RuntimeFailure(f"{self.where}: {what}: gave up after {cfg.retries + 1} attempts ({last})")

    def _get(self, path: str, params: Params, what: str) -> bytes:
        try:
            with self.in_flight:
                resp = self.session.get(f"{self.base}{path}", params=params, headers=self.headers, auth=self.auth,
                                        timeout=(min(10.0, self.cfg.timeout_s), self.cfg.timeout_s))
        except requests.exceptions.SSLError as exc:
            raise RuntimeFailure(f"{self.where}: TLS error ({exc.__class__.__name__}); "
                                 "check --ca-file or use --insecure") from exc
        except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError) as exc:
            raise _Retry("answer cut short") from exc
        except (requests.Timeout, requests.ConnectionError) as exc:
            timed_out = isinstance(exc, requests.Timeout) or "timed out" in str(exc).lower()
            raise _Retry("timed out" if timed_out else "connection failed") from exc
        code = resp.status_code
        if code >= 500 or code == 429:
            raise _Retry(f"HTTP {code}{_error_text(resp.content)}")
        if code in (401, 403):
            raise RuntimeFailure(f"{self.where}: HTTP {code}: not authorised (check the bearer token / basic auth)")
        ctype = resp.headers.get("Content-Type", "")
        if not ctype.split(";")[0].strip().lower().endswith("json"):
            raise BadInput(f"{self.where}: {what}: answer is {ctype or 'untyped'} (HTTP {code}), not Prometheus "
                           "JSON; is the URL the Prometheus API root?")
        body = resp.content
        self.bytes_read += len(body)
        return body

    def get(self, path: str, params: Params, what: str) -> tuple[Any, list[str]]:
        """The ``data`` member of a Prometheus answer, and its warnings."""
        return self.fetch(path, params, what, lambda body: self._data(body, what))

    def _data(self, body: bytes, what: str) -> tuple[Any, list[str]]:
        doc = _json(body)
        self._check(doc, what)
        return doc.get("data"), _warnings(doc)

    def _check(self, doc: Any, what: str) -> None:
        if not isinstance(doc, dict) or "status" not in doc:
            raise BadInput(f"{self.where}: {what}: JSON answer is not a Prometheus API response")
        if doc["status"] != "success":
            msg = f"{self.where}: {what}: {doc.get('errorType', 'error')}: {doc.get('error', '')}"
            if doc.get("errorType") == "bad_data":
                raise BadInput(msg)
            raise RuntimeFailure(msg)

    # -- API -------------------------------------------------------------------------------
    def query_range(self, q: Query) -> Matrix:
        params: Params = [("query", q.expr), ("start", q.start), ("end", q.end), ("step", q.step)]
        return self.fetch("/api/v1/query_range", params, q.expr,
                          lambda body: self.decode_matrix(body, q.expr, q.keep))

    def decode_matrix(self, body: bytes, what: str, keep: frozenset[str] | None = None) -> Matrix:
        """The answer's matrix; ``keep``: the labels worth keeping (the rest is dropped on arrival)."""
        if len(self.label_sets) > 50_000:
            self.label_sets.clear()
        fast = fast_matrix(body, keep, self.label_sets if keep is not None else None)
        if fast is not None:
            return fast
        doc = _json(body)
        self._check(doc, what)
        data = doc.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            raise BadInput(f"{self.where}: {what}: expected a matrix result")
        return matrix_of(data["result"], _warnings(doc), keep)

    def metric_names(self, wanted: list[str], start: int, end: int,
                     matchers: Sequence[Matcher] = ()) -> tuple[list[str], list[str]]:
        """Which of ``wanted`` have series in the window (servers without match[] return all)."""
        sel = selector(None, [("__name__", "=~", "|".join(regex_literal(n) for n in wanted)), *matchers])
        data, warnings = self.get("/api/v1/label/__name__/values", [("match[]", sel), ("start", start), ("end", end)],
                                  "label values of __name__")
        present = set(data or [])
        return [w for w in wanted if w in present], warnings

    def series(self, match: str, start: int, end: int) -> tuple[list[dict[str, str]], list[str]]:
        data, warnings = self.get("/api/v1/series", [("match[]", match), ("start", start), ("end", end)],
                                  f"series {match}")
        return list(data or []), warnings


def _json(body: bytes) -> Any:
    """orjson, with an invalid body (cut short, garbled) as a transient failure to retry."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _Retry(f"invalid JSON in a {len(body):,}-byte answer: {exc}") from exc


def _warnings(doc: dict[str, Any]) -> list[str]:
    out = [str(w) for w in doc.get("warnings") or []]
    if doc.get("isPartial") is True:
        out.append("isPartial: some storage nodes did not answer")
    return out


def _error_text(body: bytes) -> str:
    """``: errorType: error`` from a JSON error body, if it is one (for the give-up message)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    if isinstance(doc, dict) and doc.get("error"):
        return f": {doc.get('errorType', 'error')}: {str(doc['error'])[:200]}"
    return ""


# The head of a compact matrix answer as Prometheus, Thanos, Mimir and VictoriaMetrics
# (``isPartial``) write it.
_MATRIX_HEAD = re.compile(rb'\{"status":"success",(?:"isPartial":(?:true|false),)?'
                          rb'"data":\{"resultType":"matrix","result":\[')
_POINTS = bytes.maketrans(b"]", b"\n")
_VALUES_KEY = b'"values":['
# The points as CSV (``,t,"v"`` lines) read by Arrow's reader: a fifth less CPU than polars' on
# these two float columns, and on the calling thread (``use_threads=False``): the answers are
# decoded in the fetch workers, several at once, so a pool per call would only add switching.
# No string is null (``"NaN"`` is a NaN, as Prometheus means it); a value that is not a number
# raises, and the answer is decoded in full instead.
_CSV_READ = pa_csv.ReadOptions(column_names=["_", "ts", "value"], use_threads=False, block_size=1 << 26)
_CSV_PARSE = pa_csv.ParseOptions(quote_char='"')
_CSV_CONVERT = pa_csv.ConvertOptions(column_types={"ts": pa.float64(), "value": pa.float64()},
                                     include_columns=["ts", "value"], null_values=[], strings_can_be_null=False,
                                     quoted_strings_can_be_null=False)


def fast_matrix(body: bytes, keep: frozenset[str] | None = None,
                label_sets: dict[tuple[frozenset[str] | None, bytes], dict[str, str]] | None = None
                ) -> Matrix | None:
    """The bulk path for a compact matrix answer, or None to decode it in full instead.

    In the compact JSON these servers write, an unescaped ``"values":[`` can only be the key
    (inside a label value the quote would be escaped) and the points ``[t,"v"]`` hold no
    ``]``; so the points of all series are cut out as bytes, turned into CSV lines
    (``[t,"v"],`` -> ``,t,"v"\\n`` by one ``translate``) and read by Arrow's CSV reader; only
    the small ``metric`` objects and the envelope around the result (status, ``warnings``,
    ``isPartial``) go through orjson. Anything unexpected (other key order, native histograms,
    truncation) returns None and the answer is decoded in full by orjson, which then also
    tells a cut-short body from a valid one.
    """
    head = _MATRIX_HEAD.match(body)
    if head is None:
        return None
    view = memoryview(body)
    labels: list[Any] = []  # label dicts, shared with ``label_sets``: read, never changed
    segments: list[memoryview] = []  # the points arrays, as views: no copy of the body
    lens: list[int] = []
    after = head.end()  # just past the previous series' points
    try:
        while (key := body.find(_VALUES_KEY, after)) >= 0:
            k = body.rfind(b'{"metric":', after, key)
            start = key + len(_VALUES_KEY)
            end = body.find(b"]]", start)
            if k < 0 or end < 0 or body[key - 1:key] != b"," or body[start:start + 1] != b"[":
                return None
            raw = body[k + 10:key - 1]
            metric = label_sets.get((keep, raw)) if label_sets is not None else None
            if metric is None:
                metric = orjson.loads(raw)
                if keep is not None and isinstance(metric, dict):
                    metric = {n: v for n, v in metric.items() if n in keep}
                if label_sets is not None:
                    label_sets[keep, raw] = metric
            labels.append(metric)
            segments.append(view[start:end + 1])
            lens.append(body.count(b"]", start, end + 1))
            after = end + 2
        if not segments or body[after:after + 1] != b"}":
            return None  # no series (small: orjson takes it), or not the shape we know
        envelope = orjson.loads(body[:head.end()] + body[after + 1:])
        if not isinstance(envelope, dict) or envelope.get("data") != {"resultType": "matrix", "result": []}:
            return None
        blob = b",".join([b"", *segments]).translate(_POINTS, b"[")
        del segments, view
        table = pa_csv.read_csv(pa.py_buffer(blob), read_options=_CSV_READ, parse_options=_CSV_PARSE,
                                convert_options=_CSV_CONVERT)
        del blob
        points = pl.DataFrame(table)
    except (ValueError, orjson.JSONDecodeError, pa.ArrowException, pl.exceptions.PolarsError):
        return None
    if points.height != sum(lens) or points["ts"].null_count() or points["value"].null_count():
        return None
    if not all(isinstance(m, dict) for m in labels):
        return None
    return Matrix(labels, np.array(lens, dtype=np.int64), points["ts"], points["value"], _warnings(envelope))


def matrix_of(result: list[dict[str, Any]], warnings: list[str] | None = None,
              keep: frozenset[str] | None = None) -> Matrix:
    """A decoded ``result`` list -> Matrix (the generic path: any key order, any spacing).

    The points are flattened with C-level iteration ([t0, "v0", t1, "v1", ...]) and sliced
    into two columns. A series with only native histograms has no points here.
    """
    lens = np.fromiter((len(r.get("values") or ()) for r in result), dtype=np.int64, count=len(result))
    flat = list(chain.from_iterable(chain.from_iterable(r.get("values") or () for r in result)))
    ts = pl.Series("ts", flat[0::2], dtype=pl.Float64, strict=False)
    values = pl.Series("value", flat[1::2], dtype=pl.Utf8, strict=False).cast(pl.Float64, strict=False)
    labels = [r.get("metric") or {} for r in result]
    if keep is not None:
        labels = [{n: v for n, v in m.items() if n in keep} for m in labels]
    return Matrix(labels, lens, ts, values, list(warnings or []))

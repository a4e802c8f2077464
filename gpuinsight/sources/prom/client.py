"""HTTP to the Prometheus API (Prometheus, Thanos, Mimir, VictoriaMetrics) and fast decoding.

The connection is prometheus-api-client's ``PrometheusConnect`` (its session carries the URL,
auth, TLS and headers), but range data does not go through its pandas path: we call
``/api/v1/query_range`` on the same session, decode with orjson and build the series frame
column-wise, which is several times faster and uses far less memory.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from itertools import chain
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import orjson
import polars as pl
import requests
from prometheus_api_client import PrometheusConnect
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from gpuinsight.config import PrometheusConfig
from gpuinsight.errors import BadInput, RuntimeFailure
from gpuinsight.sources.prom.frames import TS, empty_series
from gpuinsight.sources.prom.promql import Matcher, Query, regex_literal, selector


def redact_url(url: str) -> str:
    """The URL without user:password, query or fragment: safe for logs and ``ingest_state``."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class PromClient:
    def __init__(self, pcfg: PrometheusConfig, *, pool_size: int = 10) -> None:
        if not pcfg.url:
            raise BadInput("Prometheus: no URL given (--url)")
        parts = urlsplit(pcfg.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadInput(f"Prometheus URL {redact_url(pcfg.url)!r}: expected http(s)://host[:port][/path]")
        self.cfg = pcfg
        self.base = pcfg.url.rstrip("/")
        self.where = redact_url(pcfg.url)
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
        self.bytes_read = 0

    # -- raw calls -------------------------------------------------------------------------
    def get(self, path: str, params: dict[str, Any] | list[tuple[str, Any]], what: str) -> Any:
        """GET ``path`` and return the ``data`` member of the Prometheus answer."""
        return self._data(self.get_body(path, params, what), what)

    def get_body(self, path: str, params: dict[str, Any] | list[tuple[str, Any]], what: str) -> bytes:
        """GET with bounded retries on 5xx/429/timeouts; the body of a JSON answer."""
        cfg = self.cfg
        last = ""
        for attempt in range(cfg.retries + 1):
            if attempt:
                time.sleep(min(8.0, 0.25 * 2 ** attempt) * (0.75 + 0.5 * random.random()))
            try:
                resp = self.session.get(f"{self.base}{path}", params=params, headers=self.headers, auth=self.auth,
                                        timeout=(min(10.0, cfg.timeout_s), cfg.timeout_s))
            except requests.exceptions.SSLError as exc:
                raise RuntimeFailure(f"{self.where}: TLS error ({exc.__class__.__name__}); "
                                     "check --ca-file or use --insecure") from exc
            except (requests.Timeout, requests.ConnectionError) as exc:
                timed_out = isinstance(exc, requests.Timeout) or "timed out" in str(exc).lower()
                last = "timed out" if timed_out else "connection failed"
                continue
            if resp.status_code >= 500 or resp.status_code == 429:
                last = f"HTTP {resp.status_code}"
                continue
            return self._body(resp, what)
        raise RuntimeFailure(f"{self.where}: {what}: gave up after {cfg.retries + 1} attempts ({last})")

    def _body(self, resp: requests.Response, what: str) -> bytes:
        code = resp.status_code
        if code in (401, 403):
            raise RuntimeFailure(f"{self.where}: HTTP {code}: not authorised (check the bearer token / basic auth)")
        ctype = resp.headers.get("Content-Type", "")
        if not ctype.split(";")[0].strip().lower().endswith("json"):
            raise BadInput(f"{self.where}: {what}: answer is {ctype or 'untyped'} (HTTP {code}), not Prometheus "
                           "JSON; is the URL the Prometheus API root?")
        body = resp.content
        self.bytes_read += len(body)
        return body

    def _data(self, body: bytes, what: str) -> Any:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadInput(f"{self.where}: {what}: malformed JSON in the answer ({exc})") from exc
        if not isinstance(doc, dict) or "status" not in doc:
            raise BadInput(f"{self.where}: {what}: JSON answer is not a Prometheus API response")
        if doc["status"] != "success":
            msg = f"{self.where}: {what}: {doc.get('errorType', 'error')}: {doc.get('error', '')}"
            if doc.get("errorType") == "bad_data":
                raise BadInput(msg)
            raise RuntimeFailure(msg)
        return doc.get("data")

    # -- API -------------------------------------------------------------------------------
    def query_range(self, q: Query) -> pl.DataFrame:
        body = self.get_body("/api/v1/query_range", {"query": q.expr, "start": q.start, "end": q.end, "step": q.step},
                             q.expr)
        fast = fast_matrix(body, q.metric, q.shift_s, q.keep)
        if fast is not None:
            return fast
        data = self._data(body, q.expr)
        if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            raise BadInput(f"{self.where}: {q.expr}: expected a matrix result")
        return matrix_frame(data["result"], q.metric, q.shift_s, q.keep)

    def metric_names(self, wanted: list[str], start: int, end: int, matchers: Sequence[Matcher] = ()) -> list[str]:
        """Which of ``wanted`` have series in the window (servers without match[] return all)."""
        sel = selector(None, [("__name__", "=~", "|".join(regex_literal(n) for n in wanted)), *matchers])
        data = self.get("/api/v1/label/__name__/values", [("match[]", sel), ("start", start), ("end", end)],
                        "label values of __name__")
        present = set(data or [])
        return [w for w in wanted if w in present]

    def series(self, match: str, start: int, end: int) -> list[dict[str, str]]:
        data = self.get("/api/v1/series", [("match[]", match), ("start", start), ("end", end)], f"series {match}")
        return list(data or [])


_MATRIX_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['


def fast_matrix(body: bytes, metric: str, shift_s: float = 0, keep: frozenset[str] | None = None
                ) -> pl.DataFrame | None:
    """The bulk path for a plain Prometheus matrix answer, or None to use the generic one.

    In the compact JSON Prometheus writes, an unescaped ``"values":[`` can only be the key
    (inside a label value the quotes would be escaped), and the points ``[t,"v"]`` hold no
    ``]``; so the points of all series are cut out as bytes, turned into two-column CSV and
    read by polars' multi-threaded CSV reader, and only the small ``metric`` objects go
    through orjson. Anything unexpected (other key order, warnings, native histograms,
    truncation) returns None and the answer is decoded in full by orjson instead.
    """
    if not body.startswith(_MATRIX_HEAD) or not body.rstrip().endswith(b"]}}"):
        return None
    try:
        parts = body[len(_MATRIX_HEAD):].split(b'"values":[')
        if len(parts) == 1:
            return empty_series() if body[len(_MATRIX_HEAD):].strip() == b"]}}" else None
        metrics, values = [], []
        for i in range(1, len(parts)):
            prev, cur = parts[i - 1], parts[i]
            k = prev.rfind(b'{"metric":')
            if k < 0 or not prev.endswith(b","):
                return None
            metrics.append(orjson.loads(prev[k + 10:-1]))
            end = cur.index(b"]]")
            values.append(cur[1:end])
        if not parts[-1][parts[-1].index(b"]]"):].startswith(b"]]}]}}"):
            return None
        lens = np.fromiter((v.count(b"],[") + 1 for v in values), dtype=np.int64, count=len(values))
        blob = b"\n".join(values).replace(b"],[", b"\n")
        points = pl.read_csv(blob, has_header=False, new_columns=["ts", "value"],
                             schema={"ts": pl.Float64, "value": pl.Utf8}, quote_char='"')
    except (ValueError, orjson.JSONDecodeError, pl.exceptions.PolarsError):
        return None
    if points.height != int(lens.sum()):
        return None
    return _assemble(metrics, lens, points["ts"], points["value"], metric, shift_s, keep)


def matrix_frame(result: list[dict[str, Any]], metric: str, shift_s: float = 0,
                 keep: frozenset[str] | None = None) -> pl.DataFrame:
    """A Prometheus matrix result -> series frame, without a Python object per row.

    The points are flattened with C-level iteration ([t0, "v0", t1, "v1", ...]) and sliced into
    two columns; labels are one small frame per series, gathered by series index.
    """
    if not result:
        return empty_series()
    lens = np.fromiter((len(r["values"]) for r in result), dtype=np.int64, count=len(result))
    flat = list(chain.from_iterable(chain.from_iterable(r["values"] for r in result)))
    ts = pl.Series("ts", flat[0::2], dtype=pl.Float64)
    value = pl.Series("value", flat[1::2], dtype=pl.Utf8)
    return _assemble([r["metric"] for r in result], lens, ts, value, metric, shift_s, keep)


def _assemble(metrics: list[dict[str, str]], lens: np.ndarray, ts: pl.Series, value: pl.Series, metric: str,
              shift_s: float, keep: frozenset[str] | None = None) -> pl.DataFrame:
    value = value.cast(pl.Float64, strict=False).alias("value")
    if keep is not None:
        metrics = [{k: v for k, v in m.items() if k in keep} for m in metrics]
    labels = pl.DataFrame(metrics, infer_schema_length=None)
    labels = labels.drop([c for c in ("__name__", "metric", "ts", "value") if c in labels.columns])
    idx = pl.Series(np.repeat(np.arange(len(metrics), dtype=np.uint32), lens))
    frame = pl.DataFrame([
        pl.Series("metric", [metric], dtype=pl.Utf8).new_from_index(0, len(ts)),
        ((ts - shift_s) * 1_000_000).round(0).cast(pl.Int64).cast(TS).alias("ts"),
        value,
    ])
    if labels.width:
        frame = pl.concat([frame, labels.select(pl.all().cast(pl.Utf8)).select(pl.all().gather(idx))], how="horizontal")
    return frame

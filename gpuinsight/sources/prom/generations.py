"""What the server holds, asked before planning: exporter generation, scrape interval, KSM version.

* DCGM-like metric names (every dcgm-exporter generation starts with ``dcgm_``, case aside):
  when some exist but none is a name gpuinsight maps, the collection is refused naming them,
  rather than succeeding with nothing loaded.
* The scrape interval of the DCGM series: the server-side filter takes one reading per
  interval (see :func:`promql.dcgm_exprs`).
* Whether kube-state-metrics puts ``uid`` on its pod series (v2.1 and later): if not, pods are
  joined to ``kube_pod_info`` by namespace and name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuinsight.errors import BadInput
from gpuinsight.sources.dcgm import BY_SPELLING, FIELDS
from gpuinsight.sources.prom import promql
from gpuinsight.sources.prom.promql import Matcher

DEFAULT_INTERVAL_S = 30  # dcgm-exporter's default collect interval (-c 30000)
_PROBE_WINDOW_S = 900


@dataclass
class Generations:
    resolution_s: int
    pod_key: str
    dcgm_like: list[str]
    mapped: list[str]
    warnings: list[str] = field(default_factory=list)  # the answers' warnings (a partial answer?)

    def details(self) -> dict[str, Any]:
        return {"scrape_interval_s": self.resolution_s, "pod_join": self.pod_key,
                "dcgm_like_metrics": len(self.dcgm_like)}

    def notes(self) -> list[str]:
        out = []
        unread = sorted(set(self.dcgm_like) - set(self.mapped))
        if self.dcgm_like:
            out.append(f"DCGM-like metrics: {len(self.dcgm_like)} seen, {len(self.mapped)} mapped"
                       + (f"; not read: {', '.join(unread[:12])}{' ...' if len(unread) > 12 else ''}" if unread else ""))
        if self.pod_key == promql.POD_BY_NAME:
            out.append("kube-state-metrics pod series carry no `uid` (before v2.1): pods joined to kube_pod_info "
                       "by namespace + pod")
        return out


def probe_generations(client: Any, names: list[str], start: int, end: int, step: int,
                      matchers: list[Matcher]) -> Generations:
    warnings: list[str] = []
    like = _dcgm_like(client, start, end, matchers, warnings)
    if like and not names:
        supported = ", ".join(f.name for f in FIELDS)
        raise BadInput(f"{client.where}: {len(like)} DCGM-like metric(s) ({', '.join(like[:6])}"
                       f"{' ...' if len(like) > 6 else ''}) but none gpuinsight reads; it maps {supported} and their "
                       "lower-case and dcgm-exporter 1.x names")
    old_ksm, said = client.series(promql.selector("kube_pod_container_resource_requests",
                                                  [("resource", "=~", promql.GPU_RESOURCES), ("uid", "=", ""),
                                                   *matchers]), start, end)
    warnings += said
    return Generations(resolution_s=_interval(client, names, start, end, step, matchers, warnings),
                       pod_key=promql.POD_BY_NAME if old_ksm else promql.POD_BY_UID,
                       dcgm_like=like, mapped=[n for n in like if n in BY_SPELLING], warnings=warnings)


def _dcgm_like(client: Any, start: int, end: int, matchers: list[Matcher], warnings: list[str]) -> list[str]:
    sel = promql.selector(None, [("__name__", "=~", "(?i)dcgm_.+"), *matchers])
    data, said = client.get("/api/v1/label/__name__/values", [("match[]", sel), ("start", start), ("end", end)],
                      "label values of __name__")
    warnings += said
    # servers that ignore match[] return every name
    return sorted(n for n in (data or []) if isinstance(n, str) and n.lower().startswith("dcgm_"))


def _interval(client: Any, names: list[str], start: int, end: int, step: int, matchers: list[Matcher],
              warnings: list[str]) -> int:
    """Seconds between two readings of a DCGM series: the raw samples of one field over the last
    15 minutes of the window (else its first 15), the smallest per-series median gap. A count
    over a fixed span would be fooled by a series that lived only part of it."""
    probe = [n for n in names if BY_SPELLING[n].name == "DCGM_FI_DEV_FB_USED"] or names[:1]
    if not probe:
        return min(DEFAULT_INTERVAL_S, step)
    sel = f"{promql.selector(probe[0], matchers)}[{_PROBE_WINDOW_S}s]"
    for at in dict.fromkeys((end, min(end, start + _PROBE_WINDOW_S))):
        data, said = client.get("/api/v1/query", [("query", sel), ("time", at)], sel)
        warnings += said
        gaps = []
        for series in (data or {}).get("result") or [] if isinstance(data, dict) else []:
            times = sorted(float(v[0]) for v in series.get("values") or [] if isinstance(v, list) and v)
            diffs = sorted(b - a for a, b in zip(times, times[1:], strict=False) if b > a)
            if diffs:
                gaps.append(diffs[len(diffs) // 2])
        if gaps:
            return max(1, min(int(round(min(gaps))), step))
    return min(DEFAULT_INTERVAL_S, step)

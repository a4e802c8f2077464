"""What the rules read from the inference servers' metrics (``unit_economics``): the one place a
finding learns a serving workload's tokens, its cost per million tokens and its latency.

* A consolidation or MIG finding on a serving workload states the cost per 1M tokens after the
  change: today's cost per token x (the share of a GPU it pays after / the GPUs it holds now), the
  tokens being the ones it serves today (the change moves no traffic). Its latency evidence is the
  p95 time to first token observed at today's load, which is the load the slice will see; how the
  smaller slice changes it is not measured, and the finding says so rather than promise it.
* A serving workload that held GPUs for the whole window and served no token is idle, whatever its
  GPU activity says (a server polling or compiling keeps the GR engine busy with no work).
"""

from __future__ import annotations

from typing import Any

from gpuinsight.rules.common import num
from gpuinsight.rules.context import PlanContext

MODEL = "unit_economics"


def serving_by_workload(frames: dict[str, Any], ctx: PlanContext) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(cluster, namespace, workload) -> its serving totals over every model it served."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in ctx.rows(frames, MODEL):
        key = (str(r.get("cluster") or ""), r["namespace"], r["workload"])
        acc = out.setdefault(key, {"tokens": 0.0, "cost_usd": 0.0, "hours": 0, "ttft_p95_s": None,
                                   "models": [], "servers": set(), "price_missing": False})
        acc["tokens"] += num(r.get("tokens"))
        acc["cost_usd"] += num(r.get("cost_usd"))
        acc["hours"] = max(acc["hours"], int(num(r.get("hours"))))
        acc["price_missing"] = acc["price_missing"] or bool(r.get("price_missing"))
        if r.get("ttft_p95_s") is not None:
            acc["ttft_p95_s"] = max(num(acc["ttft_p95_s"]), num(r.get("ttft_p95_s")))
        acc["models"].append(r.get("model_name") or "")
        acc["servers"].add(r.get("server") or "")
    return out


def unit_cost_evidence(serving: dict[str, Any] | None, gpus_now: float, gpus_after: float) -> dict[str, Any]:
    """Evidence fields of a consolidation finding on a serving workload (empty for other work)."""
    if not serving or serving["tokens"] <= 0 or serving["price_missing"] or gpus_now <= 0:
        return {}
    now = serving["cost_usd"] / serving["tokens"] * 1e6
    return {
        "usd_per_1m_tokens": round(now, 4),
        "usd_per_1m_tokens_after": round(now * gpus_after / gpus_now, 4),
        "tokens_per_hour": round(serving["tokens"] / max(serving["hours"], 1), 1),
        "models": sorted(set(serving["models"])),
        "ttft_p95_s_observed": None if serving["ttft_p95_s"] is None else round(serving["ttft_p95_s"], 4),
        "latency_basis": ("p95 time to first token observed at today's load, the load the slice will see; "
                          "its latency on the slice is not measured"),
    }


def served_nothing(serving: dict[str, Any] | None, min_hours: float) -> bool:
    """Held GPUs for at least ``min_hours`` hours of serving metrics and served no token."""
    return bool(serving) and serving["tokens"] == 0 and serving["hours"] >= min_hours

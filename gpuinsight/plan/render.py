"""A plan as people and tools read it: a table (``recommend``), CSV, JSON (the fixed
recommendation array of design.md) or YAML."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import yaml

from gpuinsight.plan.model import Plan, target_of

FORMATS = ("table", "json", "yaml", "csv")


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


def plan_json(plan: Plan) -> str:
    """The fixed interface (``recommend --format json``, the demo's recommendations.json)."""
    return json.dumps(plan.to_json_obj(), indent=2, default=str)


def plan_yaml(plan: Plan) -> str:
    data: Any = json.loads(json.dumps(plan.to_json_obj(), default=str))
    return yaml.safe_dump(data, sort_keys=False)


def render(plan: Plan, fmt: str) -> str:
    """The plan in ``fmt`` (one of :data:`FORMATS`), without a final newline for table/json/yaml
    as each is printed with one."""
    if fmt == "json":
        return plan_json(plan)
    if fmt == "yaml":
        return plan_yaml(plan)
    if fmt == "csv":
        return plan_csv(plan)
    return plan_table(plan)

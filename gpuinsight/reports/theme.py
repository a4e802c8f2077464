"""One look for every chart: the same colour always means the same bucket, rule or measure.

Chart builders use the scales here; :data:`CONFIG` is the chart-level configuration (fonts,
sizes) that the HTML report applies, and :func:`themed` applies it to a chart in a notebook.
"""

from __future__ import annotations

from typing import Any

import altair as alt

from gpuinsight.plan.kinds import KINDS

# Where GPU money goes. Used is the only "good" bucket; the others are waste of different kinds.
BUCKETS: tuple[str, ...] = ("used", "idle", "underused", "unallocated", "unmeasured")
# What each bucket means (said after its name, so never the name again).
BUCKET_LABELS: dict[str, str] = {
    "used": "the busy share of allocated GPUs (GR engine active)",
    "idle": "allocated to a pod that kept the GPU under 5 % active",
    "underused": "the inactive share of allocated GPUs that were at least 5 % active",
    "unallocated": "capacity no pod requested",
    "unmeasured": "allocated to pods with no DCGM samples",
}
BUCKET_COLORS: dict[str, str] = {
    "used": "#2e7d32",
    "idle": "#c62828",
    "underused": "#f9a825",
    "unallocated": "#78909c",
    "unmeasured": "#cfd8dc",
}
WASTE_BUCKETS: tuple[str, ...] = ("idle", "underused", "unallocated")

# Finding kinds (the ``rule`` of a recommendation): their order, colours and labels are the
# kinds' own (gpuinsight.plan.kinds), so a new kind has them wherever the report draws one.
RULES: tuple[str, ...] = tuple(k.name for k in KINDS)
RULE_COLORS: dict[str, str] = {k.name: k.colour for k in KINDS}
RULE_LABELS: dict[str, str] = {k.name: k.label for k in KINDS}

# Volcano queue measures.
QUEUE_MEASURES: tuple[str, ...] = ("guarantee", "deserved", "capability", "allocated (avg)", "used (avg)")
QUEUE_COLORS: dict[str, str] = {
    "guarantee": "#90a4ae",
    "deserved": "#1565c0",
    "capability": "#bbdefb",
    "allocated (avg)": "#ef6c00",
    "used (avg)": "#2e7d32",
}

# Free GPUs by the kind of node they sit on.
FRAGMENT_KINDS: tuple[str, ...] = ("on partly-used nodes", "on empty nodes")
FRAGMENT_COLORS: dict[str, str] = {"on partly-used nodes": "#ef6c00", "on empty nodes": "#90a4ae"}

# MIG fit: the smallest instance class the mig rule's fit gives a workload (an instance of all 7
# slices is the whole GPU).
FIT_CLASSES: tuple[str, ...] = ("1g", "2g", "3g", "4g", "whole GPU", "not measured")
FIT_COLORS: dict[str, str] = {
    "1g": "#1b5e20",
    "2g": "#43a047",
    "3g": "#9ccc65",
    "4g": "#fbc02d",
    "whole GPU": "#c62828",
    "not measured": "#b0bec5",
}

# Which grouping stands in for "everything else" when only the top groups are drawn.
OTHER = "(other)"
UNALLOCATED = "(unallocated)"
OTHER_COLOR = "#b0bec5"
GROUP_SCHEME = "tableau10"

# Utilization heatmap: low activity is the interesting (wasteful) end, so it is the dark end.
HEATMAP_SCHEME = "viridis"

WIDTH = 760
FONT = "Liberation Sans, Helvetica, Arial, sans-serif"

CONFIG: dict[str, Any] = {
    "font": FONT,
    "view": {"stroke": None, "continuousWidth": WIDTH, "continuousHeight": 300},
    "title": {"fontSize": 15, "anchor": "start", "subtitleFontSize": 11, "subtitleColor": "#546e7a",
              "offset": 10},
    "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#eceff1"},
    "legend": {"labelFontSize": 11, "titleFontSize": 12, "labelLimit": 260},
    "header": {"labelFontSize": 12, "titleFontSize": 12},
}


def present(order: tuple[str, ...], values: list[str]) -> list[str]:
    """The values that occur, in the theme's order (unknown ones last): a legend lists only
    what the chart draws."""
    seen = set(values)
    return [v for v in order if v in seen] + sorted(seen - set(order) - {None})  # type: ignore[arg-type]


def scale_for(colors: dict[str, str], domain: tuple[str, ...] | list[str] | None = None) -> alt.Scale:
    """A categorical colour scale with a fixed domain order, so colours never shift."""
    keys = list(domain) if domain is not None else list(colors)
    return alt.Scale(domain=keys, range=[colors.get(k, OTHER_COLOR) for k in keys])


def bucket_scale(buckets: tuple[str, ...] | list[str] = BUCKETS) -> alt.Scale:
    return scale_for(BUCKET_COLORS, list(buckets))


def rule_scale(rules: tuple[str, ...] | list[str] = RULES) -> alt.Scale:
    return scale_for(RULE_COLORS, list(rules))


def group_scale(groups: list[str]) -> alt.Scale:
    """Top groups get the categorical scheme in rank order; "(...)" labels are greys."""
    palette = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
               "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"]
    colors: list[str] = []
    i = 0
    for g in groups:
        if g.startswith("("):
            colors.append(OTHER_COLOR if g == OTHER else BUCKET_COLORS["unallocated"])
        else:
            colors.append(palette[i % len(palette)])
            i += 1
    return alt.Scale(domain=groups, range=colors)


def themed(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    """Apply the report look to a chart (for notebooks; the HTML report does this itself)."""
    return chart.configure(**CONFIG)  # type: ignore[attr-defined, no-any-return]

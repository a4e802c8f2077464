"""Shared pieces of the chart builders: the chart type, titles, time axes, placeholders."""

from __future__ import annotations

import math
from datetime import datetime

import altair as alt
import polars as pl

from gpuinsight.reports.theme import WIDTH

ChartLike = alt.Chart | alt.LayerChart | alt.HConcatChart | alt.VConcatChart | alt.FacetChart

USD = "$,.0f"


def heading(text: str, *subtitle: str) -> alt.TitleParams:
    """A title with its non-empty subtitle lines."""
    return alt.TitleParams(text, subtitle=[s for s in subtitle if s])


def time_axis(start: datetime | None, end: datetime | None) -> alt.Axis:
    """Day ticks labelled "08 Jan" for multi-day windows, hours otherwise."""
    span_h = (end - start).total_seconds() / 3600 if start and end else 0
    if span_h <= 48:
        return alt.Axis(format="%d %b %H:%M", labelOverlap=True)
    step = max(1, math.ceil(span_h / 24 / 14))
    return alt.Axis(format="%d %b", tickCount=alt.TimeIntervalStep(interval="day", step=step), labelOverlap=True)


def padded(values: pl.Series, pad: float = 1.2) -> alt.Scale:
    """Room to the right of the longest bar for its value label."""
    top = float(values.max() or 0.0)
    return alt.Scale(domain=[0, top * pad if top > 0 else 1], nice=False)


def placeholder(title: str, message: str, subtitle: str = "") -> alt.Chart:
    """A chart that only says why there is nothing to draw."""
    data = pl.DataFrame({"message": [message]})
    return (
        alt.Chart(data)
        .mark_text(fontSize=14, color="#546e7a", align="center")
        .encode(text="message:N")
        .properties(title=heading(title, subtitle), width=WIDTH, height=60)
    )

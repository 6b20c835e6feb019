"""Overview: every queue with its counts, refreshed in place (the counts table is a fragment).

Counts are exact up to a cap and never read more than that: above it, a count is estimated from
a random sample of the table's pages ("≈ 71,000").
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pgqueue.dashboard.core import Dashboard, NavItem, format_when
from pgqueue.dashboard.counting import count_queues
from pgqueue.dashboard.pages.queues import rate_text
from pgqueue.dashboard.pages.workflows import STATE_NOTES
from pgqueue.store import WORKFLOW_COUNT_CAP, ThroughputBucket

NAV = NavItem("Overview", "/", "overview")
# The throughput chart's ranges: (label, span in minutes, bucket in minutes), aggregated in SQL.
RANGES = {"hour": ("last hour", 60, 1), "day": ("last day", 1440, 15)}
CHART_WIDTH, CHART_HEIGHT = 720, 140
OUTCOMES = (("succeeded", "#2f855a"), ("retried", "#d69e2e"), ("failed", "#c53030"), ("cancelled", "#718096"))
# Time axis: a labelled tick every this many buckets (hour: every 10 minutes; day: every 3 hours).
TICK_EVERY = {1: 10, 15: 12}


@dataclass(frozen=True)
class Bar:
    """One bucket of the chart: its counts and the stacked rectangles (y, height, colour) drawn."""

    bucket: ThroughputBucket
    x: float
    width: float
    parts: list[tuple[str, float, float, str]]


def chart_bars(buckets: list[ThroughputBucket]) -> tuple[list[Bar], int]:
    """Bars scaled to the tallest bucket (its total is returned, 0: nothing finished)."""
    peak = max((b.total for b in buckets), default=0)
    step = CHART_WIDTH / max(len(buckets), 1)
    bars = []
    for index, bucket in enumerate(buckets):
        parts, base = [], float(CHART_HEIGHT)
        for outcome, colour in OUTCOMES:
            value = getattr(bucket, outcome)
            if value and peak:
                height = value * CHART_HEIGHT / peak
                base -= height
                parts.append((outcome, round(base, 2), round(height, 2), colour))
        bars.append(Bar(bucket, round(index * step, 2), round(max(step - 1, 1), 2), parts))
    return bars, peak


def chart_ticks(bars: list[Bar]) -> list[tuple[float, str]]:
    """The time axis: (x, label) of a tick every few buckets, labelled HH:MM UTC."""
    if not bars:
        return []
    every = TICK_EVERY.get(bars[0].bucket.minutes, max(len(bars) // 6, 1))
    return [(bar.x, format_when(bar.bucket.start)[11:16]) for index, bar in enumerate(bars) if index % every == 0]


def routes(dash: Dashboard) -> list[BaseRoute]:
    """``/`` (the page) and ``/overview/counts`` (the table alone, what the live refresh swaps in)."""

    async def counts_context() -> dict[str, Any]:
        store = await dash.store()
        # Independent reads run side by side, each on a pooled connection of its own.
        controls, listeners, flows = await asyncio.gather(store.queue_controls(), store.listeners(),
                                                          store.workflow_counts(WORKFLOW_COUNT_CAP))
        counted = await count_queues(dash, also=[c.queue for c in controls])
        return {
            "workflows": flows,  # issue 27: the live workflows by state
            "workflow_notes": STATE_NOTES,
            "rows": counted.rows,
            "controls": {c.queue: c for c in controls},
            "rate_text": rate_text,
            "totals": counted.totals,
            "listeners": len(listeners),
            "cap": dash.options.count_cap,
            "sampled": counted.sampled,
        }

    async def chart_context(request: Request) -> dict[str, Any]:
        chosen = request.query_params.get("range", "hour")
        label, span, bucket = RANGES.get(chosen, RANGES["hour"])
        queue = request.query_params.get("queue") or None
        store = await dash.store()
        # No queue name holds a NUL (nor can PostgreSQL compare one): nothing finished there.
        found = [] if queue and "\x00" in queue else await store.throughput_buckets(span, bucket, queue)
        bars, peak = chart_bars(found)
        queue = queue.replace("\x00", "\N{REPLACEMENT CHARACTER}") if queue else queue
        return {"chart_range": chosen if chosen in RANGES else "hour", "chart_label": label,
                "chart_bucket": bucket, "chart_queue": queue, "bars": bars, "peak": peak,
                "chart_width": CHART_WIDTH, "chart_height": CHART_HEIGHT, "ranges": RANGES,
                "chart_ticks": chart_ticks(bars),
                "chart_totals": {o: sum(getattr(b.bucket, o) for b in bars) for o, _ in OUTCOMES}}

    async def page(request: Request) -> Response:
        counts, chart = await asyncio.gather(counts_context(), chart_context(request))
        # Every queue listed (with jobs, failures, controls or history in the last day) can be
        # charted, idle or not, and so can the one asked for.
        asked = {chart["chart_queue"]} if chart["chart_queue"] else set()
        choices = sorted({q.queue for q, _ in counts["rows"]} | asked)
        return dash.render(request, "overview.html", page="overview", chart_queues=choices, **counts, **chart)

    async def throughput(request: Request) -> Response:
        return dash.render(request, "_throughput.html", **await chart_context(request))

    async def counts(request: Request) -> Response:
        return dash.render(request, "_counts.html", **await counts_context())

    return [Route("/", page, name="overview"), Route("/overview/counts", counts, name="overview_counts"),
            Route("/overview/throughput", throughput, name="overview_throughput")]

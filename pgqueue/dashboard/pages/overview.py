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

from pgqueue.dashboard.core import Dashboard, NavItem
from pgqueue.dashboard.pages.queues import rate_text
from pgqueue.store import QueueCounts, ThroughputBucket

NAV = NavItem("Overview", "/", "overview")
STATES = ("ready", "delayed", "reserved", "expired")
# The throughput chart's ranges: (label, span in minutes, bucket in minutes), aggregated in SQL.
RANGES = {"hour": ("last hour", 60, 1), "day": ("last day", 1440, 15)}
CHART_WIDTH, CHART_HEIGHT = 720, 140
OUTCOMES = (("succeeded", "#2f855a"), ("retried", "#d69e2e"), ("failed", "#c53030"))


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


@dataclass(frozen=True)
class Cell:
    """One count as shown: its value, and whether it is exact, a lower bound or an estimate."""

    value: int
    kind: str = "exact"   # "exact", "at least" or "estimate"
    note: str = ""

    @property
    def text(self) -> str:
        """The count as the page prints it."""
        if self.kind == "estimate":
            return f"≈ {round_estimate(self.value):,}"
        return f"{self.value:,}+" if self.kind == "at least" else f"{self.value:,}"


def round_estimate(value: int) -> int:
    """Two significant digits: the precision a page sample has."""
    if value < 100:
        return value
    magnitude = 10 ** (len(str(value)) - 2)
    return int(round(value / magnitude) * magnitude)


Sample = tuple[float, dict[str, tuple[int, int, int, int]] | dict[str, tuple[int]]]


def estimated(value: int, seen: int | None, percent: float, cap: int) -> Cell:
    """A capped count: estimated from what a sample of ``percent`` of the pages saw, never below ``value``."""
    if seen is None or percent <= 0:
        return Cell(value, "at least", f"at least {value:,}: counting stopped at {cap:,}")
    # The exact part is a floor: a sample that saw fewer (sampling noise) does not lower it.
    return Cell(max(int(seen * 100 / percent), value), "estimate",
                f"estimated from a random sample of {percent:.2g}% of the table's pages "
                f"(exact counting stops at {cap:,})")


def cells(row: QueueCounts, sample: Sample | None, failed_sample: Sample | None, cap: int,
          failed_cap: int) -> dict[str, Cell]:
    """The cells of one queue's row: exact below the cap, estimated (or "N+") above it."""
    capped = {"ready": row.due_capped, "expired": row.due_capped, "delayed": row.later_capped,
              "reserved": row.later_capped}
    out: dict[str, Cell] = {}
    for index, state in enumerate(STATES):
        value = int(getattr(row, state))
        if not capped[state]:
            out[state] = Cell(value)
        elif sample is None:
            out[state] = estimated(value, None, 0, cap)
        else:
            seen = sample[1].get(row.queue)
            out[state] = estimated(value, 0 if seen is None else seen[index], sample[0], cap)
    if not row.failed_capped:
        out["failed"] = Cell(row.failed)
    elif failed_sample is None:
        out["failed"] = estimated(row.failed, None, 0, failed_cap)
    else:
        seen = failed_sample[1].get(row.queue)
        out["failed"] = estimated(row.failed, 0 if seen is None else seen[0], failed_sample[0], failed_cap)
    return out


def totals(rows: list[dict[str, Cell]]) -> dict[str, Cell]:
    """The footer: sums, as approximate as their least exact part."""
    out = {}
    for state in (*STATES, "failed"):
        parts = [r[state] for r in rows]
        kinds = {p.kind for p in parts}
        kind = "estimate" if "estimate" in kinds else "at least" if "at least" in kinds else "exact"
        out[state] = Cell(sum(p.value for p in parts), kind)
    return out


def routes(dash: Dashboard) -> list[BaseRoute]:
    """``/`` (the page) and ``/overview/counts`` (the table alone, what the live refresh swaps in)."""

    async def counts_context() -> dict[str, Any]:
        store = await dash.store()
        options = dash.options
        # Independent reads run side by side, each on a pooled connection of its own.
        queues, estimates, listeners, controls = await asyncio.gather(
            store.queue_counts(options.count_cap, options.failed_count_cap), store.table_estimates(),
            store.listeners(), store.queue_controls())
        # A sample costs its pages: taken only when an exact count stopped at its cap.
        jobs_capped = any(q.due_capped or q.later_capped for q in queues)
        failed_capped = any(q.failed_capped for q in queues)
        sample: Sample | None = None
        failed_sample: Sample | None = None
        if jobs_capped and failed_capped:
            sample, (percent, seen) = await asyncio.gather(store.queue_sample(options.sample_pages),
                                                           store.failed_sample(options.sample_pages))
            failed_sample = (percent, {queue: (n,) for queue, n in seen.items()})
        elif jobs_capped:
            sample = await store.queue_sample(options.sample_pages)
        elif failed_capped:
            percent, seen = await store.failed_sample(options.sample_pages)
            failed_sample = (percent, {queue: (n,) for queue, n in seen.items()})
        rows = [(q, cells(q, sample, failed_sample, options.count_cap, options.failed_count_cap)) for q in queues]
        return {
            "rows": rows,
            "controls": {c.queue: c for c in controls},
            "rate_text": rate_text,
            "totals": totals([c for _, c in rows]),
            "estimates": estimates,
            "listeners": len(listeners),
            "cap": options.count_cap,
            "sampled": sample is not None or failed_sample is not None,
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
                "chart_totals": {o: sum(getattr(b.bucket, o) for b in bars) for o, _ in OUTCOMES}}

    async def page(request: Request) -> Response:
        counts, chart = await asyncio.gather(counts_context(), chart_context(request))
        return dash.render(request, "overview.html", page="overview", **counts, **chart)

    async def throughput(request: Request) -> Response:
        return dash.render(request, "_throughput.html", **await chart_context(request))

    async def counts(request: Request) -> Response:
        return dash.render(request, "_counts.html", **await counts_context())

    return [Route("/", page, name="overview"), Route("/overview/counts", counts, name="overview_counts"),
            Route("/overview/throughput", throughput, name="overview_throughput")]

"""Queues: each queue's controls (paused, concurrency and rate limits), with pause / resume and limits,
and the busiest partitions of each queue with per-partition limits or fair shares (issue 28, read only).

The controls are rows of ``pgqueue.queues``, set through the public API (``Client.pause``,
``resume``, ``set_limits``): the reservation function enforces them for every worker, so the
page only shows and sets them.
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pgqueue import QueueConfigurationError, QueueControl, format_rate, parse_rate
from pgqueue.dashboard.core import Dashboard, NavItem
from pgqueue.dashboard.counting import count_queues
from pgqueue.store import PartitionStatus, Store

NAV = NavItem("Queues", "/queues", "queues")

#: The partitions shown per queue served by partition, busiest first.
PARTITIONS_SHOWN = 10

# pgqueue.queues.concurrency is an integer column.
MAX_CONCURRENCY = 2_147_483_647


def rate_text(control: QueueControl | None) -> str:
    """A queue's rate limit as the form takes it back (``"100/s"``, ``"5/2s"``), or "" for none."""
    if control is None or control.rate_limit is None or control.rate_period is None:
        return ""
    return format_rate(control.rate_limit, control.rate_period)


def parse_concurrency(text: str) -> int | None:
    """The concurrency field: empty is no limit, else a whole number >= 1 (named when it is not)."""
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not text.isdigit() or not 1 <= value <= MAX_CONCURRENCY:
        raise QueueConfigurationError(
            f"concurrency {text!r} is not a whole number from 1 to {MAX_CONCURRENCY:,} (leave it empty for no "
            "limit); the limits were not changed")
    return value


def field(form: FormData, name: str) -> str:
    """A text field of the form, stripped ("" when absent)."""
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def queue_of(form: FormData) -> str:
    """The queue an action names (raises QueueConfigurationError when none is)."""
    queue = field(form, "queue")
    if not queue:
        raise QueueConfigurationError("no queue was named; nothing was changed")
    return queue


async def partition_tables(store: Store, controls: list[QueueControl]) -> list[tuple[QueueControl,
                                                                                  list[PartitionStatus]]]:
    """The busiest partitions of each queue with per-partition limits or fair shares (issue 28)."""
    return [(c, await store.partition_status(c.queue, PARTITIONS_SHOWN)) for c in controls
            if c.fair or c.partition_concurrency is not None or c.partition_rate_limit is not None]


def _kept(current: QueueControl | None, rated: bool, *, cleared: bool
          ) -> tuple[int | None, tuple[int, int] | None, float | None]:
    """The form has no burst or adaptive fields: the burst, the adaptive bounds and the cut's factor
    (issue 28, revision 0010) set from the CLI, Python or SQL, kept (the burst only with a rate;
    Clear removes the first two and resets the factor)."""
    if current is None or cleared:
        return None, None, None
    adaptive = None
    if current.adaptive_min is not None and current.adaptive_max is not None:
        adaptive = (current.adaptive_min, current.adaptive_max)
    return (current.burst if rated else None), adaptive, current.adaptive_decrease


def routes(dash: Dashboard) -> list[BaseRoute]:
    """``/queues`` (the page) and its actions: pause, resume, set or clear the limits of a queue."""

    async def page(request: Request) -> Response:
        store = await dash.store()
        controls = await store.queue_controls()
        # The overview's counts, computed the same way, so the two pages agree.
        counted = await count_queues(dash, also=[c.queue for c in controls])
        by_queue, partitions = {c.queue: c for c in controls}, await partition_tables(store, controls)
        rows = [(q.queue, by_queue.get(q.queue), cells) for q, cells in counted.rows]
        return dash.render(request, "queues.html", page="queues", rows=rows, rate_text=rate_text,
                           cap=dash.options.count_cap, partitions=partitions, format_rate=format_rate)

    async def pause(request: Request) -> Response:
        async def run(form: FormData) -> str:
            queue = queue_of(form)
            if await dash.client.pause(queue, connection=dash.options.connection):
                return f"paused queue {queue!r}: no worker reserves from it until it is resumed"
            return f"queue {queue!r} was already paused"
        return await dash.action(request, run)

    async def resume(request: Request) -> Response:
        async def run(form: FormData) -> str:
            queue = queue_of(form)
            if await dash.client.resume(queue, connection=dash.options.connection):
                return f"resumed queue {queue!r}: workers reserve from it again"
            return f"queue {queue!r} was not paused"
        return await dash.action(request, run)

    async def limits(request: Request) -> Response:
        async def run(form: FormData) -> str:
            queue = queue_of(form)
            if form.get("clear"):
                concurrency, rate = None, None
            else:
                concurrency = parse_concurrency(field(form, "concurrency"))
                text = field(form, "rate")
                rate = parse_rate(text) if text else None
            controls = await dash.client.controls(connection=dash.options.connection)
            burst, adaptive, cut = _kept(next((c for c in controls if c.queue == queue), None), rate is not None,
                                         cleared=bool(form.get("clear")))
            await dash.client.set_limits(queue, concurrency=concurrency,
                                         rate_limit=None if rate is None else rate[0],
                                         rate_period=None if rate is None else rate[1],
                                         burst=burst, adaptive=adaptive, adaptive_decrease=cut,
                                         connection=dash.options.connection)
            if concurrency is None and rate is None:
                return f"cleared the limits of queue {queue!r}"
            said = [f"concurrency {concurrency}" if concurrency is not None else "no concurrency limit",
                    f"rate {field(form, 'rate')}" if rate is not None else "no rate limit"]
            return f"queue {queue!r}: {', '.join(said)}"
        return await dash.action(request, run)

    return [
        Route("/queues", page, name="queues"),
        Route("/queues/pause", pause, methods=["POST"], name="queue_pause"),
        Route("/queues/resume", resume, methods=["POST"], name="queue_resume"),
        Route("/queues/limits", limits, methods=["POST"], name="queue_limits"),
    ]

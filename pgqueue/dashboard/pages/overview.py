"""Overview: every queue with its counts, refreshed in place (the counts table is a fragment)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pgqueue.dashboard.core import Dashboard, NavItem

NAV = NavItem("Overview", "/", "overview")


def routes(dash: Dashboard) -> list[BaseRoute]:
    """``/`` (the page) and ``/overview/counts`` (the table alone, what the live refresh swaps in)."""

    async def counts_context() -> dict[str, Any]:
        store = await dash.store()
        queues = await store.queue_counts(dash.options.count_cap)
        return {
            "queues": queues,
            "estimates": await store.table_estimates(),
            "listeners": len(await store.listeners()),
            "cap": dash.options.count_cap,
            "totals": {
                "ready": sum(q.ready for q in queues), "delayed": sum(q.delayed for q in queues),
                "reserved": sum(q.reserved for q in queues), "expired": sum(q.expired for q in queues),
                "failed": sum(q.failed for q in queues),
                "due_capped": any(q.due_capped for q in queues),
                "later_capped": any(q.later_capped for q in queues),
                "failed_capped": any(q.failed_capped for q in queues),
            },
        }

    async def page(request: Request) -> Response:
        return dash.render(request, "overview.html", page="overview", **await counts_context())

    async def counts(request: Request) -> Response:
        return dash.render(request, "_counts.html", **await counts_context())

    return [Route("/", page, name="overview"), Route("/overview/counts", counts, name="overview_counts")]

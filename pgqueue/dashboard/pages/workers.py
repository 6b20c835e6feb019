"""Workers: the workers registered in ``pgqueue.workers`` (host, pid, queues, concurrency, version,
heartbeat, the jobs each holds and for how long), and the sessions listening on pgqueue's channel."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pgqueue.dashboard.core import Dashboard, NavItem

NAV = NavItem("Workers", "/workers", "workers")


def routes(dash: Dashboard) -> list[BaseRoute]:
    """``/workers`` and ``/workers/table`` (the registered workers alone, what the live refresh swaps in)."""

    async def context() -> dict[str, Any]:
        store = await dash.store()
        workers, listeners = await asyncio.gather(store.registered_workers(), store.listeners())
        return {"workers": workers, "alive": sum(not w.gone for w in workers), "listeners": listeners}

    async def page(request: Request) -> Response:
        return dash.render(request, "workers.html", page="workers", **await context())

    async def table(request: Request) -> Response:
        return dash.render(request, "_workers.html", **await context())

    return [Route("/workers", page, name="workers"), Route("/workers/table", table, name="workers_table")]

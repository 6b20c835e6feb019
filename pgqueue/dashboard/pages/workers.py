"""Workers: the sessions listening on pgqueue's channel, who they are and since when."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pgqueue.dashboard.core import Dashboard, NavItem

NAV = NavItem("Workers", "/workers", "workers")


def routes(dash: Dashboard) -> list[BaseRoute]:
    """``/workers``."""

    async def page(request: Request) -> Response:
        listeners = await (await dash.store()).listeners()
        return dash.render(request, "workers.html", page="workers", listeners=listeners)

    return [Route("/workers", page, name="workers")]

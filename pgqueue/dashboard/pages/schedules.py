"""Schedules: each periodic job with its expression, timezone, last and next tick (``Client.schedules``).

The schedules are declared on job types, so the page lists those imported in the dashboard's
process (``pgqueue dashboard --app myapp.jobs``); the last tick comes from
``pgqueue.schedule_ticks`` and the next one is computed on the database clock.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pgqueue.dashboard.core import Dashboard, NavItem

NAV = NavItem("Schedules", "/schedules", "schedules")


def routes(dash: Dashboard) -> list[BaseRoute]:
    """``/schedules``."""

    async def page(request: Request) -> Response:
        schedules = await dash.client.schedules(dash.options.connection)
        # A schedule's args are a job's args: masked like everywhere else.
        rows = [(s, dash.redactor.args(s.name, s.args)[0]) for s in schedules]
        return dash.render(request, "schedules.html", page="schedules", rows=rows)

    return [Route("/schedules", page, name="schedules")]

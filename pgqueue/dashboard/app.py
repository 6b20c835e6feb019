"""The dashboard as a Starlette application: :func:`create_app`."""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from pgqueue import Client, QueueStorageError
from pgqueue.dashboard.core import HERE, Dashboard, Options
from pgqueue.dashboard.pages import failed, jobs, overview, queues, schedules, workers, workflows
from pgqueue.dashboard.security import (
    DEFAULT_ALLOWED_HOSTS,
    AllowedHosts,
    BasicAuth,
    SecurityHeaders,
    allowed_host_problem,
)

__all__ = ["PAGES", "create_app"]

# The pages, in navigation order. Pages for features pgqueue does not have yet get no entry.
PAGES: tuple[ModuleType, ...] = (overview, queues, failed, jobs, workflows, schedules, workers)


def create_app(client: Client, *, read_only: bool = False, auth: tuple[str, str] | None = None,  # noqa: PLR0913  # the public API: one keyword per option
               connection: str | None = None, redact: Iterable[str] = (), count_cap: int = 200,
               failed_count_cap: int = 2_000, sample_pages: int = 300, exact_pages: int = 2_000,
               page_size: int = 50, scan_limit: int = 10_000, refresh_seconds: float = 2.0,
               allowed_hosts: Iterable[str] = DEFAULT_ALLOWED_HOSTS, debug: bool = False) -> Starlette:
    """The dashboard of ``queue`` as an ASGI app: serve it with uvicorn or mount it in your own app.

    ``read_only`` hides every action and makes the server refuse them. ``auth`` (user, password)
    requires HTTP basic auth on every request. ``allowed_hosts``: the names (or addresses) the
    dashboard is reached by; a request whose ``Host`` names another is refused with 400, so a page
    of another site cannot use a DNS name pointed at this address (DNS rebinding). Default: the
    loopback names; ``*.example.com`` allows the subdomains, ``*`` any host. ``connection``
    picks the named connection whose database is shown. ``redact`` names arg fields masked for
    every job, besides each job class's own ``redact``. ``count_cap``: job counts stop there (per
    queue, priority and due / not yet due), failure counts at ``failed_count_cap`` per queue;
    larger ones are counted exactly by reading the whole table while it is at most ``exact_pages``
    pages (8 KiB each: 2,000 pages is about 16 MB), and beyond that estimated from a random sample
    of ``sample_pages`` pages of the table, so pages stay fast at any backlog. ``scan_limit``: at
    most that many rows are read per page of a filtered list. The app uses the queue's pool;
    whoever opened the queue closes it.
    """
    if min(count_cap, failed_count_cap, sample_pages, page_size) < 1 or scan_limit < page_size + 1 \
            or not refresh_seconds > 0 or exact_pages < 0:
        raise ValueError("count_cap, failed_count_cap, sample_pages and page_size must be >= 1, exact_pages "
                         ">= 0, scan_limit > page_size, refresh_seconds > 0; the dashboard was not created")
    hosts = list(allowed_hosts) if not isinstance(allowed_hosts, str) else [allowed_hosts]
    for entry in hosts:
        problem = allowed_host_problem(entry)
        if problem is not None:
            raise ValueError(f"{problem}; the dashboard was not created")
    options = Options(read_only=read_only, connection=connection, count_cap=count_cap,
                      failed_count_cap=failed_count_cap, sample_pages=sample_pages, exact_pages=exact_pages,
                      page_size=page_size,
                      scan_limit=scan_limit, refresh_seconds=refresh_seconds, redact=tuple(redact))
    dash = Dashboard(client, options)
    routes: list[BaseRoute] = []
    for page in PAGES:
        dash.nav.append(page.NAV)
        routes.extend(page.routes(dash))
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))

    async def favicon(request: Request) -> Response:
        # Pages link the icon; this answers browsers and tools that ask for /favicon.ico anyway.
        return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")

    routes.append(Route("/favicon.ico", favicon, name="favicon"))

    async def storage_error(request: Request, exc: Exception) -> Response:
        # The database is unreachable or not migrated: say so on the page instead of a bare 500.
        return PlainTextResponse(f"pgqueue dashboard: {exc}\n", status_code=503)

    # Outermost first: every response, the refusals of the host check and of basic auth included,
    # carries the security headers.
    middleware = [Middleware(SecurityHeaders), Middleware(AllowedHosts, hosts=hosts)]
    if auth is not None:
        middleware.append(Middleware(BasicAuth, user=auth[0], password=auth[1]))
    app = Starlette(debug=debug, routes=routes, middleware=middleware,
                    exception_handlers={QueueStorageError: storage_error})
    app.state.dashboard = dash
    return app

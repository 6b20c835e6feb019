"""``pgqueue dashboard``: serve the web dashboard (the ``pgqueue-py[dashboard]`` extra)."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Annotated

import typer

from pgqueue_cli.runtime import EXIT_CONFIG, app_modules, err, fail, import_apps, reports_errors, target

AUTH_ENV = "PGQUEUE_DASHBOARD_AUTH"


def parse_auth(text: str | None) -> tuple[str, str] | None:
    """``USER:PASSWORD`` as a pair (None for no text); a malformed value fails with what to write."""
    if not text:
        return None
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        fail(f"--auth / {AUTH_ENV} must be USER:PASSWORD with both parts non-empty", EXIT_CONFIG)
    return user, password


def served_hosts(host: str, extra: list[str]) -> list[str]:
    """The hosts the command answers for: the bound address (unless it is every interface), localhost
    and the --allowed-host values, each once."""
    bound = [] if host.strip("[]") in ("0.0.0.0", "::", "") else [host.strip("[]")]
    return list(dict.fromkeys([*bound, "localhost", *(e.strip() for e in extra)]))


@reports_errors
def dashboard_command(  # noqa: PLR0913  # a typer command: one parameter per option
    host: Annotated[str, typer.Option("--host", help="Interface to bind. Anything but loopback needs --auth.")]
        = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", help="TCP port (0: any free one, printed).")] = 8080,
    read_only: Annotated[bool, typer.Option("--read-only", help="Hide every action; the server refuses them.")]
        = False,
    auth: Annotated[str | None, typer.Option(
        "--auth", metavar="USER:PASSWORD", envvar=AUTH_ENV, show_envvar=True,
        help="Require HTTP basic auth with this user and password (prefer the environment variable: "
             "a command line is visible to other users of the host).")] = None,
    allowed_hosts: Annotated[list[str] | None, typer.Option(
        "--allowed-host", metavar="HOST",
        help="Also answer requests for this host name or address (repeatable; *.example.com: its subdomains, "
             "*: any, only behind a proxy that checks the host). The --host address and localhost are always "
             "answered; a request naming another host gets 400 (this stops DNS rebinding).")] = None,
    redact: Annotated[list[str] | None, typer.Option(
        "--redact", metavar="FIELD", help="Mask this args field of every job (repeatable), besides each "
                                          "job class's own `redact`.")] = None,
    apps: Annotated[list[str] | None, typer.Option(
        "--app", metavar="MODULE",
        help="Module that defines jobs, imported so their `redact` fields and schedules are known "
             "(repeatable; also [tool.pgqueue] app).")] = None,
    dsn: Annotated[str | None, typer.Option("--dsn", metavar="DSN", help="PostgreSQL DSN (default: as for the "
                                                                         "other commands).")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show the traceback of an error.")] = False,
) -> None:
    """Serve the web dashboard: queues (pause, limits), failed jobs, jobs (cancel), schedules, workers.

    Binds 127.0.0.1:8080 by default. A non-local --host is refused unless --auth (or
    PGQUEUE_DASHBOARD_AUTH) sets a user and password. Requests are answered only for the --host
    address, localhost and each --allowed-host. Needs `pip install pgqueue-py[dashboard]`.
    """
    credentials = parse_auth(auth)
    try:
        # The web stack is an optional extra: only this command imports it.
        import uvicorn  # noqa: PLC0415

        from pgqueue.dashboard import allowed_host_problem, check_bind, create_app  # noqa: PLC0415
    except ImportError as exc:
        fail(f"the dashboard needs its extra: pip install 'pgqueue-py[dashboard]' ({exc})", EXIT_CONFIG)
    try:
        check_bind(host, credentials)
    except ValueError as exc:
        fail(str(exc), EXIT_CONFIG)
    hosts = served_hosts(host, allowed_hosts or [])
    for entry in hosts:
        problem = allowed_host_problem(entry)
        if problem is not None:
            fail(f"--allowed-host: {problem}", EXIT_CONFIG)
    if not 0 <= port < 65536:
        fail(f"--port must be between 0 and 65535, got {port}", EXIT_CONFIG)
    found = target(dsn)
    import_apps(app_modules(apps, found.settings))
    # Bound here, before serving: a port in use fails with one clear line, and once the line
    # below is printed the dashboard accepts connections (they wait in the backlog until served).
    try:
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc} (choose another --port or --host)", EXIT_CONFIG)
    shown = f"[{host}]" if ":" in host else host

    async def serve() -> None:
        async with found.client() as client:
            web = create_app(client, read_only=read_only, auth=credentials, connection=found.connection.name,
                             redact=redact or (), allowed_hosts=hosts, debug=debug)
            config = uvicorn.Config(web, log_level="warning", access_log=False, server_header=False,
                                    lifespan="off")
            err(f"pgqueue dashboard: serving http://{shown}:{sock.getsockname()[1]}/"
                + (" (read-only)" if read_only else "") + (" (basic auth)" if credentials else "")
                + f"; pid {os.getpid()}, stop with Ctrl-C")
            err(f"pgqueue dashboard: answering requests for {', '.join(hosts)} only (--allowed-host adds one)")
            await uvicorn.Server(config).serve(sockets=[sock])

    try:
        asyncio.run(serve())
    finally:
        sock.close()

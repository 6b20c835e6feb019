"""What every page shares: the store, the options, rendering, and the checks around actions."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import jinja2
from psycopg.conninfo import conninfo_to_dict
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from pgqueue import Client, QueueError
from pgqueue.dashboard.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    csrf_matches,
    flash_matches,
    flash_signature,
    new_csrf_token,
    origin_matches,
)
from pgqueue.redaction import Redactor
from pgqueue.store import Store

__all__ = ["Dashboard", "NavItem", "Options", "text_filters"]

HERE = Path(__file__).resolve().parent
#: The event dashboard.js sends every live region when the tab is shown again (it refreshes at once).
SHOWN_EVENT = "pgqueue-shown"


@dataclass(frozen=True)
class NavItem:
    """One entry of the navigation: a page that exists (features that do not exist have none)."""

    title: str
    path: str
    name: str
    #: The shortcut's key ("g" then it); empty: the title's initial.
    key: str = ""


@dataclass(frozen=True)
class Options:
    """How a dashboard was asked to behave (see :func:`pgqueue.dashboard.create_app`)."""

    read_only: bool = False
    connection: str | None = None
    count_cap: int = 200
    failed_count_cap: int = 2_000
    sample_pages: int = 300
    exact_pages: int = 2_000
    page_size: int = 50
    scan_limit: int = 10_000
    refresh_seconds: float = 2.0
    redact: tuple[str, ...] = ()
    title: str = "pgqueue"


#: How many failed attempts a job's pages list (newest first); "N more" says how many are not shown.
ATTEMPTS_SHOWN = 20
#: How far the attempts of one job are counted for "N more" ("at least N more" beyond).
ATTEMPTS_COUNTED = 10_000


@dataclass(frozen=True)
class Attempts:
    """A job's failed attempts as its pages list them: ``rows`` (newest first, masked) and how many
    older ones are not shown (``more``; a lower bound when ``capped``)."""

    rows: list[dict[str, Any]]
    more: int
    capped: bool = False


@dataclass
class Dashboard:
    """The state of one dashboard app: the queue it shows, its options, its templates and nav."""

    client: Client
    options: Options
    nav: list[NavItem] = field(default_factory=list)
    _store: Store | None = None

    def __post_init__(self) -> None:
        self.redactor = Redactor(self.options.redact)
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        )
        self.templates.filters.update(count=format_count, age=format_age, when=format_when,
                                      pretty=pretty_json)

    async def store(self) -> Store:
        """The store of the dashboard's connection (the queue's pool, opened on first use)."""
        if self._store is None:
            self._store = Store(await self.client.pool(self.options.connection))
        return self._store

    def database(self) -> str:
        """Where the dashboard reads, for the header: user@host:port/dbname, never the password."""
        try:
            parts = conninfo_to_dict(self.client.dsn)
        except Exception:
            return "(database)"
        host = parts.get("host") or "localhost"
        port = f":{parts['port']}" if parts.get("port") else ""
        user = f"{parts['user']}@" if parts.get("user") else ""
        return f"{user}{host}{port}/{parts.get('dbname') or ''}"

    def masked_failures(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Failure rows (with ``name``, ``args``, ``message``, ``message_cut``) as a list shows them: each
        message with the values its job declares secret masked, and no args."""
        for row in rows:
            _, secrets = self.redactor.args(row.get("name"), row.pop("args", None))
            row["message"] = self.redactor.text(row["message"], secrets, cut=bool(row.get("message_cut")))
        return rows

    async def attempts(self, job_id: Any, secrets: list[str]) -> Attempts:
        """The newest :data:`ATTEMPTS_SHOWN` failed attempts of a job as its pages show them: message,
        traceback and exception with the values its job declares secret (``secrets``) masked."""
        history = await (await self.store()).job_attempt_history(job_id, ATTEMPTS_SHOWN, ATTEMPTS_COUNTED)
        for row in history.rows:
            row["exception"] = self.redactor.text(row["exception"], secrets)
            row["message"] = self.redactor.text(row["message"], secrets, cut=bool(row.pop("message_cut")))
            trace = self.redactor.text(row["traceback"], secrets, cut_start=bool(row["traceback_cut"]))
            if trace is not None and row["traceback_cut"]:
                trace = "… (the traceback's start is omitted)\n…" + trace
            row["traceback"] = trace
            row["worker"] = self.redactor.text(row["worker"], secrets)
        return Attempts(history.rows, history.total - len(history.rows),
                        capped=history.total >= ATTEMPTS_COUNTED)

    # -------------------------------------------------------------- rendering
    def missing(self, request: Request, page: str, what: str, ident: object) -> HTMLResponse:
        """The 404 page of a detail page: no ``what`` (job, failure, batch, workflow) ``ident`` here."""
        return self.render(request, "missing.html", status=404, page=page, what=what, ident=str(ident))

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        """Render a page (or fragment) with what every template needs: nav, CSRF token, options."""
        csrf = request.cookies.get(CSRF_COOKIE) or getattr(request.state, "csrf", None) or new_csrf_token()
        request.state.csrf = csrf
        html = self.templates.get_template(template).render(
            request=request, url=partial(url, request), nav=self.nav,
            options=self.options, read_only=self.options.read_only, csrf=csrf, csrf_field=CSRF_FIELD,
            # A live region's hx-trigger: its period, and at once when the tab is shown again (dashboard.js).
            refresh=f"every {self.options.refresh_seconds}s, {SHOWN_EVENT}",
            database=self.database(), flash_message=flash(request, "msg"), flash_error=flash(request, "err"),
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        if request.cookies.get(CSRF_COOKIE) != csrf:
            response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict",
                                path=request.scope.get("root_path") or "/")
        return response

    # ---------------------------------------------------------------- actions
    async def action(self, request: Request, run: Callable[[FormData], Awaitable[str]]) -> Response:
        """Run a POSTed action: refused when read-only or without a valid CSRF token; then back to ``next``.

        ``run`` returns the message shown on the page it redirects to; a :class:`~pgqueue.QueueError`
        it raises is shown as the error instead (nothing else was changed by that action).
        """
        if self.options.read_only:
            return PlainTextResponse("this dashboard is read-only: actions are disabled (started with "
                                     "--read-only / read_only=True)\n", status_code=403)
        form = await request.form()
        submitted = form.get(CSRF_FIELD)
        if not csrf_matches(request.cookies.get(CSRF_COOKIE), submitted if isinstance(submitted, str) else None) \
                or not origin_matches(request.headers, request.headers.get("host")):
            return PlainTextResponse("refused: the form's CSRF token is missing or stale, or the request came from "
                                     "another site; nothing was changed. Reload the page and try again.\n",
                                     status_code=403)
        target = safe_next(request, form.get("next"))
        cookie = request.cookies.get(CSRF_COOKIE) or ""
        try:
            note, kind = await run(form), "msg"
        except QueueError as exc:
            note, kind = str(exc), "err"
        # Signed for this browser: the page shows only a message this server left for it.
        return RedirectResponse(with_params(target, **{kind: note, "sig": flash_signature(cookie, kind, note)}),
                                status_code=303)


def text_filters(params: Any, labels: dict[str, str], problems: list[str]) -> dict[str, str]:
    """The filters of a list from the query string, stripped; one holding a NUL character (which no
    text in PostgreSQL holds, so it matches nothing) is named in ``problems`` and left empty."""
    found = {}
    for key, label in labels.items():
        value = (params.get(key) or "").strip()
        if "\x00" in value:
            problems.append(f"{label} {value!r} contains a NUL character, which nothing stored can hold; "
                            "that filter was ignored")
            value = ""
        found[key] = value
    return found


def url(request: Request, route: str, path: dict[str, Any] | None = None, /, **params: Any) -> str:
    """The path of a named route (under the app's mount point), with the query params that are set.

    Positional-only, so that query params may be called ``name`` or ``path`` (the job name filter).
    """
    found = request.scope.get("root_path", "") + str(
        request.app.url_path_for(route, **{k: str(v) for k, v in (path or {}).items()}))
    query = {k: v for k, v in params.items() if v not in (None, "")}
    return f"{found}?{urlencode(query)}" if query else found


def safe_next(request: Request, value: object) -> str:
    """Where an action returns to: a path of this app (never another site), else the overview."""
    root = request.scope.get("root_path", "") or ""
    if isinstance(value, str) and value.startswith(root + "/") and not value.startswith("//") and "\\" not in value:
        return value
    return root + "/"


def flash(request: Request, kind: str) -> str | None:
    """The action's message of ``kind`` ("msg" or "err") in the address, if this server signed it for this
    browser (anyone can write ``?msg=...`` into a link; only the server can sign it)."""
    text = request.query_params.get(kind)
    if text and flash_matches(request.cookies.get(CSRF_COOKIE), kind, text, request.query_params.get("sig")):
        return text
    return None


def with_params(target: str, **params: str) -> str:
    """``target`` with its ``msg``/``err`` (and their ``sig``) replaced by ``params``."""
    path, _, query = target.partition("?")
    kept = [pair for pair in (query.split("&") if query else [])
            if pair.split("=")[0] not in ("msg", "err", "sig")]
    kept.append(urlencode(params))
    return f"{path}?{'&'.join(kept)}"


# ------------------------------------------------------------------ formatting
def format_count(value: int, capped: bool = False) -> str:
    """A count with thousands separators; ``capped``: "at least", shown with a trailing +."""
    return f"{value:,}+" if capped else f"{value:,}"


def format_age(seconds: float | None) -> str:
    """An age or duration, short: 850 ms, 42 s, 5 min 3 s, 2 h 10 min, 3 d 4 h."""
    if seconds is None or math.isnan(seconds):
        return "\u2013"  # an en dash: "nothing" in a table cell
    if seconds < 1:
        return f"{max(seconds, 0) * 1000:.0f} ms"
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def format_when(moment: datetime | None, zone: str = "UTC") -> str:
    """A moment in UTC (or in the IANA timezone ``zone``), to the second."""
    if moment is None:
        return "\u2013"  # an en dash: "nothing" in a table cell
    if zone == "UTC":
        return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return moment.astimezone(ZoneInfo(zone)).strftime(f"%Y-%m-%d %H:%M:%S {zone}")


def pretty_json(value: Any) -> str:
    """JSON indented for reading (non-ASCII kept)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)

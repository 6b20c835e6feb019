"""Who may use the dashboard and how actions are protected: the bind check, hosts, basic auth, CSRF.

- A server bound to anything but the loopback interface refuses to start without credentials
  (:func:`check_bind`): the dashboard shows job args and can delete failure records.
- Only requests that name one of the dashboard's own hosts (``Host``) are served
  (:class:`AllowedHosts`): a page of another site whose DNS name is made to point at the
  dashboard's address (DNS rebinding) gets 400, never a page, a token or an action.
- HTTP basic auth, when configured, guards every request (pages, fragments, static files).
- Every action is a POST carrying a CSRF token that must equal the ``pgqueue_csrf`` cookie
  (double submit; the cookie is SameSite=Strict), and a browser's ``Origin``, when sent, must be
  this server. A page on another site can neither read the token nor forge the post.
- The message an action leaves for the page it returns to (``?msg=``, ``?err=``) is signed with
  that browser's CSRF token (:func:`flash_signature`): a link made by anyone else puts no text
  on the page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["CSRF_COOKIE", "CSRF_FIELD", "DEFAULT_ALLOWED_HOSTS", "AllowedHosts", "BasicAuth", "SecurityHeaders",
           "allowed_host_problem", "check_bind", "csrf_matches", "flash_matches", "flash_signature", "host_name",
           "is_local_host", "origin_matches"]

CSRF_COOKIE = "pgqueue_csrf"
CSRF_FIELD = "csrf"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_local_host(host: str) -> bool:
    """Whether ``host`` (an address or name to bind) is the loopback interface only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, auth: tuple[str, str] | None) -> None:
    """Refuse (ValueError, saying what to do) a non-local ``host`` when no credentials are set."""
    if auth is None and not is_local_host(host):
        raise ValueError(
            f"refusing to serve the dashboard on {host!r} without authentication: it shows job args and "
            "can retry and delete failures. Set a user and password (--auth USER:PASSWORD or "
            "PGQUEUE_DASHBOARD_AUTH), or bind to 127.0.0.1 and reach it through an SSH tunnel"
        )


#: What :func:`pgqueue.dashboard.create_app` serves unless told otherwise: the loopback names.
DEFAULT_ALLOWED_HOSTS = ("localhost", "127.0.0.1", "::1")
# A host name or address as an allow-list entry may spell it: no port, path, user or white space.
_HOST_ENTRY = re.compile(r"^(\*|(\*\.)?[a-z0-9_.-]+|\[?[0-9a-f:.]+\]?)$")


def host_name(value: str) -> str:
    """The host a ``Host`` header (or an allow-list entry) names: lower case, without the port, the
    IPv6 brackets or a trailing dot."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        value = value[1:end] if end > 0 else value
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".") if value != "." else value


def allowed_host_problem(entry: str) -> str | None:
    """Why ``entry`` is no allowed host (a name, an address, ``*.example.com`` or ``*``), or None."""
    if not isinstance(entry, str) or not _HOST_ENTRY.match(entry.strip().lower()) or not host_name(entry):
        return (f"allowed host {entry!r} is not a host name or address without a port (e.g. queue.example.com, "
                "192.0.2.7, ::1, *.example.com for its subdomains, * for any)")
    return None


class AllowedHosts:
    """ASGI middleware: serve only requests whose ``Host`` names one of ``hosts``; refuse others (400).

    Entries are names or addresses (any port), ``*.example.com`` (its subdomains) or ``*`` (any host:
    for a dashboard behind a proxy that checks the host itself).
    """

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app = app
        entries = [h.strip().lower() for h in hosts]
        self._any = "*" in entries
        self._names = frozenset(host_name(h) for h in entries if not h.startswith("*"))
        self._suffixes = tuple(host_name(h)[1:] for h in entries if h.startswith("*."))

    def allows(self, header: str | None) -> bool:
        """Whether a request with this ``Host`` header is served."""
        if self._any:
            return True
        if not header:
            return False
        name = host_name(header)
        return name in self._names or any(name.endswith(suffix) for suffix in self._suffixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = next((value.decode("latin-1") for key, value in scope.get("headers", ()) if key == b"host"), None)
        if self.allows(header):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        name = host_name(header or "") or "NAME"
        body = (f"pgqueue dashboard: refused: this request names host {header!r}, which this dashboard does not "
                "serve (a page of another site may have pointed that name at this address); nothing was read or "
                f"changed. If you reach the dashboard by that name, allow it: pgqueue dashboard --allowed-host "
                f"{name} (create_app(..., allowed_hosts=[...]) when mounted in your app).\n").encode()
        await send({"type": "http.response.start", "status": 400, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
        ]})
        await send({"type": "http.response.body", "body": body})


def csrf_matches(cookie: str | None, submitted: str | None) -> bool:
    """Whether a submitted CSRF token equals the cookie's (compared in constant time)."""
    if not cookie or not submitted:
        return False
    return hmac.compare_digest(cookie.encode(), submitted.encode())


def origin_matches(headers: MutableMapping[str, str] | Any, host: str | None) -> bool:
    """Whether the request's ``Origin`` (or, without one, ``Referer``) names this ``host``; absent: True.

    Browsers send ``Origin`` on every POST; a client that sends neither is not a browser a
    forged page could drive, and still needs the CSRF token.
    """
    origin = headers.get("origin") or headers.get("referer")
    if not origin:
        return True
    if origin == "null":
        return False
    return urlsplit(origin).netloc == (host or "")


class BasicAuth:
    """ASGI middleware: HTTP basic auth with one user and password for every request."""

    def __init__(self, app: ASGIApp, user: str, password: str, realm: str = "pgqueue dashboard") -> None:
        self.app = app
        self._expected = f"{user}:{password}".encode()
        self._realm = realm

    def _allowed(self, scope: Scope) -> bool:
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                if scheme.lower() != b"basic":
                    return False
                try:
                    given = base64.b64decode(credentials.strip(), validate=True)
                except (binascii.Error, ValueError):
                    return False
                return hmac.compare_digest(given, self._expected)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        body = b"authentication required: this pgqueue dashboard is protected by a user and password\n"
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"www-authenticate", f'Basic realm="{self._realm}", charset="UTF-8"'.encode()),
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
        ]})
        await send({"type": "http.response.body", "body": body})


def flash_signature(csrf: str, kind: str, text: str) -> str:
    """The signature of an action's message (``kind`` "msg" or "err") for the browser whose CSRF token
    is ``csrf``: only the server, which saw the token, can make it."""
    return hmac.new(csrf.encode(), f"{kind}\x00{text}".encode(), hashlib.sha256).hexdigest()


def flash_matches(csrf: str | None, kind: str, text: str, signature: str | None) -> bool:
    """Whether ``signature`` is this server's for ``text``, for this browser (compared in constant time)."""
    if not csrf or not signature:
        return False
    return hmac.compare_digest(flash_signature(csrf, kind, text), signature)


def new_csrf_token() -> str:
    """A fresh random CSRF token (the cookie's value)."""
    return secrets.token_urlsafe(32)


class SecurityHeaders:
    """ASGI middleware: a strict content security policy (scripts and styles from this server only),
    no framing (clickjacking on the action buttons), no MIME sniffing, same-origin referrers."""

    HEADERS = (
        (b"content-security-policy",
         b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
         b"frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
        (b"x-frame-options", b"DENY"),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"same-origin"),
    )

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)

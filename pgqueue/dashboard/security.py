"""Who may use the dashboard and how actions are protected: the bind check, basic auth, CSRF.

- A server bound to anything but the loopback interface refuses to start without credentials
  (:func:`check_bind`): the dashboard shows job args and can delete failure records.
- HTTP basic auth, when configured, guards every request (pages, fragments, static files).
- Every action is a POST carrying a CSRF token that must equal the ``pgqueue_csrf`` cookie
  (double submit; the cookie is SameSite=Strict), and a browser's ``Origin``, when sent, must be
  this server. A page on another site can neither read the token nor forge the post.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["CSRF_COOKIE", "CSRF_FIELD", "BasicAuth", "SecurityHeaders", "check_bind", "csrf_matches", "is_local_host",
           "origin_matches"]

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

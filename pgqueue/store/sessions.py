"""A caller's session: the psycopg connection behind what a caller dispatches with, unwrapped.

A *session* is the database session a caller passes to run pgqueue's statements in its own
transaction (the Glossary's word; a *connection* is a named configuration). Accepted: psycopg 3
``AsyncConnection`` and ``Connection``, and SQLAlchemy ``Session``, ``Connection``,
``AsyncSession`` and ``AsyncConnection`` on the psycopg driver. The job is written in the
caller's session as it is (no commit, no savepoint), so it commits or rolls back with the
caller's business data.
"""

from __future__ import annotations

from typing import Any

import psycopg

from pgqueue.errors import QueueConfigurationError


def _sqlalchemy_kind(conn: object) -> str | None:
    module = type(conn).__module__
    if not module.startswith("sqlalchemy"):
        return None
    return type(conn).__name__


def _driver_of(dbapi_connection: Any) -> Any:
    driver = getattr(dbapi_connection, "driver_connection", None)
    if not isinstance(driver, psycopg.Connection | psycopg.AsyncConnection):
        raise QueueConfigurationError(
            f"pgqueue needs SQLAlchemy on the psycopg 3 driver (a URL starting postgresql+psycopg://), "
            f"got a {type(driver).__module__}.{type(driver).__name__} connection"
        )
    return driver


async def unwrap_session(conn: Any) -> psycopg.AsyncConnection[Any] | psycopg.Connection[Any]:
    """The psycopg connection behind what the caller passed (same session, same transaction)."""
    if isinstance(conn, psycopg.AsyncConnection | psycopg.Connection):
        return conn
    kind = _sqlalchemy_kind(conn)
    if kind == "AsyncSession":
        conn = await conn.connection()
        kind = "AsyncConnection"
    if kind == "AsyncConnection":
        raw = await conn.get_raw_connection()
        return _driver_of(raw)  # type: ignore[no-any-return]
    if kind in ("Session", "Connection"):
        return unwrap_session_sync(conn)
    raise QueueConfigurationError(
        f"cannot dispatch with a {type(conn).__module__}.{type(conn).__name__}: pass a psycopg "
        "(Async)Connection or a SQLAlchemy (Async)Session/(Async)Connection, or no connection at all"
    )


def _is_django_connection(conn: Any) -> bool:
    # Django's DatabaseWrapper, or the proxy ``django.db.connection``, recognised without importing Django.
    return type(conn).__module__.startswith("django.") and hasattr(conn, "ensure_connection")


def unwrap_session_sync(conn: Any) -> psycopg.Connection[Any]:
    """The psycopg connection behind a synchronous connection or session."""
    if isinstance(conn, psycopg.Connection):
        return conn
    if _is_django_connection(conn):
        # Django opens its connection at the first query: `connection.connection` is None until then.
        if getattr(conn, "vendor", None) != "postgresql":
            raise QueueConfigurationError(
                f"cannot dispatch on Django's {conn.alias!r} database: it is {conn.vendor!r}, not PostgreSQL")
        conn.ensure_connection()
        return unwrap_session_sync(conn.connection)
    if conn is None:
        raise QueueConfigurationError(
            "cannot dispatch synchronously with None: pass a psycopg Connection or a SQLAlchemy "
            "Session/Connection (with Django, pass `django.db.connection` itself: its `.connection` is None "
            "until its first query)")
    kind = _sqlalchemy_kind(conn)
    if kind == "Session":
        conn = conn.connection()
        kind = "Connection"
    if kind == "Connection":
        return _driver_of(conn.connection)  # type: ignore[no-any-return]
    raise QueueConfigurationError(
        f"cannot dispatch synchronously with a {type(conn).__module__}.{type(conn).__name__}: pass a psycopg "
        "Connection or a SQLAlchemy Session/Connection"
    )

"""pgqueue.migrate's bookkeeping when pgqueue's branch lives in the application's alembic tree.

Synchronous, like alembic; ``conn`` is a psycopg Connection or the SQLAlchemy Connection alembic
runs on (the statement joins its transaction). Reads of a table that may not exist run in a
transaction (a savepoint inside the caller's) so that its absence aborts nothing.
"""

from __future__ import annotations

from typing import Any

from psycopg import errors as pg_errors

from pgqueue.resources import query
from pgqueue.store.sessions import unwrap_session_sync


def _versions(conn: Any, statement: bytes, params: dict[str, Any] | None = None) -> list[str]:
    session = unwrap_session_sync(conn)
    try:
        with session.transaction():
            return [str(row[0]) for row in session.execute(statement, params)]
    except pg_errors.UndefinedTable:
        return []


def alembic_own_versions(conn: Any) -> list[str]:
    """The revisions in pgqueue's own alembic table (``pgqueue_alembic_version``); [] when it does not exist."""
    return _versions(conn, query("alembic_own_versions"))


def pgqueue_schema_exists(conn: Any) -> bool:
    """Whether the database has a schema named ``pgqueue`` (empty or not)."""
    row = unwrap_session_sync(conn).execute(query("pgqueue_schema_exists")).fetchone()
    return bool(row and row[0])


def alembic_user_versions(conn: Any, revisions: list[str]) -> list[str]:
    """Which of pgqueue's ``revisions`` the application's ``alembic_version`` records; [] when it has none."""
    return _versions(conn, query("alembic_user_versions"), {"revisions": revisions})


def alembic_user_versions_delete(conn: Any, old: list[str]) -> None:
    """Remove pgqueue's ``old`` revisions from the application's ``alembic_version``, in the caller's transaction."""
    unwrap_session_sync(conn).execute(query("alembic_user_versions_delete"), {"old": old})


def alembic_user_versions_insert(conn: Any, new: list[str]) -> None:
    """Record pgqueue's ``new`` revisions in the application's ``alembic_version``, in the caller's transaction."""
    unwrap_session_sync(conn).execute(query("alembic_user_versions_insert"), {"new": new})


def alembic_own_versions_drop(conn: Any) -> None:
    """Drop pgqueue's own alembic table, in the caller's transaction (its rows moved to the application's)."""
    unwrap_session_sync(conn).execute(query("alembic_own_versions_drop"))

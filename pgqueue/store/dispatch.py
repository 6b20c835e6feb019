"""Dispatch: storing envelopes (``pgqueue.enqueue``, ``enqueue_many``, ``enqueue_unique``, ``enqueue_debounced``).

Each statement has one implementation, on a session (a caller's connection or SQLAlchemy
session, inside its transaction, no commit: the ``*_on`` methods); the pool methods check
out a connection and call it, in a transaction of pgqueue's own.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from pgqueue.errors import QueueStorageError
from pgqueue.resources import query
from pgqueue.store.errors import storage_errors
from pgqueue.store.pooled import Pooled, first
from pgqueue.store.sessions import unwrap_session, unwrap_session_sync


@dataclass(frozen=True, slots=True)
class UniqueDispatch:
    """What a dispatch with a unique key did: the id of the job holding the key, and whether
    that is an earlier job (``duplicate``: nothing was inserted)."""

    id: uuid.UUID
    duplicate: bool


@dataclass(frozen=True, slots=True)
class DebouncedDispatch:
    """What a debounced dispatch did (issue 28): the id of the job of its window, whether that is an
    earlier dispatch's job whose window was still open (``coalesced``: it took this dispatch's args
    and was pushed later), and when that job is due (``available_at``, by the database clock)."""

    id: uuid.UUID
    coalesced: bool
    available_at: datetime


def _debounced_dispatch(row: Sequence[Any] | None) -> DebouncedDispatch:
    if row is None:  # the function always returns one row
        raise QueueStorageError("pgqueue.enqueue_debounced returned no row; please report this")
    return DebouncedDispatch(id=row[0], coalesced=bool(row[1]), available_at=row[2])


#: How many times a dispatch with a unique key that runs in a transaction of pgqueue's own (not
#: the caller's) is tried when the database reports a serialization failure: under REPEATABLE
#: READ or SERIALIZABLE a new snapshot shows the holder a refused one could not see.
UNIQUE_ATTEMPTS = 3

_SERIALIZATION_FAILURE = "40001"


def _unique_dispatch(row: Sequence[Any] | None) -> UniqueDispatch:
    if row is None:  # the function always returns one row
        raise QueueStorageError("pgqueue.enqueue_unique returned no row; please report this")
    return UniqueDispatch(id=row[0], duplicate=bool(row[1]))


Session = psycopg.AsyncConnection[Any] | psycopg.Connection[Any]


async def _execute(session: Session, statement: bytes, params: tuple[Any, ...]) -> None:
    """Run one statement on a caller's unwrapped session, async or blocking."""
    if isinstance(session, psycopg.AsyncConnection):
        await session.execute(statement, params)
    else:
        session.execute(statement, params)


async def _fetch(session: Session, statement: bytes, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """Run one statement on a caller's unwrapped session, async or blocking, and read its first row."""
    row: tuple[Any, ...] | None
    if isinstance(session, psycopg.AsyncConnection):
        row = await (await session.execute(statement, params)).fetchone()
    else:
        row = session.execute(statement, params).fetchone()
    return row


class DispatchStatements(Pooled):
    """Storing jobs: plain, many at once, and with a unique key."""

    __slots__ = ()

    async def enqueue(self, envelope: str, delay: float, *, what: str = "dispatching a job") -> None:
        """Store one envelope (JSON text), ready after ``delay`` seconds, in a transaction of its own."""
        with storage_errors(what):
            async with self._pool.connection() as conn:
                await self.enqueue_on(conn, envelope, delay, what=what)

    async def enqueue_many(self, envelopes: str, delays: list[float] | None, *,
                           what: str = "dispatching jobs") -> None:
        """Store many envelopes (one JSON array) in one statement; ``delays``: None (all ready) or one per job."""
        with storage_errors(what):
            async with self._pool.connection() as conn:
                await self.enqueue_many_on(conn, envelopes, delays, what=what)

    @staticmethod
    async def enqueue_on(conn: Any, envelope: str, delay: float, *, what: str = "dispatching a job") -> None:
        """:meth:`enqueue` on the caller's connection or session, inside its transaction (no commit)."""
        with storage_errors(what):
            await _execute(await unwrap_session(conn), query("enqueue"), (envelope, delay))

    @staticmethod
    async def enqueue_many_on(conn: Any, envelopes: str, delays: list[float] | None, *,
                              what: str = "dispatching jobs") -> None:
        """:meth:`enqueue_many` on the caller's connection or session, inside its transaction."""
        with storage_errors(what):
            await _execute(await unwrap_session(conn), query("enqueue_many"), (envelopes, delays))

    @staticmethod
    def enqueue_on_sync(conn: Any, envelope: str, delay: float, *, what: str = "dispatching a job") -> None:
        """:meth:`enqueue_on` for a synchronous connection or session (the blocking ``dispatch_sync``)."""
        with storage_errors(what):
            unwrap_session_sync(conn).execute(query("enqueue"), (envelope, delay))

    async def enqueue_unique(self, envelope: str, delay: float, key: str, scope: str, period: float | None, *,
                             what: str = "dispatching a job") -> UniqueDispatch:
        """Store one envelope unless a job holds ``key`` in ``scope``; says which job holds it now.

        The statement is its own transaction, so a serialization failure (a database whose
        default_transaction_isolation is repeatable read or serializable) is retried, at most
        :data:`UNIQUE_ATTEMPTS` times in all.
        """
        for attempt in range(1, UNIQUE_ATTEMPTS + 1):
            try:
                with storage_errors(what):
                    async with self._pool.connection() as conn:
                        return await self.enqueue_unique_on(conn, envelope, delay, key, scope, period, what=what)
            except QueueStorageError as exc:  # translated, by the inner call or at checkout
                if exc.sqlstate != _SERIALIZATION_FAILURE or attempt == UNIQUE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")  # the loop returns or raises

    @staticmethod
    async def enqueue_unique_on(conn: Any, envelope: str, delay: float, key: str, scope: str,
                                period: float | None, *, what: str = "dispatching a job") -> UniqueDispatch:
        """:meth:`enqueue_unique` on the caller's connection or session, inside its transaction."""
        with storage_errors(what):
            row = await _fetch(await unwrap_session(conn), query("enqueue_unique"),
                               (envelope, delay, key, scope, period))
        return _unique_dispatch(row)

    @staticmethod
    def enqueue_unique_on_sync(conn: Any, envelope: str, delay: float, key: str, scope: str,
                               period: float | None, *, what: str = "dispatching a job") -> UniqueDispatch:
        """:meth:`enqueue_unique_on` for a synchronous connection or session (``dispatch_sync`` of a job
        type with ``unique_by``)."""
        with storage_errors(what):
            row = unwrap_session_sync(conn).execute(query("enqueue_unique"),
                                                    (envelope, delay, key, scope, period)).fetchone()
        return _unique_dispatch(row)

    async def enqueue_unique_many(self, envelopes: list[str], delays: list[float], keys: list[str | None],
                                  scope: str, period: float | None, *,
                                  what: str = "dispatching jobs") -> list[UniqueDispatch]:
        """:meth:`enqueue_unique` for many envelopes in one transaction; a None key enqueues plainly.

        The transaction is pgqueue's own, so it is run again after a serialization failure, as
        :meth:`enqueue_unique` is.
        """
        for attempt in range(1, UNIQUE_ATTEMPTS + 1):
            try:
                with storage_errors(what):
                    async with self._pool.connection() as conn, conn.transaction():
                        return await self.enqueue_unique_many_on(conn, envelopes, delays, keys, scope, period,
                                                                 what=what)
            except QueueStorageError as exc:  # translated, by the inner call or at commit
                if exc.sqlstate != _SERIALIZATION_FAILURE or attempt == UNIQUE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")  # the loop returns or raises

    @staticmethod
    async def enqueue_unique_many_on(conn: Any, envelopes: list[str], delays: list[float],
                                     keys: list[str | None], scope: str, period: float | None, *,
                                     what: str = "dispatching jobs") -> list[UniqueDispatch]:
        """:meth:`enqueue_unique_many` on the caller's connection or session, inside its transaction."""
        results: list[UniqueDispatch] = []
        with storage_errors(what):
            session = await unwrap_session(conn)
            for envelope, delay, key in zip(envelopes, delays, keys, strict=True):
                if key is None:
                    row = await _fetch(session, query("enqueue"), (envelope, delay))
                    results.append(UniqueDispatch(id=first(row), duplicate=False))
                else:
                    row = await _fetch(session, query("enqueue_unique"), (envelope, delay, key, scope, period))
                    results.append(_unique_dispatch(row))
        return results

    # --- issue 28: debounce ---
    async def enqueue_debounced(self, envelope: str, key: str, window: float, max_wait: float | None, *,
                                what: str = "dispatching a job") -> DebouncedDispatch:
        """Store one envelope debounced by ``key`` (``pgqueue.enqueue_debounced``), in a transaction of
        its own, run again after a serialization failure as :meth:`enqueue_unique` is."""
        for attempt in range(1, UNIQUE_ATTEMPTS + 1):
            try:
                with storage_errors(what):
                    async with self._pool.connection() as conn:
                        return await self.enqueue_debounced_on(conn, envelope, key, window, max_wait, what=what)
            except QueueStorageError as exc:  # translated, by the inner call or at checkout
                if exc.sqlstate != _SERIALIZATION_FAILURE or attempt == UNIQUE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")  # the loop returns or raises

    @staticmethod
    async def enqueue_debounced_on(conn: Any, envelope: str, key: str, window: float, max_wait: float | None, *,
                                   what: str = "dispatching a job") -> DebouncedDispatch:
        """:meth:`enqueue_debounced` on the caller's connection or session, inside its transaction."""
        with storage_errors(what):
            row = await _fetch(await unwrap_session(conn), query("enqueue_debounced"),
                               (envelope, key, window, max_wait))
        return _debounced_dispatch(row)

    @staticmethod
    def enqueue_debounced_on_sync(conn: Any, envelope: str, key: str, window: float, max_wait: float | None, *,
                                  what: str = "dispatching a job") -> DebouncedDispatch:
        """:meth:`enqueue_debounced_on` for a synchronous connection or session."""
        with storage_errors(what):
            row = unwrap_session_sync(conn).execute(query("enqueue_debounced"),
                                                    (envelope, key, window, max_wait)).fetchone()
        return _debounced_dispatch(row)

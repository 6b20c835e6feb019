"""What ``pgqueue.testing`` reads: the stored jobs as a user's test asserts on them
(``sql/queries/testing_dispatched.sql``), on the pool or on a given blocking connection."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from pgqueue.resources import query
from pgqueue.store.errors import storage_errors
from pgqueue.store.pooled import Pooled


@dataclass(frozen=True, slots=True)
class DispatchedJob:
    """A job in ``pgqueue.jobs`` as ``pgqueue.testing.dispatched()`` shows it."""

    id: uuid.UUID
    name: str
    queue: str
    priority: int
    #: The envelope's args, as stored (JSON values).
    args: dict[str, Any]
    connection: str
    #: Reservations so far (0: it never ran).
    attempts: int
    max_tries: int
    #: ``ready``, ``delayed`` or ``reserved``.
    state: str
    available_at: datetime
    created_at: datetime


class TestingStatements(Pooled):
    """The stored jobs, for assertions in tests."""

    __slots__ = ()

    async def dispatched_jobs(self, name: str | None) -> list[DispatchedJob]:
        """The stored jobs (of job name ``name``, or all), oldest dispatch first (``pgqueue.testing``)."""
        with storage_errors("reading the dispatched jobs"):
            return [DispatchedJob(*row) for row in await self._rows("testing_dispatched", {"name": name})]


def dispatched_jobs_on_sync(conn: psycopg.Connection[Any], name: str | None) -> list[DispatchedJob]:
    """:meth:`TestingStatements.dispatched_jobs` on a given blocking connection (assertions in synchronous tests)."""
    with storage_errors("reading the dispatched jobs"):
        rows = conn.execute(query("testing_dispatched"), {"name": name}).fetchall()
    return [DispatchedJob(*row) for row in rows]

"""Dependencies and batches (issue 26 §2): jobs enqueued together with what they wait for
(``pgqueue.add_dependencies``, ``pgqueue.add_batch``) in one transaction, and the reads of
what waits for what (parents' results, a batch's progress and members, a job's family).

The release itself is not here: the stored functions that end an attempt decide it
(``pgqueue.jobs_ended``, called by ``pgqueue.ack`` and the trigger on ``failed_jobs``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from pgqueue.resources import query
from pgqueue.store.errors import storage_errors
from pgqueue.store.pooled import Pooled
from pgqueue.store.sessions import unwrap_session, unwrap_session_sync


@dataclass(frozen=True, slots=True)
class Wait:
    """``children`` wait until every job of ``parents`` has ended; a parent that fails or is
    cancelled cancels them (``on_parent_failure="cancel"``) or counts as ended (``"run"``)."""

    children: Sequence[uuid.UUID]
    parents: Sequence[uuid.UUID]
    on_parent_failure: str = "cancel"


@dataclass(frozen=True, slots=True)
class BatchLink:
    """``members`` form batch ``id``; ``callback`` runs once every member has ended."""

    id: uuid.UUID
    members: Sequence[uuid.UUID]
    callback: uuid.UUID


Link = Wait | BatchLink


@dataclass(frozen=True, slots=True)
class BatchState:
    """A batch's progress (``pgqueue.batch_state``): members in all, not ended yet, and ended by outcome."""

    id: uuid.UUID
    callback_id: uuid.UUID
    total: int
    pending: int
    succeeded: int
    failed: int
    cancelled: int
    created_at: datetime
    finished_at: datetime | None

    @property
    def finished(self) -> bool:
        """Whether every member has ended (the callback was released)."""
        return self.pending == 0


def _statement(link: Link) -> tuple[bytes, tuple[Any, ...]]:
    if isinstance(link, Wait):
        return query("add_dependencies"), (list(link.children), list(link.parents), link.on_parent_failure)
    return query("add_batch"), (link.id, list(link.members), link.callback)


class DependencyStatements(Pooled):
    """Jobs enqueued with what they wait for; the reads of parents, batches and families."""

    __slots__ = ()

    async def enqueue_linked(self, envelopes: str, delays: list[float] | None, links: Sequence[Link], *,
                             what: str) -> None:
        """Store many envelopes (one JSON array) and their links in one transaction of pgqueue's own."""
        with storage_errors(what):
            async with self._pool.connection() as conn, conn.transaction():
                await self.enqueue_linked_on(conn, envelopes, delays, links, what=what)

    @staticmethod
    async def enqueue_linked_on(conn: Any, envelopes: str, delays: list[float] | None, links: Sequence[Link], *,
                                what: str) -> None:
        """:meth:`enqueue_linked` on the caller's connection or session, inside its transaction."""
        with storage_errors(what):
            session = await unwrap_session(conn)
            if isinstance(session, psycopg.AsyncConnection):
                await session.execute(query("enqueue_many"), (envelopes, delays))
                for link in links:
                    await session.execute(*_statement(link))
            else:
                DependencyStatements._linked_sync(session, envelopes, delays, links)

    @staticmethod
    def enqueue_linked_on_sync(conn: Any, envelopes: str, delays: list[float] | None, links: Sequence[Link], *,
                               what: str) -> None:
        """:meth:`enqueue_linked_on` for a synchronous connection or session."""
        with storage_errors(what):
            DependencyStatements._linked_sync(unwrap_session_sync(conn), envelopes, delays, links)

    @staticmethod
    def _linked_sync(session: psycopg.Connection[Any], envelopes: str, delays: list[float] | None,
                     links: Sequence[Link]) -> None:
        session.execute(query("enqueue_many"), (envelopes, delays))
        for link in links:
            session.execute(*_statement(link))

    async def parent_results(self, job_id: uuid.UUID) -> list[tuple[uuid.UUID, str | None, Any]]:
        """``pgqueue.parent_results``: per parent in order, its id, state as known and kept result."""
        with storage_errors(f"reading the parents of job {job_id}"):
            return [(r[0], r[1], r[2]) for r in await self._rows("parent_results", (job_id,))]

    async def batch_state(self, some_id: uuid.UUID) -> BatchState | None:
        """``pgqueue.batch_state`` by batch, callback or member id; None when it is in no batch."""
        with storage_errors(f"reading the batch of {some_id}"):
            found = await self._objects("batch_state", BatchState, (some_id,))
        return found[0] if found else None

    async def batch_results(self, some_id: uuid.UUID) -> list[tuple[uuid.UUID, str | None, Any]]:
        """``pgqueue.batch_results`` by batch or callback id: each member, its outcome and kept result."""
        with storage_errors(f"reading the members of batch {some_id}"):
            return [(r[0], r[1], r[2]) for r in await self._rows("batch_results", (some_id,))]

    async def batch_members_page(self, batch_id: uuid.UUID, after: uuid.UUID | None,
                                 limit: int) -> list[tuple[uuid.UUID, str | None, str | None, str | None]]:
        """``dashboard_batch_members``: up to ``limit`` members of a batch after ``after`` (by id): each
        member's id, outcome (None: not ended), state in pgqueue.jobs while not ended, and job name."""
        with storage_errors(f"reading the members of batch {batch_id}"):
            found = await self._rows("dashboard_batch_members", {"batch_id": batch_id, "after": after, "limit": limit})
            return [(r[0], r[1], r[2], r[3]) for r in found]

    async def job_family(self, job_id: uuid.UUID) -> list[tuple[str, uuid.UUID, bool]]:
        """``pgqueue.job_family``: (kind, other id, open) for each parent, waiting child and batch."""
        with storage_errors(f"reading what job {job_id} waits for"):
            return [(r[0], r[1], bool(r[2])) for r in await self._rows("job_family", (job_id,))]

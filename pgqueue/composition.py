"""Jobs that wait for jobs (issue 26 §2): ``dispatch(job, after=[...])``, batches with a callback,
chains and groups, and what a handler reads of them.

The database decides every release: a child is stored with what it waits for in the
transaction of its dispatch (``pgqueue.add_dependencies``, ``pgqueue.add_batch``), and the
stored functions that end an attempt release it, cancel it or count it
(``pgqueue.jobs_ended``) — no polling, no sweeper. :class:`Composition` is a base of
:class:`~pgqueue.Client` (``pgqueue/client.py``), which provides its stores and encoding.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgqueue.errors import QueueConfigurationError, QueueDispatchError, QueueStorageError
from pgqueue.handles import JobHandle
from pgqueue.store import BatchLink, BatchState, Link, Store, Wait

if TYPE_CHECKING:
    from pgqueue.config import ConnectionConfig, Settings
    from pgqueue.envelope import EncodedJobs
    from pgqueue.jobs import Job

__all__ = ["ON_PARENT_FAILURE", "Batch", "BatchState", "Composition", "Group", "check_after", "check_policy",
           "parent_ids", "refuse_unique"]

#: What a child does when a parent fails terminally or is cancelled: ``"cancel"`` (the default:
#: it is moved to failed_jobs with reason ``dependency_failed``, and its own children follow) or
#: ``"run"`` (that parent counts as ended).
ON_PARENT_FAILURE = ("cancel", "run")

_INVALID_PARAMETER = "22023"


def parent_ids(after: object, what: str) -> list[uuid.UUID]:
    """The parents named by ``after=`` (job ids or handles, or one of them), checked; nothing is stored."""
    items: Iterable[object] = [after] if isinstance(after, uuid.UUID | str) else after  # type: ignore[assignment]
    if isinstance(after, bytes) or not isinstance(items, Iterable):
        raise QueueDispatchError(f"{what}: after= takes job ids or handles, got {type(after).__name__}; "
                                 "nothing was dispatched")
    ids: list[uuid.UUID] = []
    for item in items:
        try:
            ids.append(uuid.UUID(int=item.int) if isinstance(item, uuid.UUID) else uuid.UUID(str(item)))
        except (ValueError, TypeError):
            raise QueueDispatchError(f"{what}: after= takes job ids or handles; {str(item)[:80]!r} is not a job id "
                                     "(a UUID); nothing was dispatched") from None
    if not ids:
        raise QueueDispatchError(f"{what}: after= names no parent job; leave it out to dispatch without one")
    return ids


def refuse_unique(jobs: Sequence[Job], what: str) -> None:
    """Refuse a job whose class derives a unique key (``unique_by``) in a linked dispatch (``after=``,
    a chain, a batch, a group): the unique dispatch of a duplicate returns the job holding the key,
    which would then wait, or be counted, in its place; the key is never dropped silently either."""
    for job in jobs:
        if getattr(type(job), "unique_by", None):
            raise QueueDispatchError(
                f"{what}: {type(job).__name__} derives a unique key (unique_by), which cannot be combined with "
                "after=, chain, group or batch (a duplicate is another job: it would wait or be counted in its "
                "place); dispatch it on its own and pass its handle as a parent; nothing was dispatched")


def check_after(after: object, what: str, *, debounced: bool = False, unique_key: str | None = None,
                jobs: Sequence[Job] = ()) -> None:
    """Refuse what ``after=`` cannot be combined with (nothing is stored): a debounced dispatch or a
    unique key, whose dispatch of a duplicate returns the job already holding the key (it would
    wait in the place of the job meant), or a job whose class derives a unique key."""
    if after is None:
        return
    if debounced:
        raise QueueDispatchError(f"{what}: after= cannot be combined with debounce; nothing was dispatched")
    if unique_key is not None:
        raise QueueDispatchError(f"{what}: after= cannot be combined with a unique key (a duplicate would return "
                                 "another job, which would wait in its place); nothing was dispatched")
    refuse_unique(jobs, what)


def check_policy(policy: object, what: str) -> str:
    """``on_parent_failure`` checked: one of :data:`ON_PARENT_FAILURE`."""
    if policy not in ON_PARENT_FAILURE:
        raise QueueConfigurationError(f"{what}: on_parent_failure must be 'cancel' or 'run', got {policy!r}; "
                                      "nothing was dispatched")
    return str(policy)


@dataclass(frozen=True, slots=True)
class Batch:
    """A dispatched batch: its id, its members' handles and its callback's handle."""

    id: uuid.UUID
    members: list[JobHandle]
    callback: JobHandle


@dataclass(frozen=True, slots=True)
class Group:
    """Jobs dispatched to run in parallel; :meth:`results` awaits them all, in order."""

    members: list[JobHandle]

    async def results(self, timeout: float | None = None) -> list[Any]:  # noqa: ASYNC109  # as JobHandle.result
        """Every member's result, in dispatch order (see :meth:`JobHandle.result`)."""
        return list(await asyncio.gather(*(m.result(timeout=timeout) for m in self.members)))


class Composition:
    """Batches, chains and groups, and the linked dispatch under ``after=`` (a base of ``Client``)."""

    settings: Settings
    inline: bool

    if TYPE_CHECKING:
        async def _store(self, connection: ConnectionConfig | None = None) -> Store: ...
        def encode_many(self, jobs: Iterable[Job], *, queue: str | None = None,
                        connection: str | None = None, partition: str | None = None) -> EncodedJobs: ...
        def job(self, job_id: uuid.UUID | str) -> JobHandle: ...
        async def dispatch_many(self, jobs: Iterable[Job], *, conn: Any = None, queue: str | None = None,
                                connection: str | None = None) -> list[JobHandle]: ...
        @staticmethod
        def _delays(delay: float | Iterable[float], names: list[str]) -> list[float] | None: ...

    async def _store_linked(self, config: ConnectionConfig, conn: Any, text: str, delays: list[float] | None,
                            links: Sequence[Link], what: str) -> None:
        """Enqueue a JSON array of envelopes with their links, in one transaction (the caller's with ``conn``).
        What the database refuses (an unknown parent, a bad batch) is a QueueDispatchError; nothing is stored."""
        try:
            if conn is not None:
                await Store.enqueue_linked_on(conn, text, delays, links, what=what)
            else:
                await (await self._store(config)).enqueue_linked(text, delays, links, what=what)
        except QueueStorageError as exc:
            if exc.sqlstate == _INVALID_PARAMETER:
                raise QueueDispatchError(str(exc)) from exc
            raise

    async def _dispatch_many_after(self, jobs: Iterable[Job], after: object, on_parent_failure: str,  # noqa: PLR0913  # dispatch_many's settings, passed on
                                   unique: bool, *, conn: Any, delay: float | Iterable[float], queue: str | None,
                                   connection: str | None, partition: str | None = None) -> list[JobHandle]:
        """``dispatch_many(jobs, after=...)``: every job waits for the parents, in one transaction."""
        what = "dispatch_many"
        parents = parent_ids(after, what)
        policy = check_policy(on_parent_failure, what)
        if unique:
            raise QueueDispatchError(f"{what}: after= cannot be combined with unique keys; nothing was dispatched")
        jobs = list(jobs)
        refuse_unique(jobs, what)
        encoded = self.encode_many(jobs, queue=queue, connection=connection, partition=partition)
        if not encoded.ids:
            return []
        delays = self._delays(delay, encoded.names)
        await self._store_linked(encoded.connections[0], conn, encoded.text, delays,
                                 [Wait(encoded.ids, parents, policy)], f"dispatching {len(encoded.ids)} jobs")
        return [self.job(i) for i in encoded.ids]

    async def batch(self, jobs: Iterable[Job], *, then: Job, conn: Any = None, queue: str | None = None,
                    connection: str | None = None) -> Batch:
        """Dispatch ``jobs`` as a batch whose callback ``then`` runs exactly once, when every member
        has ended (succeeded, failed terminally or cancelled); the callback reads the counts with
        ``context.batch()`` and the members' results with ``context.batch_results()``. One
        transaction (the caller's with ``conn``): the batch and its callback are stored together."""
        members = list(jobs)
        if not members:
            raise QueueDispatchError("batch: give at least one member job; nothing was dispatched")
        self._needs_a_database("batch")
        refuse_unique([*members, then], "batch")
        encoded = self.encode_many([*members, then], queue=queue, connection=connection)
        batch_id = uuid.uuid4()
        link = BatchLink(batch_id, encoded.ids[:-1], encoded.ids[-1])
        await self._store_linked(encoded.connections[0], conn, encoded.text, None, [link],
                                 f"dispatching a batch of {len(members)} jobs")
        return Batch(batch_id, [self.job(i) for i in encoded.ids[:-1]], self.job(encoded.ids[-1]))

    async def chain(self, jobs: Iterable[Job], *, conn: Any = None, queue: str | None = None,
                    connection: str | None = None) -> list[JobHandle]:
        """Dispatch ``jobs`` to run one after the other: each waits for the previous one to succeed
        (and reads its result with ``context.parent_results()``); a failure cancels the rest
        (reason ``dependency_failed``). One transaction; returns their handles in order."""
        steps = list(jobs)
        if not steps:
            raise QueueDispatchError("chain: give at least one job; nothing was dispatched")
        self._needs_a_database("chain")
        refuse_unique(steps, "chain")
        encoded = self.encode_many(steps, queue=queue, connection=connection)
        links = [Wait([child], [parent]) for parent, child in zip(encoded.ids, encoded.ids[1:], strict=False)]
        await self._store_linked(encoded.connections[0], conn, encoded.text, None, links,
                                 f"dispatching a chain of {len(steps)} jobs")
        return [self.job(i) for i in encoded.ids]

    async def group(self, jobs: Iterable[Job], *, conn: Any = None, queue: str | None = None,
                    connection: str | None = None) -> Group:
        """Dispatch ``jobs`` to run in parallel (one transaction); ``await group.results()`` gives
        their results as a list. For a job to run after them all, use :meth:`batch`."""
        members = list(jobs)
        refuse_unique(members, "group")
        if self.inline:  # each runs at dispatch: the group is dispatch_many's
            return Group(await self.dispatch_many(members, conn=conn, queue=queue, connection=connection))
        encoded = self.encode_many(members, queue=queue, connection=connection)
        if members:
            await self._store_linked(encoded.connections[0], conn, encoded.text, None, [],
                                     f"dispatching a group of {len(members)} jobs")
        return Group([self.job(i) for i in encoded.ids])

    def _needs_a_database(self, what: str) -> None:
        if self.inline:
            raise QueueConfigurationError(f"{what}: the inline mode runs each job at dispatch, so no job can wait for "
                                          "another; test it against a database (a worker of the test's database)")

    async def batch_state(self, batch_id: uuid.UUID | str, connection: str | None = None) -> BatchState | None:
        """A batch's progress by batch, callback or member id (``pgqueue.batch_state``); None if none."""
        store = await self._store(None if connection is None else self.settings.connection(connection))
        return await store.batch_state(uuid.UUID(str(batch_id)))


async def parent_results_of(store: Store, job_id: uuid.UUID) -> dict[uuid.UUID, Any]:
    """The kept results of a job's succeeded parents, by parent id, in the order they were given."""
    return {parent: result for parent, state, result in await store.parent_results(job_id) if state == "succeeded"}


async def batch_results_of(store: Store, job_id: uuid.UUID) -> dict[uuid.UUID, Any]:
    """The kept results of a batch's succeeded members, by member id (the batch by callback or batch id)."""
    return {member: result for member, outcome, result in await store.batch_results(job_id)
            if outcome == "succeeded"}

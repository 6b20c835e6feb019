"""Reservations and their outcomes: the worker's hot path (reserve, ack, release, fail, snooze,
extend, heartbeat, next due) and a handler's transaction that carries its ack.

These let psycopg errors through: the worker tells transient faults from the rest
(:func:`pgqueue.store.errors.classify`). Reservations are built positionally from their rows,
not through a row factory: a reservation is made per job, on the hot path.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg

from pgqueue.resources import query
from pgqueue.store.pooled import Pooled, first


@dataclass(slots=True)
class Reservation:
    """One job handed to a worker by ``pgqueue.reserve``: the row as the database granted it.

    ``envelope`` is the stored envelope as JSON text, not yet parsed or validated: a worker
    decodes it with :meth:`pgqueue.Envelope.decode`, one reservation at a time, so an envelope
    that cannot be read fails its own job instead of the fetch of the whole batch.

    ``prefetched``: granted into the worker's prefetch buffer on its final try; the worker
    starts it only after :meth:`Store.mark_started` accepted it, so if the worker dies before,
    the attempt is given back instead of being spent unrun.

    ``waiting`` and ``heir_of`` (issue 28, slot heirs): granted beyond the free slots of its queue's
    concurrency limit as the heir of ``heir_of``, one of the caller's running jobs of that queue
    named in :meth:`Store.reserve`'s ``heirs``: it counts in the limit from the moment that job's
    reservation ends (with no write of its own), and the worker starts it as that job's execution
    ends, never before.

    ``queued_seconds``: from the time the job became due (its dispatch, the end of its delay, a
    retry's backoff or a snooze, or an expired lease) to this reservation, on the database clock.
    """

    id: uuid.UUID
    token: int
    attempts: int
    tries: int
    lease_seconds_left: float
    queue: str
    envelope: str
    prefetched: bool = False
    queued_seconds: float = 0.0
    waiting: bool = False
    heir_of: uuid.UUID | None = None


class AckBatch(NamedTuple):
    """A batch of acks as the completer hands it over: the parameters of ``pgqueue.ack``, in order."""

    #: The jobs acked.
    ids: list[uuid.UUID]
    #: Their reservations' fencing tokens.
    tokens: list[int]
    #: Per job, the handler's run time in seconds (None: unknown).
    durations: list[float | None]
    #: Per job, the wait from reservation to handler start in seconds (None: unknown).
    waits: list[float | None]
    #: Whether to keep copies in ``pgqueue.completed_jobs``.
    keep: bool

    @property
    def empty(self) -> bool:
        """No ack to send."""
        return not self.ids


def _refused(rows: list[Any]) -> list[uuid.UUID]:
    """The ids of the acks the fence refused, from the rows of ``pgqueue.ack``."""
    return [row[0] for row in rows]


class ReservationStatements(Pooled):
    """Reserving jobs and ending (or renewing) their reservations, fenced by their tokens."""

    __slots__ = ()

    async def reserve(self, queues: list[str], limit: int, lease: float, *,
                      run_now: int | None = None, acks: AckBatch | None = None,
                      heirs: list[tuple[uuid.UUID, int]] | None = None,
                      ) -> tuple[list[Reservation], list[uuid.UUID]]:
        """Reserve up to ``limit`` jobs of ``queues`` (in that order) for ``lease`` seconds.

        The first ``run_now`` (default: all) start at once; the rest are granted as
        ``prefetched`` (see :class:`Reservation`). ``acks`` (an :class:`AckBatch`) are
        acknowledged in the same transaction, in one round trip (pipeline mode) and one commit.
        Returns the reservations and the ids of the acks the fence refused (their lease was
        lost). If the call raises, neither happened; the caller keeps the acks to send again.

        ``heirs`` (issue 28, slot heirs): slots the caller holds, each named by the job whose
        reservation took it (id, token), once per heir asked for in it; beyond the free slots of a
        queue with a concurrency limit, the waiting grants go to those still held, in that order
        (:class:`Reservation`'s ``heir_of``). With heirs, the reservation runs before the acks in
        the transaction: a slot whose job ended (its ack here) is still held when its heirs are
        granted, and passes to them when the ack deletes that job.
        """
        ids = [job_id for job_id, _ in heirs] if heirs else None
        tokens = [token for _, token in heirs] if heirs else None
        params = (queues, limit, lease, limit if run_now is None else run_now, ids, tokens)
        if not acks or acks.empty:
            rows = await self._rows("reserve", params)
            return [Reservation(*row) for row in rows], []
        async with self._pool.connection() as conn:
            async with conn.pipeline(), conn.transaction():
                if heirs:
                    cur = await conn.execute(query("reserve"), params)
                    acked = await conn.execute(query("ack"), acks)
                else:
                    acked = await conn.execute(query("ack"), acks)
                    cur = await conn.execute(query("reserve"), params)
            refused = _refused(await acked.fetchall())
            rows = await cur.fetchall()
        return [Reservation(*row) for row in rows], refused

    async def ack(self, ids: list[uuid.UUID], tokens: list[int], durations: list[float | None] | None = None,
                  waits: list[float | None] | None = None, keep: bool = False) -> list[uuid.UUID]:
        """Delete finished jobs (fenced by their tokens); returns the ids the fence refused.

        Each counts as succeeded in ``pgqueue.job_stats``, with its handler's run time and its
        wait from reservation to handler start (seconds, None: unknown); ``keep`` copies the
        jobs to ``pgqueue.completed_jobs`` in the same statement.
        """
        unknown: list[float | None] = [None] * len(ids)
        return _refused(await self._rows("ack", (ids, tokens, unknown if durations is None else durations,
                                                 unknown if waits is None else waits, keep)))

    async def mark_started(self, ids: list[uuid.UUID], tokens: list[int], *, acks: AckBatch | None = None,
                           ) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
        """Clear the marks of prefetched jobs about to start (``pgqueue.mark_started``, fenced);
        ``acks`` ride in the same transaction (one round trip, one commit). Returns the ids
        marked (start those only) and the ids of the acks the fence refused."""
        if not acks or acks.empty:
            marks = await self._rows("mark_started", (ids, tokens))
            return [job_id for job_id, marked in marks if marked], []
        async with self._pool.connection() as conn:
            async with conn.pipeline(), conn.transaction():
                cur = await conn.execute(query("mark_started"), (ids, tokens))
                acked = await conn.execute(query("ack"), acks)
            marks = await cur.fetchall()
            refused = _refused(await acked.fetchall())
        return [job_id for job_id, marked in marks if marked], refused

    async def cancelled(self, ids: list[uuid.UUID], tokens: list[int]) -> list[uuid.UUID]:
        """Of the reservations ``(ids, tokens)``, the ids whose job the database recorded as cancelled
        (``pgqueue.cancelled``: the reservation is gone and the job's latest failure is a cancellation)."""
        return [job_id for job_id, cancelled in await self._rows("cancelled", (ids, tokens)) if cancelled]

    async def release(self, job_id: uuid.UUID, token: int, delay: float, duration: float | None = None,
                      wait: float | None = None) -> bool:
        """Put a reserved job back, available after ``delay`` seconds; False if the fence refused.

        Counts as retried in ``pgqueue.job_stats`` with the handler's run time and its wait from
        reservation to handler start (seconds, None: unknown).
        """
        return bool(await self._value("release", (job_id, token, delay, duration, wait)))

    async def release_interrupted(self, job_id: uuid.UUID, token: int, duration: float | None = None,
                                  wait: float | None = None) -> bool:
        """Put back a job whose attempt the worker interrupted (a forced stop), ready now, with its
        attempt given back; False if the fence refused. Counts as given_back in ``pgqueue.job_stats``
        (run time and wait as for :meth:`release`)."""
        return bool(await self._value("release_interrupted", (job_id, token, duration, wait)))

    async def release_unstarted(self, ids: list[uuid.UUID], tokens: list[int]) -> list[uuid.UUID]:
        """Hand back reservations that never ran (the attempt does not count); returns the ids released."""
        return [job_id for job_id, released in await self._rows("release_unstarted", (ids, tokens)) if released]

    async def fail(self, job_id: uuid.UUID, token: int, exception: str | None, message: str,
                   traceback: str | None, reason: str, duration: float | None = None,
                   wait: float | None = None) -> bool:
        """Move a reserved job to failed_jobs (one transaction); False if the fence refused.

        Counts as failed in ``pgqueue.job_stats`` (run time and wait as for :meth:`release`).
        """
        return bool(await self._value("fail", (job_id, token, exception, message, traceback, reason, duration,
                                               wait)))

    async def snooze(self, job_id: uuid.UUID, token: int, delay: float) -> str:
        """Fenced snooze: 'snoozed', 'not_yours' or 'past_deadline'."""
        return str(await self._value("snooze", (job_id, token, delay)))

    async def backpressure(self, job_id: uuid.UUID, token: int, delay: float) -> str:
        """Fenced backpressure (issue 28): the job back after ``delay`` seconds, its try given back,
        its queue's adaptive limit halved: 'backpressured', 'not_yours' or 'past_deadline'."""
        return str(await self._value("backpressure", (job_id, token, delay)))

    async def extend(self, job_id: uuid.UUID, token: int, seconds: float) -> float | None:
        """Renew a lease to end ``seconds`` from now; the seconds left, or None if the fence refused."""
        left = await self._value("extend", (job_id, token, seconds))
        return None if left is None else float(left)

    async def heartbeat(self, ids: list[uuid.UUID], tokens: list[int], lease: float,
                        ) -> list[tuple[uuid.UUID, bool, float | None]]:
        """Renew the leases of running handlers to end ``lease`` seconds from now, fenced by their
        tokens, in one statement; returns ``(id, renewed, seconds left)`` per job, in the order given."""
        rows = await self._rows("heartbeat", (ids, tokens, lease))
        return [(job_id, bool(renewed), None if left is None else float(left)) for job_id, renewed, left in rows]

    async def served_queues(self) -> list[str]:
        """The queues that have jobs or failures (each once), read by index probes, never a table scan."""
        return [row[0] for row in await self._rows("served_queues")]

    async def next_due(self, queues: list[str]) -> float | None:
        """Seconds until the next job of ``queues`` is due (<= 0: due now), or None if none is waiting."""
        due = await self._value("next_due", (queues,))
        return None if due is None else float(due)


# A handler's own transaction (``context.transaction()``), on the connection it writes with.
async def begin_transaction(conn: psycopg.AsyncConnection[Any]) -> str:
    """BEGIN a transaction on ``conn`` (autocommit) and return its id, in one round trip; the caller
    commits or rolls back. The id is for :func:`ack_in_transaction`."""
    cur = await conn.execute(query("transaction_begin"), prepare=False)  # two statements: never prepared
    cur.nextset()
    return str(first(await cur.fetchone()))


def begin_transaction_sync(conn: psycopg.Connection[Any]) -> str:
    """:func:`begin_transaction` on a blocking connection."""
    cur = conn.execute(query("transaction_begin"), prepare=False)
    cur.nextset()
    return str(first(cur.fetchone()))


async def ack_in_transaction(conn: psycopg.AsyncConnection[Any], job_id: uuid.UUID, token: int,
                             began: str) -> bool | None:
    """The fenced ack of one job on ``conn``, inside the caller's transaction ``began`` (its id, from
    :func:`begin_transaction`); False if the fence refused, None (nothing acked) if ``conn`` is in
    another transaction by now (the caller must roll it back)."""
    cur = await conn.execute(query("ack_in_transaction"), (began, job_id, token))
    acked = first(await cur.fetchone())
    return None if acked is None else bool(acked)


def ack_in_transaction_sync(conn: psycopg.Connection[Any], job_id: uuid.UUID, token: int,
                            began: str) -> bool | None:
    """:func:`ack_in_transaction` on a blocking connection."""
    cur = conn.execute(query("ack_in_transaction"), (began, job_id, token))
    acked = first(cur.fetchone())
    return None if acked is None else bool(acked)


# The worker's dedicated LISTEN session (pgqueue/worker/notifier.py).
async def listen(conn: psycopg.AsyncConnection[Any]) -> None:
    """LISTEN on pgqueue's channels (``pgqueue``: ready jobs, ``pgqueue_delayed``: delayed ones)."""
    await conn.execute(query("listen"))


async def listen_cancel(conn: psycopg.AsyncConnection[Any]) -> None:
    """LISTEN for cancellations of running jobs (channel ``pgqueue_cancel``, payload = job id)."""
    await conn.execute(query("listen_cancel"))

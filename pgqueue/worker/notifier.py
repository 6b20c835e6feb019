"""The notifier: one dedicated LISTEN connection that wakes the worker when jobs arrive."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection

import psycopg

from pgqueue.store import listen, listen_cancel

logger = logging.getLogger("pgqueue.worker")


class Notifier:
    """LISTENs on channel ``pgqueue`` and calls ``wake`` for notifications of its queues;
    on channel ``pgqueue_delayed`` (a delayed job was enqueued) it calls ``rescheduled``; on
    channel ``pgqueue_cancel`` (a reserved job was cancelled) it calls ``cancelled`` with the job id.

    Every notification is a hint, never an authority: any role that may connect can send one.
    A wake-up makes the fetcher reserve (the reservation decides what, if anything, is granted:
    pause, limits and due times included), a reschedule makes it read the next due time again,
    and a cancel is checked with the database before anything is stopped
    (:class:`pgqueue.worker.cancellation.Cancellations`).

    If the connection drops, it reconnects with backoff, LISTENs again and calls ``wake``
    once, so a job notified while it was away is picked up by a catch-up reservation.
    """

    def __init__(self, dsn: str, queues: Collection[str], wake: Callable[[], None],
                 rescheduled: Callable[[], None] | None = None,
                 cancelled: Callable[[str], None] | None = None) -> None:
        self._dsn = dsn
        self._queues = frozenset(queues)
        self._wake = wake
        self._rescheduled = rescheduled
        self._cancelled = cancelled
        self.connected = asyncio.Event()
        self.reconnects = 0

    async def run(self) -> None:
        """Listen until cancelled."""
        delay = 0.05
        while True:
            conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
            try:
                conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True)
                await listen(conn)
                if self._cancelled is not None:
                    await listen_cancel(conn)
                self.connected.set()
                delay = 0.05
                self._wake()  # catch up on anything notified before (or while away)
                async for notify in conn.notifies():
                    if notify.channel == "pgqueue_cancel":
                        if self._cancelled is not None:
                            self._cancelled(notify.payload)
                        continue
                    if notify.payload not in self._queues:
                        continue
                    if notify.channel == "pgqueue":
                        self._wake()
                    elif self._rescheduled is not None:
                        self._rescheduled()
                # The server closed the stream without an error: treat it as a drop.
                raise psycopg.OperationalError("the LISTEN connection was closed")
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                self.connected.clear()
                self.reconnects += 1
                logger.warning("pgqueue: the LISTEN connection failed (%s); reconnecting in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            finally:
                if conn is not None:
                    await conn.close()

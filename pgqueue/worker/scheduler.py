"""The scheduler: every worker enqueues the due ticks of the schedules its code declares.

No leader: each worker, on its own timer, asks the database for its clock and each schedule's
last enqueued tick (``pgqueue.schedule_sync``), computes the due ticks from those database
times only, and enqueues each through ``pgqueue.enqueue_tick``, whose primary key on
(schedule, tick) lets exactly one caller in. Two workers racing for a tick give one job; a
worker killed mid-tick leaves no row, and the next one takes the tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime

import psycopg

from pgqueue.config import ConnectionConfig
from pgqueue.envelope import Envelope
from pgqueue.errors import QueueError
from pgqueue.jobs import Job
from pgqueue.schedules import Schedule, schedule_of
from pgqueue.storage import is_transient
from pgqueue.store import Store

__all__ = ["Scheduler", "declared_schedules"]

logger = logging.getLogger("pgqueue.scheduler")

#: The longest the scheduler sleeps between two looks (a changed deploy or a clock step is
#: seen within this time even when the next tick is hours away).
MAX_SLEEP = 30.0


def declared_schedules(job_types: Sequence[type[Job]], connection: str) -> list[tuple[type[Job], Schedule]]:
    """The job types among ``job_types`` that declare a schedule and go to ``connection``."""
    found = []
    for job_type in job_types:
        schedule = schedule_of(job_type)
        if schedule is not None and job_type.connection in (None, connection):
            found.append((job_type, schedule))
    return sorted(found, key=lambda pair: pair[1].job_name)


class Scheduler:
    """Enqueues the due ticks of a worker's schedules; :meth:`run` until cancelled."""

    def __init__(self, store: Store, config: ConnectionConfig,
                 schedules: Sequence[tuple[type[Job], Schedule]]) -> None:
        self._store = store
        self._config = config
        self._schedules = list(schedules)
        #: Ticks this scheduler enqueued (others were enqueued by other workers).
        self.enqueued = 0

    async def run(self) -> None:
        """Tick, sleep until the next tick is due (by the database clock), repeat."""
        if not self._schedules:
            return
        while True:
            try:
                sleep = await self.tick()
            except (psycopg.Error, OSError) as exc:
                if isinstance(exc, psycopg.Error) and not is_transient(exc):
                    logger.error("pgqueue scheduler: %s; retrying in 1 s", exc)
                else:
                    logger.warning("pgqueue scheduler: database unavailable (%s); retrying in 1 s", exc)
                sleep = 1.0
            except Exception:  # a scheduler bug must not take the worker down: its jobs still run
                logger.exception("pgqueue scheduler: unexpected error; retrying in %.0f s", MAX_SLEEP)
                sleep = MAX_SLEEP
            await asyncio.sleep(sleep)

    async def tick(self) -> float:
        """Enqueue every due tick once; returns the seconds until the next one (at most MAX_SLEEP)."""
        schedules = {schedule.job_name: (job_type, schedule) for job_type, schedule in self._schedules}
        states = await self._store.schedule_sync(
            list(schedules), [s.expression for _, s in schedules.values()],
            [s.timezone for _, s in schedules.values()], [s.catch_up for _, s in schedules.values()])
        wait = MAX_SLEEP
        now: datetime | None = None
        for state in states:
            job_type, schedule = schedules[state.name]
            now = state.now
            # Ticks after the last enqueued one, but never from before the schedule took its
            # current form (first seen, or changed by a deploy).
            after = state.changed_at if state.last_tick is None else max(state.last_tick, state.changed_at)
            for tick in schedule.due_ticks(after, state.now):
                try:
                    job = job_type.from_args(dict(schedule.args))
                    envelope = Envelope.build(job, self._config, queue=None, priority=None)
                    text = envelope.encode(self._config.max_payload_bytes)
                except QueueError as exc:
                    # One schedule's bad args must not stop the others (nor the worker).
                    logger.error("pgqueue scheduler: job %r: its schedule_args cannot be dispatched (%s); "
                                 "tick %s skipped: fix schedule_args and deploy", schedule.job_name, exc, tick)
                    continue
                if await self._store.enqueue_tick(schedule.job_name, tick, text) is not None:
                    self.enqueued += 1
            wait = min(wait, (schedule.next_tick(state.now) - state.now).total_seconds())
        # A little after the tick, so that the database clock has passed it when we look.
        return max(wait, 0.0) + 0.01 if now is not None else MAX_SLEEP

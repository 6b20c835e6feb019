"""The scheduler: every worker enqueues the due ticks of the schedules its code declares.

No leader: each worker, on its own timer, asks the database for its clock and each schedule's
last enqueued tick (``pgqueue.schedule_sync``), computes the due ticks from those database
times only, and enqueues each through ``pgqueue.enqueue_tick``, whose primary key on
(schedule, tick) lets exactly one caller in. Two workers racing for a tick give one job; a
worker killed mid-tick leaves no row, and the next one takes the tick.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime

import psycopg

from pgqueue.config import ConnectionConfig
from pgqueue.envelope import Envelope
from pgqueue.errors import QueueError
from pgqueue.ids import new_id
from pgqueue.jobs import Job
from pgqueue.schedules import Schedule, schedule_of
from pgqueue.storage import is_transient
from pgqueue.store import ScheduleState, Store

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
        self._envelopes: dict[str, tuple[Schedule, Envelope]] | None = None

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
        """Enqueue every due tick once; returns the seconds until the next one (at most MAX_SLEEP).

        Each schedule is ticked on its own: one whose args cannot be dispatched or whose ticks
        cannot be computed is logged by name and skipped, and the others go on. Only database
        faults that concern every schedule (the connection, a transient error) propagate.
        """
        prepared = self._prepared()
        if not prepared:
            return MAX_SLEEP
        schedules = [schedule for schedule, _ in prepared.values()]
        states = await self._store.schedule_sync(
            [s.job_name for s in schedules], [s.expression for s in schedules],
            [s.timezone for s in schedules], [s.catch_up for s in schedules])
        wait = MAX_SLEEP
        now: datetime | None = None
        for state in states:
            now = state.now
            try:
                wait = min(wait, await self._tick_one(state, *prepared[state.name]))
            except Exception as exc:
                if is_transient(exc):
                    raise
                logger.error("pgqueue scheduler: schedule of job %r failed (%s: %s); its ticks are skipped, the "
                             "other schedules go on", state.name, type(exc).__name__, exc)
        # A little after the tick, so that the database clock has passed it when we look.
        return max(wait, 0.0) + 0.01 if now is not None else MAX_SLEEP

    async def _tick_one(self, state: ScheduleState, schedule: Schedule, envelope: Envelope) -> float:
        """Enqueue the due ticks of one schedule; the seconds until its next tick."""
        # Ticks after the last enqueued one, but never from before the schedule took its
        # current form (first seen, or changed by a deploy).
        after = state.changed_at if state.last_tick is None else max(state.last_tick, state.changed_at)
        for tick in schedule.due_ticks(after, state.now):
            text = dataclasses.replace(envelope, id=new_id()).encode(self._config.max_payload_bytes)
            if await self._store.enqueue_tick(schedule.job_name, tick, text) is not None:
                self.enqueued += 1
        return (schedule.next_tick(state.now) - state.now).total_seconds()

    def _prepared(self) -> dict[str, tuple[Schedule, Envelope]]:
        """Each schedule with the envelope of its ticks, checked once as a dispatch checks one; a
        schedule whose args do not fit its job is logged by name (once) and left out."""
        if self._envelopes is None:
            self._envelopes = {}
            for job_type, schedule in self._schedules:
                try:
                    job = job_type.from_args(dict(schedule.args))
                    envelope = Envelope.build(job, self._config, queue=None, priority=None)
                    envelope.encode(self._config.max_payload_bytes)
                except QueueError as exc:
                    logger.error("pgqueue scheduler: job %r: its schedule_args cannot be dispatched (%s); the "
                                 "schedule does not tick: fix schedule_args and deploy", schedule.job_name, exc)
                    continue
                self._envelopes[schedule.job_name] = (schedule, envelope)
        return self._envelopes

"""The scheduler: every worker enqueues the due ticks of the schedules its code declares.

No leader: each worker, on its own timer, registers its schedules (``pgqueue.schedule_sync``:
expression, timezone, catch-up, period and the template of their jobs' envelope) and reads
back the database clock and each schedule's last enqueued tick, computes the due ticks from
those database times only, and enqueues each through ``pgqueue.enqueue_tick(schedule, tick)``.
The database builds the job from the registered template and refuses a tick the schedule does
not have (not aligned, outside its catch-up window); its primary key on (schedule, tick) lets
exactly one caller in. Two workers racing for a tick give one job; a worker killed mid-tick
leaves no row, and the next one takes the tick.

Registering a template amounts to enqueueing its job, so a least-privilege worker role
(``pgqueue_worker``) may not: such a worker reads the schedules as registered
(``pgqueue.schedule_state``) and ticks those, and ``pgqueue schedule:sync`` registers them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg import errors as pg_errors

from pgqueue.config import ConnectionConfig
from pgqueue.envelope import Envelope
from pgqueue.errors import QueueError
from pgqueue.jobs import Job
from pgqueue.jsonvalues import dumps_json
from pgqueue.schedules import Schedule, schedule_of
from pgqueue.store import ScheduleState, Store
from pgqueue.store.errors import is_transient

__all__ = ["Registration", "Scheduler", "declared_schedules", "registration"]

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


@dataclass(frozen=True, slots=True)
class Registration:
    """A schedule as it is registered: the schedule, and the template of its jobs (the envelope
    every tick enqueues, without its id, as JSON text)."""

    schedule: Schedule
    template: str


def registration(job_type: type[Job], schedule: Schedule, config: ConnectionConfig) -> Registration:
    """The schedule with the template of its jobs on ``config``: ``schedule_args`` are checked as
    a dispatch checks a job's args (types, JSON, the envelope's size), once. Raises the
    :class:`~pgqueue.QueueError` a dispatch of the job would raise."""
    job = job_type.from_args(dict(schedule.args))
    envelope = Envelope.build(job, config, queue=None, priority=None)
    envelope.encode(config.max_payload_bytes)
    template = envelope.to_data()
    del template["id"]  # each tick's job gets its own, from the database
    return Registration(schedule, dumps_json(template))


def sync_arguments(registrations: Sequence[Registration]) -> tuple[list[str], list[str], list[str], list[int],
                                                                     list[int], list[str]]:
    """The arguments of ``pgqueue.schedule_sync`` for these registrations, one element each."""
    schedules = [r.schedule for r in registrations]
    return ([s.job_name for s in schedules], [s.expression for s in schedules], [s.timezone for s in schedules],
            [s.catch_up for s in schedules], [s.period_seconds for s in schedules],
            [r.template for r in registrations])


class Scheduler:
    """Enqueues the due ticks of a worker's schedules; :meth:`run` until cancelled."""

    def __init__(self, store: Store, config: ConnectionConfig,
                 schedules: Sequence[tuple[type[Job], Schedule]]) -> None:
        self._store = store
        self._config = config
        self._schedules = list(schedules)
        #: Ticks this scheduler enqueued (others were enqueued by other workers).
        self.enqueued = 0
        #: False once this worker's role was refused registering schedules: it then ticks the
        #: schedules as registered in the database.
        self.registers = True
        self._registrations: dict[str, Registration] | None = None
        self._forms: dict[tuple[str, str, str, int], Schedule] = {}
        self._noted: set[tuple[object, ...]] = set()

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
        cannot be computed is logged by name and skipped, a tick the database refuses is logged
        and the next one tried, and the other schedules go on. Only database faults that concern
        every schedule (the connection, a transient error) propagate.
        """
        registrations = self._registered()
        if not registrations:
            return MAX_SLEEP
        states = await self._states(registrations)
        if not self.registers:
            for name in sorted(set(registrations) - {state.name for state in states}):
                self._note(("unregistered", name), logging.WARNING,
                           "pgqueue scheduler: job %r: its schedule is not registered in pgqueue.schedules, and this "
                           "worker's role may not register it: it does not tick until `pgqueue schedule:sync` "
                           "registers it (run as a role that may enqueue: pgqueue_producer, or the owner)", name)
        wait = MAX_SLEEP
        now: datetime | None = None
        for state in states:
            now = state.now
            try:
                wait = min(wait, await self._tick_one(state, registrations[state.name].schedule))
            except Exception as exc:
                if is_transient(exc):
                    raise
                logger.error("pgqueue scheduler: schedule of job %r failed (%s: %s); its ticks are skipped, the "
                             "other schedules go on", state.name, type(exc).__name__, exc)
        # A little after the tick, so that the database clock has passed it when we look.
        return max(wait, 0.0) + 0.01 if now is not None else MAX_SLEEP

    async def _states(self, registrations: dict[str, Registration]) -> list[ScheduleState]:
        """Register the schedules (when this worker's role may) and read their state."""
        if self.registers:
            ordered = [registrations[name] for name in sorted(registrations)]
            try:
                return await self._store.schedule_sync(*sync_arguments(ordered))
            except pg_errors.InvalidParameterValue:
                # The database refused one of them: register each alone, so that it fails alone.
                states: list[ScheduleState] = []
                for one in ordered:
                    try:
                        states += await self._store.schedule_sync(*sync_arguments([one]))
                    except pg_errors.InvalidParameterValue as exc:
                        self._note(("refused", one.schedule.job_name, str(exc)), logging.ERROR,
                                   "pgqueue scheduler: job %r: the database refuses to register its schedule (%s); "
                                   "it does not tick, the other schedules go on", one.schedule.job_name,
                                   exc.diag.message_primary or exc)
                return states
            except pg_errors.InsufficientPrivilege as exc:
                self.registers = False
                logger.warning(
                    "pgqueue scheduler: this worker's role may not register schedules (%s); it ticks the schedules "
                    "as registered in the database. After a deploy that adds or changes a schedule, register them "
                    "with `pgqueue schedule:sync --app <module>` as a role that may enqueue (pgqueue_producer, or "
                    "the owner)", exc.diag.message_primary or exc)
        return await self._store.schedule_state(sorted(registrations))

    async def _tick_one(self, state: ScheduleState, declared: Schedule) -> float:
        """Enqueue the due ticks of one schedule; the seconds until its next tick."""
        schedule = declared
        form = (state.expression, state.timezone, state.catch_up)
        if form != (declared.expression, declared.timezone, declared.catch_up):
            # Registered otherwise (this worker may not register): the database takes only the
            # ticks of the registered form, so those are the ones to compute.
            self._note(("form", state.name, *form), logging.WARNING,
                       "pgqueue scheduler: job %r: its schedule is registered as %r (%s, catch-up %d) while this "
                       "worker's code declares %r (%s, catch-up %d); it ticks as registered until `pgqueue "
                       "schedule:sync` registers the new one", state.name, *form, declared.expression,
                       declared.timezone, declared.catch_up)
            schedule = self._forms.get((state.name, *form)) or self._forms.setdefault(
                (state.name, *form), Schedule.registered(state.name, *form))
        if not state.has_template:
            self._note(("template", state.name), logging.WARNING,
                       "pgqueue scheduler: job %r: its schedule was registered before revision 0008 without the "
                       "template of its jobs, and this worker's role may not register it: it does not tick until "
                       "`pgqueue schedule:sync` registers it", state.name)
            return MAX_SLEEP
        # Ticks after the last enqueued one, but never from before the schedule took its
        # current form (first seen, or changed by a deploy).
        after = state.changed_at if state.last_tick is None else max(state.last_tick, state.changed_at)
        for tick in schedule.due_ticks(after, state.now):
            try:
                enqueued = await self._store.enqueue_tick(state.name, tick)
            except pg_errors.InvalidParameterValue as exc:  # refused by the database: this tick only
                logger.warning("pgqueue scheduler: job %r: tick %s refused: %s", state.name, tick.isoformat(),
                               exc.diag.message_primary or exc)
                continue
            if enqueued is not None:
                self.enqueued += 1
        return (schedule.next_tick(state.now) - state.now).total_seconds()

    def _registered(self) -> dict[str, Registration]:
        """Each schedule with the template of its jobs, checked once as a dispatch checks one; a
        schedule whose args do not fit its job is logged by name (once) and left out."""
        if self._registrations is None:
            self._registrations = {}
            for job_type, schedule in self._schedules:
                try:
                    found = registration(job_type, schedule, self._config)
                except QueueError as exc:
                    logger.error("pgqueue scheduler: job %r: its schedule_args cannot be dispatched (%s); the "
                                 "schedule does not tick: fix schedule_args and deploy", schedule.job_name, exc)
                    continue
                self._registrations[schedule.job_name] = found
        return self._registrations

    def _note(self, key: tuple[object, ...], level: int, message: str, *args: object) -> None:
        """Log ``message`` once for ``key`` (a condition that lasts until a deploy)."""
        if key not in self._noted:
            self._noted.add(key)
            logger.log(level, message, *args)

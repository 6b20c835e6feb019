"""Schedules: registering periodic schedules with their job templates, and enqueuing their ticks.

The scheduler's statements (:meth:`ScheduleStatements.schedule_sync`, ``schedule_state``,
``enqueue_tick``) let psycopg errors through: the scheduler tells a role that may not
register from a passing fault. The ones for people translate them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from pgqueue.store.errors import storage_errors
from pgqueue.store.pooled import Pooled


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """One row of ``pgqueue.schedule_state`` (and ``pgqueue.schedule_sync``): a schedule as
    registered, whether its job template is (``has_template``), the database clock, when the
    schedule took its current form and its latest enqueued tick not after that clock."""

    name: str
    expression: str
    timezone: str
    catch_up: int
    has_template: bool
    now: datetime
    changed_at: datetime
    last_tick: datetime | None


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A schedule's last enqueued tick (None: none yet), with the database clock."""

    name: str
    last_tick: datetime | None
    now: datetime


class ScheduleStatements(Pooled):
    """The schedules as the database holds them, and the exactly-once enqueue of a tick."""

    __slots__ = ()

    async def schedule_sync(self, names: list[str], expressions: list[str], timezones: list[str],
                            catch_ups: list[int], periods: list[int], templates: list[str]) -> list[ScheduleState]:
        """Register schedules with their periods and job templates (JSON text); the state of each.

        Lets psycopg errors through (the scheduler tells a role that may not register from the
        rest); :meth:`register_schedules` is the same for people.
        """
        rows = await self._rows("schedule_sync", (names, expressions, timezones, catch_ups, periods, templates))
        return [ScheduleState(*row) for row in rows]

    async def register_schedules(self, names: list[str], expressions: list[str], timezones: list[str],
                                 catch_ups: list[int], periods: list[int], templates: list[str]
                                 ) -> list[ScheduleState]:
        """:meth:`schedule_sync`, raising :class:`~pgqueue.QueueError` subclasses."""
        with storage_errors("registering schedules"):
            return await self.schedule_sync(names, expressions, timezones, catch_ups, periods, templates)

    async def schedule_state(self, names: list[str]) -> list[ScheduleState]:
        """The registered schedules among ``names``, as :meth:`schedule_sync` returns them; marks them seen."""
        return [ScheduleState(*row) for row in await self._rows("schedule_state", (names,))]

    async def enqueue_tick(self, schedule: str, tick: datetime) -> uuid.UUID | None:
        """Enqueue the job of one tick (built by the database from the registered template),
        exactly once; None when the tick was enqueued before."""
        job_id: uuid.UUID | None = await self._value("enqueue_tick", (schedule, tick))
        return job_id

    async def schedule_ticks(self, names: list[str]) -> list[ScheduleRow]:
        """Per schedule among ``names``: its last enqueued tick, and the database clock."""
        with storage_errors("reading schedules"):
            return await self._objects("schedule_ticks", ScheduleRow, (names,))

"""Periodic jobs: a job type's schedule, and the ticks that are due by the database clock.

A schedule is declared on the job type (``schedule = "0 3 * * *"`` as a class attribute, or
``@job(schedule=...)``): a cron expression of 5 fields (minute hour day-of-month month
day-of-week, parsed by `cronsim <https://pypi.org/project/cronsim/>`_; no seconds field) in
``schedule_timezone`` (default UTC, DST-correct: a time skipped by spring-forward runs once at
the first valid time after it, a time repeated by fall-back runs once, at its first occurrence),
or a :class:`datetime.timedelta` for "every N seconds", ticking at multiples of N seconds since
the Unix epoch. Which worker enqueues a tick does not matter: see
:class:`pgqueue.worker.scheduler.Scheduler` and ``pgqueue.enqueue_tick``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from pgqueue.errors import QueueConfigurationError

__all__ = ["MAX_CATCH_UP", "Schedule", "schedule_of"]

#: The most missed ticks one schedule may enqueue after downtime (``schedule_catch_up``).
MAX_CATCH_UP = 1000


@dataclass(frozen=True)
class Schedule:
    """When a job type runs by itself, and with which args.

    ``catch_up``: how many missed ticks are enqueued after a time when no worker ran (the most
    recent ones); 1, the default, enqueues only the latest missed tick.
    """

    job_name: str
    every: str | timedelta
    timezone: str = "UTC"
    args: Mapping[str, Any] = field(default_factory=dict)
    catch_up: int = 1

    def __post_init__(self) -> None:
        where = f"job {self.job_name!r}: schedule"
        if isinstance(self.every, timedelta):
            seconds = self.every.total_seconds()
            if seconds < 1 or seconds != math.floor(seconds):
                raise QueueConfigurationError(
                    f"{where} {self.every!r} must be a whole number of seconds, at least 1")
        elif isinstance(self.every, str):
            try:
                CronSim(self.every, datetime(2000, 1, 1, tzinfo=UTC))
            except CronSimError as exc:
                raise QueueConfigurationError(
                    f"{where} {self.every!r} is not a 5-field cron expression ({exc}); e.g. \"0 3 * * *\" "
                    "for 03:00 daily, or a datetime.timedelta for every N seconds") from None
        else:
            raise QueueConfigurationError(
                f"{where} must be a cron expression (str) or a datetime.timedelta, got {self.every!r}")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise QueueConfigurationError(
                f"{where}: unknown timezone {self.timezone!r}; use an IANA name such as 'Europe/Paris'") from None
        if isinstance(self.catch_up, bool) or not isinstance(self.catch_up, int) \
                or not 1 <= self.catch_up <= MAX_CATCH_UP:
            raise QueueConfigurationError(f"{where}: catch_up must be an integer from 1 to {MAX_CATCH_UP}, "
                                          f"got {self.catch_up!r}")

    @property
    def expression(self) -> str:
        """The schedule as stored in ``pgqueue.schedules.expression``: the cron text or ``every <n>s``."""
        if isinstance(self.every, timedelta):
            return f"every {int(self.every.total_seconds())}s"
        return self.every

    def due_ticks(self, after: datetime, now: datetime) -> list[datetime]:
        """The ticks in ``(after, now]``, oldest first, at most ``catch_up`` (the most recent ones)."""
        if now <= after:
            return []
        ticks: list[datetime] = []
        if isinstance(self.every, timedelta):
            step = int(self.every.total_seconds())
            last = math.floor(now.timestamp() / step) * step
            while len(ticks) < self.catch_up and last > after.timestamp():
                ticks.append(datetime.fromtimestamp(last, UTC))
                last -= step
        else:
            zone = ZoneInfo(self.timezone)
            # cronsim yields times strictly before its start when reversed, at whole seconds.
            start = now.astimezone(zone).replace(microsecond=0) + timedelta(seconds=1)
            for tick in CronSim(self.every, start, reverse=True):
                if tick <= after or len(ticks) >= self.catch_up:
                    break
                ticks.append(tick.astimezone(UTC))
        ticks.reverse()
        return ticks

    def next_tick(self, now: datetime) -> datetime:
        """The first tick after ``now``."""
        if isinstance(self.every, timedelta):
            step = int(self.every.total_seconds())
            return datetime.fromtimestamp((math.floor(now.timestamp() / step) + 1) * step, UTC)
        zone = ZoneInfo(self.timezone)
        return next(iter(CronSim(self.every, now.astimezone(zone).replace(microsecond=0)))).astimezone(UTC)


def schedule_of(job_type: type[Any]) -> Schedule | None:
    """The schedule a job type declares (``schedule`` and friends), or None."""
    every = getattr(job_type, "schedule", None)
    if every is None:
        return None
    return Schedule(job_name=job_type.name, every=every,
                    timezone=getattr(job_type, "schedule_timezone", "UTC"),
                    args=dict(getattr(job_type, "schedule_args", None) or {}),
                    catch_up=getattr(job_type, "schedule_catch_up", 1))

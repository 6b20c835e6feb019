"""Periodic jobs: a job type's schedule, and the ticks that are due by the database clock.

A schedule is declared on the job type (``schedule = "0 3 * * *"`` as a class attribute, or
``@job(schedule=...)``): a cron expression of 5 fields (minute hour day-of-month month
day-of-week, parsed by `cronsim <https://pypi.org/project/cronsim/>`_; no seconds field) in
``schedule_timezone`` (default UTC, DST-correct: a time skipped by spring-forward runs once at
the first valid time after it, a time repeated by fall-back runs once, at its first occurrence),
or a :class:`datetime.timedelta` for "every N seconds" (1 s to 365 days), ticking at multiples of
N seconds since the Unix epoch. Everything is checked when the class is defined: the expression,
the timezone, that its ticks can be computed, and that ``schedule_args`` name the job's fields.
Which worker enqueues a tick does not matter: see :class:`pgqueue.worker.scheduler.Scheduler`
and ``pgqueue.enqueue_tick``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from pgqueue.errors import QueueConfigurationError
from pgqueue.limits import MAX_CATCH_UP, MAX_SCHEDULE_INTERVAL_SECONDS, MAX_SCHEDULE_PERIOD_SECONDS

__all__ = ["MAX_CATCH_UP", "Schedule", "schedule_of"]

_SECOND = timedelta(seconds=1)
_DAY = 86400
_INTERVAL = re.compile(r"every ([0-9]+)s")
#: The days scanned for the longest gap between two days a cron expression runs on: the year
#: before today and the eleven after it (leap years and most weekday-of-month patterns repeat).
_SCANNED_DAYS = 12 * 366


@dataclass(frozen=True)
class Schedule:
    """When a job type runs by itself, and with which args.

    ``catch_up``: how many missed ticks are enqueued after a time when no worker ran (the most
    recent ones); 1, the default, enqueues only the latest missed tick.

    Raises :class:`~pgqueue.QueueConfigurationError`, naming the job and the bad value, for an
    interval that is not a whole number of seconds from 1 to 365 days, a cron expression that
    is not 5 valid fields, an unknown timezone, a catch-up outside 1 to :data:`MAX_CATCH_UP`, or
    a schedule whose ticks cannot be computed (a cron expression that matches no time in the 50
    years before or after now).
    """

    job_name: str
    every: str | timedelta
    timezone: str = "UTC"
    args: Mapping[str, Any] = field(default_factory=dict)
    catch_up: int = 1

    def __post_init__(self) -> None:
        where = f"job {self.job_name!r}: schedule"
        if isinstance(self.every, timedelta):
            seconds, rest = divmod(self.every, _SECOND)
            if rest or not 1 <= seconds <= MAX_SCHEDULE_INTERVAL_SECONDS:
                raise QueueConfigurationError(
                    f"{where} {self.every!r} must be a whole number of seconds from 1 to "
                    f"{MAX_SCHEDULE_INTERVAL_SECONDS} (365 days); for a longer period use a cron expression, "
                    "e.g. \"0 3 1 1 *\" for 03:00 every 1 January")
        elif isinstance(self.every, str):
            fields = self.every.split()
            if len(fields) != 5:
                seconds_field = (" (a seconds field is not supported: for a schedule of less than a minute "
                                 "use a datetime.timedelta)") if len(fields) == 6 else ""
                raise QueueConfigurationError(
                    f"{where} {self.every!r} is not a 5-field cron expression: it has {len(fields)} fields, "
                    f"not minute hour day-of-month month day-of-week{seconds_field}; e.g. \"0 3 * * *\" for "
                    "03:00 daily")
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
        # A schedule accepted here must never fail in the scheduler: compute a tick each way now.
        now = datetime.now(UTC)
        try:
            self._tick_after(now)
            next(self._ticks_before(now))
        except (StopIteration, OverflowError, ValueError) as exc:
            raise QueueConfigurationError(
                f"{where} {self.every!r}: its ticks cannot be computed ({type(exc).__name__}: {exc}); "
                "no time in the 50 years around now matches it") from None

    @classmethod
    def registered(cls, job_name: str, expression: str, timezone: str, catch_up: int) -> Schedule:
        """The schedule as ``pgqueue.schedules`` holds it (``expression``: cron text or ``every <n>s``)."""
        interval = _INTERVAL.fullmatch(expression)
        every: str | timedelta = timedelta(seconds=int(interval[1])) if interval else expression
        return cls(job_name=job_name, every=every, timezone=timezone, catch_up=catch_up)

    @functools.cached_property
    def period_seconds(self) -> int:
        """The most seconds between two consecutive ticks, as registered with the schedule: the
        database refuses a tick older than ``catch_up`` periods.

        An interval's own length; for a cron expression an upper bound computed from its fields:
        the longest gap between two days it runs on (scanned over the year before today and the
        eleven after; 100 years if it runs on fewer than two of them) less the span of its times
        of day, or the longest gap within a day. In a timezone other than UTC, a daylight-saving
        change may skip every tick of one hour of a day and repeat another hour, which is counted
        too.
        """
        if isinstance(self.every, timedelta):
            return self.every // _SECOND
        sim = CronSim(self.every, datetime(2000, 1, 1, tzinfo=UTC))
        times = sorted({hour * 3600 + minute * 60 for hour in sim.hours for minute in sim.minutes})
        start = date.today() - timedelta(days=366)
        days = [n for n in range(_SCANNED_DAYS)
                if (day := start + timedelta(days=n)).month in sim.months and sim.match_day(day)]
        day_gap = max((b - a for a, b in itertools.pairwise(days)), default=MAX_SCHEDULE_PERIOD_SECONDS // _DAY)

        def longest(kept: list[int]) -> int:
            within = max((b - a for a, b in itertools.pairwise(kept)), default=0)
            return max(within, day_gap * _DAY - (kept[-1] - kept[0]))

        gap = longest(times)
        if self.timezone != "UTC":
            for hour in range(24):  # the hour a spring-forward day skips: its ticks do not happen
                kept = [t for t in times if t // 3600 != hour]
                gap = max(gap, longest(kept) if kept else 2 * day_gap * _DAY)
            gap += 3600  # the hour a fall-back day repeats
        return min(gap, MAX_SCHEDULE_PERIOD_SECONDS)

    @property
    def expression(self) -> str:
        """The schedule as stored in ``pgqueue.schedules.expression``: the cron text or ``every <n>s``."""
        if isinstance(self.every, timedelta):
            return f"every {self.every // _SECOND}s"
        return self.every

    def due_ticks(self, after: datetime, now: datetime) -> list[datetime]:
        """The ticks in ``(after, now]``, oldest first, at most ``catch_up`` (the most recent ones)."""
        if now <= after:
            return []
        ticks: list[datetime] = []
        for tick in self._ticks_before(now):
            if tick <= after or len(ticks) >= self.catch_up:
                break
            ticks.append(tick)
        ticks.reverse()
        return ticks

    def _ticks_before(self, now: datetime) -> Iterator[datetime]:
        """The ticks at or before ``now``, newest first, in UTC."""
        if isinstance(self.every, timedelta):
            step = self.every // _SECOND
            last = math.floor(now.timestamp() / step) * step
            while True:
                yield datetime.fromtimestamp(last, UTC)
                last -= step
        zone = ZoneInfo(self.timezone)
        # cronsim yields times strictly before its start when reversed, at whole seconds.
        start = now.astimezone(zone).replace(microsecond=0) + _SECOND
        for tick in CronSim(self.every, start, reverse=True):
            yield tick.astimezone(UTC)

    def next_tick(self, now: datetime) -> datetime:
        """The first tick after ``now``."""
        try:
            return self._tick_after(now)
        except StopIteration:  # cronsim gives up after 50 years without a match
            raise QueueConfigurationError(f"job {self.job_name!r}: schedule {self.every!r} has no tick in the "
                                          f"50 years after {now.isoformat()}") from None

    def _tick_after(self, now: datetime) -> datetime:
        if isinstance(self.every, timedelta):
            step = self.every // _SECOND
            return datetime.fromtimestamp((math.floor(now.timestamp() / step) + 1) * step, UTC)
        zone = ZoneInfo(self.timezone)
        return next(iter(CronSim(self.every, now.astimezone(zone).replace(microsecond=0)))).astimezone(UTC)


def schedule_of(job_type: type[Any]) -> Schedule | None:
    """The schedule a job type declares (``schedule`` and friends), or None.

    Also checks that ``schedule_args`` is a mapping of the job's field names holding every
    field that has no default (their types and JSON form are checked, as a dispatch checks
    them, when a worker registers the schedule).
    """
    every = getattr(job_type, "schedule", None)
    if every is None:
        return None
    name = job_type.name
    args = getattr(job_type, "schedule_args", None) or {}
    if not isinstance(args, Mapping) or not all(isinstance(key, str) for key in args):
        raise QueueConfigurationError(f"job {name!r}: schedule_args must be a dict of the job's args by field "
                                      f"name, got {args!r}")
    if dataclasses.is_dataclass(job_type):
        fields = dataclasses.fields(job_type)
        names = [f.name for f in fields]
        unknown = [key for key in args if key not in names]
        if unknown:
            raise QueueConfigurationError(
                f"job {name!r}: schedule_args has an unknown field {unknown[0]!r}; the job's fields are "
                f"{', '.join(names) or 'none'}")
        missing = [f.name for f in fields if f.name not in args
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise QueueConfigurationError(
                f"job {name!r}: schedule_args lacks the required field {missing[0]!r}; every periodic dispatch "
                "uses schedule_args as the job's args")
    return Schedule(job_name=name, every=every,
                    timezone=getattr(job_type, "schedule_timezone", "UTC"),
                    args=dict(args),
                    catch_up=getattr(job_type, "schedule_catch_up", 1))

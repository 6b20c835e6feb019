"""Queue controls an operator sets: pause, global concurrency and rate limits, and cancel.

The database decides: ``pgqueue.reserve`` reads ``pgqueue.queues`` and enforces every
control for every worker on every host. This module only checks what a person typed.
"""

from __future__ import annotations

import math
import re

from pgqueue.errors import QueueConfigurationError
from pgqueue.limits import MAX_SQL_INTEGER, shown
from pgqueue.store import CancelOutcome, QueueControl

__all__ = ["DEFAULT_ADAPTIVE_DECREASE", "CancelOutcome", "QueueControl", "Rate", "format_rate", "parse_adaptive",
           "parse_decrease", "parse_rate"]

#: A rate as the Python API takes it: ``"100/s"`` (:func:`parse_rate`) or ``(100, 1.0)``
#: (reservations, period in seconds).
Rate = str | tuple[int, float]

_PERIODS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
            "h": 3600.0, "hour": 3600.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$")


def parse_rate(text: str) -> tuple[int, float]:
    """``"100/s"`` -> ``(100, 1.0)``: reservations and the period in seconds (``/s``, ``/min``, ``/h``,
    or a number of them: ``"5/2s"`` -> ``(5, 2.0)``, ``"30/1.5h"`` -> ``(30, 5400.0)``)."""
    match = _RATE.match(text.lower())
    count = float(match.group(2) or 1) if match is not None and len(match.group(2) or "") <= 12 else 0.0
    # At most 10 digits before int(): Python refuses to convert more than 4,300 (ValueError).
    if match is None or match.group(3) not in _PERIODS or len(match.group(1)) > 10 \
            or not 1 <= int(match.group(1)) <= MAX_SQL_INTEGER or not count > 0:
        raise QueueConfigurationError(
            f"rate {shown(text)} is not a rate: write a whole number from 1 to {MAX_SQL_INTEGER} per period, e.g. "
            "100/s, 20/min, 500/h or 5/2s; the limits were not changed")
    return int(match.group(1)), count * _PERIODS[match.group(3)]


def parse_adaptive(text: str) -> tuple[int, int]:
    """``"2:50"`` -> ``(2, 50)``: the bounds of an adaptive concurrency limit (``MIN:MAX``), checked
    as :func:`check_adaptive` checks them."""
    low, sep, high = text.partition(":")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit() \
            or len(low.strip()) > 10 or len(high.strip()) > 10:
        raise QueueConfigurationError(
            f"adaptive limit {shown(text)} is not MIN:MAX: write two whole numbers, e.g. 2:50 (from 2 up to 50 "
            "jobs at once); the limits were not changed")
    bounds = (int(low), int(high))
    check_adaptive(bounds)
    return bounds


def check_adaptive(adaptive: object) -> None:
    """Refuse adaptive bounds ``pgqueue.set_adaptive_limit`` would refuse: a pair ``(min, max)`` of
    whole numbers with 1 <= min <= max (nothing is changed)."""
    if adaptive is None:
        return
    if not isinstance(adaptive, tuple | list) or len(adaptive) != 2 or not all(_whole(b) for b in adaptive):
        raise QueueConfigurationError(
            f"adaptive must be a pair (min, max) of whole numbers from 1 to {MAX_SQL_INTEGER}, got {adaptive!r}; "
            "the limits were not changed")
    if adaptive[0] > adaptive[1]:
        raise QueueConfigurationError(
            f"adaptive limit: min {adaptive[0]} is above max {adaptive[1]} (the limit moves between them); "
            "the limits were not changed")


#: Issue 28: what a backpressure report multiplies an adaptive limit by when a queue was given no
#: factor (``pgqueue.queues.adaptive_decrease``): 0.9, the backoff ratio of Netflix concurrency-limits'
#: AIMD limit. A cut leaves ``floor(limit * factor)``, at least one less, never below the minimum.
DEFAULT_ADAPTIVE_DECREASE = 0.9


def check_decrease(factor: object) -> None:
    """Refuse a cut factor ``pgqueue.set_adaptive_decrease`` would refuse: a number above 0 and below 1
    (None: the default, :data:`DEFAULT_ADAPTIVE_DECREASE`; nothing is changed)."""
    if factor is None:
        return
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor < 1:
        raise QueueConfigurationError(
            f"adaptive_decrease must be a number above 0 and below 1 (what a backpressure report multiplies the "
            f"limit by: 0.9 cuts 10 %, 0.5 halves), got {factor!r}; the limits were not changed")


def parse_decrease(text: str) -> float:
    """``"0.75"`` -> ``0.75``: a cut factor as :func:`check_decrease` checks it."""
    try:
        factor = float(text) if len(text) <= 32 else math.nan
    except ValueError:
        factor = math.nan
    if math.isnan(factor):
        raise QueueConfigurationError(f"adaptive decrease {shown(text)} is not a number: write one above 0 and "
                                      "below 1, e.g. 0.9 (cut 10 %) or 0.5 (halve); the limits were not changed")
    check_decrease(factor)
    return factor


def check_aging(seconds: object) -> None:
    """Refuse a priority aging ``pgqueue.set_aging`` would refuse: seconds from 0.001 to 31536000
    (one year), or None for none (nothing is changed)."""
    if seconds is None:
        return
    if not (isinstance(seconds, int | float) and not isinstance(seconds, bool) and math.isfinite(seconds)
            and 0.001 <= seconds <= 31536000):
        raise QueueConfigurationError(
            f"aging must be a number of seconds from 0.001 to 31536000 (or None for strict priorities), got "
            f"{seconds!r}; the queue's aging was not changed")


def format_rate(limit: int, period: float) -> str:
    """A rate as :func:`parse_rate` reads it back: ``(100, 1.0)`` -> ``"100/s"``, ``(5, 7200.0)`` -> ``"5/2h"``,
    ``(5, 90.0)`` -> ``"5/90s"``."""
    for unit, size in (("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        count = period / size
        if count >= 1 and count.is_integer():
            return f"{limit}/{unit}" if count == 1 else f"{limit}/{int(count)}{unit}"
    return f"{limit}/{period!r}s"  # a fraction of a second: repr() is the shortest text that reads back


def check_limits(concurrency: int | None, rate_limit: int | None, rate_period: float | None,
                 burst: int | None = None) -> None:
    """Refuse limits ``pgqueue.set_limits`` would refuse, naming the bad value (nothing is changed)."""
    if concurrency is not None and not _whole(concurrency):
        raise QueueConfigurationError(
            f"concurrency must be a whole number >= 1 and at most {MAX_SQL_INTEGER} (or None for no limit), got "
            f"{concurrency!r}; the limits were not changed")
    if (rate_limit is None) != (rate_period is None):
        raise QueueConfigurationError("give rate_limit and rate_period together (or neither); "
                                      "the limits were not changed")
    if rate_limit is not None and not _whole(rate_limit):
        raise QueueConfigurationError(f"rate_limit must be a whole number >= 1 and at most {MAX_SQL_INTEGER}, got "
                                      f"{rate_limit!r}; the limits were not changed")
    if rate_period is not None and not (isinstance(rate_period, int | float) and not isinstance(rate_period, bool)
                                        and math.isfinite(rate_period) and 0.001 <= rate_period <= 31536000):
        raise QueueConfigurationError(f"rate_period must be from 0.001 to 31536000 seconds, got {rate_period!r}; "
                                      "the limits were not changed")
    if burst is not None and not _whole(burst):
        raise QueueConfigurationError(f"burst must be a whole number >= 1 and at most {MAX_SQL_INTEGER} (or None "
                                      f"for the rate per period), got {burst!r}; the limits were not changed")
    if burst is not None and rate_limit is None:
        raise QueueConfigurationError(f"burst {burst} needs a rate limit (it is the capacity of the rate's token "
                                      "bucket): give rate_limit and rate_period too; the limits were not changed")


def _whole(value: object) -> bool:
    """A whole number a PostgreSQL ``integer`` column of pgqueue.queues holds, and at least 1."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SQL_INTEGER


def rate_of(rate: Rate | None) -> tuple[int | None, float | None]:
    """A :data:`Rate` as (reservations, period in seconds), (None, None) for None; a text that is not a rate
    raises QueueConfigurationError (issue 28: the per-partition rates)."""
    if rate is None:
        return None, None
    if isinstance(rate, str):
        return parse_rate(rate)
    if not isinstance(rate, tuple) or len(rate) != 2:
        raise QueueConfigurationError(f"a rate is a text such as '10/s' or a pair (10, 1.0), got {rate!r}; "
                                      "the limits were not changed")
    return rate[0], rate[1]


def check_partition_limits(concurrency: int | None, rate_limit: int | None, rate_period: float | None,
                           burst: int | None, weight: int | None) -> None:
    """Refuse per-partition limits ``pgqueue.set_partition_limit(s)`` would refuse, naming the bad value."""
    check_limits(concurrency, rate_limit, rate_period, burst)
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 1000):
        raise QueueConfigurationError(f"weight must be a whole number from 1 to 1000 (or None for 1), got {weight!r}; "
                                      "the limits were not changed")


def parse_aging(text: str) -> float:
    """``"30"``, ``"0.5"``, ``"30s"``, ``"5min"``, ``"2h"`` -> seconds: a priority aging (``queue:limit
    --aging``) as :func:`check_aging` checks it."""
    units = {"h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    number, scale = text.strip(), 1.0
    for unit in sorted(units, key=len, reverse=True):
        if number.endswith(unit):
            number, scale = number[: -len(unit)], units[unit]
            break
    try:
        seconds = float(number) * scale
    except ValueError:
        raise QueueConfigurationError(
            f"give seconds (30, 0.5), a number with a unit (30s, 5min, 2h) or 'off', got {text!r}") from None
    check_aging(seconds)
    return seconds

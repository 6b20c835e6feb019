"""Queue controls an operator sets: pause, global concurrency and rate limits, and cancel.

The database decides: ``pgqueue.reserve`` reads ``pgqueue.queues`` and enforces every
control for every worker on every host. This module only checks what a person typed.
"""

from __future__ import annotations

import math
import re

from pgqueue.errors import QueueConfigurationError
from pgqueue.store import CancelOutcome, QueueControl

__all__ = ["CancelOutcome", "QueueControl", "format_rate", "parse_rate"]

_PERIODS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
            "h": 3600.0, "hour": 3600.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$")


def parse_rate(text: str) -> tuple[int, float]:
    """``"100/s"`` -> ``(100, 1.0)``: reservations and the period in seconds (``/s``, ``/min``, ``/h``,
    or a number of them: ``"5/2s"`` -> ``(5, 2.0)``, ``"30/1.5h"`` -> ``(30, 5400.0)``)."""
    match = _RATE.match(text.lower())
    count = float(match.group(2) or 1) if match is not None else 0.0
    if match is None or match.group(3) not in _PERIODS or int(match.group(1)) < 1 or not count > 0:
        raise QueueConfigurationError(
            f"rate {text!r} is not a rate: write a whole number of at least 1 per period, e.g. 100/s, 20/min "
            "or 500/h; the limits were not changed")
    return int(match.group(1)), count * _PERIODS[match.group(3)]


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
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise QueueConfigurationError(
            f"concurrency must be a whole number >= 1 (or None for no limit), got {concurrency!r}; "
            "the limits were not changed")
    if (rate_limit is None) != (rate_period is None):
        raise QueueConfigurationError("give rate_limit and rate_period together (or neither); "
                                      "the limits were not changed")
    if rate_limit is not None and (isinstance(rate_limit, bool) or not isinstance(rate_limit, int) or rate_limit < 1):
        raise QueueConfigurationError(f"rate_limit must be a whole number >= 1, got {rate_limit!r}; "
                                      "the limits were not changed")
    if rate_period is not None and not (isinstance(rate_period, int | float) and not isinstance(rate_period, bool)
                                        and math.isfinite(rate_period) and 0.001 <= rate_period <= 31536000):
        raise QueueConfigurationError(f"rate_period must be from 0.001 to 31536000 seconds, got {rate_period!r}; "
                                      "the limits were not changed")
    if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or burst < 1):
        raise QueueConfigurationError(f"burst must be a whole number >= 1 (or None for the rate per period), "
                                      f"got {burst!r}; the limits were not changed")
    if burst is not None and rate_limit is None:
        raise QueueConfigurationError(f"burst {burst} needs a rate limit (it is the capacity of the rate's token "
                                      "bucket): give rate_limit and rate_period too; the limits were not changed")

"""The checks of a dispatch's settings that are not the envelope's: its delay and its unique key,
scope and period (what ``pgqueue.enqueue`` and ``pgqueue.enqueue_unique`` would refuse, named)."""

from __future__ import annotations

import dataclasses
import math

from pgqueue.envelope import Envelope
from pgqueue.errors import QueueConfigurationError
from pgqueue.jobs import check_result_ttl
from pgqueue.limits import MAX_DELAY_SECONDS, MAX_UNIQUE_PERIOD_SECONDS, unique_key_problem

__all__ = ["check_delay", "check_unique", "with_result_ttl"]


def check_delay(delay: object, job_name: str) -> float:
    """A dispatch delay checked (seconds, 0 to 10 years), as a float."""
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not math.isfinite(delay) \
            or not 0 <= delay <= MAX_DELAY_SECONDS:
        raise QueueConfigurationError(
            f"job {job_name!r}: delay must be a finite number of seconds >= 0 and at most "
            f"{MAX_DELAY_SECONDS:.0f} (10 years), got {delay!r}; the job was not dispatched"
        )
    return float(delay)


def check_unique(key: object, scope: object, period: object) -> float | None:
    """Refuse what ``pgqueue.enqueue_unique`` would refuse, naming the value; the period as a float."""
    if not isinstance(scope, str) or scope not in ("queued", "active", "period"):
        raise QueueConfigurationError(
            f"unique scope must be 'queued', 'active' or 'period', got {scope!r}; the job was not dispatched")
    problem = unique_key_problem(key)
    if problem is not None:
        raise QueueConfigurationError(f"{problem}; the job was not dispatched")
    if (scope == "period") != (period is not None):
        raise QueueConfigurationError(
            f"unique scope 'period' needs period=<seconds> (and only it takes one), got scope {scope!r} and "
            f"period {period!r}; the job was not dispatched")
    if period is None:
        return None
    if isinstance(period, bool) or not isinstance(period, int | float) or not math.isfinite(period) \
            or not 0 < period <= MAX_UNIQUE_PERIOD_SECONDS:
        raise QueueConfigurationError(
            f"unique period must be a finite number of seconds above 0 and at most "
            f"{MAX_UNIQUE_PERIOD_SECONDS:.0f} (10 years), got {type(period).__name__} {period!r}; "
            "the job was not dispatched")
    return float(period)


def with_result_ttl(envelope: Envelope, result_ttl: float | None) -> Envelope:
    """The envelope with a dispatch's own ``result_ttl`` (checked), or as it is without one."""
    if result_ttl is None:
        return envelope
    return dataclasses.replace(envelope, result_ttl=check_result_ttl(result_ttl, f"job {envelope.name!r}"))

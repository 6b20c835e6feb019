"""Debounce (issue 28): dispatches of one key coalesced into one job, decided by the database.

:class:`DebouncedDispatching` is a base of :class:`~pgqueue.Client` (``pgqueue/client.py``, which
provides its envelopes and its stores); ``client.dispatch(job, debounce=5, key="reindex:42")`` and
``client.dispatch_debounced(...)`` come from here. The window is trailing: each dispatch of the key
while its job waits pushes that job to ``window`` seconds after it and gives it its args (the latest
win); ``max_wait`` bounds how far a stream of dispatches can push it. ``pgqueue.enqueue_debounced``
(``sql/functions/enqueue_debounced/``) decides it, race-free across producers, inside the caller's
transaction when one is given.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pgqueue.dispatch_checks import with_result_ttl
from pgqueue.errors import QueueConfigurationError
from pgqueue.limits import MAX_DELAY_SECONDS, shown, unique_key_problem
from pgqueue.store import DebouncedDispatch, Store

if TYPE_CHECKING:
    from pgqueue.config import ConnectionConfig
    from pgqueue.envelope import Envelope
    from pgqueue.jobs import Job
    from pgqueue.testing.inline import InlineRunner

__all__ = ["DebouncedDispatch", "DebouncedDispatching", "check_debounce", "debounce_arguments"]

#: The longest debounce window and max wait, in seconds: 10 years, as a delay.
MAX_DEBOUNCE_SECONDS = MAX_DELAY_SECONDS


def _seconds(value: object, what: str, low: float, *, inclusive: bool) -> float:
    """``value`` as seconds above ``low`` (or from it, ``inclusive``) and at most 10 years, else the error."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not (low <= value if inclusive else low < value) or value > MAX_DEBOUNCE_SECONDS:
        bound = f"from the window ({low:g})" if inclusive else f"above {low:g}"
        raise QueueConfigurationError(
            f"the debounce {what} must be a finite number of seconds {bound} and at most "
            f"{MAX_DEBOUNCE_SECONDS:.0f} (10 years), got {type(value).__name__} {value!r}; the job was not dispatched")
    return float(value)


def check_debounce(key: object, window: object, max_wait: object) -> tuple[str, float, float | None]:
    """Refuse what ``pgqueue.enqueue_debounced`` would refuse, naming the value: a key of 1 to 1,000
    bytes of UTF-8 (the unique key's rule), a window above 0 and at most 10 years, a max wait that is
    None or from the window to 10 years. Returns them as stored."""
    problem = unique_key_problem(key)
    if problem is not None:
        raise QueueConfigurationError(f"{problem.replace('unique key', 'debounce key')}; the job was not dispatched")
    seconds = _seconds(window, "window", 0.0, inclusive=False)
    bound = None if max_wait is None else _seconds(max_wait, "max wait", seconds, inclusive=True)
    return str(key), seconds, bound


def debounce_arguments(job: object, debounce: float | None, key: str | None, max_wait: float | None,
                       delay: float, unique_key: str | None) -> tuple[str, float]:
    """Refuse a dispatch whose debounce keywords do not go together (checked before anything is
    stored); returns its key and window (each checked later by :func:`check_debounce`)."""
    where = f"job {getattr(type(job), 'name', type(job).__name__)!r}"
    if debounce is None:
        given = "key=" if key is not None else "max_wait="
        raise QueueConfigurationError(f"{where}: {given} belongs to a debounced dispatch: give debounce=<seconds> "
                                      "and key=<debounce key> together; the job was not dispatched")
    if key is None:
        raise QueueConfigurationError(f"{where}: debounce={debounce!r} needs key=<debounce key> (the dispatches "
                                      "of one key are coalesced); the job was not dispatched")
    if delay:
        raise QueueConfigurationError(f"{where}: a debounced dispatch takes no delay (the window is its delay), "
                                      f"got delay={delay!r}; the job was not dispatched")
    if unique_key is not None:
        raise QueueConfigurationError(f"{where}: a dispatch is either debounced or unique, not both (got "
                                      f"unique key {shown(unique_key)}); the job was not dispatched")
    return key, debounce


class DebouncedDispatching:
    """Debounced dispatch, a base of :class:`~pgqueue.Client`."""

    if TYPE_CHECKING:  # Client's
        def envelope(self, job: Job, *, queue: str | None = None, priority: int | None = None,
                     connection: str | None = None) -> tuple[Envelope, ConnectionConfig]: ...
        async def _store(self, connection: ConnectionConfig | None = None) -> Store: ...
        def _inline(self, config: ConnectionConfig) -> InlineRunner | None: ...

    def _debounced(self, job: Job, key: str, window: float, max_wait: float | None, queue: str | None,
                   priority: int | None, connection: str | None,
                   result_ttl: float | None) -> tuple[str, tuple[str, float, float | None], str, ConnectionConfig]:
        """Check and encode one debounced dispatch: (envelope text, key/window/max wait, what, connection)."""
        checked = check_debounce(key, window, max_wait)
        envelope, config = self.envelope(job, queue=queue, priority=priority, connection=connection)
        envelope = with_result_ttl(envelope, result_ttl)
        if self._inline(config) is not None:
            raise QueueConfigurationError(
                f"job {envelope.name!r}: the inline mode runs jobs at dispatch and cannot debounce them (a debounced "
                "job waits for its window); dispatch it without debounce= in inline tests")
        what = f"dispatching job {envelope.name!r} debounced by key {shown(checked[0])}"
        return envelope.encode(config.max_payload_bytes), checked, what, config

    async def dispatch_debounced(self, job: Job, key: str, window: float, *, max_wait: float | None = None,  # noqa: PLR0913  # the public API, as dispatch
                                 conn: Any = None, queue: str | None = None, priority: int | None = None,
                                 connection: str | None = None, result_ttl: float | None = None,
                                 ) -> DebouncedDispatch:
        """Dispatch a job debounced by ``key``: the dispatches of one key coalesce into one job, which
        runs once they stop for ``window`` seconds (a trailing window), and no later than ``max_wait``
        seconds after the first of them (None: no bound). The job takes each dispatch's args (the
        latest win) and keeps the first one's id. A job already running is never changed: a dispatch
        then starts a new window. PostgreSQL decides (``pgqueue.enqueue_debounced``), race-free across
        producers; with ``conn`` it joins the caller's transaction. A bad key, window or max wait is a
        :class:`~pgqueue.QueueConfigurationError` and nothing is stored.
        """
        text, (key, window, max_wait), what, config = self._debounced(job, key, window, max_wait, queue, priority,
                                                                      connection, result_ttl)
        if conn is not None:
            return await Store.enqueue_debounced_on(conn, text, key, window, max_wait, what=what)
        return await (await self._store(config)).enqueue_debounced(text, key, window, max_wait, what=what)

    def dispatch_debounced_sync(self, job: Job, key: str, window: float, *, conn: Any,  # noqa: PLR0913  # the public API, as dispatch
                                max_wait: float | None = None, queue: str | None = None,
                                priority: int | None = None, connection: str | None = None,
                                result_ttl: float | None = None) -> DebouncedDispatch:
        """Synchronous :meth:`dispatch_debounced` on the caller's psycopg or SQLAlchemy connection (its
        transaction)."""
        text, (key, window, max_wait), what, _ = self._debounced(job, key, window, max_wait, queue, priority,
                                                                 connection, result_ttl)
        return Store.enqueue_debounced_on_sync(conn, text, key, window, max_wait, what=what)

"""Dispatch from synchronous code (``Client.dispatch_sync``, ``Job.dispatch_sync``) on the caller's
psycopg or SQLAlchemy connection, inside its transaction.

:class:`SyncDispatching` is a base of :class:`~pgqueue.Client` (``pgqueue/client.py``, which this
module does not import). It decides what :meth:`Client.dispatch` decides: a debounced dispatch, a
job that waits for its parents (``after=``), and a job type's unique key (``unique_by``): a
duplicate returns the handle of the job holding the key, as the async dispatch does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pgqueue.composition import check_after, check_policy, parent_ids
from pgqueue.debounce import debounce_arguments
from pgqueue.dispatch_checks import check_delay, check_unique
from pgqueue.limits import shown
from pgqueue.store import Store, Wait

if TYPE_CHECKING:
    from pgqueue.config import ConnectionConfig
    from pgqueue.debounce import DebouncedDispatch
    from pgqueue.envelope import Envelope
    from pgqueue.handles import JobHandle
    from pgqueue.jobs import Job
    from pgqueue.testing.inline import InlineRunner

__all__ = ["SyncDispatching"]


class SyncDispatching:
    """Synchronous dispatch, a base of :class:`~pgqueue.Client`."""

    if TYPE_CHECKING:  # Client's
        def envelope(self, job: Job, *, queue: str | None = None, priority: int | None = None,
                     connection: str | None = None) -> tuple[Envelope, ConnectionConfig]: ...
        def _inline(self, config: ConnectionConfig) -> InlineRunner | None: ...
        def job(self, job_id: uuid.UUID | str) -> JobHandle: ...
        def dispatch_debounced_sync(self, job: Job, key: str, window: float, *, conn: Any,  # noqa: PLR0913  # as Client's
                                    max_wait: float | None = None, queue: str | None = None,
                                    priority: int | None = None, connection: str | None = None,
                                    result_ttl: float | None = None) -> DebouncedDispatch: ...

    def dispatch_sync(self, job: Job, *, conn: Any, delay: float = 0.0, queue: str | None = None,  # noqa: PLR0913  # as dispatch
                      priority: int | None = None, connection: str | None = None, debounce: float | None = None,
                      key: str | None = None, max_wait: float | None = None,
                      after: Iterable[uuid.UUID | str] | uuid.UUID | str | None = None,
                      on_parent_failure: str = "cancel") -> JobHandle:
        """Synchronous :meth:`dispatch` on the caller's psycopg or SQLAlchemy connection (its transaction).

        A job type with ``unique_by`` is dispatched under its derived key (``unique_scope``,
        ``unique_period``): a duplicate inserts nothing and the handle is the key holder's."""
        check_after(after, f"dispatching {type(job).__name__}", jobs=[job],
                    debounced=debounce is not None or key is not None or max_wait is not None)
        if debounce is not None or key is not None or max_wait is not None:
            key, window = debounce_arguments(job, debounce, key, max_wait, delay, None)
            return self.job(self.dispatch_debounced_sync(job, key, window, conn=conn, max_wait=max_wait, queue=queue,
                                                         priority=priority, connection=connection).id)
        envelope, config = self.envelope(job, queue=queue, priority=priority, connection=connection)
        delay = check_delay(delay, envelope.name)
        if (inline := self._inline(config)) is not None:
            return self.job(inline.dispatch_blocking(job, envelope, delay))
        text = envelope.encode(config.max_payload_bytes)
        what = f"dispatching job {envelope.name!r}"
        if getattr(type(job), "unique_by", None):  # check_after refused after= for such a job
            unique_key = job.derived_unique_key()
            assert unique_key is not None  # unique_by names args, so a key is derived
            scope, period = type(job).unique_scope, type(job).unique_period
            period_seconds = check_unique(unique_key, scope, period)
            held = Store.enqueue_unique_on_sync(conn, text, delay, unique_key, scope, period_seconds,
                                                what=f"{what} with unique key {shown(unique_key)}")
            return self.job(held.id)
        if after is None:
            Store.enqueue_on_sync(conn, text, delay, what=what)
        else:
            link = Wait([envelope.id], parent_ids(after, what), check_policy(on_parent_failure, what))
            Store.enqueue_linked_on_sync(conn, f"[{text}]", [delay] if delay else None, [link], what=what)
        return self.job(envelope.id)

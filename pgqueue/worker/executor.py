"""The executor: runs one reservation to its end — decode, look up, run, then ack, retry or fail."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from typing import Any

from pgqueue.config import ConnectionConfig
from pgqueue.context import SyncJobContext
from pgqueue.envelope import Envelope
from pgqueue.errors import Backpressure, QueueError, QueueLeaseError, QueuePayloadError, QueueResultError
from pgqueue.failures import MESSAGE_LIMIT, describe, failure_message, ran, stored_text, trimmed
from pgqueue.job_context import JobContext
from pgqueue.jobs import Job, has_sync_handle, lookup
from pgqueue.jsonvalues import dumps_json
from pgqueue.redaction import log_fields
from pgqueue.results import encode_result, result_ttl
from pgqueue.store import Reservation, Store
from pgqueue.store.errors import DATABASE_ERRORS
from pgqueue.tracing import active as tracing_active
from pgqueue.tracing import consumer_span, record_failure
from pgqueue.worker.cancellation import Cancellations
from pgqueue.worker.completer import Completer
from pgqueue.worker.decisions import WorkerDecisions, backpressured
from pgqueue.worker.heartbeat import Heartbeat
from pgqueue.worker.instruments import Instruments
from pgqueue.worker.outcomes import Ended, Outcome, Outcomes

logger = logging.getLogger("pgqueue.worker")

#: ``scope(context)``: an async context manager entered around each execution.
Scope = Callable[[JobContext], AbstractAsyncContextManager[Any]]


class Executor:
    """Runs reservations (:meth:`run`, one task each): the job's start and its end are both here.

    A reservation is decoded and its job looked up; one that cannot be (bad envelope, unknown
    name, args that do not fit) fails at once. Otherwise the handler runs under its time limit
    — its timeout, kept ``lease_margin`` inside its lease, moved by the heartbeat and
    ``context.extend`` — inside ``scope``. Then, unless the handler decided itself: returned →
    ack (batched by the completer); raised (anything, ``SystemExit`` and other BaseExceptions
    too) or timed out → release with backoff while tries and ``retry_until`` allow, else failure;
    cancelled by the worker's forced stop → given back with its try (``release_interrupted``).

    Each attempt's end is emitted once to ``outcomes`` (:mod:`pgqueue.worker.outcomes`): here, or
    by the completer once the database answered a batched ack. An attempt whose decision could not
    reach the database (it stays reserved until its lease expires) ends in no outcome.
    """

    def __init__(self, store: Store, completer: Completer, outcomes: Outcomes, *, lease_margin: float,  # noqa: PLR0913  # keyword-only: its collaborators and WorkerOptions fields
                 timeout_cap: float | None, scope: Scope | None, heartbeat: Heartbeat | None,
                 threads: int, cancellations: Cancellations | None = None,
                 instruments: Instruments | None = None, config: ConnectionConfig | None = None) -> None:
        self._store = store
        #: The connection's settings (issue 27: a workflow's children are dispatched with them).
        self.config = config
        #: What each execution reports (metrics: its start and run time); the default does nothing.
        self.instruments = instruments or Instruments()
        #: The running handlers by job id, so a cancellation (``pgqueue.cancel``) finds its handler.
        self.cancellations = cancellations
        self._completer = completer
        self._outcomes = outcomes
        self._decisions = WorkerDecisions(store, completer)
        self.lease_margin = lease_margin
        self.timeout_cap = timeout_cap
        self.scope = scope
        self.heartbeat = heartbeat
        self.threads = threads
        self._thread_pool: ThreadPoolExecutor | None = None
        #: Set when the worker stops: a reservation not yet started is handed back unstarted.
        self.stopping = False
        #: Who ran an attempt, as kept with its failure (issue 26): host and process.
        self.worker_name = f"{socket.gethostname()}:{os.getpid()}"
        #: Set by :meth:`Worker.install_signal_handlers`: SIGINT then never raises KeyboardInterrupt,
        #: so one raised by a handler is that handler's.
        self.signals_installed = False

    def shutdown(self) -> None:
        """Stop the sync handlers' thread pool (threads still running a handler are left to finish)."""
        if self._thread_pool is not None:
            self._thread_pool.shutdown(wait=False, cancel_futures=True)
            self._thread_pool = None

    async def run(self, reservation: Reservation, received: float | None = None,
                  lease_left: float | None = None) -> bool:
        """Run one reservation to its end; False if it was handed back unstarted (stopping).

        ``received``: when the reservation arrived (``time.monotonic()``; default now): a job that
        waited in the prefetch buffer counts that wait in its queue latency. ``lease_left``: the
        seconds its lease had left when it was taken from the buffer (default: the reservation's).
        """
        job_id, token, attempts = reservation.id, reservation.token, reservation.attempts
        started = time.monotonic()
        if received is None:
            received = started
        if self.stopping:
            await self._release_unstarted(job_id, token)
            return False
        found = await self._job_of(reservation)
        if found is None:
            return True  # it could not run: failed
        envelope, job = found
        # The job starts here.
        context = JobContext(job_id=job_id, token=token, attempts=attempts, tries=reservation.tries,
                             queue=reservation.queue, connection=envelope.connection,
                             lease_seconds_left=(reservation.lease_seconds_left if lease_left is None else lease_left)
                             - (time.monotonic() - started),
                             decisions=self._decisions, name=envelope.name)
        context._pool = self._store.pool  # context.transaction() commits on it
        context.connection_config, context.workflow_version = self.config, envelope.workflow  # issue 27
        context.result_ttl = result_ttl(type(job), envelope)  # 0 for a job that keeps no result
        if self.cancellations is not None:
            self.cancellations.hold(context)
        began = time.monotonic()
        try:
            if tracing_active():
                with consumer_span(context.queue, job_id, envelope.name, attempts, envelope.trace):
                    await self._attempt(job, context, envelope, received, reservation.queued_seconds)
            else:
                await self._attempt(job, context, envelope, received, reservation.queued_seconds)
        finally:
            self.instruments.ran(context.queue, envelope.name, time.monotonic() - began)
            # The job ends here (whatever ended it: see context.decision).
            if self.cancellations is not None:
                self.cancellations.drop(context)
            context.watch_lease(None)
            if self.heartbeat is not None:
                self.heartbeat.drop(context)
        return True

    async def _job_of(self, reservation: Reservation) -> tuple[Envelope, Job] | None:
        """The reservation's envelope and job; None if it cannot run (bad envelope, unknown name, args
        that do not fit), and then it has failed."""
        job_id, attempts = reservation.id, reservation.attempts
        try:
            # Decoding and validation happen here, per reservation: whatever one stored envelope
            # contains fails that job alone, never the fetch of its batch.
            envelope = Envelope.decode(reservation.envelope, job_id=job_id)
        except QueuePayloadError as exc:
            self.instruments.started(reservation.queue, "?", job_id, attempts)
            await self._fail_unrun(reservation, "?", exc, "payload_invalid")
            return None
        self.instruments.started(reservation.queue, envelope.name, job_id, attempts)
        job_type = lookup(envelope.name)
        if job_type is None:
            error = QueuePayloadError(
                f"job name {envelope.name!r} is not registered in this worker; import the module that "
                "defines it (--app) — the job was not run"
            )
            await self._fail_unrun(reservation, envelope.name, error, "unknown_job")
            return None
        try:
            return envelope, job_type.from_args(envelope.args)
        except Exception as exc:
            error = QueuePayloadError(f"job {envelope.name!r}: args {envelope.args!r:.500} do not fit the job: "
                                      f"{exc}")
            await self._fail_unrun(reservation, envelope.name, error, "payload_invalid", args=envelope.args)
            return None

    async def _attempt(self, job: Job, context: JobContext, envelope: Envelope, received: float,
                       queued: float) -> None:
        """Run the handler under its time limit, carry out the worker's decision if it took none, and
        emit the attempt's outcome.

        ``received``: when the reservation arrived (``time.monotonic()``): its wait until the
        handler starts and the handler's run time go to the history. ``queued``: the seconds from
        the job's due time to its reservation; with the wait, the queue latency of the metrics,
        the same figure the history counts.
        """
        timeout = envelope.timeout if self.timeout_cap is None else min(envelope.timeout, self.timeout_cap)
        loop = asyncio.get_running_loop()
        started = loop.time()
        wait = time.monotonic() - received
        self.instruments.waited(context.queue, envelope.name, queued + wait)
        job_deadline = started + timeout
        margin = self.lease_margin

        def limit() -> float:
            """When the handler must stop: its timeout, or ``margin`` before its lease ends."""
            if context.cancelled:
                return loop.time()
            return min(job_deadline, loop.time() + context.lease_expires_in - margin)

        deadline = asyncio.timeout(None)

        def lease_moved() -> None:
            with contextlib.suppress(RuntimeError):  # not entered yet, or already expiring
                deadline.reschedule(limit())

        self._hold(context, lease_moved)
        raised: BaseException | None = None
        result: Any = None
        try:
            if limit() <= loop.time():
                raise TimeoutError(f"job {context.id}: no time left in its lease to run (lease margin "
                                   f"{margin:g}s)")
            if self.scope is None:
                async with deadline:
                    deadline.reschedule(limit())
                    result = await self._handle(job, context)
            else:
                async with self.scope(context), deadline:
                    deadline.reschedule(limit())
                    result = await self._handle(job, context)
        except BaseException as exc:  # whatever the handler raised, the attempt ends here, recorded
            raised = exc
        duration = loop.time() - started
        if raised is None:
            outcome = await self._returned(job, context, envelope, result, duration, wait)
        else:
            outcome = await self._raised(job, context, envelope, raised, deadline, job_deadline, duration, wait)
        if outcome is not None:
            self._outcomes.emit(_ended(context, outcome))
        if raised is not None and (isinstance(raised, asyncio.CancelledError) if _interrupted()
                                   else self._stops(job, raised)):
            raise raised  # the worker's forced stop goes on; a Ctrl-C stops the process

    async def _returned(self, job: Job, context: JobContext, envelope: Envelope, value: Any, duration: float,
                        wait: float) -> Outcome | None:
        """The handler returned ``value``: the ack (batched by the completer, which emits the attempt's
        outcome once the database answers: None here), carrying the result when the job keeps one;
        or the handler's own decision, or the result's failure (``result_invalid``)."""
        kept: tuple[str, float] | None = None
        if context.result_ttl > 0 and (context.decision is None or context.result_pending):
            settled = await self._result(job, context, envelope, value, duration, wait)
            if not isinstance(settled, tuple):
                return settled  # failed (result_invalid), or acked by its transaction block, value written
            kept = settled
        if context.claim_decision("acked"):
            self._completer.add(context.id, context.token, duration, wait,
                                ended=_ended(context, Outcome.ACKED, value), result=kept)
            return None
        return _decided(context)  # the handler's own decision

    def _hold(self, context: JobContext, lease_moved: Callable[[], None]) -> None:
        """The handler is about to run: its time limit follows its lease, the heartbeat renews it."""
        context.watch_lease(lease_moved)
        if self.heartbeat is not None:
            self.heartbeat.hold(context)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("pgqueue: running %s %s attempt %d/%d", context.name, context.id, context.attempts,
                         context.tries, extra=context.log_fields())

    def _stops(self, job: Job, raised: BaseException) -> bool:
        """Whether ``raised`` stops the worker once recorded: a KeyboardInterrupt from an async handler
        may be a real Ctrl-C when the worker's own signal handlers are not installed."""
        return isinstance(raised, KeyboardInterrupt) and not self.signals_installed \
            and not has_sync_handle(type(job))

    async def _raised(self, job: Job, context: JobContext, envelope: Envelope, raised: BaseException,
                      deadline: asyncio.Timeout, job_deadline: float, duration: float,
                      wait: float) -> Outcome | None:
        """The handler raised (or was stopped): how the attempt ends, carried out."""
        if _interrupted():
            # This execution was cancelled from outside (the worker's forced stop): the worker,
            # not the handler, ended the attempt, so it is given back.
            context.mark_cancelled()
            return await self._give_back(context, envelope, duration, wait)
        error: BaseException = raised
        if isinstance(raised, TimeoutError) and deadline.expired():
            context.mark_cancelled()
            # cancelled: pgqueue.cancel, already recorded in failed_jobs; lost: the heartbeat's
            # renewal was refused, someone else holds the job now.
            if context.decision in ("cancelled", "lost"):
                return _decided(context)
            when = deadline.when()
            if self.heartbeat is not None and when is not None and when < job_deadline \
                    and context.claim_decision("lost"):
                logger.warning(
                    "pgqueue: job %s (%s) attempt %d: its lease could not be renewed, so the handler was "
                    "stopped %gs before the lease ends; the job runs again once the lease has expired",
                    context.id, envelope.name, context.attempts, self.lease_margin, extra=context.log_fields())
                return Outcome.LOST
            error = TimeoutError(
                f"job {envelope.name!r} timed out after {duration:.3g}s "
                f"(its timeout is {envelope.timeout:g}s; the limit is also kept {self.lease_margin:g}s inside "
                "the lease); the handler was cancelled at an await"
                + (" (a sync handler's thread runs on until it returns)" if has_sync_handle(type(job)) else "")
            )
        elif isinstance(raised, QueueLeaseError) and context.finished and context.decision == "lost":
            logger.warning("pgqueue: %s", raised, extra=context.log_fields())
            return Outcome.LOST
        elif isinstance(raised, Backpressure) and (outcome := await backpressured(context, raised)) is not None:
            return outcome
        note = None if isinstance(raised, Exception) else _handler_exit(raised, stops=self._stops(job, raised))
        return await self._after_exception(context, envelope, error, duration, wait, note=note)

    async def _result(self, job: Job, context: JobContext, envelope: Envelope, value: Any, duration: float,
                      wait: float) -> tuple[str, float] | Outcome | None:
        """The handler returned ``value`` and its job keeps results: the result to ack with (JSON
        text, seconds kept). One that cannot be kept (result_invalid) fails the attempt: its outcome
        is given. After a ``context.transaction()`` block acked the job, the value is written now,
        fenced by the attempt's token, and the block's ``acked`` is given (the job is settled)."""
        try:
            text = encode_result(type(job), value)
        except QueueResultError as exc:
            if context.result_pending:
                logger.error("pgqueue: job %s (%s) was acked in its transaction but its result cannot be kept: "
                             "%s; it keeps the result null", context.id, envelope.name, exc,
                             extra=context.log_fields())
                text = "null"
            else:
                if not context.claim_decision("failed"):
                    return _decided(context)
                return await self._fail(context.id, context.token, context.attempts, exc, "result_invalid",
                                        name=envelope.name, queue=context.queue, duration=duration, wait=wait,
                                        args=envelope.args)
        if not context.result_pending:
            return text, context.result_ttl
        try:
            if not await self._store.store_result(context.id, context.token, text):
                logger.warning("pgqueue: job %s (%s): its pending result was no longer there (expired); the "
                               "value was not kept", context.id, envelope.name, extra=context.log_fields())
        except DATABASE_ERRORS as exc:
            logger.error("pgqueue: job %s (%s) was acked in its transaction but writing its result failed (%s); "
                         "the result stays pending until it expires", context.id, envelope.name, exc,
                         extra=context.log_fields())
        return _decided(context)

    def _handle(self, job: Job, context: JobContext) -> Awaitable[Any]:
        """The handler's run: the coroutine of an async ``handle``, or a sync one in the thread pool."""
        if not has_sync_handle(type(job)):
            return job.handle(context)
        if self._thread_pool is None:
            self._thread_pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="pgqueue-handler")
        loop = asyncio.get_running_loop()
        facade = SyncJobContext(context, loop)
        # The handler sees the context variables of its execution (scope), as an async one would.
        handle: Callable[[SyncJobContext], Any] = job.handle  # type: ignore[assignment]  # sync, checked above
        return loop.run_in_executor(self._thread_pool, contextvars.copy_context().run, handle, facade)

    async def _after_exception(self, context: JobContext, envelope: Envelope, error: BaseException,
                               duration: float | None = None, wait: float | None = None, *,
                               note: str | None = None) -> Outcome | None:
        """The retry policy: a handler raised (or timed out): retry with backoff while tries and the
        deadline allow, else record the failure. ``duration`` and ``wait`` go to the history;
        ``note`` is stored and logged instead of the exception's own message. Returns the outcome
        (None: the decision could not reach the database)."""
        message = failure_message(error) if note is None else stored_text(note, MESSAGE_LIMIT, "message")
        if context.finished:
            logger.warning("pgqueue: job %s (%s) raised after it was %s: %s: %s", context.id, envelope.name,
                           context.decision, type(error).__name__, message,
                           extra=log_fields(context.log_fields(), envelope.name, envelope.args))
            return _decided(context)
        attempts = context.attempts
        if tracing_active():
            with contextlib.suppress(Exception):  # e.g. an exception whose __str__ raises: never lose the failure
                record_failure(error, "retried" if attempts < context.tries else "failed")
        if attempts < context.tries:
            delay = envelope.backoff.delay(attempts)
            if envelope.retry_until is None or time.time() + delay <= envelope.retry_until:
                context.claim_decision("released")
                exception, _, trace = describe(error, message)
                kept_error = dumps_json({"exception": exception, "message": message, "traceback": trace,
                                         "worker": self.worker_name})
                try:
                    accepted = await self._store.release_failed(context.id, context.token, delay, duration, wait,
                                                                kept_error)
                except DATABASE_ERRORS as exc:
                    logger.error("pgqueue: could not release job %s for a retry (%s); it will be retried "
                                 "when its lease expires", context.id, exc, extra=context.log_fields())
                    return None
                if not accepted:
                    logger.warning("pgqueue: job %s attempt %d failed and its lease was already lost",
                                   context.id, attempts, extra=context.log_fields())
                    return Outcome.LOST
                exception, _, trace = describe(error, message)
                logger.warning("pgqueue: job %s (%s) attempt %d/%d failed: %s: %s; retrying in %.2fs (the attempt "
                               "ran %s)%s", context.id, envelope.name, attempts, context.tries,
                               exception, message, delay, ran(duration), trimmed(trace),
                               extra=log_fields({**context.log_fields(), "error": exception,
                                                 "duration": duration}, envelope.name, envelope.args))
                return Outcome.RELEASED
        context.claim_decision("failed")
        return await self._fail(context.id, context.token, attempts, error, "exception", name=envelope.name,
                                queue=context.queue, duration=duration, wait=wait, message=message,
                                args=envelope.args)

    async def _fail_unrun(self, reservation: Reservation, name: str, error: QueuePayloadError, reason: str, *,
                          args: Any = None) -> None:
        """Fail a reservation that could not run (its envelope, name or args) and emit the outcome."""
        outcome = await self._fail(reservation.id, reservation.token, reservation.attempts, error, reason,
                                   name=name, queue=reservation.queue, args=args)
        if outcome is not None:
            self._outcomes.emit(Ended(outcome, reservation.id, reservation.token, reservation.attempts,
                                      reservation.queue, name, reason if outcome is Outcome.FAILED else None))

    async def _fail(self, job_id: uuid.UUID, token: int, attempts: int, error: BaseException, reason: str,  # noqa: PLR0913  # what pgqueue.fail records
                    *, name: str, queue: str, duration: float | None = None, wait: float | None = None,
                    message: str | None = None, args: Any = None) -> Outcome | None:
        """Record the failure (the job moves to failed_jobs; ``duration`` and ``wait`` go to the history):
        FAILED, LOST if the fence refused, None if it could not be recorded. ``message`` replaces the
        exception's own; ``args``: the job's, so its log lines mask what it declares secret."""
        exception, message, trace = describe(error, message)
        fields = log_fields({"job_id": str(job_id), "job_name": name, "queue": queue, "attempt": attempts,
                             "token": token}, name, args)
        # Decided by the worker before any handler ran: the message says it all.
        stored_trace = None if isinstance(error, QueueError) and reason != "exception" else trace
        try:
            accepted = await self._store.fail_by(job_id, token, exception, message, stored_trace, reason, duration,
                                                 wait, self.worker_name)
        except DATABASE_ERRORS as exc:
            logger.error("pgqueue: recording the failure of job %s (%s) failed (%s); the job stays reserved "
                         "and is recovered when its lease expires", job_id, name, exc, extra=fields)
            return None
        if not accepted:
            logger.warning("pgqueue: job %s failed but its lease was already lost; nothing recorded", job_id,
                           extra=fields)
            return Outcome.LOST
        # The worker's own decisions (unknown job, bad payload) have no handler traceback to show.
        shown = trimmed(stored_trace) if reason == "exception" else ""
        logger.error("pgqueue: job %s (%s) failed after %d attempt(s) [%s]: %s: %s%s%s", job_id, name,
                     attempts, reason, exception, message,
                     "" if duration is None else f" (the last attempt ran {ran(duration)})", shown,
                     extra={**fields, "error": exception, "duration": duration})
        return Outcome.FAILED

    async def _give_back(self, context: JobContext, envelope: Envelope, duration: float,
                         wait: float | None) -> Outcome | None:
        """The worker interrupted the attempt (a forced stop): hand the job back with its try
        (``pgqueue.release_interrupted``, fenced), ready for the next worker."""
        if not context.claim_decision("given_back"):
            return _decided(context)  # the handler (or the heartbeat) decided first
        try:
            # Shielded: the task is being cancelled; the give-back must still reach the database.
            accepted = await asyncio.shield(self._store.release_interrupted(context.id, context.token, duration,
                                                                            wait))
        except DATABASE_ERRORS as exc:
            logger.warning("pgqueue: job %s (%s) attempt %d was interrupted by the worker's stop, and giving it "
                           "back failed (%s); it runs again when its lease expires, the attempt counted",
                           context.id, envelope.name, context.attempts, exc, extra=context.log_fields())
            return None
        if not accepted:
            logger.warning("pgqueue: job %s (%s) attempt %d was interrupted by the worker's stop, and its lease "
                           "was already lost", context.id, envelope.name, context.attempts,
                           extra=context.log_fields())
            return Outcome.LOST
        logger.warning("pgqueue: job %s (%s) attempt %d was interrupted by the worker's stop: given back "
                       "with its try, it runs again on the next worker", context.id, envelope.name,
                       context.attempts, extra=context.log_fields())
        return Outcome.GIVEN_BACK

    async def _release_unstarted(self, job_id: uuid.UUID, token: int) -> None:
        try:
            await self._store.release_unstarted([job_id], [token])
        except DATABASE_ERRORS as exc:
            logger.warning("pgqueue: could not hand back unstarted job %s (%s); it returns when its lease "
                           "expires", job_id, exc)


def _decided(context: JobContext) -> Outcome:
    """The outcome of the decision already taken about ``context`` (by the handler, the heartbeat or
    a cancellation)."""
    decision = context.decision
    assert decision is not None, "called only once a decision was taken"
    return Outcome(decision)


def _ended(context: JobContext, outcome: Outcome, result: Any = None) -> Ended:
    """The event of an attempt's end (a failure's reason: the handler's ``context.fail`` or the
    worker's retry policy running out)."""
    reason = None
    if outcome is Outcome.FAILED:
        reason = "failed_by_handler" if context.failure is not None else "exception"
    return Ended(outcome, context.id, context.token, context.attempts, context.queue, context.name, reason, result)


def _interrupted() -> bool:
    """Whether the running execution's task was cancelled from outside (``task.cancel()``: the
    worker's forced stop), as opposed to a CancelledError the handler raised or let through."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _handler_exit(error: BaseException, *, stops: bool) -> str:
    """What failed_jobs says of a BaseException that is not an Exception raised by a handler."""
    try:
        raised = repr(error)
    except Exception:  # a broken __repr__ must not lose the failure
        raised = type(error).__name__
    if isinstance(error, asyncio.CancelledError):
        return (f"the handler raised {raised} although nothing cancelled this execution (e.g. it awaited a "
                "task that was cancelled); the worker went on")
    if stops:
        return (f"the handler raised {raised}; the worker stops: it has no signal handlers of its own "
                "(Worker.install_signal_handlers), so this may be a Ctrl-C")
    return f"the handler raised {raised}; the worker went on"

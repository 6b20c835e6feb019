"""JobContext: what an async handler receives, and the decisions it can take about its job.

:class:`~pgqueue.context.SyncJobContext` (in ``pgqueue/context.py``, where both are imported from) is
its blocking face for sync handlers."""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import psycopg
from psycopg import pq
from psycopg_pool import AsyncConnectionPool

from pgqueue.errors import QueueConfigurationError, QueueLeaseError, QueuePayloadError, QueueRetryError
from pgqueue.failures import describe
from pgqueue.jsonvalues import check_json_safe, dumps_json
from pgqueue.limits import MAX_LEASE_SECONDS, MIN_LEASE_SECONDS
from pgqueue.store import BatchState, Store, ack_in_transaction, begin_transaction

#: Seconds between two stored progress reports of one job (context.progress is throttled to it).
PROGRESS_INTERVAL = 1.0
#: The most bytes of JSON a progress note may have (pgqueue.progress refuses more).
PROGRESS_NOTE_BYTES = 4096


class Decisions(Protocol):
    """Where a context sends the decisions taken about its reservation (the worker's executor, or
    ``Client.run_inline``). Each call returns whether the fence matched (the lease was still held)."""

    async def ack(self, job_id: uuid.UUID, token: int) -> bool: ...

    async def release(self, job_id: uuid.UUID, token: int, delay: float) -> bool: ...

    async def fail(self, job_id: uuid.UUID, token: int, exception: str | None, message: str,
                   traceback_text: str | None, reason: str) -> bool: ...

    async def extend(self, job_id: uuid.UUID, token: int, seconds: float) -> float | None: ...

    async def snooze(self, job_id: uuid.UUID, token: int, delay: float) -> str: ...

    async def backpressure(self, job_id: uuid.UUID, token: int, delay: float) -> str: ...


class JobContext:
    """One execution of one job: read-only facts and at most one decision.

    Decisions (``release``, ``ack``, ``fail``) end the reservation; after one has
    completed, any further one raises :class:`~pgqueue.QueueLeaseError`, and so does a
    decision the fence refuses because the lease was lost. Of two tasks racing to decide,
    exactly one wins. ``extend`` renews the lease and may be called any number of times.
    A handler that returns without a decision is acknowledged.

    The worker's lease heartbeat (on by default) renews the lease while the handler runs;
    ``extend`` is only needed with the heartbeat off.
    """

    __slots__ = (
        "_attempts",
        "_cancelled",
        "_connection",
        "_deadline",
        "_decided",
        "_decisions",
        "_failure",
        "_id",
        "_lease_listener",
        "_name",
        "_pool",
        "_progress_at",
        "_queue",
        "_token",
        "_transaction_open",
        "connection_config",
        "result_pending",
        "result_ttl",
        "tries",
        "workflow_version",
    )

    def __init__(self, *, job_id: uuid.UUID, token: int, attempts: int, tries: int, queue: str,  # noqa: PLR0913  # keyword-only: what the worker knows of one attempt
                 connection: str, lease_seconds_left: float, decisions: Decisions, name: str = "?") -> None:
        self._id = job_id
        self._name = name
        self._token = token
        self._attempts = attempts
        self.tries = tries
        self._queue = queue
        self._connection = connection
        self._deadline = time.monotonic() + lease_seconds_left
        self._decisions = decisions
        self._decided: str | None = None
        self._failure: BaseException | None = None
        self._cancelled = False
        # Set by the worker while the handler runs (watch_lease): told when the lease end moves,
        # so the handler's time limit follows it.
        self._lease_listener: Callable[[], None] | None = None
        # Set by the worker: where context.transaction() takes its connection.
        self._pool: AsyncConnectionPool[Any] | None = None
        # While a context.transaction() block is open (one per attempt).
        self._transaction_open = False
        # Issue 26. Set by the worker: seconds this job's result is kept (0: none). When kept, a
        # context.transaction() block's ack leaves the result pending (result_pending), and the
        # worker writes the handler's return value afterwards, fenced by the same token.
        self.result_ttl = 0.0
        self.result_pending = False
        # When the last progress report was stored (time.monotonic()), for the throttle.
        self._progress_at: float | None = None
        # Issue 27. Set by the worker: its connection's settings (a workflow's children are dispatched
        # with them) and the workflow version the job's envelope carries (None: a plain job).
        self.connection_config: Any = None
        self.workflow_version: int | None = None

    # ------------------------------------------------------------- read-only facts
    @property
    def id(self) -> uuid.UUID:
        """The job id (the same for every attempt and after a retry of a failure)."""
        return self._id

    @property
    def token(self) -> int:
        """This reservation's fencing token."""
        return self._token

    @property
    def name(self) -> str:
        """The job's registered name (``"?"`` when the context was made without one)."""
        return self._name

    def log_fields(self) -> dict[str, Any]:
        """The fields every log line about this execution carries (``extra=`` of a logging call):
        ``job_id``, ``job_name``, ``queue``, ``attempt`` and ``token``."""
        return {"job_id": str(self._id), "job_name": self._name, "queue": self._queue, "attempt": self._attempts,
                "token": self._token}

    @property
    def attempts(self) -> int:
        """Which attempt this is, 1-based."""
        return self._attempts

    @property
    def queue(self) -> str:
        """The queue the job was reserved from."""
        return self._queue

    @property
    def connection(self) -> str:
        """The connection name the job was dispatched to."""
        return self._connection

    @property
    def finished(self) -> bool:
        """Whether a decision has ended this reservation (or the lease was found lost)."""
        return self._decided is not None

    @property
    def decision(self) -> str | None:
        """``released``, ``snoozed``, ``acked``, ``failed``, ``lost``, ``cancelled``, ``given_back`` (the
        worker's forced stop interrupted the attempt) or None while undecided."""
        return self._decided

    @property
    def failure(self) -> BaseException | None:
        """The error given to :meth:`fail`, if the handler failed the job."""
        return self._failure

    @property
    def lease_expires_in(self) -> float:
        """Seconds until the lease ends, measured from the expiry the database returned."""
        return self._deadline - time.monotonic()

    @property
    def cancelled(self) -> bool:
        """True once the worker gave up on this execution: its timeout passed, its lease could not
        be renewed (or was lost), the job was cancelled (``pgqueue.cancel``), or the worker is
        stopping with ``cancel_running``.

        An async handler is cancelled at its next ``await`` anyway; a sync handler (run in a
        thread, which cannot be interrupted) should poll this and return early when it is set.
        """
        return self._cancelled

    # ------------------------------------------------------------------ decisions
    def _claim(self, verb: str, decision: str) -> None:
        if self._decided is not None:
            raise QueueLeaseError(
                f"job {self._id} attempt {self._attempts}: cannot {verb} — the reservation was already "
                f"{self._decided}"
            )
        self._decided = decision  # set before any await: of racing tasks, the first one wins

    def _refused(self, decision: str) -> QueueLeaseError:
        self._decided = "lost"
        return QueueLeaseError(
            f"job {self._id} attempt {self._attempts}: {decision} refused — the lease was lost (it expired "
            "and the job was reserved again, or the job was cleared); nothing was changed"
        )

    async def release(self, delay: float = 0.0) -> None:
        """Put the job back on its queue, available again after ``delay`` seconds. The attempt counts."""
        self._claim("release", "released")
        if not await self._decisions.release(self._id, self._token, delay):
            raise self._refused("release")

    async def snooze(self, delay: float) -> None:
        """Run the job again after ``delay`` seconds WITHOUT using up a try (unlike :meth:`release`).

        Fenced like every decision (a lost lease raises QueueLeaseError and changes nothing).
        A snooze that would make the job due after its ``retry_until`` deadline is refused with
        QueueRetryError and changes nothing; the handler may then fail or release instead.
        """
        self._claim("snooze", "snoozed")
        outcome = await self._decisions.snooze(self._id, self._token, float(delay))
        if outcome == "not_yours":
            raise self._refused("snooze")
        if outcome == "past_deadline":
            self._decided = None  # nothing was decided: the handler may still release, fail or return
            raise QueueRetryError(
                f"job {self._id}: snooze({delay}) refused — the job would be due after its retry_until "
                "deadline; nothing was changed (fail or release it instead)"
            )

    async def backpressure(self, retry_after: float = 1.0) -> None:
        """The downstream is overloaded: run the job again after ``retry_after`` seconds WITHOUT using
        up a try, and halve the queue's adaptive concurrency limit (if it has one), in one fenced
        statement. ``raise Backpressure(retry_after=...)`` does the same. Like :meth:`snooze`, a delay
        past the ``retry_until`` deadline raises QueueRetryError and leaves the job as it is (the limit
        is halved all the same)."""
        self._claim("backpressure", "backpressured")
        outcome = await self._decisions.backpressure(self._id, self._token, float(retry_after))
        if outcome == "not_yours":
            raise self._refused("backpressure")
        if outcome == "past_deadline":
            self._decided = None
            raise QueueRetryError(
                f"job {self._id}: backpressure(retry_after={retry_after}) could not put the job back — it would "
                "be due after its retry_until deadline; the queue's limit was lowered, the job is unchanged")

    async def ack(self) -> None:
        """Remove the job without running it further (it counts as done)."""
        self._claim("ack", "acked")
        if not await self._decisions.ack(self._id, self._token):
            raise self._refused("ack")

    async def fail(self, error: BaseException | str) -> None:
        """Fail the job now, without retries: it goes to failed_jobs with this error."""
        self._claim("fail", "failed")
        if isinstance(error, str):
            error = RuntimeError(error)
        self._failure = error
        exception, message, trace = describe(error)
        if not await self._decisions.fail(self._id, self._token, exception, message, trace, "failed_by_handler"):
            raise self._refused("fail")

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection whose transaction also carries this job's fenced ack.

        ``async with context.transaction() as conn:`` — write the job's effects on ``conn``; on
        leaving the block the job is acknowledged in the same transaction, and both commit
        together or not at all. If the fence refuses the ack (the lease expired and the job was
        reserved again, or it was cancelled), everything rolls back and
        :class:`~pgqueue.QueueLeaseError` is raised: a stale holder's writes never commit beside
        another execution's. An exception inside the block rolls back too (the job is then
        retried as usual). After the block the job is settled (``decision == "acked"``). A job whose
        result is kept (``result_ttl``) still keeps the handler's return value: the block's ack leaves
        the result pending, and the worker writes the value once the handler returns, fenced by the
        same token (a stale holder's block was refused, so its value never lands).

        One block per attempt: a second one opened while the first is open (nested, or from
        another task) raises QueueLeaseError before it writes anything; nest with
        ``conn.transaction()`` (a savepoint). The block owns its transaction: if the handler
        ends it on ``conn`` (a raw ``COMMIT`` or ``ROLLBACK``, ``conn.commit()``), or goes on
        after a statement failed in it, the block raises QueueLeaseError and the job is not
        acknowledged (it runs again as its tries allow). What the handler committed itself
        stays committed: the connection is in autocommit mode outside the block's transaction.
        """
        if self._pool is None:
            raise QueueConfigurationError(
                f"job {self._id}: context.transaction() needs a worker of a database connection (this "
                "execution has no pgqueue database to commit in, e.g. the sync driver); nothing was written")
        self._open_transaction()
        try:
            async with self._pool.connection() as conn:
                # BEGIN and the transaction's id in one round trip; commit and rollback are ours.
                began = await begin_transaction(conn)
                try:
                    yield conn
                    self._check_block(conn.info.transaction_status)
                    self._claim("ack", "acked")
                    try:
                        if self.result_ttl > 0:
                            self._ack_answer(await Store.ack_in_transaction_kept(conn, self._id, self._token, began,
                                                                                 self.result_ttl))
                        else:
                            self._ack_answer(await ack_in_transaction(conn, self._id, self._token, began))
                        await conn.commit()
                        self.result_pending = self.result_ttl > 0
                    except BaseException:
                        if self._decided == "acked":
                            self._decided = None  # not committed: the worker's retry policy decides
                        raise
                except BaseException:
                    await _roll_back(conn)
                    raise
        finally:
            self._transaction_open = False

    def _open_transaction(self) -> None:
        """Start a ``transaction()`` block, or refuse it (before anything is written)."""
        if self._decided is not None:
            raise QueueLeaseError(f"job {self._id}: cannot open its transaction — the reservation was already "
                                  f"{self._decided}; nothing was written")
        if self._transaction_open:
            raise QueueLeaseError(
                f"job {self._id} attempt {self._attempts}: context.transaction() is already open for this "
                "attempt; one transaction carries the job's writes and its ack, so write on the connection "
                "the open block gave you (its conn.transaction() nests as a savepoint); nothing was written "
                "by this call")
        self._transaction_open = True

    def _check_block(self, status: pq.TransactionStatus) -> None:
        """Refuse to ack when the block's transaction is no longer open and healthy."""
        if status == pq.TransactionStatus.INTRANS:
            return
        if status == pq.TransactionStatus.INERROR:
            raise QueueLeaseError(
                f"job {self._id} attempt {self._attempts}: a statement inside context.transaction() failed and "
                "the handler went on; the transaction is aborted, nothing it wrote commits and the job was not "
                "acknowledged (to go on after an error, run the statement in conn.transaction(), a savepoint)")
        raise self._ended()

    def _ack_answer(self, acked: bool | None) -> None:
        """Carry out what the block's ack statement answered (raised inside the block: a refusal rolls
        the handler's writes back with it)."""
        if acked is None:
            raise self._ended()
        if not acked:
            raise self._refused("ack in its transaction (the handler's writes were rolled back)")

    def _ended(self) -> QueueLeaseError:
        return QueueLeaseError(
            f"job {self._id} attempt {self._attempts}: the transaction of context.transaction() was ended "
            "inside the block (a COMMIT or ROLLBACK run on its connection), so it can no longer carry the ack: "
            "the job was not acknowledged and runs again as its tries allow; what was committed before the "
            "block ended stays committed (the connection is in autocommit mode outside the block's "
            "transaction) — leave committing to the block (conn.transaction() inside it is a savepoint)")

    async def progress(self, fraction: float | None = None, note: Any = None) -> bool:
        """Report how far the handler is: ``fraction`` (0 to 1) and/or ``note`` (JSON, at most
        4096 bytes), visible through the job's handle (``status().progress``), ``pgqueue.job_state``
        and ``job:show``. Throttled: a report within :data:`PROGRESS_INTERVAL` seconds of the last
        stored one is skipped, except a final one (``fraction == 1``). Returns whether it was
        stored; raises QueueLeaseError if the lease was lost, QueueConfigurationError for bad input."""
        if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, int | float)
                                     or not 0 <= fraction <= 1):
            raise QueueConfigurationError(f"job {self._id}: progress(fraction={fraction!r}): the fraction must be "
                                          "a number from 0 to 1 (or None); nothing was reported")
        text = None
        if note is not None:
            try:
                check_json_safe(note, f"job {self._id}: progress note")
            except QueuePayloadError as exc:
                raise QueueConfigurationError(f"{exc}; nothing was reported") from None
            text = dumps_json(note)
            if len(text.encode("utf-8")) > PROGRESS_NOTE_BYTES:
                raise QueueConfigurationError(f"job {self._id}: the progress note is over {PROGRESS_NOTE_BYTES} bytes "
                                              "of JSON; nothing was reported")
        now = time.monotonic()
        if self._progress_at is not None and now - self._progress_at < PROGRESS_INTERVAL and fraction != 1:
            return False
        if self._pool is None or self._decided is not None:
            return False
        if not await Store(self._pool).progress(self._id, self._token, None if fraction is None else float(fraction),
                                                text):
            raise self._refused("report progress")
        self._progress_at = now
        return True

    # --- issue 26: jobs that wait for jobs (inline, without a database, nothing waits: empty) ---
    async def parent_results(self) -> dict[uuid.UUID, Any]:
        """The kept results of the jobs this one was dispatched to wait for (``after=``, a chain), by
        parent id in the order given; a parent that kept no result (or failed, for a child that
        runs anyway) is left out. Empty for a job without parents (and in the inline mode)."""
        rows = [] if self._pool is None else await Store(self._pool).parent_results(self._id)
        return {parent: result for parent, state, result in rows if state == "succeeded"}

    async def batch(self) -> BatchState | None:
        """The progress of the batch this job is the callback or a member of (counts by outcome), or None."""
        return None if self._pool is None else await Store(self._pool).batch_state(self._id)

    async def batch_results(self) -> dict[uuid.UUID, Any]:
        """For a batch's callback: the kept results of the members that succeeded, by member id."""
        rows = [] if self._pool is None else await Store(self._pool).batch_results(self._id)
        return {member: result for member, outcome, result in rows if outcome == "succeeded"}

    async def extend(self, seconds: float) -> float:
        """Renew the lease to end ``seconds`` from now; returns the seconds left.

        The handler's time limit moves with it, up to the job's own ``timeout`` (counted from
        the start of the attempt). ``seconds`` must be between
        :data:`~pgqueue.limits.MIN_LEASE_SECONDS` and :data:`~pgqueue.limits.MAX_LEASE_SECONDS`.
        """
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
                or not MIN_LEASE_SECONDS <= seconds <= MAX_LEASE_SECONDS:
            raise QueueConfigurationError(
                f"job {self._id}: extend({seconds!r}): the lease renewal must be a number of seconds from "
                f"{MIN_LEASE_SECONDS:g} to {MAX_LEASE_SECONDS:g} (one year); the lease was not changed")
        if self._decided is not None:
            raise QueueLeaseError(f"job {self._id}: cannot extend — the reservation was already {self._decided}")
        sent = time.monotonic()
        left = await self._decisions.extend(self._id, self._token, float(seconds))
        if left is None:
            raise self._refused("extend")
        self._lease_renewed(sent + left)
        return left

    # ------------------------------------------------------------- for the worker
    def _lease_renewed(self, ends_at: float) -> None:
        """The lease now ends at ``ends_at`` (``time.monotonic()`` clock): move the time limit."""
        self._deadline = max(self._deadline, ends_at)
        if self._lease_listener is not None:
            self._lease_listener()

    def _lease_lost(self) -> bool:
        """The fence refused a renewal: the lease is lost. Stops the handler; False if it had decided."""
        if self._decided is not None:
            return False
        self._decided = "lost"
        self._cancelled = True
        if self._lease_listener is not None:
            self._lease_listener()
        return True

    def _cancel_requested(self) -> bool:
        """The job was cancelled (``pgqueue.cancel`` already removed it and recorded the failure):
        stop the handler; False if it had decided already."""
        if self._decided is not None:
            return False
        self._decided = "cancelled"
        self._cancelled = True
        if self._lease_listener is not None:
            self._lease_listener()
        return True

    # The executor's side of the context (pgqueue/worker/executor.py): a handler never calls these.
    def claim_decision(self, decision: str) -> bool:
        """For the worker: take ``decision`` ("acked", "released", "failed", "lost", "given_back") for
        a handler that took none; False if the handler (or the heartbeat) decided first. Sends
        nothing: the caller carries the decision out."""
        if self._decided is not None:
            return False
        self._decided = decision
        return True

    def forget_decision(self, decision: str) -> None:
        """For the worker: ``decision`` could not be carried out (a database error), so none was taken."""
        if self._decided == decision:
            self._decided = None

    def mark_cancelled(self) -> None:
        """For the worker: the handler was stopped (time limit, lost lease, forced stop)."""
        self._cancelled = True

    def watch_lease(self, listener: Callable[[], None] | None) -> None:
        """For the worker: call ``listener`` whenever the lease end moves (None: stop)."""
        self._lease_listener = listener

    def __repr__(self) -> str:
        return (f"JobContext(id={self._id}, attempts={self._attempts}, queue={self._queue!r}, "
                f"decision={self._decided!r})")



async def _roll_back(conn: psycopg.AsyncConnection[Any]) -> None:
    """Roll back the block's transaction (whatever the handler left open on ``conn``); a connection
    that cannot is closed, so the pool replaces it rather than hand out an open transaction."""
    try:
        await conn.rollback()
    except psycopg.Error:
        await conn.close()

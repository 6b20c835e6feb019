"""The pgqueue error hierarchy. Every error a user can hit derives from :class:`QueueError`."""

from __future__ import annotations


class QueueError(Exception):
    """Base class of every error pgqueue raises on purpose."""


class QueueConfigurationError(QueueError):
    """A setting is missing, unknown or inconsistent (DSN, connection name, timeouts, backoff)."""


class QueueDispatchError(QueueError):
    """A job could not be dispatched as asked (e.g. a delay on the sync connection)."""


class QueuePayloadError(QueueError):
    """A job's args or envelope cannot be stored or read (not JSON-safe, too large, malformed)."""


class QueueRetryError(QueueError):
    """A job cannot be run again as asked: a failed job cannot be retried (unknown failure id,
    deadline passed, job already queued), or ``context.snooze()`` would make a job due after its
    ``retry_until`` deadline (nothing is changed; the handler may still fail or release it)."""


class QueueLeaseError(QueueError):
    """A transition was refused: the reservation already has a decision, or its lease was lost; or
    ``context.transaction()`` could not carry the ack (a second block while one is open, or the
    handler ended or aborted the block's transaction itself)."""


class QueueStorageError(QueueError):
    """The database refused or could not complete an operation (not migrated, unreachable, a
    statement timeout, a serialization failure, ...).

    ``sqlstate`` is the SQLSTATE of the database error behind it (None when there was none):
    ``"40001"`` (serialization failure) and ``"40P01"`` (deadlock) mean the transaction can be
    run again as it is.
    """

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class QueueDuplicateError(QueueDispatchError):
    """A dispatch with a unique key found the key held by an earlier job (raised only when asked)."""


class QueueResultError(QueueError):
    """A job's result is not available: the handler's return value could not be kept (not JSON,
    too large, not what its return annotation declares: failure reason ``result_invalid``), or a
    :class:`~pgqueue.JobHandle` waited for a job that failed, was cancelled, keeps no result or did
    not end in time (see :class:`JobFailedError`, :class:`JobResultTimeout`)."""


class JobFailedError(QueueResultError):
    """The awaited job failed or was cancelled. ``status`` is its :class:`~pgqueue.JobStatus`:
    the failure's reason and message, and every failed attempt with its error."""

    def __init__(self, message: str, status: object) -> None:
        super().__init__(message)
        self.status = status


class JobResultTimeout(QueueResultError, TimeoutError):
    """The awaited job did not end within the timeout (it goes on; wait again or check its status)."""


class Backpressure(Exception):  # a signal a handler raises, not an error of pgqueue's
    """Raised by a handler whose downstream is overloaded (a 429, a full pool): the job runs again
    after ``retry_after`` seconds WITHOUT using up a try, and the queue's adaptive concurrency limit
    (``set_limits(adaptive=(min, max))``) is halved, in one fenced statement (``pgqueue.backpressure``).
    Same as ``await context.backpressure(retry_after)``. A ``retry_after`` past the job's
    ``retry_until`` deadline retries the job as an error would (the limit is still halved)."""

    def __init__(self, message: str = "the downstream is overloaded", *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# --- issue 27: durable workflows ---
class WorkflowError(QueueError):
    """A workflow was used wrongly or cannot go on: a step called outside a workflow or inside another
    step, a duplicate or bad step name, a step result that is not JSON, a signal to an unknown or
    finished workflow (or to a job that is not one), a bad signal name or payload."""


class WorkflowDeterminismError(WorkflowError):
    """The workflow's code changed between runs: the step it calls now at a position is not the one
    recorded there (another name or kind), or it was dispatched at another ``version``. The workflow
    fails (no retry): results of old and new code are never mixed."""


class WorkflowStepError(WorkflowError):
    """A step of a workflow failed as many times as its ``tries`` allow: the workflow fails, naming the
    step and its last error."""


class WorkflowTimeout(WorkflowError):
    """``context.wait_for(name, timeout=...)``: the signal did not come in time. Catch it to go on without
    it; uncaught, it fails the workflow (every replay would time out the same)."""


class WorkflowChildError(WorkflowError):
    """``context.run(job)``: the child job failed or was cancelled; the message carries its failure's
    reason and message, :attr:`child_id` its id. Uncaught, it fails the workflow."""

    def __init__(self, message: str, child_id: object = None) -> None:
        super().__init__(message)
        self.child_id = child_id

"""Following a job after its dispatch: :class:`JobHandle` (its status, its result) and the one
listening connection per client that wakes everyone awaiting a result (:class:`ResultWaiter`).

``dispatch`` returns a :class:`JobHandle`, which *is* the job's id (a :class:`uuid.UUID`
subclass: code that stores, compares or prints the id keeps working) and can also tell what
became of the job: ``await handle.status()`` (a :class:`JobStatus`, from ``pgqueue.job_state``)
and ``await handle.result(timeout=...)``. ``client.job(id)`` gives a handle for any id.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import psycopg

from pgqueue.errors import (
    JobFailedError,
    JobResultTimeout,
    QueueConfigurationError,
    QueueResultError,
    QueueStorageError,
)
from pgqueue.jobs import lookup
from pgqueue.redaction import MASK, Redactor
from pgqueue.results import type_result_ttl
from pgqueue.store import Store

logger = logging.getLogger("pgqueue.results")

#: What :attr:`JobStatus.state` may be. ``blocked``: waiting for its parents (``after=``) or, a
#: batch's callback, for its members. ``unknown``: pgqueue holds nothing of the id (never
#: dispatched, its dispatching transaction not committed yet, or it succeeded keeping no result).
STATES = ("waiting", "blocked", "delayed", "running", "succeeded", "failed", "cancelled", "unknown")
#: The states a job does not leave (``unknown`` too: nothing will notify).
ENDED = frozenset({"succeeded", "failed", "cancelled", "unknown"})


@dataclass(frozen=True, slots=True)
class Attempt:
    """One failed attempt of a job, as kept in ``pgqueue.attempt_failures``."""

    attempt: int
    failed_at: datetime
    #: ``retried`` (the job ran again), ``lease_expired`` (its lease ended before the attempt did: the
    #: worker died, hung or lost the database; the job ran again), or the reason of its terminal failure.
    reason: str
    exception: str | None
    message: str
    traceback: str | None
    #: The worker that ran it (host:pid); None when the database decided (a cancel, a lost lease).
    worker: str | None
    #: The handler's run time in seconds, when known.
    duration: float | None

    def to_data(self) -> dict[str, Any]:
        """As JSON-ready data (times in ISO 8601)."""
        return {"attempt": self.attempt, "failed_at": self.failed_at.isoformat(), "reason": self.reason,
                "exception": self.exception, "message": self.message, "traceback": self.traceback,
                "worker": self.worker, "duration": self.duration}


@dataclass(frozen=True, slots=True)
class JobStatus:
    """Where a job is (``pgqueue.job_state``): its state (one of :data:`STATES`), attempts and tries,
    times, result when kept, failure when it failed, and every failed attempt (:attr:`errors`)."""

    id: uuid.UUID
    state: str
    queue: str | None = None
    name: str | None = None
    attempts: int | None = None
    tries: int | None = None
    created_at: datetime | None = None
    #: When it is due (waiting, delayed), or when its lease ends (running).
    available_at: datetime | None = None
    reserved_at: datetime | None = None
    finished_at: datetime | None = None
    #: The kept result (succeeded, with a result kept); see :attr:`has_result`.
    result: Any = None
    has_result: bool = False
    result_expires_at: datetime | None = None
    failure_id: uuid.UUID | None = None
    reason: str | None = None
    message: str | None = None
    errors: tuple[Attempt, ...] = ()
    #: The seconds its dispatch said to keep its result (None: its job type decides).
    result_ttl: float | None = None
    #: A live job's last progress report (``context.progress``): fraction, note, attempt, at.
    progress: dict[str, Any] | None = None
    #: The jobs it was dispatched to wait for (``after=``), the jobs still waiting for it, and the
    #: batch it is a member or the callback of (issue 26 §2).
    parents: tuple[uuid.UUID, ...] = ()
    children: tuple[uuid.UUID, ...] = ()
    batch_id: uuid.UUID | None = None

    @classmethod
    def from_row(cls, job_id: uuid.UUID, row: Mapping[str, Any] | None) -> JobStatus:
        """From a ``pgqueue.job_state`` row (None: ``unknown``)."""
        if row is None:
            return cls(id=job_id, state="unknown")
        errors = tuple(Attempt(attempt=e["attempt"], failed_at=_time(e["failed_at"]), reason=e["reason"],
                               exception=e["exception"], message=e["message"], traceback=e["traceback"],
                               worker=e["worker"], duration=e["duration"]) for e in row["errors"] or ())
        has_result = row["state"] == "succeeded" and row["result_expires_at"] is not None
        return cls(id=job_id, state=row["state"], queue=row["queue"], name=row["name"], attempts=row["attempts"],
                   tries=row["tries"], created_at=row["created_at"], available_at=row["available_at"],
                   reserved_at=row["reserved_at"], finished_at=row["finished_at"], result=row["result"],
                   has_result=has_result, result_expires_at=row["result_expires_at"], failure_id=row["failure_id"],
                   reason=row["reason"], message=row["message"], errors=errors, result_ttl=row["result_ttl"],
                   progress=row["progress"], parents=tuple(row.get("parents") or ()),
                   children=tuple(row.get("children") or ()), batch_id=row.get("batch_id"))

    @property
    def ended(self) -> bool:
        """Whether the job is in a state it does not leave (succeeded, failed, cancelled or unknown)."""
        return self.state in ENDED

    def to_data(self) -> dict[str, Any]:
        """As JSON-ready data (times in ISO 8601, ids as strings)."""
        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {"id": str(self.id), "state": self.state, "queue": self.queue, "name": self.name,
                "attempts": self.attempts, "tries": self.tries, "created_at": iso(self.created_at),
                "available_at": iso(self.available_at), "reserved_at": iso(self.reserved_at),
                "finished_at": iso(self.finished_at), "result": self.result, "has_result": self.has_result,
                "result_expires_at": iso(self.result_expires_at),
                "failure_id": None if self.failure_id is None else str(self.failure_id), "reason": self.reason,
                "message": self.message, "errors": [e.to_data() for e in self.errors], "progress": self.progress,
                "parents": [str(p) for p in self.parents], "children": [str(c) for c in self.children],
                "batch_id": None if self.batch_id is None else str(self.batch_id)}


#: The SQLSTATE of a read the role may not make (a least-privilege producer reading the args).
_NOT_ALLOWED = "42501"


def masked(status: JobStatus, redactor: Redactor, args: Any, known: bool) -> JobStatus:
    """``status`` as shown: the values the job's class declares secret (``Job.redact``, plus the
    redactor's names for every job) masked in its failure message and every attempt's exception,
    message, traceback and worker, as the dashboard and ``queue:failed`` mask them. ``args``: the
    job's args when ``known``; unknown (not kept, or not readable by this role), every such text is
    masked whole, since what it quotes cannot be told."""
    if known:
        _, secrets = redactor.args(status.name, args)
        if not secrets:
            return status

        def text(value: str | None) -> str | None:
            return redactor.text(value, secrets)
    else:
        def text(value: str | None) -> str | None:
            return None if value is None else MASK

    errors = tuple(dataclasses.replace(e, exception=text(e.exception), message=text(e.message) or "",
                                       traceback=text(e.traceback), worker=text(e.worker)) for e in status.errors)
    return dataclasses.replace(status, message=text(status.message), errors=errors)


def _needs_masking(status: JobStatus, redactor: Redactor) -> bool:
    """Whether ``status`` shows texts and its job declares fields secret (else nothing is read)."""
    return bool((status.errors or status.message) and redactor.fields(status.name))


async def _shown(status: JobStatus, store: Store, redactor: Redactor) -> JobStatus:
    if not _needs_masking(status, redactor):
        return status
    try:
        known, args = await store.job_args(status.id)
    except QueueStorageError as exc:
        if exc.sqlstate != _NOT_ALLOWED:
            raise
        known, args = False, None
    return masked(status, redactor, args, known)


def _shown_sync(status: JobStatus, conn: psycopg.Connection[Any], redactor: Redactor) -> JobStatus:
    if not _needs_masking(status, redactor):
        return status
    try:
        known, args = Store.job_args_sync(conn, status.id)
    except QueueStorageError as exc:
        if exc.sqlstate != _NOT_ALLOWED:
            raise
        known, args = False, None
    return masked(status, redactor, args, known)


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def outcome(status: JobStatus) -> Any:
    """The result of an ended job, or the error that says why there is none."""
    if status.state == "succeeded":
        if status.has_result:
            return status.result
        raise QueueResultError(f"job {status.id} ({status.name}) succeeded but kept no result (it was kept in "
                               "completed_jobs only); set result_ttl on its job type or dispatch to keep one")
    if status.state in ("failed", "cancelled"):
        last = status.errors[-1] if status.errors else None
        detail = f"{last.exception}: {status.message}" if last is not None and last.exception else status.message
        raise JobFailedError(f"job {status.id} ({status.name}) {status.state} after {status.attempts} attempt(s) "
                             f"[{status.reason}]: {detail} (failure {status.failure_id})", status)
    if status.state != "unknown":
        raise QueueResultError(f"job {status.id} ({status.name}) is {status.state} and keeps no result (its "
                               "result_ttl is 0, or its handler declares no return type): there is nothing to "
                               "wait for; read its status() instead")
    raise QueueResultError(f"pgqueue holds nothing of job {status.id}: it was never dispatched, its dispatching "
                           "transaction has not committed yet, or it succeeded keeping no result (result_ttl 0) "
                           "and is gone")


def keeps_no_result(status: JobStatus) -> bool:
    """Whether a live job will keep no result, as far as this process can tell (its dispatch's
    result_ttl, else its job type's when registered here): nothing would wake a waiter."""
    if status.result_ttl is not None:
        return status.result_ttl == 0
    job_type = lookup(status.name) if status.name else None
    if job_type is None:
        return False
    return type_result_ttl(job_type) == 0


class Follows(Protocol):
    """What a handle needs of the client it follows (a :class:`pgqueue.Client`; this room does not
    import the client, which imports it)."""

    @property
    def dsn(self) -> str: ...

    async def _store(self) -> Store: ...

    def _result_waiter(self) -> ResultWaiter: ...


class JobHandle(uuid.UUID):
    """A dispatched job's id (a :class:`uuid.UUID`: equal to, and hashed as, the plain id) that can
    also follow the job: :meth:`status`, :meth:`result` and their ``_sync`` variants.

    Pickled or copied, it becomes a plain UUID (the client it follows does not travel).
    """

    __slots__ = ("_client",)
    _client: Follows | None

    def __init__(self, job_id: uuid.UUID | str, client: Follows | None = None) -> None:
        if isinstance(job_id, uuid.UUID):
            super().__init__(int=job_id.int)  # no parsing: dispatch_many makes one per job
        else:
            super().__init__(job_id)
        object.__setattr__(self, "_client", client)

    def __reduce__(self) -> tuple[Callable[..., uuid.UUID], tuple[str]]:
        return uuid.UUID, (str(self),)

    def __copy__(self) -> uuid.UUID:
        return uuid.UUID(int=self.int)

    def __deepcopy__(self, memo: object) -> uuid.UUID:
        return uuid.UUID(int=self.int)

    @property
    def id(self) -> uuid.UUID:
        """The job id as a plain UUID."""
        return uuid.UUID(int=self.int)

    def _the_client(self) -> Follows:
        if self._client is None:
            raise QueueConfigurationError(f"this handle of job {self} follows no client; get one with "
                                          "client.job(job_id)")
        return self._client

    async def status(self, *, redact: Iterable[str] = ()) -> JobStatus:
        """The job's :class:`JobStatus` now. What its class declares secret (``Job.redact``, when the
        class is imported in this process) and the arg names in ``redact`` are masked in its failure
        message and attempts (see :func:`masked`)."""
        store = await self._the_client()._store()
        return await _shown(JobStatus.from_row(self.id, await store.job_state(self.id)), store, Redactor(redact))

    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109  # the issue's API: result(timeout=...)
        """The handler's return value, once the job has succeeded: woken by the database's
        notification when the job ends (no polling). Raises :class:`~pgqueue.JobFailedError`
        (carrying the :class:`JobStatus`: reason, message, every attempt) if it failed or was
        cancelled, :class:`~pgqueue.JobResultTimeout` after ``timeout`` seconds (None: no limit),
        and :class:`~pgqueue.QueueResultError` if it keeps no result."""
        client = self._the_client()
        status = await client._result_waiter().wait(self.id, _checked_timeout(timeout))
        if status.state in ("failed", "cancelled"):  # the error carries it: masked as status() is
            status = await _shown(status, await client._store(), Redactor())
        return outcome(status)

    def status_sync(self, *, redact: Iterable[str] = ()) -> JobStatus:
        """:meth:`status` for synchronous code (its own short connection)."""
        with psycopg.connect(self._the_client().dsn, autocommit=True) as conn:
            return _shown_sync(JobStatus.from_row(self.id, Store.job_state_sync(conn, self.id)), conn,
                               Redactor(redact))

    def result_sync(self, timeout: float | None = None) -> Any:
        """:meth:`result` for synchronous code: its own connection LISTENs while it waits."""
        limit = _checked_timeout(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        with psycopg.connect(self._the_client().dsn, autocommit=True) as conn:
            Store.listen_ended_sync(conn)
            while True:
                status = JobStatus.from_row(self.id, Store.job_state_sync(conn, self.id))
                if status.ended or keeps_no_result(status):
                    return outcome(_shown_sync(status, conn, Redactor()) if status.state in ("failed", "cancelled")
                                   else status)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise _timed_out(status, limit)
                for _ in conn.notifies(timeout=left if left is not None else 60.0, stop_after=1):
                    pass

    def __repr__(self) -> str:
        return f"JobHandle('{self}')"


def _checked_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise QueueConfigurationError(f"result(timeout=...) must be seconds >= 0 or None, got {timeout!r}")
    return float(timeout)


def _timed_out(status: JobStatus, timeout: float | None) -> JobResultTimeout:
    return JobResultTimeout(f"job {status.id} ({status.name}) did not end within {timeout:g}s; it is "
                            f"{status.state} (attempt {status.attempts} of {status.tries}) and goes on")


class ResultWaiter:
    """One LISTEN connection per client (channel ``pgqueue_ended``), shared by every waiter.

    Each waiter checks the job's row only after the LISTEN is in place, then again after every
    wake-up, so an end that happened before or during the wait is never missed. A lost connection
    wakes every waiter (each checks its row again) and is opened anew by the next wait.
    """

    def __init__(self, dsn: Callable[[], str], store: Callable[[], Any]) -> None:
        self._dsn = dsn
        self._store = store
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._waiting: dict[uuid.UUID, set[asyncio.Event]] = {}

    async def _listening(self) -> None:
        async with self._lock:
            if self._conn is not None and not self._conn.closed:
                return
            conn = await psycopg.AsyncConnection.connect(self._dsn(), autocommit=True)
            await Store.listen_ended(conn)
            self._conn = conn
            self._reader = asyncio.create_task(self._read(conn), name="pgqueue-result-waiter")

    async def _read(self, conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            async for notice in conn.notifies():
                try:
                    job_id = uuid.UUID(notice.payload)
                except ValueError:
                    continue  # a notification is a hint: anyone may send one
                for event in self._waiting.get(job_id, ()):
                    event.set()
        except psycopg.Error as exc:
            logger.warning("pgqueue: the connection listening for job ends was lost (%s); waiters check again",
                           exc)
        finally:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
            for events in self._waiting.values():
                for event in events:
                    event.set()

    async def wait(self, job_id: uuid.UUID, seconds: float | None) -> JobStatus:
        """The job's status once it has ended; raises JobResultTimeout after ``seconds`` (None: no limit)."""
        loop = asyncio.get_running_loop()
        deadline = None if seconds is None else loop.time() + seconds
        event = asyncio.Event()
        self._waiting.setdefault(job_id, set()).add(event)
        try:
            while True:
                store = await self._store()  # opens the client (and resolves its DSN) first
                await self._listening()
                event.clear()
                status = JobStatus.from_row(job_id, await store.job_state(job_id))
                if status.ended or keeps_no_result(status):
                    return status
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    raise _timed_out(status, seconds)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), left)
        finally:
            events = self._waiting.get(job_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[job_id]

    async def close(self) -> None:
        """Stop listening (waiters still waiting check their rows and reconnect if they go on)."""
        reader, self._reader = self._reader, None
        conn, self._conn = self._conn, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                await reader
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()

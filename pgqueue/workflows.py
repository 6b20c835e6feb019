"""Durable workflows (issue 27): a function of steps that survives crashes, deploys and lost leases.

``@workflow(queue="orders")`` turns an ``async def f(context: WorkflowContext, **args)`` into a job type
(a :class:`WorkflowJob` subclass, registered and dispatched like any job). Each run of the job is an
attempt that runs the function from the top; each call of a step method of the context is the next
*step* (its seq: 1, 2, ...), and a step already recorded (``pgqueue.workflow_steps``) returns its
stored result without running again:

- ``await context.step(name, fn, *args)``: runs ``fn`` once (sync functions in a thread), keeps its
  result (JSON); a step that raises is retried with its own ``tries``/``backoff`` without using up a try
  of the workflow; once its tries are spent the workflow fails, naming the step.
- ``async with context.transaction(name) as conn:``: the block's writes and the step's checkpoint
  commit in one transaction fenced by the reservation's token (exactly once). On replay the block
  is skipped: ``conn`` is then a stand-in whose first use ends the block (nothing runs on it).
- ``await context.sleep(delta)``, ``await context.wait_for(signal, timeout=)``: the attempt ends without
  using up a try and without holding a lease, a connection or a slot; the workflow is due again at
  its wake time or when the signal comes (``client.signal``, ``pgqueue.signal``, ``workflow:signal``).
- ``await context.run(job)``: dispatches a child job (or workflow) exactly once and resumes with its
  result once it has ended (a failed child raises :class:`~pgqueue.errors.WorkflowChildError`).

Every checkpoint is written by a stored function that checks the reservation's token, so a stale
holder (its lease expired and another worker took the workflow over) records nothing. The
checkpoints must come in the same order on every run: a run whose step at some seq has another name
or kind than the recorded one fails the workflow (:class:`~pgqueue.errors.WorkflowDeterminismError`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg

from pgqueue.backoff import Backoff
from pgqueue.envelope import Envelope
from pgqueue.errors import (
    QueueConfigurationError,
    QueueLeaseError,
    QueuePayloadError,
    WorkflowChildError,
    WorkflowDeterminismError,
    WorkflowError,
    WorkflowStepError,
    WorkflowTimeout,
)
from pgqueue.failures import describe
from pgqueue.jobs import Job
from pgqueue.jsonvalues import check_json_safe, dumps_json
from pgqueue.results import DEFAULT_RESULT_TTL, MAX_RESULT_BYTES, result_ttl
from pgqueue.store import Store
from pgqueue.workflow_block import BlockConnection, TransactionBlock

if TYPE_CHECKING:
    from pgqueue.config import ConnectionConfig
    from pgqueue.job_context import JobContext
    from pgqueue.store import WorkflowStep

logger = logging.getLogger("pgqueue.workflows")

__all__ = ["MAX_NAME_LENGTH", "MAX_SIGNAL_BYTES", "WorkflowContext", "name_problem", "run_workflow"]

#: The longest step or signal name (characters), as the tables check.
MAX_NAME_LENGTH = 200
#: The most bytes of JSON a signal's payload may have (pgqueue.signal refuses more).
MAX_SIGNAL_BYTES = 65536
#: A step's default tries and backoff (seconds before the 1st, 2nd, later retry).
DEFAULT_STEP_TRIES = 3
DEFAULT_STEP_BACKOFF = Backoff.fixed(1.0, 5.0, 30.0)
_MAX_WAIT_SECONDS = 315360000.0


class _Suspended(BaseException):  # control flow, not an error: never seen outside this module
    """The attempt has ended in the database (parked for a sleep, a signal, a child or a step's retry):
    unwinds the workflow function. A BaseException, so a handler's ``except Exception`` lets it through."""


class _Terminated(BaseException):  # control flow carrying the error the workflow fails with
    """The workflow cannot go on (determinism, a step's tries spent, bad use): unwinds the function, and
    the job fails with :attr:`error` (no retry)."""

    def __init__(self, error: WorkflowError) -> None:
        super().__init__(str(error))
        self.error = error


def _seconds(value: timedelta | float, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
            or not 0 <= seconds <= _MAX_WAIT_SECONDS:
        raise WorkflowError(f"{what} must be a timedelta or seconds from 0 to {_MAX_WAIT_SECONDS:.0f} (10 years), "
                            f"got {value!r}")
    return float(seconds)


def name_problem(name: object, what: str) -> str | None:
    """Why ``name`` cannot be a step's or a signal's name (``what`` says which), or None: a string of 1 to
    :data:`MAX_NAME_LENGTH` characters that PostgreSQL text can hold (no NUL, no lone surrogate)."""
    if isinstance(name, str) and 1 <= len(name) <= MAX_NAME_LENGTH and "\x00" not in name:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            pass
        else:
            return None
    return (f"{what} must be a string of 1 to {MAX_NAME_LENGTH} characters without NUL or lone surrogates "
            f"(PostgreSQL text holds neither), got {name!r:.80}")


def _checked_name(name: object, what: str) -> str:
    problem = name_problem(name, what)
    if problem is not None:
        raise WorkflowError(problem)
    return name  # type: ignore[return-value]  # a str: name_problem said so


class WorkflowContext:
    """What a workflow function receives: its job's facts (:attr:`job`, a :class:`~pgqueue.JobContext`)
    and the step methods, each one checkpoint (see :mod:`pgqueue.workflows`). Steps run one at a time,
    in the order of the code; a context is usable only during the attempt that made it."""

    __slots__ = ("_config", "_held", "_in_step", "_job", "_loaded", "_names", "_open", "_recorded", "_seq",
                 "_steps", "_store", "_version")

    #: Whether the transaction blocks of an attempt keep one pooled connection until the attempt's end or
    #: its next step of another kind, across awaits between them too. Off: an await between two blocks
    #: (outside any step) would hold it, and ten such attempts would starve a pool of ten, the worker's
    #: own acks and reservations included. Without it, blocks that follow each other at once share the
    #: connection all the same, given back at the event loop's next turn (see BlockConnection).
    _keep_connection: ClassVar[bool] = False

    def __init__(self, job: JobContext, store: Store, config: ConnectionConfig | None,
                 version: tuple[int | None, str] = (None, "")) -> None:
        self._job = job
        self._store = store
        self._config = config
        self._version = version  # this worker's version of the workflow, and its name
        # The recorded steps are read with the attempt's first step (a transaction block reads them in
        # the round trip of its BEGIN): a first run, which has none, pays no round trip for them.
        self._loaded = False
        self._steps: dict[int, WorkflowStep] = {}
        self._recorded: dict[str, int] = {}
        self._names: set[str] = set()
        self._seq = 0
        self._in_step = False
        self._open = True
        self._held = BlockConnection(job, self._keep_connection)

    @property
    def job(self) -> JobContext:
        """The attempt's :class:`~pgqueue.JobContext` (id, attempts, queue, progress, ...)."""
        return self._job

    @property
    def id(self) -> Any:
        """The workflow's id (its job's: what ``dispatch`` returned, what ``signal`` takes)."""
        return self._job.id

    @property
    def replaying(self) -> bool:
        """Whether the next step was recorded by an earlier attempt (it will return its stored result).
        The recorded steps are read with the attempt's first step: before it, this raises
        :class:`~pgqueue.errors.WorkflowError` (await a step first)."""
        if not self._loaded:
            raise WorkflowError(f"workflow {self.id}: context.replaying is known once the attempt's first step "
                                "was called (the recorded steps are read with it)")
        return self._seq + 1 in self._steps

    def _record(self, steps: Sequence[WorkflowStep]) -> None:
        """Take the steps earlier attempts recorded, once per attempt; a workflow that recorded steps
        under another version of its code fails (it would replay them with other code)."""
        self._loaded = True
        self._steps = {step.seq: step for step in steps}
        self._recorded = {step.name: step.seq for step in steps}
        version, name = self._version
        dispatched = self._job.workflow_version
        if steps and dispatched != version:
            raise _Terminated(WorkflowDeterminismError(
                f"workflow {self.id} ({name}) started at version {dispatched} and this worker runs "
                f"version {version}: it fails rather than replay its steps with other code; keep the old version "
                "registered under its own name until its runs end"))

    async def _load(self) -> None:
        """The recorded steps, read before the attempt's first step (one round trip, once). The blocks'
        connection goes back first (not from inside a block, which is still using it: the step is then
        refused): the step's own statement takes one of its own."""
        if not self._in_step:
            await self._release()
        if not self._loaded and self._open:
            self._record(await self._store.workflow_steps(self.id))

    # ------------------------------------------------------------------ the steps
    async def step(self, name: str, fn: Callable[..., Any], *args: Any, tries: int = DEFAULT_STEP_TRIES,
                   backoff: float | Sequence[float] | Backoff | None = None, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once as the step ``name`` and return its result (JSON, kept).

        On a later run of the workflow the recorded result is returned without calling ``fn``. If ``fn``
        raises, the attempt ends and the workflow runs again after the step's ``backoff`` (default 1, 5,
        30 s) without using up a try of the workflow; after ``tries`` failed runs the workflow fails,
        naming the step. ``fn`` may be async; a sync one runs in a thread. The result is returned as
        JSON reads it back (a tuple comes back as a list), on the first run as on a replay.
        Effects of ``fn`` outside the database are at least once (a crash after ``fn`` returned and
        before its checkpoint runs it again); use :meth:`transaction` for exactly-once writes.
        """
        if isinstance(tries, bool) or not isinstance(tries, int) or tries < 1:
            raise WorkflowError(f"step {name!r}: tries must be an integer >= 1, got {tries!r}")
        chosen = DEFAULT_STEP_BACKOFF if backoff is None else Backoff.coerce(backoff)
        await self._load()
        seq, stored = self._next(name, "step")
        if stored is not None and stored.state == "succeeded":
            return None if stored.result is None else json.loads(stored.result)
        # A step marked failed runs again (its workflow was retried: retry_failed) with fresh tries.
        failures = 0 if stored is None or stored.state == "failed" else stored.attempts
        started = time.monotonic()
        self._in_step = True
        try:
            value = await _call(fn, args, kwargs)
        except Exception as exc:
            self._in_step = False
            await self._step_failed(seq, name, exc, tries, chosen.delay(failures + 1))
            raise AssertionError("unreachable") from None  # _step_failed always raises
        finally:
            self._in_step = False
        text = self._encoded(name, value)
        answer = await self._store.workflow_checkpoint(self.id, self._job.token, seq, name, text,
                                                       time.monotonic() - started)
        self._answered(answer, name, "record step")
        return json.loads(text)

    def transaction(self, name: str, *, pipeline: bool = True) -> TransactionBlock:
        """``async with context.transaction(name) as conn:`` — the step ``name``: write on ``conn``; on leaving
        the block the step's checkpoint is written in the same transaction, fenced by the reservation's
        token, and both commit together or not at all (a stale holder's writes roll back and it raises
        :class:`~pgqueue.QueueLeaseError`). An exception in the block rolls back and propagates (the
        workflow is then retried as its tries allow). On a later run the block is skipped: ``conn`` is a
        stand-in and the first use of it ends the block, so put the block's database work first.

        ``pipeline`` (default True): ``conn`` is in psycopg's pipeline mode, so the block's BEGIN, its
        statements, the checkpoint and the COMMIT go to the server together, in one round trip. A
        statement is then sent when a result of the block is fetched (``await cur.fetchone()``) or when
        the block ends, and its error is raised there, not by ``execute``. ``pipeline=False`` for what
        pipeline mode cannot do (COPY, server-side cursors) or to see each error at its ``execute``: one
        round trip per statement, and BEGIN's own. Blocks that follow each other at once (nothing awaited
        between them) share one pooled connection; it goes back to the pool as soon as the code awaits
        anything else, at its next step of another kind or at the attempt's end."""
        return TransactionBlock(self, name, pipeline and psycopg.Pipeline.is_supported())

    async def sleep(self, delay: timedelta | float, *, name: str | None = None) -> None:
        """Sleep durably: the attempt ends (no try used; no lease, connection or slot held) and the
        workflow runs again once ``delay`` (timedelta or seconds) has passed since the first call."""
        seconds = _seconds(delay, "context.sleep's delay")
        step_name = name or f"sleep#{self._seq + 1}"
        await self._load()
        seq, stored = self._next(step_name, "sleep")
        if stored is not None and stored.state == "succeeded":
            return
        outcome, _ = await self._wait(seq, step_name, "sleep", None, seconds)
        if outcome != "done":
            raise AssertionError(f"pgqueue.workflow_wait answered {outcome!r} to a sleep")

    async def wait_for(self, signal: str, timeout: timedelta | float | None = None, *,  # noqa: ASYNC109  # a durable timeout, stored: not asyncio's
                       name: str | None = None) -> Any:
        """Wait durably for the signal ``signal`` and return its payload (JSON, or None).

        A signal sent before the wait is kept and consumed at once (the oldest first). While it waits
        the workflow holds no lease, connection or slot, and the attempt uses up no try; it is due at
        once when the signal comes. ``timeout`` (timedelta or seconds from the first call; None: none):
        then :class:`~pgqueue.errors.WorkflowTimeout` is raised (catch it to go on; uncaught, the
        workflow fails). ``name``: the step's name (default ``wait:<signal>#<seq>``).
        """
        _checked_name(signal, "the signal name of context.wait_for")
        seconds = None if timeout is None else _seconds(timeout, "context.wait_for's timeout")
        step_name = name or f"wait:{signal}#{self._seq + 1}"
        await self._load()
        seq, stored = self._next(step_name, "signal")
        if stored is not None and stored.state in ("succeeded", "timed_out"):
            outcome, payload = ("done" if stored.state == "succeeded" else "timed_out"), stored.result
        else:
            outcome, payload = await self._wait(seq, step_name, "signal", signal, seconds)
        if outcome == "timed_out":
            raise WorkflowTimeout(f"workflow {self.id}: signal {signal!r} did not come within its timeout "
                                  f"({seconds if seconds is not None else 0:g}s, step {step_name!r})")
        return None if payload is None else json.loads(payload)

    async def run(self, job: Job, *, name: str | None = None, delay: float = 0.0) -> Any:
        """Dispatch ``job`` (a job or a workflow) as a child, exactly once, and return its result once it
        has ended; the workflow waits without a lease, a connection or a slot. A child that failed or was
        cancelled raises :class:`~pgqueue.errors.WorkflowChildError` with its failure. The child keeps
        its result at least a day (it is copied into the step when the workflow resumes).
        ``name``: the step's name (default ``run:<job name>#<seq>``)."""
        if not isinstance(job, Job):
            raise WorkflowError(f"context.run needs a job (e.g. ShipJob(order_id=1)), got {job!r:.80}")
        step_name = name or f"run:{type(job).name}#{self._seq + 1}"
        await self._load()
        seq, stored = self._next(step_name, "child")
        if stored is not None and stored.state == "succeeded":
            return None if stored.result is None else json.loads(stored.result)
        envelope = None if stored is not None else self._child_envelope(job)
        self._claim()
        try:
            outcome, child, result, error = await self._store.workflow_child(self.id, self._job.token, seq, step_name,
                                                                             envelope, float(delay))
        except BaseException:
            self._job.forget_decision("snoozed")
            raise
        if outcome == "parked":
            raise _Suspended
        self._job.forget_decision("snoozed")
        self._answered(outcome if outcome in ("not_yours", "conflict") else "recorded", step_name, "run a child")
        if outcome == "failed":
            raise WorkflowChildError(f"workflow {self.id}: child job {child} ({type(job).name}) of step "
                                     f"{step_name!r} did not succeed: {error}", child)
        return None if result is None else json.loads(result)

    # ------------------------------------------------------------------ machinery
    def _next(self, name: str, kind: str) -> tuple[int, WorkflowStep | None]:
        """The seq of the next step call, named and checked (usable, not nested, unique name, the same
        as recorded), and its checkpoint if one was recorded."""
        if not self._open:
            raise WorkflowError(f"workflow {self.id}: a step was called after its attempt ended (a "
                                "WorkflowContext is usable only inside the run of the workflow that received it)")
        if self._in_step:
            raise _Terminated(WorkflowError(f"workflow {self.id}: step {name!r} was called inside another step "
                                            "or a transaction block (or beside one, in another task): steps run "
                                            "one at a time, in order; call it from the workflow function after "
                                            "the step returns"))
        _checked_name(name, "a step name")
        if name in self._names:
            raise _Terminated(WorkflowError(f"workflow {self.id}: the step name {name!r} is used twice in one "
                                            "run; give each step its own name (name=... for sleep, wait_for, run)"))
        self._seq += 1
        self._names.add(name)
        seq = self._seq
        stored = self._steps.get(seq)
        if stored is not None and (stored.name != name or stored.kind != kind):
            raise _Terminated(WorkflowDeterminismError(
                f"workflow {self.id}: step {seq} is {kind} {name!r} in this code but was recorded as "
                f"{stored.kind} {stored.name!r} by an earlier run: the workflow's code changed while it ran; "
                "it fails rather than mix old and new results (see README, Workflows: versions)"))
        if stored is None and name in self._recorded:
            raise _Terminated(WorkflowDeterminismError(
                f"workflow {self.id}: step {name!r} is step {seq} in this code but was recorded as step "
                f"{self._recorded[name]} by an earlier run: the workflow's code changed while it ran"))
        return seq, stored

    def _claim(self) -> None:
        """Take the decision 'snoozed' before a statement that may park the workflow (so a racing heartbeat
        or cancellation cannot decide meanwhile); the caller forgets it if the workflow goes on."""
        if not self._job.claim_decision("snoozed"):
            raise QueueLeaseError(f"workflow {self.id}: the reservation was already {self._job.decision}; "
                                  "no step can be recorded")

    async def _wait(self, seq: int, name: str, kind: str, signal: str | None,
                    seconds: float | None) -> tuple[str, str | None]:
        self._claim()
        try:
            outcome, payload = await self._store.workflow_wait(self.id, self._job.token, seq, name, kind, signal,
                                                               seconds)
        except BaseException:
            self._job.forget_decision("snoozed")
            raise
        if outcome == "parked":
            raise _Suspended
        self._job.forget_decision("snoozed")
        self._answered("recorded" if outcome in ("done", "timed_out") else outcome, name, f"record {kind}")
        return outcome, payload

    async def _step_failed(self, seq: int, name: str, exc: Exception, tries: int, delay: float) -> None:
        exception, message, _ = describe(exc)
        self._claim()
        try:
            answer = await self._store.workflow_step_failed(self.id, self._job.token, seq, name,
                                                            f"{exception}: {message}", tries, delay)
        except BaseException:
            self._job.forget_decision("snoozed")
            raise
        if answer == "retrying":
            logger.warning("pgqueue: workflow %s step %r failed (%s: %s); retrying it in %.2fs", self.id, name,
                           exception, message, delay, extra=self._job.log_fields())
            raise _Suspended
        self._job.forget_decision("snoozed")
        if answer == "exhausted":
            raise _Terminated(WorkflowStepError(f"workflow {self.id}: step {name!r} failed {tries} time(s), its "
                                                f"tries; last error: {exception}: {message}")) from exc
        self._answered(answer, name, "record the failure of step")

    def _answered(self, answer: str, name: str, what: str) -> None:
        """Carry out a fenced statement's refusal: the lease was lost, or the code changed."""
        if answer == "not_yours":
            raise self._job._refused(f"{what} {name!r}")  # the context's own fence refusal
        if answer == "conflict":
            raise _Terminated(WorkflowDeterminismError(
                f"workflow {self.id}: step {name!r} could not be recorded: another step holds its place or its "
                "name (the workflow's code changed while it ran)"))

    def _encoded(self, name: str, value: Any) -> str:
        """A step's result as JSON text, or the workflow fails naming the step."""
        try:
            check_json_safe(value, f"workflow {self.id}: the result of step {name!r}")
        except QueuePayloadError as exc:
            raise _Terminated(WorkflowError(f"{exc}; a step's result is kept as JSON (return ids, strings, "
                                            "numbers, lists or dicts)")) from None
        text = dumps_json(value)
        if len(text.encode("utf-8")) > MAX_RESULT_BYTES:
            raise _Terminated(WorkflowError(
                f"workflow {self.id}: the result of step {name!r} is {len(text.encode('utf-8'))} bytes of JSON, "
                f"over the limit of {MAX_RESULT_BYTES}; store large data elsewhere and return its key"))
        return text

    def _child_envelope(self, job: Job) -> str:
        if self._config is None:
            raise WorkflowError(f"workflow {self.id}: context.run needs a worker of a database connection")
        envelope = Envelope.build(job, self._config)
        kept = max(result_ttl(type(job), envelope), DEFAULT_RESULT_TTL)
        envelope = Envelope(**{**_fields(envelope), "result_ttl": kept})
        return envelope.encode(self._config.max_payload_bytes)

    async def _release(self) -> None:
        """Give the blocks' connection back to the pool now (if one is held)."""
        await self._held.release()

    def _close(self) -> None:
        self._open = False


def _fields(envelope: Envelope) -> dict[str, Any]:
    return {name: getattr(envelope, name) for name in Envelope.__dataclass_fields__}


async def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a step's function: a coroutine function awaited, a plain one in a thread (its awaitable
    result awaited too)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    value = await asyncio.to_thread(fn, *args, **kwargs)
    if inspect.isawaitable(value):
        value = await value
    return value


async def run_workflow(function: Callable[..., Awaitable[Any]], args: dict[str, Any], context: JobContext,
                       version: int | None, name: str) -> Any:
    """One attempt of a workflow: ``function(WorkflowContext, **args)`` run from the top, its recorded
    steps replayed; returns its value, or None once the attempt ended in the database (parked, or failed
    terminally: the context's decision says which)."""
    if context._pool is None:  # set by the worker
        raise QueueConfigurationError(f"workflow {name!r} needs a worker of a database connection (its steps "
                                      "are rows): it cannot run inline; test it against a database "
                                      "(pgqueue.testing.drain)")
    flow = WorkflowContext(context, Store(context._pool), context.connection_config, (version, name))
    try:
        value = await function(flow, **args)
        await flow._load()  # a run that called no step: its version is checked all the same
        return value
    except _Suspended:
        return None  # the attempt ended in the database (parked): the executor sees the decision
    except _Terminated as stop:
        error: WorkflowError = stop.error
    except WorkflowError as exc:
        # A timeout, a failed child, or the workflow's bad use of its context (a bad name or delay, a
        # context.run of a non-job): every replay would raise the same, so no try is spent on it.
        error = exc
    finally:
        # On every way out (a return, a park, a failure, a cancellation, a lost lease) the blocks'
        # connection goes back to the pool before the job's decision takes one of its own.
        await flow._release()
        flow._close()
    await context.fail(error)
    return None

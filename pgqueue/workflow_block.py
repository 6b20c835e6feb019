"""A workflow's ``context.transaction(name)`` block (issue 27): its writes and the step's checkpoint
commit in one transaction fenced by the reservation's token; a replayed block is skipped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq

from pgqueue.errors import WorkflowError
from pgqueue.store import Store
from pgqueue.store.workflows import refusal

if TYPE_CHECKING:
    from pgqueue.job_context import JobContext
    from pgqueue.store import WorkflowStep

__all__ = ["BlockConnection", "TransactionBlock"]

logger = logging.getLogger("pgqueue.workflows")

#: The give-backs under way (:meth:`BlockConnection.block_ended`): a task is kept until it is done.
_GIVING_BACK: set[asyncio.Task[None]] = set()


class BlockConnection:
    """The pooled connection of an attempt's transaction blocks: a block takes it (:meth:`take`); at the
    block's end (:meth:`block_ended`) it stays for a block that follows at once and goes back to the pool
    at the event loop's next turn, that is once the workflow's code awaits anything but a block (or ends).
    Kept meanwhile, it cannot starve the pool: the attempt's code runs on without awaiting, so no other
    task (another attempt, the worker's acks and reservations) could run and wait for it. One pool
    checkout for blocks back to back, where one each took ~10 % of a block's client CPU. ``keep``
    (``WorkflowContext._keep_connection``): kept until :meth:`release`, across awaits too."""

    __slots__ = ("_conn", "_job", "_keep", "_uses")

    def __init__(self, job: JobContext, keep: bool) -> None:
        self._job = job
        self._keep = keep
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._uses = 0  # blocks that took it: a give-back scheduled before the latest one is void

    async def take(self) -> psycopg.AsyncConnection[Any]:
        """The connection for a block: the one kept (if usable: idle) or a new one from the pool."""
        self._uses += 1
        held = self._conn
        if held is not None and not held.closed and held.info.transaction_status == pq.TransactionStatus.IDLE:
            return held
        await self.release()
        pool = self._job._pool  # the pool the worker gave the attempt
        if pool is None:
            raise WorkflowError(f"workflow {self._job.id}: context.transaction needs a worker of a database "
                                "connection")
        self._conn = await pool.getconn()
        return self._conn

    def block_ended(self) -> None:
        """A block committed: keep the connection for a block that follows at once, give it back at the
        loop's next turn unless one took it (its own give-back is scheduled at its end)."""
        if not self._keep:
            asyncio.get_running_loop().call_soon(self._give_back, self._uses)

    def _give_back(self, uses: int) -> None:
        held, pool = self._conn, self._job._pool
        if held is None or pool is None or uses != self._uses:
            return  # given back already, or a later block took it (and gives it back itself)
        self._conn = None  # from now on no block can take it
        task = asyncio.get_running_loop().create_task(pool.putconn(held))
        _GIVING_BACK.add(task)
        task.add_done_callback(_given_back)

    async def release(self) -> None:
        """Give the connection back now (if one is held). ``putconn``, not the exit of ``pool.connection()``,
        which would COMMIT: the pool rolls back or replaces what a block left."""
        held, self._conn = self._conn, None
        if held is not None and self._job._pool is not None:
            await self._job._pool.putconn(held)


def _given_back(task: asyncio.Task[None]) -> None:
    _GIVING_BACK.discard(task)
    if not task.cancelled() and (error := task.exception()) is not None:  # the pool closes what it cannot take
        logger.warning("pgqueue: giving a workflow block's connection back to the pool failed: %r", error)


class _Workflow(Protocol):
    """What a block needs of its :class:`~pgqueue.workflows.WorkflowContext` (which imports this room)."""

    _job: JobContext
    _loaded: bool
    _open: bool
    _in_step: bool

    @property
    def id(self) -> Any: ...

    def _record(self, steps: Sequence[WorkflowStep]) -> None: ...

    def _next(self, name: str, kind: str) -> tuple[int, WorkflowStep | None]: ...

    def _answered(self, answer: str, name: str, what: str) -> None: ...

    _held: BlockConnection

    async def _release(self) -> None: ...


class _Skipped(BaseException):  # control flow: ends a replayed transaction block
    """Raised by the stand-in connection of a replayed ``context.transaction()`` block; its exit swallows it."""


class _SkippedConnection:
    """What a replayed ``context.transaction(name)`` block gets as ``conn``: its checkpoint exists, so the
    block's writes committed already; the first use of ``conn`` ends the block, running nothing."""

    def __getattr__(self, name: str) -> Any:
        raise _Skipped


class TransactionBlock:
    """``context.transaction(name)``: see :meth:`WorkflowContext.transaction`.

    Pipelined (the default), the block's BEGIN, its statements, its checkpoint and its COMMIT go in
    one round trip (psycopg's pipeline mode: a statement is sent when the block ends, or when a
    result of the block is fetched); the attempt's first step, which reads the recorded steps
    first, takes one round trip more. Out of pipeline mode (``pipeline=False``): BEGIN, each
    statement, then the checkpoint and COMMIT, each one round trip."""

    __slots__ = ("_conn", "_context", "_cur", "_mark", "_name", "_pipe", "_pipelined", "_seq", "_skipped",
                 "_started")

    def __init__(self, context: _Workflow, name: str, pipeline: bool = True) -> None:
        self._context = context
        self._name = name
        self._pipelined = pipeline
        self._seq = 0
        self._skipped = False
        self._mark = ""
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._cur: psycopg.AsyncCursor[Any] | None = None  # pipelined: the cursor of the block's own statements
        self._pipe = contextlib.AsyncExitStack()  # its pipeline, left before the connection goes back
        self._started = 0.0

    async def __aenter__(self) -> Any:
        context = self._context
        if not context._loaded and context._open and not context._in_step:  # its own block
            return await self._enter_first()
        self._seq, stored = context._next(self._name, "transaction")  # its own block
        context._in_step = True  # a step inside the block would not commit with it: refused
        if stored is not None and stored.state == "succeeded":
            self._skipped = True
            return _SkippedConnection()
        try:
            conn = await self._connect()
            await self._enter_pipeline(conn)
            await Store.workflow_block_begin(conn, self._mark, self._cur)
        except BaseException as exc:
            context._in_step = False
            await self._abandon(exc)
            raise
        self._started = time.monotonic()
        return conn

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        context = self._context
        job = context._job  # its own block
        conn = await context._held.take()  # the attempt's blocks share one (its own block's context)
        self._conn = conn
        # The block's mark on its transaction (a transaction-local setting): the checkpoint is refused in
        # any other transaction, e.g. one the handler began after ending the block's.
        self._mark = str(job.token)
        return conn

    async def _enter_pipeline(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self._pipelined:
            await self._pipe.enter_async_context(conn.pipeline())
            self._cur = conn.cursor()

    async def _enter_first(self) -> Any:
        """The attempt's first step is this block: the recorded steps are read and the block's transaction
        begun in one round trip; a replayed block rolls that transaction back and is skipped."""
        context = self._context
        try:
            conn = await self._connect()
            steps = await Store.workflow_steps_and_begin(conn, context.id, self._mark)
            context._record(steps)  # its own block's context
            self._seq, stored = context._next(self._name, "transaction")  # its own block
            if stored is not None and stored.state == "succeeded":
                self._skipped = True
                await self._abandon(None)
                context._in_step = True  # its own block: until its exit
                return _SkippedConnection()
            await self._enter_pipeline(conn)
        except BaseException as exc:
            await self._abandon(exc)
            raise
        context._in_step = True  # its own block: a step inside it would not commit with it: refused
        self._started = time.monotonic()
        return conn

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> bool:
        self._context._in_step = False  # its own block
        if self._skipped:
            return kind is None or issubclass(kind, _Skipped)
        if error is not None:
            await self._abandon(error)
            if isinstance(error, pg_errors.PipelineAborted):  # a statement after one whose error was caught
                self._context._job._check_block(pq.TransactionStatus.INERROR)  # JobContext's rule: raises
            return False
        try:
            answer = await self._commit()
        except BaseException as exc:
            await self._abandon(exc)
            raise
        context = self._context
        if answer == "recorded":
            context._held.block_ended()  # its own block: kept for a block that follows at once
        else:
            await context._release()  # a refused block's connection goes back, whatever its state
        if answer == "ended":
            raise context._job._ended()  # the handler ended the block's transaction
        context._answered(answer, self._name, "commit transaction")
        return False

    async def _commit(self) -> str:
        """The checkpoint and the COMMIT: ``recorded`` (committed) or the refusal (nothing committed)."""
        conn = self._conn
        assert conn is not None, "entered"
        context = self._context
        job = context._job  # its own block
        seconds = time.monotonic() - self._started
        if not self._pipelined:
            job._check_block(conn.info.transaction_status)  # the same rule as JobContext's block
            return await Store.workflow_commit_checkpoint(conn, self._mark, context.id, job.token, self._seq,
                                                          self._name, seconds)
        try:
            await Store.workflow_queue_checkpoint(conn, self._mark, context.id, job.token, self._seq, self._name,
                                                  seconds, self._cur)
            await self._pipe.aclose()  # the sync: everything queued is sent; the first error is raised
        except psycopg.Error as exc:
            answer = refusal(exc)
            if answer is not None:
                return answer
            if isinstance(exc, pg_errors.PipelineAborted) or exc.sqlstate == pg_errors.InFailedSqlTransaction.sqlstate:
                # A statement of the block failed, the handler caught it and went on: JobContext's rule.
                job._check_block(pq.TransactionStatus.INERROR)
            raise
        return "recorded"

    async def _abandon(self, error: BaseException | None) -> None:
        """Leave the pipeline (an error of its sync is dropped: ``error`` is the one raised), roll the
        block's transaction back and give the connection back (the next block takes a fresh one)."""
        try:
            with contextlib.suppress(psycopg.Error):
                await self._pipe.__aexit__(type(error) if error is not None else None, error,
                                           error.__traceback__ if error is not None else None)
            if self._conn is not None:
                await _roll_back(self._conn)
        finally:
            await self._context._release()  # its own block's context


async def _roll_back(conn: psycopg.AsyncConnection[Any]) -> None:
    """Roll back the block's transaction; a connection that cannot is closed (the pool replaces it)."""
    try:
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            await conn.rollback()
    except psycopg.Error:
        await conn.close()

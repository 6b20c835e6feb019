"""A workflow's ``context.transaction(name)`` block (issue 27): its writes and the step's checkpoint
commit in one transaction fenced by the reservation's token; a replayed block is skipped."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
from psycopg import pq

from pgqueue.errors import WorkflowError
from pgqueue.store import Store, begin_transaction

if TYPE_CHECKING:
    from pgqueue.job_context import JobContext
    from pgqueue.store import WorkflowStep

__all__ = ["TransactionBlock"]


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


class _Skipped(BaseException):  # control flow: ends a replayed transaction block
    """Raised by the stand-in connection of a replayed ``context.transaction()`` block; its exit swallows it."""


class _SkippedConnection:
    """What a replayed ``context.transaction(name)`` block gets as ``conn``: its checkpoint exists, so the
    block's writes committed already; the first use of ``conn`` ends the block, running nothing."""

    def __getattr__(self, name: str) -> Any:
        raise _Skipped


class TransactionBlock:
    """``context.transaction(name)``: see :meth:`WorkflowContext.transaction`."""

    __slots__ = ("_began", "_conn", "_context", "_exits", "_name", "_seq", "_skipped", "_started")

    def __init__(self, context: _Workflow, name: str) -> None:
        self._context = context
        self._name = name
        self._seq = 0
        self._skipped = False
        self._began = ""
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._exits = contextlib.AsyncExitStack()
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
        pool = context._job._pool  # the pool the worker gave the attempt
        try:
            if pool is None:
                raise WorkflowError(f"workflow {context.id}: context.transaction needs a worker of a database "
                                    "connection")
            conn: psycopg.AsyncConnection[Any] = await self._exits.enter_async_context(pool.connection())
            self._conn = conn
            self._began = await begin_transaction(conn)
        except BaseException:
            context._in_step = False
            await self._exits.aclose()
            raise
        self._started = time.monotonic()
        return conn

    async def _enter_first(self) -> Any:
        """The attempt's first step is this block: the recorded steps are read and the block's transaction
        begun in one round trip; a replayed block rolls that transaction back and is skipped."""
        context = self._context
        pool = context._job._pool  # the pool the worker gave the attempt
        if pool is None:
            raise WorkflowError(f"workflow {context.id}: context.transaction needs a worker of a database "
                                "connection")
        conn: psycopg.AsyncConnection[Any] = await self._exits.enter_async_context(pool.connection())
        try:
            steps, began = await Store.workflow_steps_and_begin(conn, context.id)
            context._record(steps)  # its own block's context
            self._seq, stored = context._next(self._name, "transaction")  # its own block
            if stored is not None and stored.state == "succeeded":
                self._skipped = True
                await _roll_back(conn)
                await self._exits.aclose()
                context._in_step = True  # its own block: until its exit
                return _SkippedConnection()
        except BaseException:
            await _roll_back(conn)
            await self._exits.aclose()
            raise
        context._in_step = True  # its own block: a step inside it would not commit with it: refused
        self._conn = conn
        self._began = began
        self._started = time.monotonic()
        return conn

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> bool:
        self._context._in_step = False  # its own block
        if self._skipped:
            return kind is None or issubclass(kind, _Skipped)
        conn = self._conn
        assert conn is not None, "entered"
        try:
            if kind is not None:
                await _roll_back(conn)
                return False
            context = self._context
            job = context._job  # its own block
            try:
                job._check_block(conn.info.transaction_status)  # the same rule as JobContext's block
                answer = await Store.workflow_commit_checkpoint(
                    conn, self._began, context.id, job.token, self._seq, self._name, time.monotonic() - self._started)
                if answer == "ended":
                    raise job._ended()  # the handler ended the block's transaction
                context._answered(answer, self._name, "commit transaction")
            except BaseException:
                await _roll_back(conn)
                raise
            return False
        finally:
            await self._exits.aclose()


async def _roll_back(conn: psycopg.AsyncConnection[Any]) -> None:
    """Roll back the block's transaction; a connection that cannot is closed (the pool replaces it)."""
    try:
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            await conn.rollback()
    except psycopg.Error:
        await conn.close()

"""Workflows (issue 27): a workflow's checkpoints (``pgqueue.workflow_steps``), each written by a fenced
stored function of the reservation's holder, its durable waits, its children, the signals sent to it,
and what operators read (``pgqueue.workflows``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import class_row

from pgqueue.errors import WorkflowError
from pgqueue.resources import query
from pgqueue.store.errors import storage_errors
from pgqueue.store.pooled import Pooled, first


@dataclass(frozen=True, slots=True)
class WorkflowStep:
    """One checkpoint of a workflow, as ``pgqueue.workflow_steps_of`` returns it (``result``: JSON text)."""

    seq: int
    name: str
    kind: str
    state: str
    result: str | None
    error: str | None
    attempts: int
    started_at: datetime
    ended_at: datetime | None
    wake_at: datetime | None
    signal: str | None
    child_id: uuid.UUID | None


#: The states of ``pgqueue.workflows`` (``workflow:list --state``), in the order a workflow meets them.
WORKFLOW_STATES = ("waiting", "delayed", "running", "sleeping", "waiting_signal", "waiting_child")
#: The most live workflows :meth:`WorkflowStatements.workflow_counts` reads by default.
WORKFLOW_COUNT_CAP = 10_000


@dataclass(frozen=True, slots=True)
class WorkflowCounts:
    """The live workflows by state: ``states`` has every state of :data:`WORKFLOW_STATES` (0 if none);
    ``capped``: more than ``cap`` workflows exist and the counts are of the ``cap`` + 1 read (each state
    then has at least that many)."""

    states: dict[str, int]
    cap: int
    capped: bool

    @property
    def total(self) -> int:
        """The workflows counted (more than :attr:`cap` when :attr:`capped`)."""
        return sum(self.states.values())


#: What pgqueue.workflow_checkpoint raises in a block's transaction, by SQLSTATE.
_REFUSALS = {"PGQ10": "not_yours", "PGQ11": "conflict", "PGQ12": "ended"}


def refusal(exc: psycopg.Error) -> str | None:
    """What a block's checkpoint refusal means (``not_yours``, ``conflict``, ``ended``), or None for
    another error (the block's own statement's: the caller raises it)."""
    return _REFUSALS.get(exc.sqlstate or "")


class WorkflowStatements(Pooled):
    """A workflow's checkpoints, waits, children and signals."""

    __slots__ = ()

    async def workflow_steps(self, job_id: uuid.UUID) -> list[WorkflowStep]:
        """The workflow's checkpoints in seq order (none for a workflow that has not reached a step)."""
        return await self._objects("workflow_steps_of", WorkflowStep, (job_id,))

    async def workflow_checkpoint(self, job_id: uuid.UUID, token: int, seq: int, name: str, result: str,
                                  seconds: float) -> str:
        """Record a step's result (JSON text): ``recorded``, ``not_yours`` (the fence refused) or ``conflict``."""
        return str(await self._value("workflow_checkpoint", (job_id, token, seq, name, "step", result, seconds)))

    @staticmethod
    async def workflow_steps_and_begin(conn: psycopg.AsyncConnection[Any], job_id: uuid.UUID,
                                       mark: str) -> list[WorkflowStep]:
        """The first ``context.transaction()`` block of an attempt: the workflow's checkpoints (as
        :meth:`workflow_steps`) read, then the block's transaction begun on ``conn`` (autocommit) and
        marked as the block's (``mark``), in one round trip."""
        cur = psycopg.AsyncClientCursor(conn, row_factory=class_row(WorkflowStep))
        await cur.execute(query("workflow_steps_transaction_begin"), (job_id, mark), prepare=False)
        steps: list[WorkflowStep] = await cur.fetchall()
        return steps

    @staticmethod
    async def workflow_block_begin(conn: psycopg.AsyncConnection[Any], mark: str,
                                   cursor: psycopg.AsyncCursor[Any] | None = None) -> None:
        """BEGIN a ``context.transaction()`` block's transaction on ``conn`` and mark it as the block's:
        one round trip, or none in pipeline mode (the statements are queued with the block's, on
        ``cursor`` if given: the block's own statements share one, a cursor each costs ~10 µs)."""
        if conn.pgconn.pipeline_status:
            cur = cursor or conn.cursor()
            await cur.execute(query("workflow_block_pipeline_begin"))
            await cur.execute(query("workflow_block_mark"), (mark,))
            return
        await psycopg.AsyncClientCursor(conn).execute(query("workflow_block_begin"), (mark,), prepare=False)

    @staticmethod
    async def workflow_queue_checkpoint(conn: psycopg.AsyncConnection[Any], mark: str, job_id: uuid.UUID,
                                        token: int, seq: int, name: str, seconds: float,
                                        cursor: psycopg.AsyncCursor[Any] | None = None) -> None:
        """A pipelined ``context.transaction(name)``'s end: the step's checkpoint and the COMMIT queued on
        ``conn`` (pipeline mode; on ``cursor`` if given), sent with the block's statements when the caller
        leaves the pipeline. A refusal is raised there (see :func:`refusal`) and nothing of the block
        commits."""
        cur = cursor or conn.cursor()
        await cur.execute(query("workflow_block_checkpoint"), (job_id, token, seq, name, seconds, mark))
        await cur.execute(query("workflow_block_commit"))

    @staticmethod
    async def workflow_commit_checkpoint(conn: psycopg.AsyncConnection[Any], mark: str, job_id: uuid.UUID,
                                         token: int, seq: int, name: str, seconds: float) -> str:
        """``context.transaction(name, pipeline=False)``'s end: the step's checkpoint and the COMMIT of the
        block's transaction, sent together (one round trip). ``recorded`` once committed; else
        ``not_yours``, ``conflict`` or ``ended`` (the handler ended the block's transaction), and nothing
        committed: the transaction is aborted, the caller rolls it back."""
        try:
            # Bound client-side: two statements in one simple query, one round trip.
            await psycopg.AsyncClientCursor(conn).execute(
                query("workflow_checkpoint_commit"), (job_id, token, seq, name, seconds, mark), prepare=False)
        except psycopg.Error as exc:
            answer = refusal(exc)
            if answer is None:
                raise
            return answer
        return "recorded"

    async def workflow_step_failed(self, job_id: uuid.UUID, token: int, seq: int, name: str,
                                   error: str, tries: int, delay: float) -> str:
        """Count a step's failed run: ``retrying`` (parked for ``delay``), ``exhausted``, ``not_yours`` or
        ``conflict``."""
        return str(await self._value("workflow_step_failed", (job_id, token, seq, name, error, tries, delay)))

    async def workflow_wait(self, job_id: uuid.UUID, token: int, seq: int, name: str,
                            kind: str, signal: str | None, seconds: float | None) -> tuple[str, str | None]:
        """A sleep or a signal wait: (``done`` | ``timed_out`` | ``parked`` | ``not_yours`` | ``conflict``,
        the consumed signal's payload as JSON text)."""
        row = await self._row("workflow_wait", (job_id, token, seq, name, kind, signal, seconds))
        assert row is not None, "pgqueue.workflow_wait returns one row"
        return str(row[0]), row[1]

    async def workflow_child(self, job_id: uuid.UUID, token: int, seq: int, name: str,
                             envelope: str | None, delay: float) -> tuple[str, uuid.UUID | None, str | None,
                                                                          str | None]:
        """A child job dispatched once and awaited: (``parked`` | ``succeeded`` | ``failed`` | ``not_yours``
        | ``conflict``, the child's id, its result as JSON text, its failure)."""
        row = await self._row("workflow_child", (job_id, token, seq, name, envelope, delay))
        assert row is not None, "pgqueue.workflow_child returns one row"
        return str(row[0]), row[1], row[2], row[3]

    async def signal(self, job_id: uuid.UUID, name: str, payload: str | None) -> str:
        """Send a signal (payload: JSON text or None): ``delivered`` or ``woken``. A signal the database
        refuses (unknown or finished workflow, not a workflow, a bad name) raises WorkflowError."""
        with storage_errors(f"sending signal {name!r} to workflow {job_id}"):
            async with self._pool.connection() as conn:
                return await self.signal_on(conn, job_id, name, payload)

    @staticmethod
    async def signal_on(conn: psycopg.AsyncConnection[Any], job_id: uuid.UUID, name: str,
                        payload: str | None) -> str:
        """:meth:`signal` on the caller's connection, inside its transaction."""
        try:
            cur = await conn.execute(query("signal"), (job_id, name, payload))
        except pg_errors.InvalidParameterValue as exc:
            raise WorkflowError((exc.diag.message_primary or str(exc)).removeprefix("pgqueue.signal: ")) from None
        return str(first(await cur.fetchone()))

    @staticmethod
    def signal_sync(conn: psycopg.Connection[Any], job_id: uuid.UUID, name: str, payload: str | None) -> str:
        """:meth:`signal_on` on a blocking connection."""
        try:
            cur = conn.execute(query("signal"), (job_id, name, payload))
        except pg_errors.InvalidParameterValue as exc:
            raise WorkflowError((exc.diag.message_primary or str(exc)).removeprefix("pgqueue.signal: ")) from None
        return str(first(cur.fetchone()))

    async def workflows(self, state: str | None, limit: int) -> list[dict[str, Any]]:
        """Live workflows (``pgqueue.workflows``), oldest first, optionally of one state."""
        with storage_errors("listing workflows"):
            return await self._dicts("workflows_list", {"state": state, "limit": limit})

    async def workflow_counts(self, cap: int = WORKFLOW_COUNT_CAP) -> WorkflowCounts:
        """The live workflows by state (``pgqueue.workflows``), reading at most ``cap`` + 1 of them (one
        index probe each): counts that add up to more than ``cap`` are of a part of them (``capped``)."""
        with storage_errors("counting workflows"):
            found = {str(r["state"]): int(r["workflows"])
                     for r in await self._dicts("workflow_counts", {"cap": cap})}
        states = {state: found.get(state, 0) for state in WORKFLOW_STATES}
        return WorkflowCounts(states, cap, sum(states.values()) > cap)

    async def prune_workflows(self, batch: int) -> int:
        """Delete the checkpoints and signals of at most ``batch`` workflows that are gone; how many."""
        return int(await self._value("prune_workflows", (batch,)) or 0)

"""What a :class:`~pgqueue.Client` does with workflows (issue 27): send signals, read a workflow's steps,
list live workflows. A base of ``Client`` (``pgqueue/client.py``), which provides its settings and stores."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from pgqueue.errors import QueuePayloadError, WorkflowError
from pgqueue.jsonvalues import check_json_safe, dumps_json
from pgqueue.store import WORKFLOW_COUNT_CAP, WORKFLOW_STATES, Store, WorkflowCounts, WorkflowStep
from pgqueue.workflows import MAX_SIGNAL_BYTES, name_problem

if TYPE_CHECKING:
    from pgqueue.config import ConnectionConfig, Settings

__all__ = ["WORKFLOW_COUNT_CAP", "WORKFLOW_STATES", "WorkflowCounts", "WorkflowOperations", "signal_arguments"]


def signal_arguments(workflow_id: uuid.UUID | str, name: str, payload: Any) -> tuple[uuid.UUID, str, str | None]:
    """A signal's id, name and payload (JSON text) checked; WorkflowError says what is wrong, nothing is sent."""
    try:
        job_id = workflow_id if isinstance(workflow_id, uuid.UUID) else uuid.UUID(str(workflow_id))
    except ValueError:
        raise WorkflowError(f"{workflow_id!r} is not a workflow id (a UUID, as dispatch returned it); "
                            "no signal was sent") from None
    problem = name_problem(name, "a signal name")
    if problem is not None:
        raise WorkflowError(f"{problem}; no signal was sent")
    if payload is None:
        return job_id, name, None
    try:
        check_json_safe(payload, f"the payload of signal {name!r}")
    except QueuePayloadError as exc:
        raise WorkflowError(f"{exc}; no signal was sent") from None
    text = dumps_json(payload)
    if len(text.encode("utf-8")) > MAX_SIGNAL_BYTES:
        raise WorkflowError(f"the payload of signal {name!r} is {len(text.encode('utf-8'))} bytes of JSON, over the "
                            f"limit of {MAX_SIGNAL_BYTES}; no signal was sent (send a key to larger data)")
    return job_id, name, text


class WorkflowOperations:
    """Signals and the visibility of workflows (a base of :class:`~pgqueue.Client`)."""

    settings: Settings

    if TYPE_CHECKING:
        async def _store(self, connection: ConnectionConfig | None = None) -> Store: ...  # Client's

    async def signal(self, workflow_id: uuid.UUID | str, name: str, payload: Any = None, *, conn: Any = None,
                     connection: str | None = None) -> str:
        """Send the signal ``name`` (with a JSON ``payload``) to a workflow: kept until its
        ``context.wait_for(name)`` consumes it (a signal sent before the wait is not lost), and the
        workflow is due at once if it waits for that name. Returns ``"woken"`` or ``"delivered"``.
        With ``conn`` (a psycopg ``AsyncConnection``) the signal is part of the caller's transaction.
        Raises :class:`~pgqueue.WorkflowError`, storing nothing, for an unknown, finished or failed
        workflow, a job that is not a workflow, or a bad name or payload."""
        job_id, checked, text = signal_arguments(workflow_id, name, payload)
        if conn is not None:
            return await Store.signal_on(conn, job_id, checked, text)
        return await (await self._store(self.settings.connection(connection))).signal(job_id, checked, text)

    def signal_sync(self, conn: Any, workflow_id: uuid.UUID | str, name: str, payload: Any = None) -> str:
        """:meth:`signal` for synchronous code, on the caller's psycopg ``Connection`` (in its transaction)."""
        job_id, checked, text = signal_arguments(workflow_id, name, payload)
        return Store.signal_sync(conn, job_id, checked, text)

    async def workflow_steps(self, workflow_id: uuid.UUID | str,
                             connection: str | None = None) -> list[dict[str, Any]]:
        """A workflow's steps in order (seq, name, kind, state, result decoded, error, attempts, times,
        wake time, awaited signal, child id); empty for an unknown workflow or one that has not reached
        a step (or whose steps were pruned)."""
        try:
            job_id = workflow_id if isinstance(workflow_id, uuid.UUID) else uuid.UUID(str(workflow_id))
        except ValueError:
            raise WorkflowError(f"{workflow_id!r} is not a workflow id (a UUID)") from None
        store = await self._store(self.settings.connection(connection))
        steps: list[WorkflowStep] = await store.workflow_steps(job_id)
        return [{"seq": s.seq, "name": s.name, "kind": s.kind, "state": s.state,
                 "result": None if s.result is None else json.loads(s.result), "error": s.error,
                 "attempts": s.attempts, "started_at": s.started_at, "ended_at": s.ended_at, "wake_at": s.wake_at,
                 "signal": s.signal, "child_id": s.child_id} for s in steps]

    async def workflows(self, state: str | None = None, *, limit: int = 100,
                        connection: str | None = None) -> list[dict[str, Any]]:
        """Live workflows (``pgqueue.workflows``), oldest first: id, name, version, queue, state, the step
        each is at, wake time, awaited signal or child, attempts. ``state``: one of :data:`WORKFLOW_STATES`."""
        if state is not None and state not in WORKFLOW_STATES:
            raise WorkflowError(f"workflow state {state!r} is not one of {', '.join(WORKFLOW_STATES)}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise WorkflowError(f"limit must be a positive integer, got {limit!r}")
        return await (await self._store(self.settings.connection(connection))).workflows(state, limit)

    async def workflow_counts(self, *, cap: int = WORKFLOW_COUNT_CAP,
                              connection: str | None = None) -> WorkflowCounts:
        """The live workflows by state (``pgqueue.workflows``: running, sleeping, waiting for a signal or a
        child, ...), reading at most ``cap`` + 1 of them (one index probe each), so the cost stays bounded
        with any number of jobs or workflows; above ``cap`` the counts say so (``capped``)."""
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= 1_000_000:
            raise WorkflowError(f"cap must be an integer from 1 to 1,000,000, got {cap!r}")
        return await (await self._store(self.settings.connection(connection))).workflow_counts(cap)

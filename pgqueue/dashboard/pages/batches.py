"""Batches (issue 26 §2): one batch's page, its counts, its callback and a page of its members with
how each ended; and the line of a chain (each job waiting for the one before) on a job's page."""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pgqueue.dashboard.core import Dashboard
from pgqueue.store import Store

#: Members shown on one page of a batch (a "next" link pages on by member id).
MEMBERS_SHOWN = 200
#: How far the chain line is followed each way from the job shown.
CHAIN_STEPS = 20


def _single(rows: list[tuple[str, uuid.UUID, bool]], kind: str) -> uuid.UUID | None:
    """A job's one parent or one waiting child (``kind``); None when it has none or several of them."""
    found = [other for k, other, _ in rows if k == kind]
    return found[0] if len(found) == 1 else None


async def chain_of(store: Store, job_id: uuid.UUID, family: list[tuple[str, uuid.UUID, bool]]) -> list[uuid.UUID]:
    """The line of a chain through ``job_id``: its parent while it has one only, that one's, ... and
    its waiting child while it has one only, that one's, ... (at most :data:`CHAIN_STEPS` each way;
    several parents or children end the line there: the job page lists them); empty: no line."""
    line = [job_id]
    for kind in ("parent", "child"):
        rows = family
        for _ in range(CHAIN_STEPS):
            step = _single(rows, kind)
            if step is None or step in line:
                break
            if kind == "parent":
                line.insert(0, step)
            else:
                line.append(step)
            rows = await store.job_family(step)
    return line if len(line) > 1 else []


async def batch_page(dash: Dashboard, request: Request) -> Response:
    """``/batches/{batch_id}``: counts and progress, the callback, up to :data:`MEMBERS_SHOWN` members."""
    try:
        batch_id = uuid.UUID(request.path_params["batch_id"])
    except ValueError:
        return dash.missing(request, "jobs", "batch", request.path_params["batch_id"])
    store = await dash.store()
    state = await store.batch_state(batch_id)
    if state is None or state.id != batch_id:
        return dash.missing(request, "jobs", "batch", batch_id)
    problems: list[str] = []
    after = None
    if request.query_params.get("after"):
        try:
            after = uuid.UUID(request.query_params["after"])
        except ValueError:
            problems.append("the page position in the address is malformed; showing the first members")
    members = await store.batch_members_page(batch_id, after, MEMBERS_SHOWN + 1)
    next_cursor = str(members[MEMBERS_SHOWN - 1][0]) if len(members) > MEMBERS_SHOWN else None
    ended = state.total - state.pending
    return dash.render(request, "batch.html", page="jobs", batch=state, ended=ended, problems=problems,
                       percent=100 * ended // state.total if state.total else 100,
                       members=members[:MEMBERS_SHOWN], shown=MEMBERS_SHOWN, next_cursor=next_cursor,
                       first_page=after is None, callback=await store.job_find(state.callback_id))


def routes(dash: Dashboard) -> list[BaseRoute]:
    """``/batches/{batch_id}`` (one batch)."""
    async def endpoint(request: Request) -> Response:
        return await batch_page(dash, request)
    return [Route("/batches/{batch_id}", endpoint, name="batch")]

"""Workflows (issue 27): the live workflows (running, sleeping until their wake time, waiting for a
signal or a child) and the ended ones whose steps are kept, filtered by state and name (keyset pages
over a bounded window, like the jobs list); one workflow's steps as a timeline; send it a signal,
cancel it (``Client.cancel``: its running step is stopped by its worker)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pgqueue import WorkflowError
from pgqueue.dashboard.core import Dashboard, NavItem, text_filters
from pgqueue.dashboard.pages.jobs import OUTCOMES

NAV = NavItem("Workflows", "/workflows", "workflows", key="k")

#: The states of the view ``pgqueue.workflows`` (as ``workflow:list --state`` takes them; a test holds the two
#: equal), in the order a workflow meets them.
LIVE_STATES = ("waiting", "delayed", "running", "sleeping", "waiting_signal", "waiting_child")
#: The state filter's choices: the live states, and the ended workflows whose steps are kept.
STATES = (*LIVE_STATES, "ended")
#: What each state means, as the list's legend says it.
STATE_NOTES = {
    "waiting": "due, waiting for a worker",
    "delayed": "due later (a step's retry backoff, or dispatched with a delay)",
    "running": "a worker holds it",
    "sleeping": "parked in context.sleep until its wake time; holds no worker",
    "waiting_signal": "parked in context.wait_for until the signal comes (or its timeout)",
    "waiting_child": "parked until its child job ends",
    "ended": "succeeded, failed or cancelled; its steps are kept while its result or failure record is (one "
             "that keeps neither shows as ended until the next maintenance prunes it)",
}
#: Steps shown on one page of a workflow's timeline (a "next" link pages on by seq).
STEPS_SHOWN = 200
#: How much of a signal payload the form takes (the database refuses more than 65,536 bytes of JSON).
MAX_PAYLOAD_TEXT = 65_536


@dataclass(frozen=True)
class Bar:
    """Where a step's bar sits on the timeline, in thousandths of the span shown (an SVG's viewBox)."""

    x: int
    width: int


def bars(steps: list[dict[str, Any]], now: datetime) -> tuple[list[Bar], float]:
    """Each step's bar from its start to its end (now while it has not ended), on a span from the first
    step's start to the latest end; and that span in seconds."""
    if not steps:
        return [], 0.0
    start = min(s["started_at"] for s in steps)
    ends = [s["ended_at"] or max(now, s["started_at"]) for s in steps]
    span = max((max(ends) - start).total_seconds(), 1e-6)
    found = []
    for step, end in zip(steps, ends, strict=True):
        x = round(1000 * (step["started_at"] - start).total_seconds() / span)
        width = round(1000 * (end - step["started_at"]).total_seconds() / span)
        found.append(Bar(min(x, 997), max(3, min(width, 1000 - min(x, 997)))))
    return found, span


def payload_of(text: str, name: str) -> Any:
    """The signal payload typed into the form: empty is none (null), else JSON; WorkflowError names
    what is wrong with it (quoting its start, so the operator can fix and resend it)."""
    if not text.strip():
        return None
    if len(text) > MAX_PAYLOAD_TEXT:
        raise WorkflowError(f"the payload of signal {name!r} is {len(text):,} characters, over the limit of "
                            f"{MAX_PAYLOAD_TEXT:,}; no signal was sent")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkflowError(f"the payload of signal {name!r} is not JSON ({exc.msg} at line {exc.lineno} column "
                            f"{exc.colno}): {text[:200]!r}; no signal was sent. Write JSON, e.g. "
                            '{"approved": true} or "yes" (quoted), or leave it empty for none') from None


class WorkflowPages:
    """The workflow pages and actions of one dashboard (each method a route's endpoint)."""

    def __init__(self, dash: Dashboard) -> None:
        self.dash = dash

    async def listing(self, request: Request) -> Response:
        dash = self.dash
        params = request.query_params
        problems: list[str] = []
        filters = text_filters(params, {"name": "workflow name", "state": "state"}, problems)
        state = filters["state"] or None
        if state is not None and state not in STATES:
            problems.append(f"state {state!r} is not one of {', '.join(STATES)}; showing every live workflow")
            state, filters["state"] = None, ""
        after = None
        if params.get("after"):
            try:
                after = uuid.UUID(params["after"])
            except ValueError:
                problems.append("the page position in the address is malformed; showing the newest workflows")
        size, scan = dash.options.page_size, dash.options.scan_limit
        store = await dash.store()
        name = filters["name"] or None
        if state == "ended":
            page = await store.workflows_ended_page(name=name, after=after, scan=scan, limit=size + 1)
        else:
            page = await store.workflows_page(state=state, name=name, after=after, scan=scan, limit=size + 1)
        rows = page.rows[:size]
        next_cursor = None
        searched_only = False
        if len(page.rows) > size:
            next_cursor = str(rows[-1]["id"])
        elif page.scanned >= scan and page.last is not None:
            next_cursor = str(page.last[0])
            searched_only = True
        kept = {k: v for k, v in filters.items() if v}
        return dash.render(request, "workflows.html", page="workflows", rows=rows, filters=filters,
                           problems=problems, next_cursor=next_cursor, searched_only=searched_only,
                           scanned=page.scanned, first_page=after is None, states=STATES, notes=STATE_NOTES,
                           ended=state == "ended", kept=kept,
                           here=str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""))

    async def detail(self, request: Request) -> Response:
        dash = self.dash
        try:
            job_id = uuid.UUID(request.path_params["job_id"])
        except ValueError:
            return dash.missing(request, "workflows", "workflow", request.path_params["job_id"])
        store = await dash.store()
        flow = await store.workflow_find(job_id)
        if flow is None:
            return dash.missing(request, "workflows", "workflow", job_id)
        problems: list[str] = []
        after_seq = 0
        if request.query_params.get("after"):
            try:
                after_seq = max(int(request.query_params["after"]), 0)
            except ValueError:
                problems.append("the page position in the address is malformed; showing the first steps")
        envelope, secrets = dash.redactor.envelope(flow.pop("envelope"))
        name = flow["name"]
        steps = await store.workflow_timeline(job_id, after_seq, STEPS_SHOWN + 1)
        next_seq = steps[STEPS_SHOWN - 1]["seq"] if len(steps) > STEPS_SHOWN else None
        steps = steps[:STEPS_SHOWN]
        for step in steps:
            step["result"] = self.shown_json(step["result"], name, secrets)
            step["error"] = dash.redactor.text(step["error"], secrets, cut=bool(step.pop("error_cut")))
        flow["result"] = self.shown_json(flow["result"], name, secrets)
        flow["failure_message"] = dash.redactor.text(flow["failure_message"], secrets)
        now = datetime.now(UTC)
        placed, span = bars(steps, now)
        for step in steps:  # how long a step not ended has been at it (waiting, or retrying)
            step["open_seconds"] = None if step["ended_at"] else (now - step["started_at"]).total_seconds()
        return dash.render(request, "workflow.html", page="workflows", flow=flow, job_id=job_id,
                           args=envelope.get("args") if isinstance(envelope, dict) else None,
                           masked=sorted(dash.redactor.fields(name)), steps=list(zip(steps, placed, strict=True)),
                           span=span, next_seq=next_seq, first_page=after_seq == 0, problems=problems,
                           notes=STATE_NOTES)

    def shown_json(self, text: str | None, job_name: str | None, secrets: list[str]) -> str | None:
        """A stored result (JSON text) as the page shows it: fields the workflow declares secret masked at
        any depth, values of its secret args masked in the text, indented."""
        if text is None:
            return None
        value, _ = self.dash.redactor.args(job_name, json.loads(text))
        return self.dash.redactor.text(json.dumps(value, indent=2, ensure_ascii=False), secrets)

    async def signal(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            job_id = request.path_params["job_id"]
            name = str(form.get("name") or "").strip()
            if not name:
                raise WorkflowError("give the signal a name (the one the workflow's wait_for awaits); "
                                    "no signal was sent")
            payload = payload_of(str(form.get("payload") or ""), name)
            outcome = await dash.client.signal(job_id, name, payload, connection=dash.options.connection)
            said = ("woken: it was waiting for it and is due now" if outcome == "woken"
                    else "delivered: kept until the workflow waits for it")
            return f"signal {name!r} sent to workflow {job_id}, {said}"
        return await dash.action(request, run)

    async def cancel(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            job_id = request.path_params["job_id"]
            outcome = await dash.client.cancel(job_id, connection=dash.options.connection)
            return f"workflow {job_id} {OUTCOMES.get(outcome, outcome)}"
        return await dash.action(request, run)


def routes(dash: Dashboard) -> list[BaseRoute]:
    """``/workflows`` (the list) and ``/workflows/{job_id}`` (one workflow's timeline and actions)."""
    pages = WorkflowPages(dash)
    return [
        Route("/workflows", pages.listing, name="workflows"),
        Route("/workflows/{job_id}", pages.detail, name="workflow"),
        Route("/workflows/{job_id}/signal", pages.signal, methods=["POST"], name="workflow_signal"),
        Route("/workflows/{job_id}/cancel", pages.cancel, methods=["POST"], name="workflow_cancel"),
    ]

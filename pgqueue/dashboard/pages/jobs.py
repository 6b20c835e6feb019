"""Jobs: find live jobs by id, queue or name (keyset pages), one job with its attempts and lease, and
cancel ready, delayed and running jobs (``Client.cancel``: a running handler is stopped by its worker)."""

from __future__ import annotations

import uuid

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from pgqueue import QueueConfigurationError
from pgqueue.dashboard.core import Dashboard, NavItem, text_filters, url
from pgqueue.dashboard.counting import count_queues

NAV = NavItem("Jobs", "/jobs", "jobs")

# What Client.cancel's outcomes mean, as the page says them.
OUTCOMES = {
    "cancelled": "cancelled (it was waiting; recorded in failed jobs with reason cancelled)",
    "cancelled_running": "cancelled while running (its worker stops the handler; recorded in failed jobs)",
    "already_cancelled": "was already cancelled",
    "already_failed": "had already failed; nothing changed",
    "not_found": "is not in the queue any more (finished or removed); nothing changed",
}


def routes(dash: Dashboard) -> list[BaseRoute]:
    """``/jobs`` (search) and ``/jobs/{job_id}`` (one job, live or only in failed_jobs)."""

    async def place_of(request: Request, ident: uuid.UUID) -> str:
        """Where an id pasted into "Job id" is shown: its job, or the failure it names (the id that
        ``queue:failed`` prints), said on that page; an unknown id goes to the job page (a 404)."""
        store = await dash.store()
        if await store.job_find(ident) is None and not await store.job_failures(ident, 1) \
                and await store.failed_find(ident) is not None:
            return url(request, "failure", {"failure_id": ident}, given="failure")
        return url(request, "job", {"job_id": ident})

    async def listing(request: Request) -> Response:
        params = request.query_params
        problems: list[str] = []
        filters = text_filters(params, {"id": "job id", "queue": "queue", "name": "job name"}, problems)
        if filters["id"]:
            try:
                job_id = uuid.UUID(filters["id"])
            except ValueError:
                problems.append(f"{filters['id']!r} is not a job id (a UUID); showing the search instead")
            else:
                return RedirectResponse(await place_of(request, job_id), status_code=303)
        after = None
        if params.get("after"):
            try:
                after = uuid.UUID(params["after"])
            except ValueError:
                problems.append("the page position in the address is malformed; showing the newest jobs")
        size = dash.options.page_size
        narrowing = bool(filters["queue"] or filters["name"])
        store = await dash.store()
        page = await store.jobs_page(queue=filters["queue"] or None, name=filters["name"] or None, after=after,
                                     scan=dash.options.scan_limit if narrowing else size + 1, limit=size + 1)
        rows = page.rows[:size]
        next_cursor = None
        searched_only = False
        if len(page.rows) > size:
            next_cursor = str(rows[-1]["id"])
        elif narrowing and page.scanned >= dash.options.scan_limit and page.last is not None:
            next_cursor = str(page.last[0])
            searched_only = True
        # The overview's count of the table (or of the queue), so the two pages agree.
        total = (await count_queues(dash)).of(filters["queue"] or None)["jobs"]
        return dash.render(request, "jobs.html", page="jobs", rows=rows, filters=filters, problems=problems,
                           next_cursor=next_cursor, searched_only=searched_only, scanned=page.scanned,
                           first_page=after is None, total=total,
                           here=str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""))

    async def detail(request: Request) -> Response:
        try:
            job_id = uuid.UUID(request.path_params["job_id"])
        except ValueError:
            return dash.render(request, "missing.html", status=404, page="jobs", what="job",
                               ident=request.path_params["job_id"])
        store = await dash.store()
        row = await store.job_find(job_id)
        failures = await store.job_failures(job_id, 20)
        if row is None and not failures:
            if await store.failed_find(job_id) is not None:  # a failure's id, pasted into the address
                return RedirectResponse(url(request, "failure", {"failure_id": job_id}, given="failure"),
                                        status_code=303)
            return dash.render(request, "missing.html", status=404, page="jobs", what="job", ident=str(job_id))
        if row is not None:
            envelope, _ = dash.redactor.envelope(row["envelope"])
        else:
            # The job is only in failed_jobs: its name and args are those of its latest failure.
            latest = await store.failed_find(failures[0]["id"])
            envelope, _ = dash.redactor.envelope(latest["envelope"] if latest else None)
        name = envelope.get("name") if isinstance(envelope, dict) else None
        return dash.render(request, "job.html", page="jobs", job=row, job_id=job_id, envelope=envelope,
                           name=str(name) if name else None,
                           args=envelope.get("args") if isinstance(envelope, dict) else None,
                           masked=sorted(dash.redactor.fields(name if isinstance(name, str) else None)),
                           failures=dash.masked_failures(failures))

    async def cancel_one(request: Request) -> Response:
        async def run(form: FormData) -> str:
            job_id = request.path_params["job_id"]
            outcome = await dash.client.cancel(job_id, connection=dash.options.connection)
            return f"job {job_id} {OUTCOMES.get(outcome, outcome)}"
        return await dash.action(request, run)

    async def cancel_selected(request: Request) -> Response:
        async def run(form: FormData) -> str:
            ids = []
            for value in form.getlist("id"):
                try:  # every id checked before any is cancelled
                    ids.append(uuid.UUID(str(value)))
                except ValueError:
                    raise QueueConfigurationError(f"{value!r} is not a job id; nothing was cancelled") from None
            if not ids:
                raise QueueConfigurationError("no job was selected; tick the ones to cancel")
            outcomes = [await dash.client.cancel(job_id, connection=dash.options.connection) for job_id in ids]
            done = sum(o in ("cancelled", "cancelled_running") for o in outcomes)
            running = outcomes.count("cancelled_running")
            note = f"cancelled {done} of {len(ids)} selected jobs"
            if running:
                note += f" ({running} running: their workers stop the handlers)"
            if done < len(ids):
                note += f"; {len(ids) - done} had finished, failed or been cancelled already"
            return note
        return await dash.action(request, run)

    return [
        Route("/jobs", listing, name="jobs"),
        Route("/jobs/cancel-selected", cancel_selected, methods=["POST"], name="jobs_cancel_selected"),
        Route("/jobs/{job_id}", detail, name="job"),
        Route("/jobs/{job_id}/cancel", cancel_one, methods=["POST"], name="job_cancel"),
    ]

"""Jobs: find live jobs by id, queue or name (keyset pages), one job with its attempts and lease, and
cancel ready, delayed and running jobs (``Client.cancel``: a running handler is stopped by its worker)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from pgqueue import QueueConfigurationError
from pgqueue.dashboard.core import Dashboard, NavItem, text_filters, url
from pgqueue.dashboard.counting import count_queues
from pgqueue.dashboard.pages import batches as batch_pages
from pgqueue.dashboard.search import BATCH, BULK_LIMIT, COUNT_CAP, STATES, confirm_bulk, is_narrowed, job_search
from pgqueue.store import JobSearch

NAV = NavItem("Jobs", "/jobs", "jobs")

# What Client.cancel's outcomes mean, as the page says them.
OUTCOMES = {
    "cancelled": "cancelled (it was waiting; recorded in failed jobs with reason cancelled)",
    "cancelled_running": "cancelled while running (its worker stops the handler; recorded in failed jobs)",
    "already_cancelled": "was already cancelled",
    "already_failed": "had already failed; nothing changed",
    "not_found": "is not in the queue any more (finished or removed); nothing changed",
}


#: What "all matching" can do, as the confirmation says it.
BULK_ACTIONS = {
    "cancel": "Cancel: waiting jobs are removed, running ones stopped by their workers; each is recorded in failed "
              "jobs with reason cancelled (and can be retried from there).",
    "delete": "Delete: waiting jobs are removed for good, recorded nowhere; jobs a worker holds are left (cancel "
              "them instead).",
}
#: How many jobs one "selected" action may name: a page's worth, with room to spare.
MAX_SELECTED = 500


def selected_ids(form: FormData) -> list[uuid.UUID]:
    """The job ids ticked in the list, every one checked before any is acted on."""
    values = form.getlist("id")
    if not values:
        raise QueueConfigurationError("no job was selected; tick the ones to act on")
    if len(values) > MAX_SELECTED:
        raise QueueConfigurationError(f"select at most {MAX_SELECTED} jobs at once; nothing was changed")
    ids = []
    for value in values:
        try:
            ids.append(uuid.UUID(str(value)))
        except ValueError:
            raise QueueConfigurationError(f"{value!r} is not a job id; nothing was changed") from None
    return ids


async def batches(step: Callable[[], Awaitable[int]]) -> int:
    """Run a bulk function's batches (each a short transaction) until one comes back short or
    :data:`BULK_LIMIT` rows were handled; how many were."""
    done = 0
    while done < BULK_LIMIT:
        count = await step()
        done += count
        if count < BATCH:
            break
    return done


class JobPages:
    """The jobs pages and actions of one dashboard (each method a route's endpoint)."""

    def __init__(self, dash: Dashboard) -> None:
        self.dash = dash

    async def place_of(self, request: Request, ident: uuid.UUID) -> str:
        """Where an id pasted into "Job id" is shown: its job, or the failure it names (the id that
        ``queue:failed`` prints), said on that page; an unknown id goes to the job page (a 404)."""
        dash = self.dash
        store = await dash.store()
        if await store.job_find(ident) is None and not await store.job_failures(ident, 1) \
                and await store.failed_find(ident) is not None:
            return url(request, "failure", {"failure_id": ident}, given="failure")
        return url(request, "job", {"job_id": ident})

    async def listing(self, request: Request) -> Response:
        dash = self.dash
        params = request.query_params
        problems: list[str] = []
        ident = text_filters(params, {"id": "job id"}, problems)["id"]
        if ident:
            try:
                job_id = uuid.UUID(ident)
            except ValueError:
                problems.append(f"{ident!r} is not a job id (a UUID); showing the search instead")
            else:
                return RedirectResponse(await self.place_of(request, job_id), status_code=303)
        search, filters = job_search(params, problems)
        filters["id"] = ident
        after = None
        if params.get("after"):
            try:
                after = uuid.UUID(params["after"])
            except ValueError:
                problems.append("the page position in the address is malformed; showing the newest jobs")
        size = dash.options.page_size
        narrowing = is_narrowed(search)
        store = await dash.store()
        page = await store.jobs_search(search, after=after, scan=dash.options.scan_limit if narrowing else size + 1,
                                       limit=size + 1)
        rows = page.rows[:size]
        next_cursor = None
        searched_only = False
        if len(page.rows) > size:
            next_cursor = str(rows[-1]["id"])
        elif narrowing and page.scanned >= dash.options.scan_limit and page.last is not None:
            next_cursor = str(page.last[0])
            searched_only = True
        # The overview's count of the table (or of the queue), so the two pages agree.
        total = (await count_queues(dash)).of(search.queue)["jobs"]
        kept = {k: v for k, v in filters.items() if k != "id" and v}
        return dash.render(request, "jobs.html", page="jobs", rows=rows, filters=filters, problems=problems,
                           next_cursor=next_cursor, searched_only=searched_only, scanned=page.scanned,
                           first_page=after is None, total=total, states=STATES, kept=kept,
                           narrowing=narrowing,
                           here=str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""))

    async def bulk_confirm(self, request: Request) -> Response:
        dash = self.dash
        # Step one of "all matching": the count, and a form that confirms it (step two, POST).
        problems: list[str] = []
        search, filters = job_search(request.query_params, problems)
        matching, reserved = await (await dash.store()).jobs_matching_count(search, COUNT_CAP)
        return confirm_bulk(dash, request, page="jobs", what="jobs", actions=BULK_ACTIONS, problems=problems,
                            matching=matching, held=reserved, filters=filters, bulk_route="jobs_bulk")

    async def bulk(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            problems: list[str] = []
            search, _ = job_search(form, problems)
            action = form.get("action")
            if problems:
                raise QueueConfigurationError("; ".join(problems) + "; nothing was changed")
            if action not in ("cancel", "delete"):
                raise QueueConfigurationError(f"unknown bulk action {action!r} (cancel or delete); nothing was changed")
            ids = None
            if form.getlist("id"):
                ids = selected_ids(form)
            done = await batches(lambda: self.store_bulk(action, search, ids))
            verb = "cancelled" if action == "cancel" else "deleted"
            note = f"{verb} {done:,} job{'' if done == 1 else 's'}"
            if done >= BULK_LIMIT:
                note += f" (at most {BULK_LIMIT:,} per click: more may match, run it again)"
            if action == "delete":
                note += "; jobs a worker holds are not deleted (cancel them)"
            return note
        return await dash.action(request, run)

    async def store_bulk(self, action: str, search: JobSearch, ids: list[uuid.UUID] | None) -> int:
        dash = self.dash
        store = await dash.store()
        return await store.jobs_bulk("cancel" if action == "cancel" else "delete", search, ids, BATCH)

    async def detail(self, request: Request) -> Response:
        dash = self.dash
        try:
            job_id = uuid.UUID(request.path_params["job_id"])
        except ValueError:
            return dash.missing(request, "jobs", "job", request.path_params["job_id"])
        store = await dash.store()
        row = await store.job_find(job_id)
        failures = await store.job_failures(job_id, 20)
        family = await store.job_family(job_id)  # issue 26: what it waits for, what waits for it, its batch
        succeeded = None
        if row is None and not failures:
            if await store.failed_find(job_id) is not None:  # a failure's id, pasted into the address
                return RedirectResponse(url(request, "failure", {"failure_id": job_id}, given="failure"),
                                        status_code=303)
            # Issue 26: an acked job is shown while something of it is kept (its result or copy, or
            # its links: a chain's line stays whole); otherwise pgqueue knows nothing of it.
            succeeded = await store.job_state(job_id)
            if succeeded is None and not family:
                return dash.missing(request, "jobs", "job", job_id)
        if row is not None:
            envelope, secrets = dash.redactor.envelope(row["envelope"])
        elif not failures:
            envelope, secrets = None, []
        else:
            # The job is only in failed_jobs: its name and args are those of its latest failure.
            latest = await store.failed_find(failures[0]["id"])
            envelope, secrets = dash.redactor.envelope(latest["envelope"] if latest else None)
        name = envelope.get("name") if isinstance(envelope, dict) else (succeeded or {}).get("name")
        return dash.render(request, "job.html", page="jobs", job=row, job_id=job_id, envelope=envelope,
                           succeeded=succeeded,
                           parents=[(other, is_open) for kind, other, is_open in family if kind == "parent"],
                           children=[(other, is_open) for kind, other, is_open in family if kind == "child"],
                           chain=await batch_pages.chain_of(store, job_id, family),
                           batch=await store.batch_state(job_id) if any(k == "batch" for k, _, _ in family) else None,
                           name=str(name) if name else None,
                           # issue 27: a workflow's job links its timeline; a child its workflow's.
                           workflow=isinstance(envelope, dict) and "workflow" in envelope,
                           parent_workflow=await store.workflow_of_child(job_id),
                           args=envelope.get("args") if isinstance(envelope, dict) else None,
                           masked=sorted(dash.redactor.fields(name if isinstance(name, str) else None)),
                           failures=dash.masked_failures(failures),
                           # Without its envelope, the values its args hold secret could not be masked.
                           attempts=None if envelope is None else await dash.attempts(job_id, secrets))

    async def cancel_one(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            job_id = request.path_params["job_id"]
            outcome = await dash.client.cancel(job_id, connection=dash.options.connection)
            return f"job {job_id} {OUTCOMES.get(outcome, outcome)}"
        return await dash.action(request, run)

    async def cancel_selected(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            ids = selected_ids(form)
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

    async def delete_selected(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            ids = selected_ids(form)
            done = await (await dash.store()).jobs_bulk("delete", JobSearch(), ids, min(len(ids), BATCH))
            note = f"deleted {done} of {len(ids)} selected jobs"
            if done < len(ids):
                note += f"; {len(ids) - done} were held by a worker (cancel those) or were gone already"
            return note
        return await dash.action(request, run)


def routes(dash: Dashboard) -> list[BaseRoute]:
    """``/jobs`` (search) and ``/jobs/{job_id}`` (one job, live or only in failed_jobs)."""
    pages = JobPages(dash)
    return [
        Route("/jobs", pages.listing, name="jobs"),
        Route("/jobs/cancel-selected", pages.cancel_selected, methods=["POST"], name="jobs_cancel_selected"),
        Route("/jobs/delete-selected", pages.delete_selected, methods=["POST"], name="jobs_delete_selected"),
        Route("/jobs/bulk", pages.bulk_confirm, name="jobs_bulk_confirm"),
        Route("/jobs/bulk", pages.bulk, methods=["POST"], name="jobs_bulk"),
        Route("/jobs/{job_id}", pages.detail, name="job"),
        Route("/jobs/{job_id}/cancel", pages.cancel_one, methods=["POST"], name="job_cancel"),
        *batch_pages.routes(dash),
    ]

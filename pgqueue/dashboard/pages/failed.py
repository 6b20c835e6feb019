"""Failed jobs: a filtered, keyset-paged list, a failure in full, and retry / forget / flush."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pgqueue import QueueError, QueueRetryError
from pgqueue.dashboard.core import Dashboard, NavItem, text_filters
from pgqueue.dashboard.counting import count_queues
from pgqueue.dashboard.search import BATCH, BULK_LIMIT, COUNT_CAP, confirm_bulk, failure_search
from pgqueue.store import FailureSearch

NAV = NavItem("Failed jobs", "/failed", "failed")

# The reasons pgqueue.failed_jobs accepts: its check constraint (revision 0004 added cancelled, 0009
# dependency_failed); a test compares the two, so a reason a revision adds is offered here too.
REASONS = ("exception", "attempts_exhausted", "deadline_passed", "lease_expired_after_final_attempt",
           "payload_invalid", "unknown_job", "failed_by_handler", "cancelled", "result_invalid", "dependency_failed")
#: What "all matching" can do, as the confirmation says it.
BULK_ACTIONS = {
    "retry": "Retry: each failure still within its deadline is put back on its queue (same job id and args).",
    "forget": "Forget: the failure records are deleted; this cannot be undone.",
}
# How many failures one "retry selected" may name: one page's worth, with room to spare.
MAX_SELECTED = 500


def parse_cursor(text: str | None) -> tuple[datetime, uuid.UUID] | None:
    """A page cursor ``<failed_at ISO>_<failure id>`` (made by :func:`cursor`)."""
    if not text:
        return None
    moment, _, failure_id = text.rpartition("_")
    return datetime.fromisoformat(moment), uuid.UUID(failure_id)


def cursor(failed_at: datetime, failure_id: uuid.UUID) -> str:
    """The cursor of a position in the list (the last row seen)."""
    return f"{failed_at.isoformat()}_{failure_id}"


def parse_ids(values: list[Any]) -> list[uuid.UUID]:
    """The failure ids ticked in the list (raises QueueRetryError naming a malformed one)."""
    ids = []
    for value in values[:MAX_SELECTED + 1]:
        try:
            ids.append(uuid.UUID(str(value)))
        except ValueError:
            raise QueueRetryError(f"{value!r} is not a failure id; nothing was changed") from None
    if len(ids) > MAX_SELECTED:
        raise QueueRetryError(f"select at most {MAX_SELECTED} failures at once; nothing was changed")
    return ids


def bulk_filters(params: Any, problems: list[str]) -> tuple[FailureSearch, dict[str, str]]:
    """The failures an "all matching" action names (the list's filters) and the filters as given;
    each unusable one is named in ``problems``."""
    filters = text_filters(params, {"queue": "queue", "name": "job name", "reason": "reason", "since": "'from'",
                                    "until": "'to'"}, problems)
    reason = filters["reason"] or None
    if reason is not None and reason not in REASONS:
        problems.append(f"unknown reason {reason!r}; it was ignored")
        reason = None
    return failure_search(filters, reason, problems), filters


class FailedPages:
    """The failed-jobs pages and actions of one dashboard (each method a route's endpoint)."""

    def __init__(self, dash: Dashboard) -> None:
        self.dash = dash

    async def listing(self, request: Request) -> Response:
        dash = self.dash
        params = request.query_params
        problems: list[str] = []
        search, filters = bulk_filters(params, problems)
        since, until, reason = search.since, search.until, search.reason
        after = None
        try:
            after = parse_cursor(params.get("after"))
        except ValueError:
            problems.append("the page position in the address is malformed; showing the newest failures")
        size = dash.options.page_size
        narrowing = bool(filters["name"] or reason)
        store = await dash.store()
        # Without a name or reason filter every row read is a match: read one page, not a whole scan.
        page = await store.failed_page(queue=filters["queue"] or None, name=filters["name"] or None,
                                       reason=reason, since=since, until=until, after=after,
                                       scan=dash.options.scan_limit if narrowing else size + 1, limit=size + 1)
        rows = page.rows[:size]
        next_cursor = None
        searched_only = False
        if len(page.rows) > size:
            next_cursor = cursor(rows[-1]["failed_at"], rows[-1]["id"])
        elif narrowing and page.scanned >= dash.options.scan_limit and page.last is not None:
            # The scan stopped before the page filled: the next page continues the search.
            next_cursor = cursor(page.last[0], page.last[1])
            searched_only = True
        # The list shows no args, but a message may quote a masked one.
        rows = dash.masked_failures(rows)
        total = (await count_queues(dash)).of(filters["queue"] or None)["failed"]
        return dash.render(
            request, "failed.html", page="failed", rows=rows, filters=filters, reasons=REASONS, reason=reason,
            problems=problems, next_cursor=next_cursor, searched_only=searched_only, scanned=page.scanned,
            first_page=after is None, total=total,
            here=str(request.url.path) + (
                f"?{request.url.query}" if request.url.query else ""),
        )

    async def detail(self, request: Request) -> Response:
        dash = self.dash
        try:
            failure_id = uuid.UUID(request.path_params["failure_id"])
        except ValueError:
            return dash.missing(request, "failed", "failure", request.path_params["failure_id"])
        store = await dash.store()
        row = await store.failed_find(failure_id)
        if row is None:
            return dash.missing(request, "failed", "failure", failure_id)
        envelope, secrets = dash.redactor.envelope(row["envelope"])
        live = await store.job_find(row["job_id"])
        return dash.render(
            request, "failure.html", page="failed", failure=row, envelope=envelope,
            name=str(row["envelope"].get("name", "?")) if isinstance(row["envelope"], dict) else "?",
            args=envelope.get("args") if isinstance(envelope, dict) else None,
            message=dash.redactor.text(row["message"], secrets),
            traceback=dash.redactor.text(row["traceback"], secrets),
            attempts=await dash.attempts(row["job_id"], secrets), live=live,
            given=request.query_params.get("given"),
            masked=sorted(dash.redactor.fields(envelope.get("name") if isinstance(envelope, dict) else None)),
        )

    async def bulk_confirm(self, request: Request) -> Response:
        dash = self.dash
        # Step one of "all matching": the count, and a form that confirms it (step two, POST).
        problems: list[str] = []
        search, filters = bulk_filters(request.query_params, problems)
        matching, retryable = await (await dash.store()).failed_matching_count(search, COUNT_CAP)
        return confirm_bulk(dash, request, page="failed", what="failures", actions=BULK_ACTIONS, problems=problems,
                            matching=matching, held=retryable, filters=filters, bulk_route="failed_bulk")

    async def bulk(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            problems: list[str] = []
            search, _ = bulk_filters(form, problems)
            action = form.get("action")
            if problems:
                raise QueueRetryError("; ".join(problems) + "; nothing was changed")
            if action not in ("retry", "forget"):
                raise QueueRetryError(f"unknown bulk action {action!r} (retry or forget); nothing was changed")
            store = await dash.store()
            done = 0
            while done < BULK_LIMIT:
                count = await store.failed_bulk("retry" if action == "retry" else "forget", search, BATCH)
                done += count
                if count < BATCH:
                    break
            note = f"{'retried' if action == 'retry' else 'forgot'} {done:,} failure{'' if done == 1 else 's'}"
            if action == "retry":
                note += " (failures past their deadline, or whose job is queued again, are left)"
            if done >= BULK_LIMIT:
                note += f"; at most {BULK_LIMIT:,} per click: more may match, run it again"
            return note
        return await dash.action(request, run)

    async def retry_one(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            failure_id = request.path_params["failure_id"]
            job_id = await dash.client.retry_failed(failure_id, connection=dash.options.connection)
            return f"retried failure {failure_id}: job {job_id} is ready on its queue again"
        return await dash.action(request, run)

    async def forget_one(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            failure_id = request.path_params["failure_id"]
            try:
                uuid.UUID(failure_id)
            except ValueError:
                raise QueueRetryError(f"{failure_id!r} is not a failure id; nothing was forgotten") from None
            repository = await dash.client.failed(dash.options.connection)
            if not await repository.forget(failure_id):
                return f"failure {failure_id} was already gone"
            return f"forgot failure {failure_id}"
        return await dash.action(request, run)

    async def retry_selected(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            ids = parse_ids(form.getlist("id"))
            if not ids:
                raise QueueRetryError("no failure was selected; tick the ones to retry")
            retried, refused = 0, []
            for failure_id in ids:
                try:
                    await dash.client.retry_failed(failure_id, connection=dash.options.connection)
                    retried += 1
                except QueueError as exc:
                    refused.append(str(exc))
            note = f"retried {retried} of {len(ids)} selected failures"
            if refused:
                note += f"; not retried: {'; '.join(refused[:3])}" + (" …" if len(refused) > 3 else "")
            return note
        return await dash.action(request, run)

    async def forget_selected(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            ids = parse_ids(form.getlist("id"))
            if not ids:
                raise QueueRetryError("no failure was selected; tick the ones to forget")
            repository = await dash.client.failed(dash.options.connection)
            forgotten = sum([await repository.forget(failure_id) for failure_id in ids])
            return f"forgot {forgotten} of {len(ids)} selected failures"
        return await dash.action(request, run)

    async def flush(self, request: Request) -> Response:
        dash = self.dash
        async def run(form: FormData) -> str:
            queue = form.get("queue")
            queue = queue.strip() if isinstance(queue, str) and queue.strip() else None
            if queue is not None and "\x00" in queue:
                raise QueueRetryError(f"queue {queue!r} contains a NUL character, which no queue name can hold; "
                                      "nothing was flushed")
            repository = await dash.client.failed(dash.options.connection)
            removed = await repository.flush(queue)
            return f"flushed {removed:,} failures" + (f" of queue {queue!r}" if queue else " (every queue)")
        return await dash.action(request, run)


def routes(dash: Dashboard) -> list[BaseRoute]:
    """The list, one failure, and the actions (POST, CSRF-checked, refused when read-only)."""
    pages = FailedPages(dash)
    return [
        Route("/failed", pages.listing, name="failed"),
        Route("/failed/retry-selected", pages.retry_selected, methods=["POST"], name="failed_retry_selected"),
        Route("/failed/forget-selected", pages.forget_selected, methods=["POST"], name="failed_forget_selected"),
        Route("/failed/flush", pages.flush, methods=["POST"], name="failed_flush"),
        Route("/failed/bulk", pages.bulk_confirm, name="failed_bulk_confirm"),
        Route("/failed/bulk", pages.bulk, methods=["POST"], name="failed_bulk"),
        Route("/failed/{failure_id}", pages.detail, name="failure"),
        Route("/failed/{failure_id}/retry", pages.retry_one, methods=["POST"], name="failure_retry"),
        Route("/failed/{failure_id}/forget", pages.forget_one, methods=["POST"], name="failure_forget"),
    ]

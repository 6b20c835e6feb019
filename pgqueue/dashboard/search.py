"""The search filters of the Jobs and Failed jobs pages, parsed from the query string or a form, and
the bulk actions on "all matching" (issue 29): each done in the database in bounded batches."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from pgqueue.dashboard.core import Dashboard, text_filters, url
from pgqueue.store import FailureSearch, JobSearch

__all__ = ["BATCH", "BULK_LIMIT", "COUNT_CAP", "JOB_FILTERS", "STATES", "confirm_bulk", "failure_search",
           "job_search", "parse_args", "parse_moment"]

#: The states a job can be searched by (pgqueue.jobs_matching; blocked: waiting for parents or a batch).
STATES = ("ready", "delayed", "blocked", "reserved", "expired")
#: The job search's fields and how a problem names them.
JOB_FILTERS = {"queue": "queue", "name": "job name", "args": "args", "state": "state", "since": "'from'",
               "until": "'to'"}
#: Rows per call of a bulk function (one short transaction each).
BATCH = 500
#: Rows one click of a bulk action handles at most; the page says when more remain.
BULK_LIMIT = 10_000
#: The confirmation page counts matches up to this (more: "more than").
COUNT_CAP = 10_000


def parse_moment(text: str | None) -> datetime | None:
    """A filter time from the form (``YYYY-MM-DD[ HH:MM[:SS]]``, UTC unless it says otherwise)."""
    if not text:
        return None
    moment = datetime.fromisoformat(text.strip().replace(" ", "T").removesuffix("Z"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_args(text: str) -> dict[str, Any] | None:
    """The args filter: a JSON object the args must contain (``{"to": "a@example.com"}``), or
    ``key=value`` pairs separated by spaces or commas (a value that reads as JSON, such as ``42``,
    ``true`` or ``"42"``, is that value; any other is text). Raises ValueError naming what is wrong."""
    text = text.strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            found = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"args {text!r} is not a JSON object ({exc.msg} at character {exc.pos})") from None
        if not isinstance(found, dict):
            raise ValueError(f"args {text!r} is not a JSON object")
        return found
    pairs: dict[str, Any] = {}
    for part in text.replace(",", " ").split():
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ValueError(f"args {text!r}: {part!r} is not key=value (or give a JSON object, "
                             '{"key": "value"})')
        try:
            pairs[key] = json.loads(value)
        except json.JSONDecodeError:
            pairs[key] = value
    return pairs


def job_search(params: Mapping[str, Any], problems: list[str]) -> tuple[JobSearch, dict[str, str]]:
    """The job search of a query string or form, and its fields as typed (for the form and links); a
    field that cannot be read is named in ``problems`` and ignored."""
    filters = text_filters(params, JOB_FILTERS, problems)
    args = None
    try:
        args = parse_args(filters["args"])
    except ValueError as exc:
        problems.append(f"{exc}; that filter was ignored")
    state = filters["state"] or None
    if state is not None and state not in STATES:
        problems.append(f"unknown state {state!r} (one of {', '.join(STATES)}); it was ignored")
        state = None
    since, until = moments(filters, problems)
    return JobSearch(queue=filters["queue"] or None, name=filters["name"] or None, args=args, state=state,
                     since=since, until=until), filters


def failure_search(filters: Mapping[str, str], reason: str | None, problems: list[str]) -> FailureSearch:
    """The failed jobs' filters (already read by the page) as a search."""
    since, until = moments(filters, problems)
    return FailureSearch(queue=filters.get("queue") or None, name=filters.get("name") or None, reason=reason,
                         since=since, until=until)


def moments(filters: Mapping[str, str], problems: list[str]) -> tuple[datetime | None, datetime | None]:
    """The 'from' and 'to' times of the filters (a malformed one named in ``problems`` and ignored)."""
    found: list[datetime | None] = []
    for key, label in (("since", "'from'"), ("until", "'to'")):
        try:
            found.append(parse_moment(filters.get(key)))
        except ValueError:
            problems.append(f"{label} {filters.get(key)!r} is not a time (YYYY-MM-DD HH:MM, UTC); it was ignored")
            found.append(None)
    return found[0], found[1]


def is_narrowed(search: JobSearch) -> bool:
    """Whether the search filters anything (else the newest jobs are a page of the table)."""
    return any(v is not None for v in (search.queue, search.name, search.args, search.state, search.since,
                                       search.until))


def confirm_bulk(dash: Dashboard, request: Request, *, page: str, what: str, actions: Mapping[str, str],  # noqa: PLR0913  # the confirmation page's parts
                 problems: list[str], matching: int, held: int, filters: Mapping[str, str], bulk_route: str,
                 ) -> Response:
    """Step one of an "all matching" action on a list (``page``, its rows ``what``): the count of
    what matches and a form that confirms it (step two posts to ``bulk_route``). An unknown
    ``action`` parameter is named in ``problems``."""
    action = request.query_params.get("action")
    if action not in actions:
        problems.append(f"unknown bulk action {action!r} ({' or '.join(actions)})")
        action = None
    kept = {k: v for k, v in filters.items() if v}
    return dash.render(request, "bulk.html", page=page, what=what, action=action, problems=problems,
                       matching=matching, held=held, cap=COUNT_CAP, limit=BULK_LIMIT, kept=kept,
                       describe=actions.get(action or "", ""), post=url(request, bulk_route),
                       back=url(request, page, **kept))

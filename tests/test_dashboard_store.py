"""The store's reads for the dashboard (issue 16): bounded, and right.

Capped counts agree with pgqueue.queue_stats below the cap and say "capped" above it; keyset
pages over a bounded scan visit every matching row exactly once, in order, whatever the page
and scan sizes; one job shows its lease; listeners are the sessions that LISTEN.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from pgqueue import Client
from pgqueue.store import JobSearch, Store
from tests.dashboard_support import failure, seed
from tests.helpers import envelope
from tests.sql_calls import enqueue_many, reserve, rows, scalar
from tests.worker_support import settings_for


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[Store]:
    async with Client(settings=settings_for(dsn)) as client:
        yield Store(await client.pool())


async def test_capped_counts_match_queue_stats_below_the_cap(dsn: str, store: Store) -> None:
    seed(dsn)
    counts = {c.queue: c for c in await store.queue_counts(cap=1000, failed_cap=1000)}
    with psycopg.connect(dsn) as conn:
        exact = {r["queue"]: r for r in rows(conn, "select * from pgqueue.queue_stats")}
    assert set(counts) == set(exact) == {"emails", "reports", "accounts"}
    for name, row in exact.items():
        got = counts[name]
        assert (got.ready, got.delayed, got.reserved, got.expired, got.failed) == (
            row["ready"], row["delayed"], row["reserved"], row["expired"], row["failed"]), name
        assert not (got.due_capped or got.later_capped or got.failed_capped)
    assert counts["emails"].oldest_ready_age is not None and counts["emails"].oldest_ready_age >= 0
    assert counts["accounts"].oldest_ready_age is None


async def test_counts_above_the_cap_are_flagged_as_lower_bounds(dsn: str, store: Store) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Two priorities in one queue: each (queue, priority) range is capped on its own.
        enqueue_many(conn, [envelope("bulk", priority=p) for p in (0, 1) for _ in range(30)])
        enqueue_many(conn, [envelope("bulk") for _ in range(4)], delays=[3600.0] * 4)
        for _ in range(12):
            failure(conn, "bulk")
    [bulk] = await store.queue_counts(cap=10, failed_cap=10)
    assert bulk.due_capped and bulk.failed_capped and not bulk.later_capped
    assert bulk.ready == 22 and bulk.failed == 11  # cap + 1 read per range: "more than 10"
    assert bulk.delayed == 4
    [exact] = await store.queue_counts(cap=100, failed_cap=100)
    assert (exact.ready, exact.failed, exact.due_capped, exact.failed_capped) == (60, 12, False, False)


async def test_the_sample_estimates_counts_from_whole_pages(dsn: str, store: Store) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("big") for _ in range(3000)])
        enqueue_many(conn, [envelope("big") for _ in range(1000)], delays=[3600.0] * 1000)
    # A sample as large as the table reads all of it: exact.
    percent, found = await store.queue_sample(pages=100_000)
    assert percent == 100.0 and found == {"big": (3000, 1000, 0, 0, 0)}
    percent, found = await store.queue_sample(pages=5)
    assert 0 < percent < 100
    ready, delayed, _, _, _ = found.get("big", (0, 0, 0, 0, 0))
    assert ready + delayed <= 4000


async def test_failed_pages_visit_every_match_once_in_order(dsn: str, store: Store) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        made = [failure(conn, "q1" if i % 3 else "q2", name="a" if i % 2 else "b",
                        reason="exception" if i % 5 else "failed_by_handler") for i in range(40)]
        conn.execute("update pgqueue.failed_jobs set failed_at = now() - make_interval(secs => (random() * 3)::int)")
        expected = [r["id"] for r in rows(conn, "select id from pgqueue.failed_jobs where queue = 'q1' "
                                                "and envelope->>'name' = 'a' order by failed_at desc, id desc")]
    assert len(made) == 40 and expected
    for scan, limit in ((5, 3), (7, 50), (1000, 4)):
        seen: list[uuid.UUID] = []
        after = None
        rounds = 0
        while True:
            rounds += 1
            assert rounds < 100
            page = await store.failed_page(queue="q1", name="a", reason=None, since=None, until=None,
                                           after=after, scan=scan, limit=limit + 1)
            matches = page.rows[:limit]
            seen.extend(r["id"] for r in matches)
            if len(page.rows) > limit:
                after = (matches[-1]["failed_at"], matches[-1]["id"])
            elif page.scanned >= scan and page.last is not None:
                after = (page.last[0], page.last[1])
            else:
                break
        assert seen == expected, (scan, limit)
    # A window holding a whole page of matches is read no further than the page's last match.
    page = await store.failed_page(queue="q1", name="a", reason=None, since=None, until=None, after=None,
                                   scan=1000, limit=3)
    with psycopg.connect(dsn, autocommit=True) as conn:
        window = [r["id"] for r in rows(conn, "select id from pgqueue.failed_jobs where queue = 'q1' "
                                              "order by failed_at desc, id desc")]
    assert [r["id"] for r in page.rows] == expected[:3] and page.scanned == window.index(expected[2]) + 1


async def test_failed_page_filters_by_reason_and_time(dsn: str, store: Store) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        old = failure(conn, "q", reason="failed_by_handler")
        conn.execute("update pgqueue.failed_jobs set failed_at = now() - interval '2 days' where id = %s", (old,))
        new = failure(conn, "q", reason="failed_by_handler")
        other = failure(conn, "q", reason="exception")
        [now] = rows(conn, "select now() - interval '1 day' as t")
    page = await store.failed_page(queue=None, name=None, reason="failed_by_handler", since=now["t"], until=None,
                                   after=None, scan=100, limit=10)
    assert [r["id"] for r in page.rows] == [new]
    page = await store.failed_page(queue=None, name=None, reason=None, since=None, until=now["t"],
                                   after=None, scan=100, limit=10)
    assert [r["id"] for r in page.rows] == [old]
    assert other not in [r["id"] for r in page.rows]
    empty = await store.failed_page(queue="nope", name=None, reason=None, since=None, until=None, after=None,
                                    scan=100, limit=10)
    assert (empty.rows, empty.scanned, empty.last) == ([], 0, None)


async def test_jobs_pages_newest_first_by_queue_and_name(dsn: str, store: Store) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("a" if i % 2 else "b", name=f"n{i % 3}", job_id=_uuid7(i)) for i in range(30)])
        expected = [r["id"] for r in rows(conn, "select id from pgqueue.jobs where queue = 'a' "
                                                "and envelope->>'name' = 'n1' order by id desc")]
    seen: list[uuid.UUID] = []
    after = None
    while True:
        page = await store.jobs_page(queue="a", name="n1", after=after, scan=4, limit=3)
        seen.extend(r["id"] for r in page.rows[:2])
        if len(page.rows) > 2:
            after = page.rows[1]["id"]
        elif page.scanned >= 4 and page.last is not None:
            after = page.last[0]
        else:
            break
    assert seen == expected and len(expected) == 5
    assert {r["state"] for r in (await store.jobs_page(queue=None, name=None, after=None, scan=50,
                                                        limit=50)).rows} == {"ready"}


async def test_one_job_shows_its_lease_and_its_failures(dsn: str, store: Store) -> None:
    made = seed(dsn)
    assert made.reserved is not None and made.expired is not None
    held = await store.job_find(made.reserved)
    assert held is not None and held["state"] == "reserved" and held["token"] is not None
    assert 0 < held["lease_seconds_left"] <= 600 and held["attempts"] == 1
    stale = await store.job_find(made.expired)
    assert stale is not None and stale["state"] == "expired" and stale["lease_seconds_left"] < 0
    ready = await store.job_find(made.ready[0])
    assert ready is not None and ready["state"] == "ready" and ready["lease_seconds_left"] is None
    assert await store.job_find(uuid.uuid4()) is None
    failed = await store.failed_find(made.failures[0])
    assert failed is not None
    history = await store.job_failures(failed["job_id"], 5)
    assert [h["id"] for h in history] == [made.failures[0]]


async def test_listeners_are_the_sessions_that_listen(dsn: str, store: Store) -> None:
    assert await store.listeners() == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set application_name = 'w1'")
        conn.execute("listen pgqueue")
        [one] = await store.listeners()
        pid: Any = conn.info.backend_pid
    assert (one.pid, one.application_name) == (pid, "w1") and one.connected_seconds >= 0


async def test_estimates_are_none_until_analyzed(dsn: str, store: Store) -> None:
    seed(dsn)
    # The tables were created and filled, never analyzed (autovacuum waits for 10,000 changes).
    assert (await store.table_estimates())["jobs"] is None
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("analyze pgqueue.jobs")
    estimates = await store.table_estimates()
    assert estimates["jobs"] == 6


def _uuid7(i: int) -> uuid.UUID:
    """Time-ordered ids in dispatch order, as pgqueue.ids makes them."""
    return uuid.UUID(int=(1_700_000_000_000 + i) << 80 | 0x7 << 76 | 0b10 << 62 | i)


# --- issue 29: the operator's view ---
async def test_the_search_page_and_the_bulk_functions_agree_on_what_matches(dsn: str, store: Store) -> None:
    # dashboard_jobs_search.sql writes out pgqueue.jobs_matching's conditions (inline, for speed):
    # every search finds the very jobs the function (what bulk actions act on) matches.
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(40):
            enqueue_many(conn, [envelope(("emails", "reports")[i % 2], name=f"app:Send_{i % 3}",
                                         args={"to": f"u{i % 4}@example.com", "n": i % 5})],
                         delays=[3600.0 * (i % 2)])
        reserve(conn, ["emails"], 3)
        # Issue 26: four jobs wait for a parent (blocked, not delayed).
        parent = scalar(conn, "select id from pgqueue.jobs where token is null and available_at <= now()"
                              " order by created_at limit 1")
        waiting = [r[0] for r in conn.execute("select id from pgqueue.jobs where token is null and available_at"
                                              " <= now() and id <> %s order by created_at limit 4",
                                              (parent,)).fetchall()]
        conn.execute("select pgqueue.add_dependencies(%s::uuid[], array[%s]::uuid[], 'cancel')", (waiting, parent))
        # The 21st dispatched (by created_at: the ids are random, so not by id).
        middle = scalar(conn, "select created_at from pgqueue.jobs order by created_at offset 20 limit 1")
    searches = [JobSearch(), JobSearch(queue="emails"), JobSearch(name="send_1"),
                JobSearch(args={"to": "u1@example.com"}), JobSearch(args={"n": 2}, state="delayed"),
                JobSearch(state="reserved"), JobSearch(state="ready"), JobSearch(state="blocked"),
                JobSearch(state="delayed"), JobSearch(state="blocked", queue="emails"),
                JobSearch(since=middle), JobSearch(until=middle, name="SEND", queue="reports")]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for search in searches:
            page = await store.jobs_search(search, after=None, scan=1000, limit=1000)
            p = search.params()
            expected = [r["id"] for r in rows(conn, "select j.id from pgqueue.jobs j where pgqueue.jobs_matching("
                                                    "j, %(queue)s, %(name)s, %(args)s, %(state)s, %(since)s, %(until)s)"
                                                    " order by j.id desc", p)]
            assert [r["id"] for r in page.rows] == expected, search
            assert (await store.jobs_matching_count(search, 1000))[0] == len(expected), search
            # A window holding a whole page of matches is left at the page's last match: the same rows,
            # as many rows read as it took (dashboard_jobs_search.sql reads no further).
            first = await store.jobs_search(search, after=None, scan=1000, limit=3)
            assert [r["id"] for r in first.rows] == expected[:3], search
            assert first.rows == page.rows[:3], search
            if len(expected) >= 3:
                assert first.scanned == 1 + scalar(conn, "select count(*) from pgqueue.jobs where id > %s",
                                                   (expected[2],)), search
    assert len(expected) > 0
    blocked = await store.jobs_search(JobSearch(state="blocked"), after=None, scan=1000, limit=1000)
    assert sorted(r["id"] for r in blocked.rows) == sorted(waiting)
    assert {r["state"] for r in blocked.rows} == {"blocked"}
    delayed = await store.jobs_search(JobSearch(state="delayed"), after=None, scan=1000, limit=1000)
    assert not set(waiting) & {r["id"] for r in delayed.rows}
    listed = await store.jobs_page(queue=None, name=None, after=None, scan=1000, limit=1000)
    assert {r["id"] for r in listed.rows if r["state"] == "blocked"} == set(waiting)


async def test_the_attempt_history_is_newest_first_bounded_and_counted(dsn: str, store: Store) -> None:
    made = seed(dsn)
    failed = await store.failed_find(made.failures[0])
    assert failed is not None
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = conn.execute("select pgqueue.retry_failed(%s)", (made.failures[0],)).fetchone()
        assert job_id is not None and job_id[0] == failed["job_id"]
        for _ in range(2):
            [held] = reserve(conn, ["emails"], 1)
            conn.execute("select pgqueue.release(%s, %s, 0, 0.25, 0, %s::jsonb)",
                         (held["id"], held["token"], '{"exception": "E", "message": "again", "worker": "w"}'))
    history = await store.job_attempt_history(failed["job_id"], 2, 100)
    assert history.total == 3 and [(r["attempt"], r["reason"]) for r in history.rows] == [(2, "retried"),
                                                                                          (1, "retried")]
    assert history.rows[0]["message"] == "again" and history.rows[0]["worker"] == "w"
    assert history.rows[0]["duration"] == 0.25 and history.rows[0]["message_cut"] is False
    assert (await store.job_attempt_history(failed["job_id"], 5, 2)).total == 3  # never below the rows read
    assert (await store.job_attempt_history(uuid.uuid4(), 5, 100)).total == 0


async def test_a_blocked_job_is_counted_apart_from_delayed(dsn: str, store: Store) -> None:
    """Issue 26: waiting for a parent (available_at = pgqueue.never()) is blocked, in the exact counts
    (capped like the others) and in the sample."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("deps") for _ in range(5)], delays=[0.0, 3600.0, 0.0, 0.0, 0.0])
        first, *rest = (r[0] for r in conn.execute("select id from pgqueue.jobs where available_at <= now()"
                                                   " order by id").fetchall())
        conn.execute("select pgqueue.add_dependencies(%s::uuid[], array[%s]::uuid[], 'cancel')", (rest, first))
    [counts] = await store.queue_counts(cap=100, failed_cap=100)
    assert (counts.ready, counts.delayed, counts.blocked, counts.blocked_capped) == (1, 1, 3, False)
    [capped] = await store.queue_counts(cap=2, failed_cap=100)
    assert capped.blocked == 3 and capped.blocked_capped and not capped.later_capped
    assert await store.queue_sample(pages=100_000) == (100.0, {"deps": (1, 1, 3, 0, 0)})

"""Issue 31 (revision 0015): ``pgqueue.reserve`` in reservations of hundreds of jobs, the size a worker
of concurrency 50 asks for. A grant's place in its batch decides what it gets: the order of the
result, ``prefetched`` past ``run_now`` (on a final try), and past a limited queue's free slots
``waiting`` and the slot it is an heir in. Revision 0015 learns that place from the batch's
ordinality (joined by id) instead of a search of the batch per row; these tests hold it to the same
answers across candidates that are moved to failed_jobs mid-batch (the reservation then looks at
the priority again, and the places go on from where the first pass ended).

Time is simulated by moving ``available_at`` and ``retry_until`` (database clock), never by sleeping.
"""

from __future__ import annotations

import uuid

from tests.helpers import envelope
from tests.sql_calls import Conn, Row, enqueue_many, rows, scalar
from tests.test_slot_handover import limited


def due_in_order(conn: Conn, queue: str, count: int, *, tries: int = 3) -> list[uuid.UUID]:
    """``count`` jobs of ``queue``, due one second apart in the reverse order of their ids' insertion,
    so that the due order is neither the insert order nor the id order: their ids, oldest due first."""
    enqueue_many(conn, [envelope(queue, tries=tries) for _ in range(count)])
    ids: list[uuid.UUID] = [r["id"] for r in rows(
        conn, "select id from pgqueue.jobs where queue = %s order by id", (queue,))]
    order = ids[::-1]
    conn.execute(b"update pgqueue.jobs j set available_at = now() - make_interval(secs => 100000 - o.n) "
                 b"from unnest(%s::uuid[]) with ordinality o(id, n) where j.id = o.id", (order,))
    return order


def doom(conn: Conn, job_ids: list[uuid.UUID]) -> None:
    """Their retry_until passed: a reservation moves them to failed_jobs instead of granting them."""
    conn.execute(b"update pgqueue.jobs set retry_until = now() - interval '1 second' where id = any(%s)",
                 (job_ids,))


def reserve(conn: Conn, queue: str, max_jobs: int, run_now: int, heirs: list[Row] | None = None) -> list[Row]:
    ids = None if heirs is None else [h["id"] for h in heirs]
    tokens = None if heirs is None else [h["token"] for h in heirs]
    return rows(conn, "select * from pgqueue.reserve(array[%s], %s, 60, %s, null, %s::uuid[], %s::bigint[])",
                (queue, max_jobs, run_now, ids, tokens))


def failed(conn: Conn) -> set[uuid.UUID]:
    return {r["job_id"] for r in rows(conn, "select job_id from pgqueue.failed_jobs")}


def test_a_batch_of_500_comes_in_due_order_and_is_prefetched_past_run_now_across_doomed_candidates(
        conn: Conn) -> None:
    due = due_in_order(conn, "big", 600, tries=1)  # every grant is a final try: prefetched applies
    doomed = due[6:520:7]
    doom(conn, doomed)
    grants = reserve(conn, "big", 500, run_now=120)
    # The first pass's 500 candidates lose 71 to failed_jobs; the next passes take the next ones (3 more doomed).
    expected = [j for j in due if j not in set(doomed)][:500]
    assert [g["id"] for g in grants] == expected
    assert [g["prefetched"] for g in grants] == [place > 120 for place in range(1, 501)]
    assert [g["waiting"] for g in grants] == [False] * 500
    assert [g["heir_of"] for g in grants] == [None] * 500
    last_place = due.index(expected[-1])
    assert failed(conn) == {d for d in doomed if due.index(d) < last_place}
    stored = {r["id"]: r for r in rows(conn, "select id, prefetched, attempts, token from pgqueue.jobs "
                                             "where token is not null")}
    assert {g["id"]: (g["prefetched"], g["attempts"], g["token"]) for g in grants} == {
        i: (r["prefetched"], r["attempts"], r["token"]) for i, r in stored.items()}


def test_heirs_past_the_free_slots_go_to_the_slots_named_in_order_across_doomed_candidates(conn: Conn) -> None:
    due = limited(conn, 550, concurrency=150)
    first = reserve(conn, "limited", 150, run_now=150)
    assert [g["id"] for g in first] == due[:150]
    later = due[150:]
    doomed = later[::10]
    doom(conn, doomed)
    # 300 heirs asked for: each slot named twice, the second half in reverse order.
    named = first + first[::-1]
    heirs = reserve(conn, "limited", 450, run_now=450, heirs=named)
    expected = [j for j in later if j not in set(doomed)][:300]
    assert [g["id"] for g in heirs] == expected
    assert [(g["waiting"], g["heir_of"]) for g in heirs] == [(True, n["id"]) for n in named]
    tokens = {r["id"]: r["heir_of_token"]
              for r in rows(conn, "select id, heir_of_token from pgqueue.jobs where heir_of is not null")}
    assert [tokens[g["id"]] for g in heirs] == [n["token"] for n in named]
    # The job that took a slot and its two heirs hold one slot: still 150 in use.
    assert scalar(conn, "select count(distinct (coalesce(heir_of, id), coalesce(heir_of_token, token))) "
                        "from pgqueue.jobs where queue = 'limited' and token is not null") == 150
    last_place = later.index(expected[-1])
    assert failed(conn) == {d for d in doomed if later.index(d) < last_place}

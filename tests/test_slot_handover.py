"""Issue 28, slot handover, on the bare stored functions: ``pgqueue.reserve``'s ``p_waiting`` grants
jobs beyond a limited queue's free slots (``waiting = true``, not counted in the limit), and
``pgqueue.hand_over``, run in the ack's transaction, gives a waiting job the slot of the job acked.

Time is simulated by moving ``available_at`` (database clock), never by sleeping.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.helpers import envelope
from tests.sql_calls import Conn, Row, ack, enqueue, expire_lease, job, rows, scalar

RUNNING = ("select count(*) from pgqueue.jobs where queue = %s and token is not null"
           " and available_at > clock_timestamp() and not waiting")


def reserve(conn: Conn, queue: str, max_jobs: int, waiting: list[int] | None) -> list[Row]:
    """pgqueue.reserve of ``queue`` (all run now), ``waiting`` as p_waiting: the grants in order."""
    return rows(conn, "select * from pgqueue.reserve(array[%s], %s, 60, %s, %s::integer[])",
                (queue, max_jobs, max_jobs, waiting))


def hand_over(conn: Conn, pairs: list[tuple[uuid.UUID | None, Row]]) -> list[bool]:
    """pgqueue.hand_over of (from id or None for a claim, waiting grant) pairs: handed, in order."""
    found = rows(conn, "select id, handed from pgqueue.hand_over(%s::uuid[], %s::uuid[], %s::bigint[])",
                 ([f for f, _ in pairs], [w["id"] for _, w in pairs], [w["token"] for _, w in pairs]))
    assert [r["id"] for r in found] == [w["id"] for _, w in pairs]
    return [r["handed"] for r in found]


def acked(conn: Conn, *grants: Row) -> None:
    """pgqueue.ack of ``grants``, every one accepted."""
    assert ack(conn, [g["id"] for g in grants], [g["token"] for g in grants]) == {g["id"]: True for g in grants}


def running(conn: Conn, queue: str = "limited") -> int:
    """The queue's reservations the concurrency limit counts (live, not waiting)."""
    count: int = scalar(conn, RUNNING, (queue,))
    return count


def limited(conn: Conn, jobs: int, concurrency: int, queue: str = "limited") -> list[uuid.UUID]:
    """``jobs`` jobs in a queue of that concurrency limit, due one second apart: ids, oldest due first."""
    conn.execute(b"select pgqueue.set_limits(%s, %s, null, null)", (queue, concurrency))
    ids = [enqueue(conn, envelope(queue)) for _ in range(jobs)]
    # Due in the reverse order of creation, so the grant order is the due order, not the insert order.
    for n, job_id in enumerate(reversed(ids)):
        conn.execute(b"update pgqueue.jobs set available_at = now() - make_interval(secs => %s) where id = %s",
                     (100_000 - n, job_id))
    return ids[::-1]


def waiting_of(conn: Conn, job_id: uuid.UUID) -> bool | None:
    found = job(conn, job_id)
    return None if found is None else bool(found["waiting"])


# --------------------------------------------------------------------------- reserve


def test_slotted_grants_come_first_then_waiting_ones_in_due_order(conn: Conn) -> None:
    due = limited(conn, 6, concurrency=2)
    grants = reserve(conn, "limited", 10, [3])
    assert [g["id"] for g in grants] == due[:5]
    assert [g["waiting"] for g in grants] == [False, False, True, True, True]
    assert [waiting_of(conn, j) for j in due] == [False, False, True, True, True, False]
    # Waiting grants are leased like any other: a token, an attempt, a live lease.
    assert all(g["token"] is not None and g["attempts"] == 1 and g["lease_seconds_left"] > 0 for g in grants)
    assert job(conn, due[5])["token"] is None  # type: ignore[index]


def test_the_limit_does_not_count_waiting_jobs_and_a_second_reserver_gets_no_slot(conn: Conn) -> None:
    due = limited(conn, 8, concurrency=2)
    reserve(conn, "limited", 4, [2])
    assert running(conn) == 2
    assert scalar(conn, "select count(*) from pgqueue.jobs where token is not null") == 4
    # Full: another reserver gets no slot, only waiting grants if it asks for them.
    assert reserve(conn, "limited", 5, None) == []
    assert reserve(conn, "limited", 5, [0]) == []
    other = reserve(conn, "limited", 5, [1])
    assert [(g["id"], g["waiting"]) for g in other] == [(due[4], True)]
    assert running(conn) == 2


def test_without_p_waiting_nothing_is_granted_beyond_the_limit(conn: Conn) -> None:
    due = limited(conn, 5, concurrency=2)
    first = reserve(conn, "limited", 10, None)
    assert [(g["id"], g["waiting"]) for g in first] == [(due[0], False), (due[1], False)]
    assert reserve(conn, "limited", 10, [0]) == []
    assert rows(conn, "select * from pgqueue.reserve(array['limited'], 10, 60)") == []
    assert rows(conn, "select * from pgqueue.reserve(array['limited'], 10, 60, 10)") == []
    assert scalar(conn, "select count(*) from pgqueue.jobs where token is not null or waiting") == 2


def test_a_queue_without_a_concurrency_limit_or_served_by_partition_grants_no_waiting_job(conn: Conn) -> None:
    for _ in range(4):
        enqueue(conn, envelope("free"))
    assert [g["waiting"] for g in reserve(conn, "free", 10, [5])] == [False] * 4
    # A rate limit only: no concurrency limit, no waiting grant.
    conn.execute(b"select pgqueue.set_limits('rated', null, 100, 1)")
    for _ in range(3):
        enqueue(conn, envelope("rated"))
    assert [g["waiting"] for g in reserve(conn, "rated", 10, [5])] == [False] * 3
    # Served by partition, with a queue limit of 1: one grant, never a waiting one.
    conn.execute(b"select pgqueue.set_limits('tenants', 1, null, null)")
    conn.execute(b"select pgqueue.set_partition_limits('tenants', 2, null, null)")
    for tenant in "abcabc":
        enqueue(conn, envelope("tenants") | {"partition": tenant})
    assert [g["waiting"] for g in reserve(conn, "tenants", 10, [5])] == [False]
    assert reserve(conn, "tenants", 10, [5]) == []
    assert scalar(conn, "select count(*) from pgqueue.jobs where waiting") == 0


def test_p_waiting_must_give_one_count_of_zero_or_more_per_queue(conn: Conn) -> None:
    limited(conn, 2, concurrency=1)
    for waiting in ([1, 1], [-1], [None]):
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(b"select * from pgqueue.reserve(array['limited'], 5, 60, 5, %s::integer[])", (waiting,))
        assert caught.value.sqlstate == "22023"
        assert "waiting must give a count >= 0 for each of the 1 queues" in str(caught.value)
    assert scalar(conn, "select count(*) from pgqueue.jobs where token is not null") == 0


def test_a_waiting_job_whose_lease_expires_is_reserved_again_like_any_other(conn: Conn) -> None:
    due = limited(conn, 2, concurrency=1)
    first, waiter = reserve(conn, "limited", 2, [1])
    assert waiter["waiting"]
    expire_lease(conn, waiter["id"])
    # Still full (the running job holds the only slot): the expired waiter is not granted a slot.
    assert reserve(conn, "limited", 2, None) == []
    acked(conn, first)
    [again] = reserve(conn, "limited", 2, None)
    assert again["id"] == due[1] and not again["waiting"] and again["token"] != waiter["token"]
    assert again["attempts"] == 2
    assert running(conn) == 1
    # The old token hands nothing over any more.
    with conn.transaction():
        assert hand_over(conn, [(None, waiter)]) == [False]


# --------------------------------------------------------------------------- hand_over


def test_hand_over_after_the_ack_in_one_transaction_keeps_the_count(conn: Conn) -> None:
    limited(conn, 4, concurrency=2)
    a, _, c, d = reserve(conn, "limited", 4, [2])
    with conn.transaction():
        acked(conn, a)
        assert hand_over(conn, [(a["id"], c)]) == [True]
        assert running(conn) == 2
    assert running(conn) == 2
    assert waiting_of(conn, c["id"]) is False and waiting_of(conn, d["id"]) is True
    assert job(conn, c["id"])["token"] == c["token"]  # type: ignore[index]
    # No slot left for anyone else.
    assert reserve(conn, "limited", 4, None) == []


def refusal(conn: Conn, refuse: str) -> None:
    """One refused handover (``refuse`` names why): handed = false and nothing changes."""
    limited(conn, 3, concurrency=2)
    a, _, c = reserve(conn, "limited", 3, [1])
    token = c["token"]
    with conn.transaction():
        if refuse != "from still there":
            acked(conn, a)
        if refuse == "paused":
            conn.execute(b"select pgqueue.pause('limited')")
        if refuse == "limit lowered":
            conn.execute(b"select pgqueue.set_limits('limited', 1, null, null)")
        if refuse == "lease ended":
            expire_lease(conn, c["id"])
        asked = c | {"token": token + 1} if refuse == "token mismatch" else c
        before = running(conn)
        assert hand_over(conn, [(a["id"], asked)]) == [False]
        assert running(conn) == before
    row = job(conn, c["id"])
    assert row is not None and row["waiting"] and row["token"] == token


@pytest.mark.parametrize("refuse", ["token mismatch", "lease ended", "from still there", "paused",
                                    "limit lowered"])
def test_a_refused_handover_says_so_and_changes_nothing(conn: Conn, refuse: str) -> None:
    refusal(conn, refuse)


def test_a_chain_of_acks_hands_each_slot_on(conn: Conn) -> None:
    limited(conn, 3, concurrency=1)
    a, b, c = reserve(conn, "limited", 3, [2])
    assert [a["waiting"], b["waiting"], c["waiting"]] == [False, True, True]
    with conn.transaction():
        # A ended, then B (started in A's slot) ended too, and C starts in B's slot.
        acked(conn, a, b)
        assert hand_over(conn, [(a["id"], b), (b["id"], c)]) == [True, True]
        assert running(conn) == 1
    assert waiting_of(conn, c["id"]) is False
    assert running(conn) == 1


def test_a_claim_is_granted_only_while_there_is_room_after_the_pairs_of_the_same_call(conn: Conn) -> None:
    limited(conn, 6, concurrency=2)
    a, b, c, d, e, f = reserve(conn, "limited", 6, [4])
    with conn.transaction():
        acked(conn, a)
        # One slot (a's): the pair takes it, though the claim comes first in the call.
        assert hand_over(conn, [(None, d), (a["id"], c)]) == [False, True]
        assert running(conn) == 2
    with conn.transaction():
        acked(conn, b, c)
        # Two free slots, three claims: the first two in call order.
        assert hand_over(conn, [(None, d), (None, e), (None, f)]) == [True, True, False]
        assert running(conn) == 2
    assert [waiting_of(conn, g["id"]) for g in (d, e, f)] == [False, False, True]
    # A gone job's claim is refused (a pair with it counts as handed: nothing counts it any more).
    with conn.transaction():
        acked(conn, d)
        assert hand_over(conn, [(None, d)]) == [False]
        assert hand_over(conn, [(e["id"], d)]) == [True]


def test_hand_over_wants_one_from_id_id_and_token_per_job(conn: Conn) -> None:
    limited(conn, 2, concurrency=1)
    _, w = reserve(conn, "limited", 2, [1])
    for p_from, ids, tokens in (([None, None], [w["id"]], [w["token"]]), ([None], [w["id"]], []),
                                ([], [w["id"]], [w["token"]])):
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(b"select * from pgqueue.hand_over(%s::uuid[], %s::uuid[], %s::bigint[])",
                         (p_from, ids, tokens))
        assert caught.value.sqlstate == "22023"
        assert (f"{len(p_from)} from ids, {len(ids)} ids and {len(tokens)} tokens: give one of each per job"
                in str(caught.value))
    assert waiting_of(conn, w["id"]) is True


def test_a_reservation_beside_an_open_claim_takes_no_slot(conn: Conn, dsn: str) -> None:
    """A claim locks its queue's row as a reservation does: a reservation while the claim's transaction
    is open skips the queue (SKIP LOCKED) instead of granting the same free slot."""
    limited(conn, 4, concurrency=1)
    first, mine, _ = reserve(conn, "limited", 3, [2])
    acked(conn, first)
    with psycopg.connect(dsn, autocommit=True) as other:
        with conn.transaction():
            assert hand_over(conn, [(None, mine)]) == [True]
            assert reserve(other, "limited", 1, None) == []
        assert running(conn) == 1
        assert reserve(other, "limited", 1, None) == []  # committed: the slot is the claim's


def test_a_claim_beside_an_open_claim_waits_for_it_and_finds_the_slot_taken(conn: Conn, dsn: str) -> None:
    limited(conn, 4, concurrency=1)
    first, mine, theirs = reserve(conn, "limited", 3, [2])
    acked(conn, first)
    answer: list[list[bool]] = []
    with psycopg.connect(dsn, autocommit=True) as other:
        with conn.transaction():
            assert hand_over(conn, [(None, mine)]) == [True]
            rival = threading.Thread(target=lambda: answer.append(hand_over(other, [(None, theirs)])))
            rival.start()
            # The rival waits on the queue's row until this transaction ends (it holds the lock).
            while not scalar(conn, "select count(*) from pg_locks where not granted and locktype = 'transactionid'"):
                rival.join(0.01)
        rival.join()
    assert answer == [[False]]
    assert running(conn) == 1


# --------------------------------------------------------------------------- concurrency

WORKERS = 8
JOBS = 300
LIMIT = 3


class Drainer:
    """One connection draining the queue as a worker would: reserve with p_waiting, then per ended job
    ack + hand_over in one transaction; waiting jobs left without a job to inherit from go back."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.acked: list[uuid.UUID] = []
        self.handed = 0
        self.max_seen = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                self.drain(conn)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def check(self, conn: Conn) -> None:
        self.max_seen = max(self.max_seen, running(conn))

    def drain(self, conn: Conn) -> None:
        while True:
            grants = reserve(conn, "limited", 2, [2])
            if not grants and not scalar(conn, "select count(*) from pgqueue.jobs"):
                return
            slotted = [g for g in grants if not g["waiting"]]
            waiting = [g for g in grants if g["waiting"]]
            handing = True
            while slotted:
                ended = slotted.pop(0)
                with conn.transaction():
                    acked(conn, ended)
                    self.acked.append(ended["id"])
                    if waiting and handing:
                        nxt = waiting.pop(0)
                        if hand_over(conn, [(ended["id"], nxt)]) == [True]:
                            self.handed += 1
                            slotted.append(nxt)
                        else:
                            # Refused: stop handing over; the slotted jobs left still end.
                            waiting.insert(0, nxt)
                            handing = False
                    self.check(conn)
            # Nothing left to inherit from (or refused): the waiting jobs go back unstarted.
            if waiting:
                conn.execute(b"select pgqueue.release_unstarted(%s::uuid[], %s::bigint[])",
                             ([g["id"] for g in waiting], [g["token"] for g in waiting]))


def run_drainers(dsn: str, drainers: list[Any], count: Callable[[Conn], int]) -> list[int]:
    """Run each drainer (``run()``, then ``error`` and ``acked``) in a thread of its own while another
    connection samples ``count`` over and over: the counts it saw. Every drainer finished, none failed."""
    stop = threading.Event()
    seen: list[int] = []

    def observe() -> None:
        with psycopg.connect(dsn, autocommit=True) as watcher:
            while not stop.is_set():
                seen.append(count(watcher))

    observer = threading.Thread(target=observe)
    threads = [threading.Thread(target=d.run) for d in drainers]
    observer.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    observer.join(30)
    assert not any(t.is_alive() for t in threads), "a drainer did not finish"
    errors: list[Any] = [d.error for d in drainers if d.error is not None]
    assert errors == []
    return seen


def test_concurrent_handovers_never_exceed_the_limit_and_ack_every_job_once(conn: Conn, dsn: str) -> None:
    ids = limited(conn, JOBS, concurrency=LIMIT)
    drainers = [Drainer(dsn) for _ in range(WORKERS)]
    seen = run_drainers(dsn, drainers, running)
    counts = Counter(i for d in drainers for i in d.acked)
    assert set(counts) == set(ids) and set(counts.values()) == {1}
    assert max(d.max_seen for d in drainers) <= LIMIT
    assert seen and max(seen) <= LIMIT
    assert sum(d.handed for d in drainers) > 0
    assert scalar(conn, "select count(*) from pgqueue.jobs") == 0

"""The reservation and the fence, tested on the bare stored functions.

Time is simulated by moving ``available_at`` with an UPDATE (database clock), never by
sleeping: a delayed job becomes due, a lease expires, the moment we say so.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from tests.helpers import envelope
from tests.sql_calls import (
    Conn,
    Row,
    ack,
    db_epoch,
    enqueue,
    enqueue_many,
    expire_lease,
    extend,
    fail,
    failures,
    job,
    jobs,
    make_due,
    release,
    reserve,
    rows,
    scalar,
)

# --------------------------------------------------------------------------- races


def test_concurrent_reservation_hands_each_job_to_exactly_one_holder(conn: Conn, dsn: str) -> None:
    total, holders, batch = 4000, 10, 25
    envelopes = [envelope("default") for _ in range(total)]
    for start in range(0, total, 1000):
        enqueue_many(conn, envelopes[start:start + 1000])

    granted: list[tuple[int, uuid.UUID, int, int]] = []  # (holder, job id, token, attempts)
    refused_acks: list[uuid.UUID] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start_together = threading.Barrier(holders)
    deadline = time.monotonic() + 120

    def holder(number: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as own:
                start_together.wait(timeout=30)
                while time.monotonic() < deadline:
                    got = reserve(own, ["default"], batch, 300)
                    if not got:
                        # Empty can mean "all left are locked by other holders right now":
                        # stop only once every job has been handed out.
                        with lock:
                            if len(granted) >= total:
                                return
                        continue
                    with lock:
                        granted.extend((number, r["id"], r["token"], r["attempts"]) for r in got)
                    result = ack(own, [r["id"] for r in got], [r["token"] for r in got])
                    with lock:
                        refused_acks.extend(i for i, ok in result.items() if not ok)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=holder, args=(n,)) for n in range(holders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not errors, errors
    ids = [g[1] for g in granted]
    tokens = [g[2] for g in granted]
    assert len(ids) == total, "a job was skipped or handed out twice"
    assert len(set(ids)) == total, "a job was handed to two holders"
    assert set(ids) == {uuid.UUID(e["id"]) for e in envelopes}
    assert len(set(tokens)) == total, "two reservations share a token"
    assert {g[3] for g in granted} == {1}
    assert refused_acks == []
    assert len({g[0] for g in granted}) > 1, "only one holder ever got work: no race happened"
    assert jobs(conn) == []


def test_reservations_in_flight_are_skipped_not_waited_for(conn: Conn, dsn: str) -> None:
    enqueue_many(conn, [envelope() for _ in range(10)])
    with psycopg.connect(dsn) as first, psycopg.connect(dsn, autocommit=True) as second:
        # The first holder's reservation is not committed yet: its rows stay locked.
        held = reserve(first, ["default"], 4)
        other = reserve(second, ["default"], 100)
        assert len(held) == 4 and len(other) == 6
        assert not {r["id"] for r in held} & {r["id"] for r in other}
        first.commit()
    assert reserve(conn, ["default"], 100) == []


# ------------------------------------------------------------------------- ordering


def test_first_queue_drains_before_the_next(conn: Conn) -> None:
    default = [enqueue(conn, envelope("default")) for _ in range(5)]
    high = [enqueue(conn, envelope("high")) for _ in range(5)]

    first = reserve(conn, ["high", "default"], 3)
    assert [r["id"] for r in first] == high[:3]
    second = reserve(conn, ["high", "default"], 4)
    assert [r["id"] for r in second] == high[3:] + default[:2]
    assert [r["queue"] for r in second] == ["high", "high", "default", "default"]
    rest = reserve(conn, ["high", "default"], 50)
    assert [r["id"] for r in rest] == default[2:]


def test_queues_not_asked_for_are_left_alone(conn: Conn) -> None:
    enqueue(conn, envelope("other"))
    assert reserve(conn, ["high", "default"], 10) == []


def test_higher_priority_first_then_oldest_first_within_a_queue(conn: Conn) -> None:
    low = enqueue(conn, envelope(priority=-5))
    normal_1 = enqueue(conn, envelope(priority=0))
    urgent_1 = enqueue(conn, envelope(priority=10))
    normal_2 = enqueue(conn, envelope(priority=0))
    urgent_2 = enqueue(conn, envelope(priority=10))
    assert [r["id"] for r in reserve(conn, ["default"], 3)] == [urgent_1, urgent_2, normal_1]
    assert [r["id"] for r in reserve(conn, ["default"], 1)] == [normal_2]
    assert [(r["id"], r["priority"]) for r in reserve(conn, ["default"], 9)] == [(low, -5)]


def test_reservation_returns_what_the_worker_needs(conn: Conn) -> None:
    env = envelope("mail", tries=4, priority=2, args={"to": "a@example.com"})
    job_id = enqueue(conn, env)
    [r] = reserve(conn, ["mail"], 1, lease=90)
    assert r["id"] == job_id
    assert r["attempts"] == 1 and r["max_tries"] == 4
    assert r["queue"] == "mail" and r["priority"] == 2
    assert r["envelope"] == env
    assert 0 < r["lease_seconds_left"] <= 90
    stored = job(conn, job_id)
    assert stored is not None
    assert stored["token"] == r["token"]
    assert stored["available_at"] == r["lease_expires_at"]
    assert stored["reserved_at"] is not None
    # A live lease is not handed out again.
    assert reserve(conn, ["mail"], 1) == []


# -------------------------------------------------------------------------- delayed


def test_delayed_job_is_invisible_until_due(conn: Conn) -> None:
    delayed = enqueue(conn, envelope(), delay=3600)
    ready = enqueue(conn, envelope())
    assert [r["id"] for r in reserve(conn, ["default"], 10)] == [ready]
    assert reserve(conn, ["default"], 10) == []
    stats = rows(conn, "select ready, delayed, reserved from pgqueue.queue_stats where queue = 'default'")
    assert stats == [{"ready": 0, "delayed": 1, "reserved": 1}]

    assert make_due(conn) == 1
    [r] = reserve(conn, ["default"], 10)
    assert r["id"] == delayed and r["attempts"] == 1


def test_delayed_jobs_become_due_in_their_own_order(conn: Conn) -> None:
    later = enqueue(conn, envelope(), delay=7200)
    sooner = enqueue(conn, envelope(), delay=3600)
    conn.execute(b"update pgqueue.jobs set available_at = available_at - interval '3601 seconds'")
    assert [r["id"] for r in reserve(conn, ["default"], 10)] == [sooner]
    conn.execute(b"update pgqueue.jobs set available_at = now() - interval '1 second' where id = %s",
                 (later,))
    assert [r["id"] for r in reserve(conn, ["default"], 10)] == [later]


def test_a_tiny_delay_is_honoured_on_the_database_clock(conn: Conn) -> None:
    job_id = enqueue(conn, envelope(), delay=0.05)
    due = scalar(conn, "select available_at from pgqueue.jobs where id = %s", (job_id,))
    # Poll the reservation itself until the database clock passes available_at.
    deadline = time.monotonic() + 30
    got: list[Row] = []
    while not got and time.monotonic() < deadline:
        got = reserve(conn, ["default"], 1)
    assert [r["id"] for r in got] == [job_id]
    assert got[0]["lease_expires_at"] > due


# ---------------------------------------------------------------------------- fence


def _reserved(conn: Conn, **env: Any) -> Row:
    enqueue(conn, envelope(**env))
    [r] = reserve(conn, [env.get("queue", "default")], 1)
    return r


def test_a_stale_token_changes_nothing(conn: Conn) -> None:
    r = _reserved(conn)
    before = job(conn, r["id"])
    stale = r["token"] + 1000
    assert ack(conn, [r["id"]], [stale]) == {r["id"]: False}
    assert release(conn, r["id"], stale) is False
    assert fail(conn, r["id"], stale) is False
    assert extend(conn, r["id"], stale, 600) == {"extended": False, "lease_expires_at": None,
                                                  "lease_seconds_left": None}
    assert job(conn, r["id"]) == before
    assert failures(conn) == []


def test_an_unknown_job_id_is_refused_like_a_stale_token(conn: Conn) -> None:
    r = _reserved(conn)
    nobody = uuid.uuid4()
    assert ack(conn, [nobody, r["id"]], [r["token"], r["token"]]) == {nobody: False, r["id"]: True}
    assert release(conn, nobody, r["token"]) is False
    assert fail(conn, nobody, r["token"]) is False
    assert extend(conn, nobody, r["token"], 10)["extended"] is False
    assert failures(conn) == []


def test_a_settled_token_cannot_settle_again(conn: Conn) -> None:
    r = _reserved(conn)
    assert release(conn, r["id"], r["token"], 0) is True
    # The released job is back without a token: the old one no longer opens anything.
    assert ack(conn, [r["id"]], [r["token"]]) == {r["id"]: False}
    assert extend(conn, r["id"], r["token"], 10)["extended"] is False
    assert fail(conn, r["id"], r["token"]) is False
    stored = job(conn, r["id"])
    assert stored is not None and stored["token"] is None and stored["attempts"] == 1


def test_extend_moves_the_lease_on_the_database_clock(conn: Conn) -> None:
    r = _reserved(conn)
    result = extend(conn, r["id"], r["token"], 3600)
    assert result["extended"] is True
    assert 3500 < result["lease_seconds_left"] <= 3600
    stored = job(conn, r["id"])
    assert stored is not None
    assert stored["available_at"] == result["lease_expires_at"]
    assert stored["token"] == r["token"] and stored["attempts"] == 1


def test_expired_lease_is_reserved_again_and_the_old_holder_is_fenced_off(conn: Conn) -> None:
    first = _reserved(conn)
    expire_lease(conn, first["id"])

    [second] = reserve(conn, ["default"], 1)
    assert second["id"] == first["id"]
    assert second["token"] > first["token"]
    assert second["attempts"] == first["attempts"] + 1 == 2

    assert ack(conn, [first["id"]], [first["token"]]) == {first["id"]: False}
    assert release(conn, first["id"], first["token"]) is False
    assert extend(conn, first["id"], first["token"], 60)["extended"] is False
    assert fail(conn, first["id"], first["token"]) is False
    stored = job(conn, first["id"])
    assert stored is not None and stored["token"] == second["token"]

    assert ack(conn, [second["id"]], [second["token"]]) == {second["id"]: True}
    assert jobs(conn) == []


def test_a_tiny_lease_expires_by_itself(conn: Conn) -> None:
    enqueue(conn, envelope())
    [first] = reserve(conn, ["default"], 1, lease=0.001)
    deadline = time.monotonic() + 30
    again: list[Row] = []
    while not again and time.monotonic() < deadline:
        again = reserve(conn, ["default"], 1, lease=60)
    assert [r["id"] for r in again] == [first["id"]]
    assert again[0]["token"] > first["token"] and again[0]["attempts"] == 2
    assert ack(conn, [first["id"]], [first["token"]]) == {first["id"]: False}


def test_release_counts_the_attempt_and_delays(conn: Conn) -> None:
    r = _reserved(conn, tries=5)
    assert release(conn, r["id"], r["token"], 3600) is True
    assert reserve(conn, ["default"], 1) == []
    stored = job(conn, r["id"])
    assert stored is not None and stored["token"] is None and stored["reserved_at"] is None
    make_due(conn)
    [again] = reserve(conn, ["default"], 1)
    assert again["attempts"] == 2 and again["token"] > r["token"]


# ------------------------------------------------------------------ doomed candidates


def test_lease_expired_on_the_final_attempt_goes_to_failed_jobs(conn: Conn) -> None:
    r = _reserved(conn, tries=1)
    expire_lease(conn, r["id"])
    assert reserve(conn, ["default"], 5) == []
    assert job(conn, r["id"]) is None
    [f] = failures(conn)
    assert f["job_id"] == r["id"]
    assert f["reason"] == "lease_expired_after_final_attempt"
    assert f["attempts"] == 1 and f["exception"] is None
    assert f["queue"] == "default" and f["connection"] == "database"
    assert f["envelope"] == r["envelope"]
    assert "lease" in f["message"]
    # The dead holder's late ack is refused: the job is already a failure.
    assert ack(conn, [r["id"]], [r["token"]]) == {r["id"]: False}


def test_release_on_the_last_attempt_ends_as_attempts_exhausted(conn: Conn) -> None:
    r1 = _reserved(conn, tries=2)
    assert release(conn, r1["id"], r1["token"], 0)
    [r2] = reserve(conn, ["default"], 1)
    assert r2["attempts"] == 2
    assert release(conn, r2["id"], r2["token"], 0)
    assert reserve(conn, ["default"], 1) == []
    [f] = failures(conn)
    assert (f["job_id"], f["reason"], f["attempts"]) == (r1["id"], "attempts_exhausted", 2)
    assert jobs(conn) == []


def test_passed_deadline_goes_to_failed_jobs_instead_of_running(conn: Conn) -> None:
    job_id = enqueue(conn, envelope(retry_until=db_epoch(conn, -10)))
    assert reserve(conn, ["default"], 1) == []
    [f] = failures(conn)
    assert (f["job_id"], f["reason"], f["attempts"]) == (job_id, "deadline_passed", 0)
    assert jobs(conn) == []


def test_deadline_passed_while_reserved_wins_over_the_lease_reason(conn: Conn) -> None:
    r = _reserved(conn, tries=1, retry_until=db_epoch(conn, 3600))
    conn.execute(b"update pgqueue.jobs set retry_until = now() - interval '1 second' where id = %s",
                 (r["id"],))
    expire_lease(conn, r["id"])
    assert reserve(conn, ["default"], 1) == []
    [f] = failures(conn)
    assert f["reason"] == "deadline_passed"


def test_a_future_deadline_does_not_stop_a_job(conn: Conn) -> None:
    job_id = enqueue(conn, envelope(retry_until=db_epoch(conn, 3600)))
    [r] = reserve(conn, ["default"], 1)
    assert r["id"] == job_id and r["retry_until"] is not None
    assert failures(conn) == []


def test_doomed_candidates_do_not_use_up_the_batch(conn: Conn) -> None:
    # Five jobs past their deadline sit ahead of three good ones in the same queue and
    # priority; one reservation of three still returns the three good ones.
    enqueue_many(conn, [envelope(retry_until=db_epoch(conn, -10)) for _ in range(5)])
    good = [enqueue(conn, envelope()) for _ in range(3)]
    got = reserve(conn, ["default"], 3)
    assert [r["id"] for r in got] == good
    assert len(failures(conn)) == 5
    assert {f["reason"] for f in failures(conn)} == {"deadline_passed"}


def test_batch_ack_answers_per_pair_in_the_order_given(conn: Conn) -> None:
    enqueue_many(conn, [envelope() for _ in range(4)])
    held = reserve(conn, ["default"], 4)
    ids = [r["id"] for r in held]
    tokens = [r["token"] for r in held]
    # The second pair is stale; the last repeats the first job with a stale token.
    asked_ids = [*ids, ids[0]]
    asked_tokens = [tokens[0], tokens[1] + 10_000, tokens[2], tokens[3], tokens[0] - 1]
    answer = rows(conn, "select * from pgqueue.ack(%s::uuid[], %s::bigint[])", (asked_ids, asked_tokens))
    assert [(r["id"], r["acked"]) for r in answer] == [
        (ids[0], True), (ids[1], False), (ids[2], True), (ids[3], True), (ids[0], False)]
    assert [j["id"] for j in jobs(conn)] == [ids[1]]


# ------------------------------------------------------------------------ prefetch
def _reserve_ahead(conn: Conn, max_jobs: int, run_now: int, queue: str = "default") -> list[Row]:
    return rows(conn, "select * from pgqueue.reserve(%s::text[], %s, 60, %s)", ([queue], max_jobs, run_now))


def _mark_started(conn: Conn, reserved: list[Row]) -> dict[uuid.UUID, bool]:
    found = rows(conn, "select * from pgqueue.mark_started(%s::uuid[], %s::bigint[])",
                 ([r["id"] for r in reserved], [r["token"] for r in reserved]))
    return {r["id"]: r["marked"] for r in found}


def test_buffered_jobs_on_their_final_try_are_granted_as_prefetched(conn: Conn) -> None:
    """Only the jobs past run_now whose attempt is their last are marked: a death costs the
    others a try (they have tries left), never these their last one."""
    last = [enqueue(conn, envelope(tries=1)) for _ in range(3)]
    spare = enqueue(conn, envelope(tries=3))
    granted = _reserve_ahead(conn, 4, run_now=1)
    assert [r["id"] for r in granted] == [*last, spare]
    assert [r["prefetched"] for r in granted] == [False, True, True, False]
    assert all(r["attempts"] == 1 for r in granted)
    assert [job(conn, r["id"])["prefetched"] for r in granted] == [False, True, True, False]  # type: ignore[index]


def test_an_expired_unstarted_final_try_gets_its_attempt_back(conn: Conn) -> None:
    """Its worker died before starting it (the mark was never cleared): it did not run, so it
    runs again instead of failing as lease_expired_after_final_attempt, however often that happens."""
    enqueue_many(conn, [envelope(tries=1) for _ in range(2)])
    running, buffered = _reserve_ahead(conn, 2, run_now=1)
    for r in (running, buffered):
        expire_lease(conn, r["id"])
    [again] = _reserve_ahead(conn, 5, run_now=0)
    assert (again["id"], again["attempts"], again["prefetched"]) == (buffered["id"], 1, True)
    [f] = failures(conn)  # the running one had its one try
    assert (f["job_id"], f["reason"]) == (running["id"], "lease_expired_after_final_attempt")

    expire_lease(conn, again["id"])  # unstarted again
    [third] = reserve(conn, ["default"], 1)
    assert third["attempts"] == 1
    expire_lease(conn, third["id"])  # granted to run at once: that attempt counted
    assert reserve(conn, ["default"], 1) == []
    assert {f["job_id"] for f in failures(conn)} == {running["id"], buffered["id"]}


def test_a_marked_start_counts_like_any_attempt(conn: Conn) -> None:
    enqueue_many(conn, [envelope(tries=1) for _ in range(2)])
    started, unstarted = _reserve_ahead(conn, 2, run_now=0)
    assert _mark_started(conn, [started]) == {started["id"]: True}
    for r in (started, unstarted):
        expire_lease(conn, r["id"])
    [again] = reserve(conn, ["default"], 5)
    assert (again["id"], again["attempts"]) == (unstarted["id"], 1)
    [f] = failures(conn)
    assert (f["job_id"], f["reason"]) == (started["id"], "lease_expired_after_final_attempt")


def test_mark_started_is_fenced_answers_per_pair_and_checks_its_arrays(conn: Conn) -> None:
    enqueue(conn, envelope(tries=1))
    [r] = _reserve_ahead(conn, 1, run_now=0)
    stale = {**r, "token": r["token"] + 1000}
    assert list(_mark_started(conn, [stale]).values()) == [False]  # a stale holder changes nothing
    assert job(conn, r["id"])["prefetched"]  # type: ignore[index]
    assert _mark_started(conn, [r]) == {r["id"]: True}
    assert not job(conn, r["id"])["prefetched"]  # type: ignore[index]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="1 ids but 0 tokens"):
        rows(conn, "select * from pgqueue.mark_started(%s::uuid[], %s::bigint[])", ([r["id"]], []))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="run_now must be >= 0"):
        _reserve_ahead(conn, 1, run_now=-1)


def test_a_handed_back_prefetch_is_not_refunded_twice(conn: Conn) -> None:
    """release_unstarted already gave the attempt back: the next reservation counts normally."""
    enqueue(conn, envelope(tries=1))
    [r] = _reserve_ahead(conn, 1, run_now=0)
    rows(conn, "select * from pgqueue.release_unstarted(%s::uuid[], %s::bigint[])", ([r["id"]], [r["token"]]))
    [again] = reserve(conn, ["default"], 1)
    assert again["attempts"] == 1
    expire_lease(conn, again["id"])
    assert reserve(conn, ["default"], 1) == []
    assert [f["reason"] for f in failures(conn)] == ["lease_expired_after_final_attempt"]

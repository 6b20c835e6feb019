"""Issue 26 §2, in SQL: jobs that wait for jobs (pgqueue.add_dependencies) and batches with a
callback (pgqueue.add_batch), decided by the functions that end an attempt (ack, fail, cancel,
the reservation's doomed path) through pgqueue.jobs_ended."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.types.json import Jsonb

from tests.helpers import envelope
from tests.sql_calls import Conn, Row, ack, enqueue, expire_lease, fail, job, release, reserve, rows, scalar


def _parent(conn: Conn, **env: Any) -> uuid.UUID:
    return enqueue(conn, envelope(**env))


def _child(conn: Conn, parents: list[uuid.UUID], policy: str = "cancel", queue: str = "kids",
           delay: float = 0.0) -> uuid.UUID:
    """A job enqueued and given parents in one transaction, as client.dispatch(after=...) does."""
    with conn.transaction():
        child = enqueue(conn, envelope(queue), delay)
        scalar(conn, "select pgqueue.add_dependencies(%s::uuid[], %s::uuid[], %s)", ([child], parents, policy))
    return child


def _run(conn: Conn, queue: str = "default") -> Row:
    [r] = reserve(conn, [queue], 1)
    return r


def _reservable(conn: Conn, queue: str = "kids") -> list[uuid.UUID]:
    return [r["id"] for r in reserve(conn, [queue], 10)]


def _failure(conn: Conn, job_id: uuid.UUID) -> Row:
    return rows(conn, "select * from pgqueue.failed_jobs where job_id = %s", (job_id,))[0]


def test_a_child_waits_until_every_parent_succeeded(conn: Conn) -> None:
    a, b = _parent(conn), _parent(conn)
    child = _child(conn, [a, b])
    assert scalar(conn, "select state from pgqueue.job_state(%s)", (child,)) == "blocked"
    assert _reservable(conn) == []
    first = _run(conn)
    assert ack(conn, [first["id"]], [first["token"]]) == {first["id"]: True}
    assert _reservable(conn) == []  # one parent still open
    assert scalar(conn, "select waiting_on from pgqueue.dependent_jobs where job_id = %s", (child,)) == 1
    second = _run(conn)
    assert ack(conn, [second["id"]], [second["token"]]) == {second["id"]: True}
    assert _reservable(conn) == [child]
    family = rows(conn, "select kind, other_id, open from pgqueue.job_family(%s) order by other_id", (child,))
    assert {(f["kind"], f["other_id"], f["open"]) for f in family} == {("parent", a, False), ("parent", b, False)}


def test_a_child_keeps_its_dispatch_delay(conn: Conn) -> None:
    parent = _parent(conn)
    child = _child(conn, [parent], delay=3600)
    r = _run(conn)
    ack(conn, [r["id"]], [r["token"]])
    row = job(conn, child)
    assert row is not None
    assert scalar(conn, "select %s > now() + interval '3500 seconds'", (row["available_at"],))


def test_a_failed_parent_cancels_its_children_transitively(conn: Conn) -> None:
    parent = _parent(conn)
    child = _child(conn, [parent])
    grandchild = _child(conn, [child], queue="grandkids")
    runs_anyway = _child(conn, [child], policy="run", queue="grandkids")
    r = _run(conn)
    assert fail(conn, r["id"], r["token"])
    assert job(conn, child) is None and job(conn, grandchild) is None
    assert _failure(conn, child)["reason"] == "dependency_failed"
    assert str(parent) in _failure(conn, child)["message"]
    assert _failure(conn, grandchild)["reason"] == "dependency_failed"
    assert scalar(conn, "select state from pgqueue.job_state(%s)", (grandchild,)) == "cancelled"
    # The child that runs anyway counts its cancelled parent as ended.
    assert _reservable(conn, "grandkids") == [runs_anyway]
    assert scalar(conn, "select count(*) from pgqueue.job_dependencies") == 0


def test_a_cancelled_parent_cancels_its_children(conn: Conn) -> None:
    parent = _parent(conn)
    child = _child(conn, [parent])
    assert scalar(conn, "select pgqueue.cancel(%s)", (parent,)) == "cancelled"
    assert _failure(conn, child)["reason"] == "dependency_failed"
    assert "was cancelled" in _failure(conn, child)["message"]


def test_run_anyway_runs_after_a_failed_parent(conn: Conn) -> None:
    a, b = _parent(conn), _parent(conn)
    child = _child(conn, [a, b], policy="run")
    first = _run(conn)
    fail(conn, first["id"], first["token"])
    assert _reservable(conn) == []
    second = _run(conn)
    ack(conn, [second["id"]], [second["token"]])
    assert _reservable(conn) == [child]


def test_a_lease_expired_on_the_last_attempt_cancels_the_children(conn: Conn) -> None:
    parent = _parent(conn, tries=1)
    child = _child(conn, [parent])
    r = _run(conn)
    expire_lease(conn, r["id"])
    assert reserve(conn, ["default"], 1) == []  # the doomed path moves it to failed_jobs
    assert _failure(conn, parent)["reason"] == "lease_expired_after_final_attempt"
    assert _failure(conn, child)["reason"] == "dependency_failed"


def test_parents_that_already_ended(conn: Conn) -> None:
    done = _parent(conn)
    r = _run(conn)
    scalar(conn, "select count(*) from pgqueue.ack_results(%s::uuid[], %s::bigint[], null, null, false, "
                 "%s::jsonb[], %s::double precision[])", ([r["id"]], [r["token"]], [Jsonb({"n": 1})], [60.0]))
    child = _child(conn, [done])
    assert _reservable(conn) == [child]  # released at once
    assert rows(conn, "select * from pgqueue.parent_results(%s)", (child,)) == [
        {"parent_id": done, "state": "succeeded", "result": {"n": 1}}]
    failed = _parent(conn)
    r = _run(conn)
    fail(conn, r["id"], r["token"])
    doomed = _child(conn, [failed])
    assert _failure(conn, doomed)["reason"] == "dependency_failed"


def test_an_unknown_parent_is_refused_and_nothing_is_stored(conn: Conn) -> None:
    known, unknown = _parent(conn), uuid.uuid4()
    with pytest.raises(errors.InvalidParameterValue, match=f"parent job {unknown} is unknown"):
        _child(conn, [known, unknown])
    assert scalar(conn, "select count(*) from pgqueue.jobs") == 1
    assert scalar(conn, "select has_dependents from pgqueue.jobs where id = %s", (known,)) is False
    assert scalar(conn, "select count(*) from pgqueue.job_dependencies") == 0
    with pytest.raises(errors.InvalidParameterValue, match="on_parent_failure"):
        _child(conn, [known], policy="maybe")
    with pytest.raises(errors.InvalidParameterValue, match="cannot wait for itself"):
        scalar(conn, "select pgqueue.add_dependencies(%s::uuid[], %s::uuid[], 'cancel')", ([known], [known]))


def test_a_parent_cannot_be_given_parents_so_no_cycle_forms(conn: Conn) -> None:
    a = _parent(conn)
    b = _child(conn, [a])
    with pytest.raises(errors.InvalidParameterValue, match=f"job {a} cannot be given parents"):
        scalar(conn, "select pgqueue.add_dependencies(%s::uuid[], %s::uuid[], 'cancel')", ([a], [b]))


def test_two_attempts_racing_at_a_lease_expiry_release_the_child_once(dsn: str, conn: Conn) -> None:
    """The first holder's lease expires and a second reserves; both ack at once, from two
    connections. The fence lets one through, so the child of two parents counts one parent."""
    raced, other = _parent(conn), _parent(conn, queue="other")
    child = _child(conn, [raced, other])
    stale = _run(conn)
    expire_lease(conn, stale["id"])
    fresh = _run(conn)
    assert fresh["token"] != stale["token"]
    barrier = threading.Barrier(2)
    verdicts: list[bool] = []

    def holder(token: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as own:
            barrier.wait()
            verdicts.append(scalar(own, "select acked from pgqueue.ack(%s::uuid[], %s::bigint[])",
                                   ([raced], [token])))

    threads = [threading.Thread(target=holder, args=(t,)) for t in (stale["token"], fresh["token"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(verdicts) == [False, True]
    assert scalar(conn, "select waiting_on from pgqueue.dependent_jobs where job_id = %s", (child,)) == 1
    assert _reservable(conn) == []
    last = _run(conn, "other")
    ack(conn, [last["id"]], [last["token"]])
    assert _reservable(conn) == [child]


def _batch(conn: Conn, members: int) -> tuple[uuid.UUID, list[uuid.UUID], uuid.UUID]:
    batch = uuid.uuid4()
    with conn.transaction():
        ids = [enqueue(conn, envelope()) for _ in range(members)]
        callback = enqueue(conn, envelope("callbacks"))
        scalar(conn, "select pgqueue.add_batch(%s, %s::uuid[], %s)", (batch, ids, callback))
    return batch, ids, callback


def test_a_batch_releases_its_callback_once_every_member_ended(conn: Conn) -> None:
    batch, members, callback = _batch(conn, 3)
    assert _reservable(conn, "callbacks") == []
    first = _run(conn)
    ack(conn, [first["id"]], [first["token"]])
    second = _run(conn)
    fail(conn, second["id"], second["token"])
    assert _reservable(conn, "callbacks") == []
    state = rows(conn, "select * from pgqueue.batch_state(%s)", (callback,))[0]
    assert (state["id"], state["total"], state["pending"], state["succeeded"], state["failed"]) == (batch, 3, 1, 1, 1)
    third = next(m for m in members if m not in (first["id"], second["id"]))
    assert scalar(conn, "select pgqueue.cancel(%s)", (third,)) == "cancelled"
    assert _reservable(conn, "callbacks") == [callback]
    state = rows(conn, "select * from pgqueue.batch_state(%s)", (batch,))[0]
    assert (state["pending"], state["succeeded"], state["failed"], state["cancelled"]) == (0, 1, 1, 1)
    assert state["finished_at"] is not None
    outcomes = {r["job_id"]: r["outcome"] for r in rows(conn, "select * from pgqueue.batch_results(%s)", (batch,))}
    assert outcomes == {first["id"]: "succeeded", second["id"]: "failed", third: "cancelled"}


def test_a_batch_refuses_bad_input_and_stores_nothing(conn: Conn) -> None:
    member = enqueue(conn, envelope())
    with pytest.raises(errors.InvalidParameterValue, match="is not a queued job"):
        scalar(conn, "select pgqueue.add_batch(%s, %s::uuid[], %s)", (uuid.uuid4(), [member], uuid.uuid4()))
    with pytest.raises(errors.InvalidParameterValue, match="own batch"):
        scalar(conn, "select pgqueue.add_batch(%s, %s::uuid[], %s)", (uuid.uuid4(), [member], member))
    assert scalar(conn, "select count(*) from pgqueue.batches") == 0
    _, [taken], _ = _batch(conn, 1)
    callback = enqueue(conn, envelope("callbacks"))
    with pytest.raises(errors.InvalidParameterValue, match=f"job {taken} is already a member of a batch"):
        scalar(conn, "select pgqueue.add_batch(%s, %s::uuid[], %s)", (uuid.uuid4(), [member, taken], callback))
    assert scalar(conn, "select count(*) from pgqueue.batches") == 1
    assert scalar(conn, "select has_dependents from pgqueue.jobs where id = %s", (member,)) is False
    assert scalar(conn, "select available_at < pgqueue.never() from pgqueue.jobs where id = %s", (callback,))


def test_prune_results_deletes_the_links_of_jobs_gone(conn: Conn) -> None:
    parent = _parent(conn)
    child = _child(conn, [parent])
    _batch(conn, 1)
    while found := reserve(conn, ["default", "kids", "callbacks"], 10):
        ack(conn, [r["id"] for r in found], [r["token"] for r in found])
    conn.execute(b"update pgqueue.dependent_jobs set created_at = now() - interval '2 days'")
    conn.execute(b"update pgqueue.batches set finished_at = now() - interval '2 days'")
    assert rows(conn, "select links_deleted from pgqueue.prune_results(86400, 100)") == [{"links_deleted": 2}]
    assert scalar(conn, "select count(*) from pgqueue.dependent_jobs where job_id = %s", (child,)) == 0
    assert scalar(conn, "select count(*) from pgqueue.batch_members") == 0


def test_a_parent_removed_by_clear_or_delete_matching_ends_as_cancelled(conn: Conn) -> None:
    cleared, deleted = _parent(conn, queue="gone"), _parent(conn, queue="deleted")
    first, second = _child(conn, [cleared]), _child(conn, [deleted], policy="run")
    assert scalar(conn, "select pgqueue.clear('gone')") == 1
    assert _failure(conn, first)["reason"] == "dependency_failed"
    assert scalar(conn, "select pgqueue.delete_matching(%s::uuid[], null, null, null, null, null, null, 10)",
                  ([deleted],)) == 1
    assert _reservable(conn) == [second]


def _end_at_once(dsn: str, ends: list[tuple[str, uuid.UUID, int]]) -> list[BaseException]:
    """Run each (statement, job id, token) on its own connection, all released by one barrier."""
    barrier = threading.Barrier(len(ends))
    problems: list[BaseException] = []

    def end(statement: str, job_id: uuid.UUID, token: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as own:
                barrier.wait()
                own.execute(statement.encode(), (job_id, token))
        except BaseException as exc:  # reported by the caller
            problems.append(exc)

    threads = [threading.Thread(target=end, args=e) for e in ends]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return problems


def test_two_parents_ending_at_once_one_failing_cancel_the_child_without_a_deadlock(dsn: str, conn: Conn) -> None:
    """One parent acks while the other fails, from two connections at the same moment, many times:
    the child's counter serialises them, no lock is taken in the other order, and the child ends
    cancelled (dependency_failed) every time, whichever end came first."""
    for _ in range(30):  # the deadlock this guards against showed in 2 of 30 rounds
        first, second = _parent(conn, queue="pair"), _parent(conn, queue="pair")
        child = _child(conn, [first, second])
        held = {r["id"]: r["token"] for r in reserve(conn, ["pair"], 2)}
        assert _end_at_once(dsn, [
            ("select * from pgqueue.ack(array[%s]::uuid[], array[%s]::bigint[])", first, held[first]),
            ("select pgqueue.fail(%s, %s, 'E', 'm', null, 'exception')", second, held[second])]) == []
        assert _failure(conn, child)["reason"] == "dependency_failed"


# --- revision 0010: a retried batch member or parent (pgqueue.jobs_requeued) ---
def _retry(conn: Conn, job_id: uuid.UUID, how: str = "one") -> None:
    """Put a failed job back the way an operator does: retry_failed (its latest failure),
    retry_failed_all of its queue or retry_failed_matching of its queue."""
    failure = rows(conn, "select id, queue from pgqueue.failed_jobs where job_id = %s order by failed_at desc",
                   (job_id,))[0]
    if how == "one":
        assert scalar(conn, "select pgqueue.retry_failed(%s)", (failure["id"],)) == job_id
    elif how == "all":
        assert scalar(conn, "select pgqueue.retry_failed_all(%s)", (failure["queue"],)) == 1
    else:
        assert scalar(conn, "select pgqueue.retry_failed_matching(%s, null, null, null, null, 10)",
                      (failure["queue"],)) == 1


def _counts(conn: Conn, batch: uuid.UUID) -> tuple[int, int, int, int]:
    s = rows(conn, "select * from pgqueue.batch_state(%s)", (batch,))[0]
    return s["pending"], s["succeeded"], s["failed"], s["cancelled"]


@pytest.mark.parametrize("how", ["one", "all", "matching"])
def test_a_retried_batch_member_is_pending_again_and_the_callback_waits_for_it(conn: Conn, how: str) -> None:
    batch, members, callback = _batch(conn, 2)
    first = _run(conn)
    fail(conn, first["id"], first["token"])
    assert _counts(conn, batch) == (1, 0, 1, 0)
    _retry(conn, first["id"], how)
    assert _counts(conn, batch) == (2, 0, 0, 0)
    assert scalar(conn, "select outcome from pgqueue.batch_members where job_id = %s", (first["id"],)) is None
    # The other member ends: the retried one is still pending, so the callback waits.
    other = next(m for m in members if m != first["id"])
    while (r := _run(conn))["id"] != other:
        release(conn, r["id"], r["token"], 3600)
    ack(conn, [other], [r["token"]])
    assert _reservable(conn, "callbacks") == []
    assert _counts(conn, batch) == (1, 1, 0, 0)
    conn.execute(b"update pgqueue.jobs set available_at = now() where queue = 'default'")
    again = _run(conn)
    assert again["id"] == first["id"]
    ack(conn, [again["id"]], [again["token"]])
    assert _counts(conn, batch) == (0, 2, 0, 0)
    assert _reservable(conn, "callbacks") == [callback]


def test_a_member_retried_after_the_callback_ran_is_counted_but_the_callback_runs_once(conn: Conn) -> None:
    batch, [member], callback = _batch(conn, 1)
    r = _run(conn)
    fail(conn, r["id"], r["token"])
    [cb] = reserve(conn, ["callbacks"], 1)
    ack(conn, [cb["id"]], [cb["token"]])  # the callback ran, with failed = 1
    _retry(conn, member)
    assert _counts(conn, batch) == (1, 0, 0, 0)
    assert rows(conn, "select finished_at from pgqueue.batch_state(%s)", (batch,))[0]["finished_at"] is None
    r = _run(conn)
    ack(conn, [r["id"]], [r["token"]])
    assert _counts(conn, batch) == (0, 1, 0, 0)  # truthful, and finished again
    assert rows(conn, "select finished_at from pgqueue.batch_state(%s)", (batch,))[0]["finished_at"] is not None
    assert job(conn, callback) is None and _reservable(conn, "callbacks") == []  # not run a second time


def test_a_callback_released_but_not_started_waits_again_and_one_in_backoff_keeps_its_due_time(conn: Conn) -> None:
    batch, [member], callback = _batch(conn, 1)
    r = _run(conn)
    fail(conn, r["id"], r["token"])
    _retry(conn, member)  # the callback was released, never reserved: it waits for the member again
    assert scalar(conn, "select available_at = pgqueue.never() from pgqueue.jobs where id = %s", (callback,))
    r = _run(conn)
    fail(conn, r["id"], r["token"])
    [cb] = reserve(conn, ["callbacks"], 1)
    release(conn, cb["id"], cb["token"], 3600)  # its first attempt failed: a retry an hour later
    _retry(conn, member)
    r = _run(conn)
    ack(conn, [r["id"]], [r["token"]])
    assert _counts(conn, batch) == (0, 1, 0, 0)
    assert scalar(conn, "select available_at > now() + interval '3500 seconds' from pgqueue.jobs where id = %s",
                  (callback,))


@pytest.mark.parametrize("how", ["one", "all", "matching"])
def test_a_retried_parent_brings_back_the_dependents_it_cancelled_transitively(conn: Conn, how: str) -> None:
    parent = _parent(conn)
    child = _child(conn, [parent])
    grandchild = _child(conn, [child], queue="grandkids")
    r = _run(conn)
    fail(conn, r["id"], r["token"])
    assert job(conn, child) is None and job(conn, grandchild) is None
    _retry(conn, parent, how)
    assert scalar(conn, "select state from pgqueue.job_state(%s)", (child,)) == "blocked"
    assert scalar(conn, "select state from pgqueue.job_state(%s)", (grandchild,)) == "blocked"
    assert scalar(conn, "select count(*) from pgqueue.failed_jobs where job_id in (%s, %s)", (child, grandchild)) == 0
    assert _reservable(conn) == [] and _reservable(conn, "grandkids") == []
    r = _run(conn)
    ack(conn, [r["id"]], [r["token"]])
    [c] = reserve(conn, ["kids"], 1)
    assert c["id"] == child
    ack(conn, [c["id"]], [c["token"]])
    assert _reservable(conn, "grandkids") == [grandchild]


def test_a_dependent_whose_other_parent_failed_stays_cancelled(conn: Conn) -> None:
    a, b = _parent(conn), _parent(conn, queue="other")
    child = _child(conn, [a, b])
    ra = _run(conn)
    fail(conn, ra["id"], ra["token"])
    rb = _run(conn, "other")
    fail(conn, rb["id"], rb["token"])
    _retry(conn, a)
    assert job(conn, child) is None and _failure(conn, child)["reason"] == "dependency_failed"
    _retry(conn, b)  # now both parents are back: the child waits for both
    assert scalar(conn, "select waiting_on from pgqueue.dependent_jobs where job_id = %s", (child,)) == 2
    for queue in ("default", "other"):
        r = _run(conn, queue)
        ack(conn, [r["id"]], [r["token"]])
    assert _reservable(conn) == [child]


def test_a_dependent_retried_on_its_own_runs_and_its_parents_retry_leaves_it_be(conn: Conn) -> None:
    parent = _parent(conn)
    child = _child(conn, [parent])
    sibling = _child(conn, [parent])
    r = _run(conn)
    fail(conn, r["id"], r["token"])
    # The child is retried on its own first: its parent ended (failed), so it runs (the operator's call).
    _retry(conn, child)
    assert scalar(conn, "select state from pgqueue.job_state(%s)", (child,)) == "waiting"
    _retry(conn, parent)  # brings back the sibling, waiting; the child, live, is left as it is
    assert scalar(conn, "select state from pgqueue.job_state(%s)", (sibling,)) == "blocked"
    assert scalar(conn, "select state from pgqueue.job_state(%s)", (child,)) == "waiting"


def test_a_job_holding_a_unique_key_cannot_wait_or_join_a_batch(conn: Conn) -> None:
    """Revision 0010: pgqueue.enqueue_unique returns the holder's id for a duplicate; giving that id
    parents (or a batch) would make another job wait in the place of the one meant: refused."""
    parent = _parent(conn)
    holder = scalar(conn, "select id from pgqueue.enqueue_unique(%s, 0, 'k', 'queued', null)",
                    (Jsonb(envelope("kids")),))
    duplicate = scalar(conn, "select id from pgqueue.enqueue_unique(%s, 0, 'k', 'queued', null)",
                       (Jsonb(envelope("kids")),))
    assert duplicate == holder
    with pytest.raises(errors.InvalidParameterValue, match=f"job {holder} holds a unique or debounce key"):
        scalar(conn, "select pgqueue.add_dependencies(%s::uuid[], %s::uuid[], 'cancel')", ([duplicate], [parent]))
    callback = enqueue(conn, envelope("callbacks"))
    with pytest.raises(errors.InvalidParameterValue, match=f"job {holder} holds a unique or debounce key"):
        scalar(conn, "select pgqueue.add_batch(%s, %s::uuid[], %s)", (uuid.uuid4(), [duplicate], callback))
    with pytest.raises(errors.InvalidParameterValue, match=f"job {holder} holds a unique or debounce key"):
        scalar(conn, "select pgqueue.add_batch(%s, %s::uuid[], %s)", (uuid.uuid4(), [parent], holder))
    assert scalar(conn, "select count(*) from pgqueue.dependent_jobs") == 0
    assert scalar(conn, "select count(*) from pgqueue.batches") == 0
    assert scalar(conn, "select bool_or(has_dependents) from pgqueue.jobs") is False
    assert _reservable(conn) == [holder]

"""Issue 26, in SQL: every failed attempt kept with its job (across retries and retry_failed), the
results written by the fenced ack (pgqueue.ack_results, pgqueue.store_result), what
pgqueue.job_state answers, the pgqueue_ended notification and the pruning."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.types.json import Jsonb

from tests.helpers import envelope
from tests.sql_calls import Conn, Row, ack, enqueue, expire_lease, fail, reserve, rows, scalar


def _reserved(conn: Conn, **env: Any) -> Row:
    enqueue(conn, envelope(**env))
    [r] = reserve(conn, [env.get("queue", "default")], 1)
    return r


def _release(conn: Conn, r: Row, error: dict[str, Any] | None) -> bool:
    released: bool = scalar(conn, "select pgqueue.release(%s, %s, 0, 0.25, null, %s)",
                            (r["id"], r["token"], None if error is None else Jsonb(error)))
    return released


def _ack_results(conn: Conn, pairs: list[Row], results: list[Any], ttls: list[float]) -> dict[uuid.UUID, bool]:
    found = rows(conn, "select id, acked from pgqueue.ack_results(%s::uuid[], %s::bigint[], null, null, false, "
                       "%s::jsonb[], %s::double precision[])",
                 ([p["id"] for p in pairs], [p["token"] for p in pairs],
                  [None if r is None else Jsonb(r) for r in results], ttls))
    return {r["id"]: r["acked"] for r in found}


def _state(conn: Conn, job_id: uuid.UUID) -> Row | None:
    found = rows(conn, "select * from pgqueue.job_state(%s)", (job_id,))
    return found[0] if found else None


def test_every_failed_attempt_is_kept_across_retries_and_retry_failed(conn: Conn) -> None:
    r = _reserved(conn, tries=2)
    assert _release(conn, r, {"exception": "app.Flaky", "message": "first", "traceback": "Traceback 1",
                              "worker": "host:1"})
    [r2] = reserve(conn, ["default"], 1)
    assert scalar(conn, "select pgqueue.fail(%s, %s, 'app.Boom', 'second', 'Traceback 2', 'exception', 1.5, null, "
                        "'host:2')", (r2["id"], r2["token"]))
    failure = rows(conn, "select * from pgqueue.failed_jobs where job_id = %s", (r["id"],))[0]
    assert (failure["worker"], failure["duration"]) == ("host:2", 1.5)
    attempts = rows(conn, "select * from pgqueue.job_attempts(%s)", (r["id"],))
    assert [(a["attempt"], a["reason"], a["exception"], a["message"], a["worker"]) for a in attempts] == [
        (1, "retried", "app.Flaky", "first", "host:1"), (2, "exception", "app.Boom", "second", "host:2")]
    assert attempts[0]["duration"] == 0.25 and attempts[1]["traceback"] == "Traceback 2"

    # retry_failed deletes the failure record; the attempts stay with the job, and its next
    # failure (a cancel, decided in SQL) joins them.
    scalar(conn, "select pgqueue.retry_failed(%s)", (failure["id"],))
    assert scalar(conn, "select pgqueue.cancel(%s)", (r["id"],)) == "cancelled"
    state = _state(conn, r["id"])
    assert state is not None and state["state"] == "cancelled" and state["reason"] == "cancelled"
    assert [e["reason"] for e in state["errors"]] == ["retried", "exception", "cancelled"]
    assert [e["message"] for e in state["errors"]][:2] == ["first", "second"]


def test_the_reservations_doomed_path_records_the_last_attempt(conn: Conn) -> None:
    r = _reserved(conn, tries=1)
    expire_lease(conn, r["id"])
    assert reserve(conn, ["default"], 1) == []
    [a] = rows(conn, "select * from pgqueue.job_attempts(%s)", (r["id"],))
    assert (a["attempt"], a["reason"], a["worker"]) == (1, "lease_expired_after_final_attempt", None)


def test_an_attempt_whose_lease_expired_is_kept_when_the_job_runs_again(conn: Conn) -> None:
    # A killed worker's attempt left no trace: attempts counted 2 and job_attempts listed nothing.
    r = _reserved(conn, tries=3)
    expire_lease(conn, r["id"])
    [again] = reserve(conn, ["default"], 1)
    assert (again["id"], again["attempts"]) == (r["id"], 2)
    [a] = rows(conn, "select * from pgqueue.job_attempts(%s)", (r["id"],))
    assert (a["attempt"], a["reason"], a["exception"], a["worker"]) == (1, "lease_expired", None, None)
    assert "lease of attempt 1 expired" in a["message"]
    # A prefetched job whose lease expired before its handler started gives its attempt back: no row.
    p = _reserved(conn, queue="prefetch", tries=3)
    conn.execute(b"update pgqueue.jobs set prefetched = true where id = %s", (p["id"],))
    expire_lease(conn, p["id"])
    [p_again] = reserve(conn, ["prefetch"], 1)
    assert p_again["attempts"] == 1
    assert rows(conn, "select * from pgqueue.job_attempts(%s)", (p["id"],)) == []
    # A partitioned queue's reservation (pgqueue.reserve_partitions) records it too.
    conn.execute(b"select pgqueue.set_partition_limits('tenants', 2, null, null)")
    enqueue(conn, envelope("tenants", tries=3) | {"partition": "a"})
    [t] = reserve(conn, ["tenants"], 1)
    expire_lease(conn, t["id"])
    assert [g["id"] for g in reserve(conn, ["tenants"], 1)] == [t["id"]]
    assert [(a["attempt"], a["reason"]) for a in rows(conn, "select * from pgqueue.job_attempts(%s)",
                                                      (t["id"],))] == [(1, "lease_expired")]


def test_a_release_without_an_error_records_no_attempt(conn: Conn) -> None:
    r = _reserved(conn)
    assert scalar(conn, "select pgqueue.release(%s, %s, 0)", (r["id"], r["token"]))
    assert rows(conn, "select * from pgqueue.job_attempts(%s)", (r["id"],)) == []


def test_ack_results_keeps_the_result_only_for_the_holder_the_fence_accepts(conn: Conn) -> None:
    stale = _reserved(conn, tries=3)
    expire_lease(conn, stale["id"])
    [holder] = reserve(conn, ["default"], 1)
    other = _reserved(conn)
    answer = _ack_results(conn, [stale, other], [{"from": "stale"}, [1, 2]], [60, 60])
    assert answer == {stale["id"]: False, other["id"]: True}
    assert _state(conn, stale["id"])["state"] == "running"  # type: ignore[index]
    answer = _ack_results(conn, [holder], [{"from": "holder"}], [60])
    assert answer == {holder["id"]: True}
    state = _state(conn, holder["id"])
    assert state is not None and state["state"] == "succeeded" and state["result"] == {"from": "holder"}
    assert state["attempts"] == 2
    assert _state(conn, other["id"])["result"] == [1, 2]  # type: ignore[index]


def test_ack_results_refuses_bad_input(conn: Conn) -> None:
    r = _reserved(conn)
    with pytest.raises(errors.InvalidParameterValue, match="1 ids but 2 results"):
        _ack_results(conn, [r], [1, 2], [60])
    with pytest.raises(errors.InvalidParameterValue, match="ttl must be a number of seconds above 0"):
        _ack_results(conn, [r], [1], [0])


def test_a_pending_result_is_written_once_fenced_by_the_token(conn: Conn) -> None:
    r = _reserved(conn)
    assert _ack_results(conn, [r], [None], [60]) == {r["id"]: True}
    assert _state(conn, r["id"])["state"] == "running"  # type: ignore[index]
    assert not scalar(conn, "select pgqueue.store_result(%s, %s, %s)", (r["id"], r["token"] + 1, Jsonb(1)))
    assert scalar(conn, "select pgqueue.store_result(%s, %s, %s)", (r["id"], r["token"], Jsonb({"n": 1})))
    assert not scalar(conn, "select pgqueue.store_result(%s, %s, %s)", (r["id"], r["token"], Jsonb(2)))
    state = _state(conn, r["id"])
    assert state is not None and (state["state"], state["result"]) == ("succeeded", {"n": 1})


def test_job_state_of_waiting_delayed_running_and_unknown_jobs(conn: Conn) -> None:
    ready = enqueue(conn, envelope(queue="a"))
    later = enqueue(conn, envelope(queue="b"), delay=3600)
    assert _state(conn, ready)["state"] == "waiting"  # type: ignore[index]
    delayed = _state(conn, later)
    assert delayed is not None and delayed["state"] == "delayed" and delayed["tries"] == 3
    reserve(conn, ["a"], 1)
    assert _state(conn, ready)["state"] == "running"  # type: ignore[index]
    assert _state(conn, uuid.uuid4()) is None


def test_a_plain_ack_keeps_nothing_and_notifies_nobody(conn: Conn, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(b"listen pgqueue_ended")
        r = _reserved(conn)
        assert ack(conn, [r["id"]], [r["token"]]) == {r["id"]: True}
        assert _state(conn, r["id"]) is None
        kept = _reserved(conn)
        _ack_results(conn, [kept], [3], [60])
        failed = _reserved(conn, tries=1)
        assert fail(conn, failed["id"], failed["token"])
        heard = [n.payload for n in listener.notifies(timeout=1.0, stop_after=2)]
    assert heard == [str(kept["id"]), str(failed["id"])]


def test_prune_results_deletes_expired_results_and_the_attempts_of_jobs_gone(conn: Conn) -> None:
    kept = _reserved(conn)
    _ack_results(conn, [kept], ["old"], [60])
    retried = _reserved(conn)
    _release(conn, retried, {"exception": "E", "message": "m"})
    [again] = reserve(conn, ["default"], 1)
    assert ack(conn, [again["id"]], [again["token"]])
    live = _reserved(conn)
    _release(conn, live, {"exception": "E", "message": "m"})
    conn.execute(b"update pgqueue.job_results set expires_at = now() - interval '1 second'")
    conn.execute(b"update pgqueue.attempt_failures set failed_at = now() - interval '2 days'")
    assert rows(conn, "select * from pgqueue.prune_results(86400, 100)") == [
        {"results_deleted": 1, "attempts_deleted": 1, "links_deleted": 0}]
    assert scalar(conn, "select count(*) from pgqueue.job_results") == 0
    assert [a["job_id"] for a in rows(conn, "select job_id from pgqueue.attempt_failures")] == [live["id"]]
    with pytest.raises(errors.InvalidParameterValue, match="batch must be >= 1"):
        rows(conn, "select * from pgqueue.prune_results(1, 0)")


def test_progress_is_fenced_checked_and_shown_by_job_state(conn: Conn) -> None:
    r = _reserved(conn)
    assert scalar(conn, "select pgqueue.progress(%s, %s, 0.25, %s)", (r["id"], r["token"], Jsonb({"rows": 10})))
    assert not scalar(conn, "select pgqueue.progress(%s, %s, 0.5, null)", (r["id"], r["token"] + 1))
    progress = _state(conn, r["id"])["progress"]  # type: ignore[index]
    assert (progress["fraction"], progress["note"], progress["attempt"]) == (0.25, {"rows": 10}, 1)
    with pytest.raises(errors.InvalidParameterValue, match="fraction must be null or a number from 0 to 1"):
        scalar(conn, "select pgqueue.progress(%s, %s, 1.5, null)", (r["id"], r["token"]))
    with pytest.raises(errors.InvalidParameterValue, match="at most 4096 bytes"):
        scalar(conn, "select pgqueue.progress(%s, %s, null, %s)", (r["id"], r["token"], Jsonb("x" * 5000)))

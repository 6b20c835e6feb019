"""The stored functions other than the reservation itself: failure, retry, bulk and
operator calls, and what each does with bad input."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.types.json import Jsonb

from tests.helpers import envelope
from tests.sql_calls import (
    Conn,
    Row,
    ack,
    db_epoch,
    enqueue,
    enqueue_many,
    expire_lease,
    fail,
    failures,
    job,
    jobs,
    make_due,
    reserve,
    rows,
    scalar,
)


def _reserved(conn: Conn, **env: Any) -> Row:
    enqueue(conn, envelope(**env))
    [r] = reserve(conn, [env.get("queue", "default")], 1)
    return r


def _failed(conn: Conn, **env: Any) -> tuple[Row, uuid.UUID]:
    """A job reserved then failed: its last reservation and the failure id."""
    r = _reserved(conn, **env)
    assert fail(conn, r["id"], r["token"])
    [f] = [f for f in failures(conn) if f["job_id"] == r["id"]]
    return r, f["id"]


# ----------------------------------------------------------------------------- fail


def test_fail_moves_the_job_to_failed_jobs(conn: Conn) -> None:
    r = _reserved(conn, queue="mail", tries=3)
    assert fail(conn, r["id"], r["token"], exception="app.jobs.SmtpDown", message="550 no",
                traceback="Traceback (most recent call last): ...", reason="exception")
    assert job(conn, r["id"]) is None
    [f] = failures(conn)
    assert f["job_id"] == r["id"] and f["queue"] == "mail" and f["connection"] == "database"
    assert f["envelope"] == r["envelope"] and f["attempts"] == 1
    assert (f["exception"], f["message"], f["reason"]) == ("app.jobs.SmtpDown", "550 no", "exception")
    assert f["traceback"].startswith("Traceback")


def test_fail_is_all_or_nothing_when_the_failure_record_cannot_be_written(conn: Conn) -> None:
    r = _reserved(conn)
    before = job(conn, r["id"])
    conn.execute(b"""
        create function pg_temp.refuse() returns trigger language plpgsql as $$
        begin raise exception 'failed_jobs is read-only in this test'; end $$;
        create trigger refuse before insert on pgqueue.failed_jobs
            for each row execute function pg_temp.refuse();
    """)
    with pytest.raises(errors.RaiseException, match="read-only in this test"):
        fail(conn, r["id"], r["token"])
    # No vanished job without its record: the reservation is intact and recovers on expiry.
    assert job(conn, r["id"]) == before
    assert failures(conn) == []

    conn.execute(b"drop trigger refuse on pgqueue.failed_jobs")
    assert fail(conn, r["id"], r["token"]) is True
    # And no failure record for a live job.
    assert job(conn, r["id"]) is None
    assert [f["job_id"] for f in failures(conn)] == [r["id"]]


def test_fail_rolled_back_with_the_callers_transaction_leaves_the_job(conn: Conn, dsn: str) -> None:
    r = _reserved(conn)
    with psycopg.connect(dsn) as worker:
        assert fail(worker, r["id"], r["token"])
        worker.rollback()
    stored = job(conn, r["id"])
    assert stored is not None and stored["token"] == r["token"]
    assert failures(conn) == []


def test_record_failure_records_a_job_that_never_lived_in_jobs(conn: Conn) -> None:
    env = envelope(queue="sync-q")
    env["connection"] = "sync"
    failure_id = scalar(conn, "select pgqueue.record_failure(%s, 1, 'app.Boom', 'boom', null)", (Jsonb(env),))
    [f] = failures(conn)
    assert f["id"] == failure_id
    assert (f["job_id"], f["connection"], f["queue"], f["reason"]) == (
        uuid.UUID(env["id"]), "sync", "sync-q", "exception")


# ---------------------------------------------------------------------------- retry


def test_retry_failed_keeps_the_job_id_resets_attempts_and_issues_a_newer_token(conn: Conn) -> None:
    r, failure_id = _failed(conn, tries=2)
    before = scalar(conn, "select last_value from pgqueue.lease_token_seq")
    assert scalar(conn, "select pgqueue.retry_failed(%s)", (failure_id,)) == r["id"]
    assert failures(conn) == []
    stored = job(conn, r["id"])
    assert stored is not None
    assert (stored["attempts"], stored["token"], stored["max_tries"]) == (0, None, 2)
    assert stored["envelope"] == r["envelope"]

    [again] = reserve(conn, ["default"], 1)
    assert again["id"] == r["id"] and again["attempts"] == 1
    assert again["token"] > r["token"] and again["token"] > before
    # The token of the failed run stays dead.
    assert ack(conn, [r["id"]], [r["token"]]) == {r["id"]: False}
    assert ack(conn, [r["id"]], [again["token"]]) == {r["id"]: True}


def test_retry_failed_refuses_a_passed_deadline(conn: Conn) -> None:
    _, failure_id = _failed(conn, retry_until=db_epoch(conn, 3600))
    conn.execute(b"update pgqueue.failed_jobs"
                 b" set envelope = jsonb_set(envelope, '{retry_until}', to_jsonb(extract(epoch from now()) - 1))")
    with pytest.raises(psycopg.Error, match="deadline") as caught:
        scalar(conn, "select pgqueue.retry_failed(%s)", (failure_id,))
    assert caught.value.sqlstate == "PGQ01"
    assert [f["id"] for f in failures(conn)] == [failure_id]
    assert jobs(conn) == []


def test_retry_failed_refuses_an_unknown_failure(conn: Conn) -> None:
    with pytest.raises(errors.NoDataFound, match="no failed job") as caught:
        scalar(conn, "select pgqueue.retry_failed(%s)", (uuid.uuid4(),))
    assert caught.value.sqlstate == "P0002"


def test_retry_failed_refuses_when_the_job_is_queued_again(conn: Conn) -> None:
    env = envelope()
    enqueue(conn, env)
    failure_id = scalar(conn, "select pgqueue.record_failure(%s, 1, 'app.Boom', 'boom', null)", (Jsonb(env),))
    with pytest.raises(psycopg.Error) as caught:
        scalar(conn, "select pgqueue.retry_failed(%s)", (failure_id,))
    assert caught.value.sqlstate == "PGQ02"
    assert len(failures(conn)) == 1 and len(jobs(conn)) == 1


def test_retry_failed_all_retries_what_its_deadline_allows(conn: Conn) -> None:
    a1, _ = _failed(conn, queue="a")
    a2, _ = _failed(conn, queue="a", retry_until=db_epoch(conn, 3600))
    late, late_failure = _failed(conn, queue="a", retry_until=db_epoch(conn, 3600))
    b1, _ = _failed(conn, queue="b")
    conn.execute(b"update pgqueue.failed_jobs"
                 b" set envelope = jsonb_set(envelope, '{retry_until}', to_jsonb(extract(epoch from now()) - 1))"
                 b" where id = %s", (late_failure,))

    assert scalar(conn, "select pgqueue.retry_failed_all('a')") == 2
    assert {j["id"] for j in jobs(conn)} == {a1["id"], a2["id"]}
    assert {f["job_id"] for f in failures(conn)} == {late["id"], b1["id"]}

    assert scalar(conn, "select pgqueue.retry_failed_all()") == 1
    assert {j["id"] for j in jobs(conn)} == {a1["id"], a2["id"], b1["id"]}
    assert [f["id"] for f in failures(conn)] == [late_failure]
    assert {j["attempts"] for j in jobs(conn)} == {0}


def test_retry_failed_all_puts_a_job_that_failed_twice_back_once(conn: Conn) -> None:
    env = envelope()
    for attempts in (1, 2):
        scalar(conn, "select pgqueue.record_failure(%s, %s, 'app.Boom', 'boom', null)", (Jsonb(env), attempts))
    assert scalar(conn, "select pgqueue.retry_failed_all()") == 1
    assert [j["id"] for j in jobs(conn)] == [uuid.UUID(env["id"])]
    # The most recent record is the one consumed; the older one stays for the record.
    [left] = failures(conn)
    assert left["attempts"] == 1


def test_forget_failed(conn: Conn) -> None:
    _, failure_id = _failed(conn)
    assert scalar(conn, "select pgqueue.forget_failed(%s)", (failure_id,)) is True
    assert scalar(conn, "select pgqueue.forget_failed(%s)", (failure_id,)) is False
    assert failures(conn) == []


def test_flush_failed_by_queue_and_by_age(conn: Conn) -> None:
    for queue in ("a", "a", "b", "c"):
        _failed(conn, queue=queue)
    conn.execute(b"update pgqueue.failed_jobs set failed_at = now() - interval '2 days' where queue = 'c'")
    assert scalar(conn, "select pgqueue.flush_failed('a')") == 2
    assert scalar(conn, "select pgqueue.flush_failed(null, interval '1 day')") == 1
    assert [f["queue"] for f in failures(conn)] == ["b"]
    assert scalar(conn, "select pgqueue.flush_failed()") == 1
    assert failures(conn) == []


# ------------------------------------------------------------------ release_unstarted


def test_release_unstarted_gives_the_attempt_back(conn: Conn) -> None:
    enqueue_many(conn, [envelope(tries=1) for _ in range(3)])
    held = reserve(conn, ["default"], 3)
    stale = held[0]["token"] - 1
    result = rows(conn, "select * from pgqueue.release_unstarted(%s::uuid[], %s::bigint[])",
                  ([r["id"] for r in held] + [held[0]["id"]], [r["token"] for r in held] + [stale]))
    assert sum(r["released"] for r in result) == 3
    assert {j["attempts"] for j in jobs(conn)} == {0}
    assert {j["token"] for j in jobs(conn)} == {None}
    # With tries=1 the jobs can still run: the shutdown did not eat their only attempt.
    again = reserve(conn, ["default"], 3)
    assert len(again) == 3 and {r["attempts"] for r in again} == {1}
    assert failures(conn) == []


# ----------------------------------------------------------------------- enqueue_many


def test_enqueue_many_inserts_ready_and_delayed_jobs(conn: Conn) -> None:
    envs = [envelope("a"), envelope("a", priority=3), envelope("b", tries=7)]
    assert enqueue_many(conn, envs, [0, 3600, 0]) == 3
    stored = {str(j["id"]): j for j in jobs(conn)}
    assert set(stored) == {e["id"] for e in envs}
    for env in envs:
        row = stored[env["id"]]
        assert (row["queue"], row["priority"], row["max_tries"], row["attempts"]) == (
            env["queue"], env["priority"], env["tries"], 0)
        assert row["envelope"] == env
    stats = rows(conn, "select queue, ready, delayed from pgqueue.queue_stats order by queue")
    assert stats == [{"queue": "a", "ready": 1, "delayed": 1}, {"queue": "b", "ready": 1, "delayed": 0}]


def test_enqueue_many_of_nothing(conn: Conn) -> None:
    assert enqueue_many(conn, []) == 0


def test_enqueue_many_is_one_statement_all_or_nothing(conn: Conn) -> None:
    envs = [envelope(), envelope()]
    envs[1]["id"] = envs[0]["id"]
    with pytest.raises(errors.UniqueViolation):
        enqueue_many(conn, envs)
    assert jobs(conn) == []


def test_enqueue_keeps_the_retry_until_deadline(conn: Conn) -> None:
    deadline = db_epoch(conn, 600)
    job_id = enqueue(conn, envelope(retry_until=deadline))
    assert scalar(conn, "select extract(epoch from retry_until)::double precision from pgqueue.jobs"
                        " where id = %s", (job_id,)) == pytest.approx(deadline, abs=1e-5)


# ---------------------------------------------------------------- clear and next_due


def test_clear_removes_ready_delayed_and_reserved_jobs_of_one_queue(conn: Conn) -> None:
    enqueue_many(conn, [envelope("a") for _ in range(3)])
    enqueue(conn, envelope("a"), delay=3600)
    held = _reserved(conn, queue="a")
    enqueue_many(conn, [envelope("b") for _ in range(2)])
    assert scalar(conn, "select pgqueue.clear('a')") == 5
    assert {j["queue"] for j in jobs(conn)} == {"b"}
    assert ack(conn, [held["id"]], [held["token"]]) == {held["id"]: False}
    assert scalar(conn, "select pgqueue.clear('a')") == 0


def test_next_due(conn: Conn) -> None:
    assert scalar(conn, "select pgqueue.next_due(array['a', 'b'])") is None
    enqueue(conn, envelope("a"), delay=7200)
    enqueue(conn, envelope("a", priority=5), delay=3600)
    later_b = enqueue(conn, envelope("b"), delay=1800)
    enqueue(conn, envelope("c"), delay=60)

    def due_of(job_id: uuid.UUID) -> Any:
        return scalar(conn, "select available_at from pgqueue.jobs where id = %s", (job_id,))

    earliest_a = scalar(conn, "select min(available_at) from pgqueue.jobs where queue = 'a'")
    assert scalar(conn, "select pgqueue.next_due(array['a'])") == earliest_a
    assert scalar(conn, "select pgqueue.next_due(array['a', 'b'])") == due_of(later_b)
    assert scalar(conn, "select pgqueue.next_due(array['nothing'])") is None

    # A live lease ends at a known time too: next_due reports it.
    held = _reserved(conn, queue="d")
    assert scalar(conn, "select pgqueue.next_due(array['d'])") == held["lease_expires_at"]
    expire_lease(conn, held["id"])
    assert scalar(conn, "select pgqueue.next_due(array['d'])") == due_of(held["id"])


# -------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("delay", [float("nan"), -1.0, float("inf")])
def test_enqueue_refuses_a_bad_delay(conn: Conn, delay: float) -> None:
    with pytest.raises(errors.InvalidParameterValue, match="delay must be a finite number"):
        enqueue(conn, envelope(), delay)
    with pytest.raises(errors.InvalidParameterValue, match="every delay must be a finite number"):
        enqueue_many(conn, [envelope()], [delay])
    assert jobs(conn) == []


def test_enqueue_refuses_a_null_delay(conn: Conn) -> None:
    with pytest.raises(errors.InvalidParameterValue):
        scalar(conn, "select pgqueue.enqueue(%s, null)", (Jsonb(envelope()),))


def test_enqueue_many_refuses_mismatched_or_malformed_input(conn: Conn) -> None:
    with pytest.raises(errors.InvalidParameterValue, match="2 envelopes but 1 delays"):
        enqueue_many(conn, [envelope(), envelope()], [0.0])
    with pytest.raises(errors.InvalidParameterValue, match="must be a JSON array"):
        scalar(conn, "select pgqueue.enqueue_many(%s)", (Jsonb(envelope()),))
    assert jobs(conn) == []


@pytest.mark.parametrize("max_jobs", [0, -3])
def test_reserve_refuses_a_batch_below_one(conn: Conn, max_jobs: int) -> None:
    with pytest.raises(errors.InvalidParameterValue, match="max_jobs must be >= 1"):
        reserve(conn, ["default"], max_jobs)


@pytest.mark.parametrize("lease", [0.0, -1.0, float("nan"), float("inf")])
def test_reserve_and_extend_refuse_a_bad_lease(conn: Conn, lease: float) -> None:
    r = _reserved(conn)
    with pytest.raises(errors.InvalidParameterValue, match="lease_seconds must be a finite number"):
        reserve(conn, ["default"], 1, lease)
    with pytest.raises(errors.InvalidParameterValue, match="seconds must be a finite number"):
        rows(conn, "select * from pgqueue.extend(%s, %s, %s)", (r["id"], r["token"], lease))


def test_reserve_refuses_no_queues(conn: Conn) -> None:
    with pytest.raises(errors.InvalidParameterValue, match="at least one queue"):
        reserve(conn, [], 1)


@pytest.mark.parametrize("delay", [float("nan"), -1.0, float("inf")])
def test_release_refuses_a_bad_delay(conn: Conn, delay: float) -> None:
    r = _reserved(conn)
    with pytest.raises(errors.InvalidParameterValue, match="delay must be a finite number"):
        scalar(conn, "select pgqueue.release(%s, %s, %s)", (r["id"], r["token"], delay))
    stored = job(conn, r["id"])
    assert stored is not None and stored["token"] == r["token"]


@pytest.mark.parametrize("function", ["ack", "release_unstarted"])
def test_per_job_calls_refuse_mismatched_arrays(conn: Conn, function: str) -> None:
    r = _reserved(conn)
    statement = {"ack": "select * from pgqueue.ack(%s::uuid[], %s::bigint[])",
                 "release_unstarted": "select * from pgqueue.release_unstarted(%s::uuid[], %s::bigint[])"}
    with pytest.raises(errors.InvalidParameterValue, match="1 ids but 2 tokens"):
        rows(conn, statement[function], ([r["id"]], [r["token"], r["token"]]))
    stored = job(conn, r["id"])
    assert stored is not None and stored["token"] == r["token"]


def test_fail_refuses_an_unknown_reason_and_changes_nothing(conn: Conn) -> None:
    r = _reserved(conn)
    with pytest.raises(errors.CheckViolation):
        fail(conn, r["id"], r["token"], reason="because")
    assert job(conn, r["id"]) is not None and failures(conn) == []


# ----------------------------------------------------------------- verbatim storage

AWKWARD = [
    "it's",
    "semi;colon; drop table pgqueue.jobs; --",
    "$$dollar$$ $q$ quoted $q$",
    'double "quotes" and \\backslash',
    "ünïcødé 队列 🚀",
    "percent %s %(name)s {braces}",
]


@pytest.mark.parametrize("queue", AWKWARD)
def test_awkward_queue_names_and_args_round_trip_verbatim(conn: Conn, queue: str) -> None:
    args = {"text": queue, "sql": "'); delete from pgqueue.jobs; --", "dollars": "$$ $body$ $$",
            "nested": {"list": [queue, None, 1.5, True]}, queue: "as a key"}
    env = envelope(queue, args=args, tries=1)
    job_id = enqueue(conn, env)
    enqueue_many(conn, [envelope(queue, args=args)])
    assert scalar(conn, "select count(*) from pgqueue.jobs where queue = %s", (queue,)) == 2
    stats = rows(conn, "select queue, ready from pgqueue.queue_stats")
    assert stats == [{"queue": queue, "ready": 2}]

    [r] = reserve(conn, [queue], 1)
    assert r["id"] == job_id and r["queue"] == queue and r["envelope"] == env
    assert r["envelope"]["args"] == args
    assert fail(conn, r["id"], r["token"], message=queue, traceback=queue)
    [f] = failures(conn)
    assert (f["queue"], f["message"], f["traceback"], f["envelope"]) == (queue, queue, queue, env)
    assert scalar(conn, "select pgqueue.clear(%s)", (queue,)) == 1
    assert jobs(conn) == []


def test_make_due_helper_only_touches_unreserved_jobs(conn: Conn) -> None:
    # Guards the time simulation the other tests rely on.
    held = _reserved(conn)
    enqueue(conn, envelope(), delay=60)
    assert make_due(conn) == 1
    stored = job(conn, held["id"])
    assert stored is not None and stored["available_at"] == held["lease_expires_at"]

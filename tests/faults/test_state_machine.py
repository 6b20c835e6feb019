"""A hypothesis state machine drives the stored functions against a model of the queue.

Rules: dispatch, reserve, ack, release, release_unstarted, extend, fail, expire (the lease is
moved into the past), retry_failed (and retry of an unknown failure), each with current or
stale tokens. After every step the invariants are checked against the database: each job in
exactly one place, attempts and tokens as modelled, tokens strictly increasing and unique,
stale tokens refused without any change.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from psycopg.types.json import Jsonb

from tests.helpers import envelope

QUEUE = "machine"
LEASE = 60.0


@dataclass
class ModelJob:
    id: uuid.UUID
    max_tries: int
    attempts: int = 0
    token: int | None = None
    state: str = "ready"  # ready | reserved | expired (lease in the past) | done | failed
    tokens: list[int] = field(default_factory=list)
    failure_id: uuid.UUID | None = None

    @property
    def live(self) -> bool:
        return self.state in ("ready", "reserved", "expired")


class QueueMachine(RuleBasedStateMachine):
    conn: psycopg.Connection[Any]

    def __init__(self) -> None:
        super().__init__()
        self.conn.execute("truncate pgqueue.jobs, pgqueue.failed_jobs")
        self.jobs: dict[uuid.UUID, ModelJob] = {}
        row = self.conn.execute(
            "select coalesce((select last_value from pgqueue.lease_token_seq where is_called), 0)").fetchone()
        assert row is not None
        self.highest_token = int(row[0])

    # ------------------------------------------------------------------ helpers
    def held(self) -> list[ModelJob]:
        return [j for j in self.jobs.values() if j.state in ("reserved", "expired")]

    def one(self, statement: str, *params: Any) -> Any:
        row = self.conn.execute(statement.encode(), params).fetchone()
        assert row is not None
        return row[0]

    def pick_token(self, job: ModelJob, stale: bool) -> int:
        if not stale:
            assert job.token is not None
            return job.token
        older = [t for t in job.tokens if t != job.token]
        return older[-1] if older else self.highest_token + 1_000_000  # superseded, or never issued

    # -------------------------------------------------------------------- rules
    @rule(tries=st.integers(1, 3))
    def dispatch(self, tries: int) -> None:
        job_id = self.one("select pgqueue.enqueue(%s)", Jsonb(envelope(QUEUE, tries=tries)))
        self.jobs[job_id] = ModelJob(id=job_id, max_tries=tries)

    @rule(n=st.integers(1, 4))
    def reserve(self, n: int) -> None:
        eligible = [j for j in self.jobs.values() if j.state in ("ready", "expired")]
        doomed = {j.id for j in eligible if j.attempts >= j.max_tries}
        grantable = {j.id for j in eligible} - doomed
        failed_before = {r[0] for r in self.conn.execute("select job_id from pgqueue.failed_jobs")}
        rows = self.conn.execute("select id, token, attempts from pgqueue.reserve(%s, %s, %s)",
                                 ([QUEUE], n, LEASE)).fetchall()
        moved = {r[0]: (r[1], r[2]) for r in self.conn.execute(
            "select job_id, reason, id from pgqueue.failed_jobs").fetchall() if r[0] not in failed_before}
        granted = [r[0] for r in rows]
        assert set(granted) <= grantable and len(set(granted)) == len(granted)
        assert len(granted) == min(n, len(grantable))
        assert set(moved) <= doomed
        if len(granted) < n:
            assert set(moved) == doomed  # nothing reservable left unexamined
        # One call hands out its tokens in no particular row order, but each is new and above
        # every token any earlier call handed out.
        assert all(token > self.highest_token for _, token, _ in rows), "tokens must strictly increase"
        self.highest_token = max([self.highest_token, *(token for _, token, _ in rows)])
        for job_id, token, attempts in rows:
            job = self.jobs[job_id]
            assert attempts == job.attempts + 1
            job.attempts, job.token, job.state = attempts, token, "reserved"
            job.tokens.append(token)
        for job_id, (reason, failure_id) in moved.items():
            job = self.jobs[job_id]
            expected = "lease_expired_after_final_attempt" if job.state == "expired" else "attempts_exhausted"
            assert reason == expected
            job.state, job.token, job.failure_id = "failed", None, failure_id

    @precondition(lambda self: self.held())
    @rule(data=st.data(), stale=st.booleans())
    def ack(self, data: st.DataObject, stale: bool) -> None:
        job = data.draw(st.sampled_from(self.held()))
        token = self.pick_token(job, stale)
        [(job_id, acked)] = self.conn.execute("select * from pgqueue.ack(%s, %s)", ([job.id], [token])).fetchall()
        assert job_id == job.id and acked is (not stale)
        if not stale:
            job.state, job.token = "done", None

    @precondition(lambda self: self.held())
    @rule(data=st.data(), stale=st.booleans())
    def release(self, data: st.DataObject, stale: bool) -> None:
        job = data.draw(st.sampled_from(self.held()))
        accepted = self.one("select pgqueue.release(%s, %s, 0)", job.id, self.pick_token(job, stale))
        assert accepted is (not stale)
        if not stale:
            job.state, job.token = "ready", None  # the attempt counts

    @precondition(lambda self: self.held())
    @rule(data=st.data(), stale=st.booleans())
    def release_unstarted(self, data: st.DataObject, stale: bool) -> None:
        job = data.draw(st.sampled_from(self.held()))
        [(_, released)] = self.conn.execute("select * from pgqueue.release_unstarted(%s, %s)",
                                            ([job.id], [self.pick_token(job, stale)])).fetchall()
        assert released is (not stale)
        if not stale:
            job.state, job.token, job.attempts = "ready", None, max(job.attempts - 1, 0)

    @precondition(lambda self: self.held())
    @rule(data=st.data(), stale=st.booleans())
    def extend(self, data: st.DataObject, stale: bool) -> None:
        job = data.draw(st.sampled_from(self.held()))
        extended = self.one("select extended from pgqueue.extend(%s, %s, %s)", job.id,
                            self.pick_token(job, stale), LEASE)
        assert extended is (not stale)
        if not stale:
            job.state = "reserved"

    @precondition(lambda self: self.held())
    @rule(data=st.data(), stale=st.booleans())
    def fail(self, data: st.DataObject, stale: bool) -> None:
        job = data.draw(st.sampled_from(self.held()))
        accepted = self.one("select pgqueue.fail(%s, %s, 'RuntimeError', 'boom', null, 'exception')", job.id,
                            self.pick_token(job, stale))
        assert accepted is (not stale)
        if not stale:
            job.state, job.token = "failed", None
            job.failure_id = self.one("select id from pgqueue.failed_jobs where job_id = %s", job.id)

    @precondition(lambda self: any(j.state == "reserved" for j in self.jobs.values()))
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from([j for j in self.jobs.values() if j.state == "reserved"]))
        self.conn.execute("update pgqueue.jobs set available_at = now() - interval '1 second' where id = %s",
                          (job.id,))
        job.state = "expired"

    @precondition(lambda self: any(j.state == "failed" for j in self.jobs.values()))
    @rule(data=st.data())
    def retry_failed(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from([j for j in self.jobs.values() if j.state == "failed"]))
        assert self.one("select pgqueue.retry_failed(%s)", job.failure_id) == job.id
        job.state, job.attempts, job.token, job.failure_id = "ready", 0, None, None

    @rule()
    def retry_unknown_failure(self) -> None:
        with pytest.raises(psycopg.errors.NoDataFound, match="no failed job with failure id"):
            self.conn.execute("select pgqueue.retry_failed(%s)", (uuid.uuid4(),))

    # --------------------------------------------------------------- invariants
    @invariant()
    def database_matches_the_model(self) -> None:
        live = {r[0]: (r[1], r[2], r[3]) for r in self.conn.execute(
            "select id, attempts, token, available_at <= now() from pgqueue.jobs")}
        failed = [r[0] for r in self.conn.execute("select job_id from pgqueue.failed_jobs")]
        assert len(failed) == len(set(failed)), "a job has two failure records"
        assert not set(live) & set(failed), "a job is both queued and failed"
        expected_live = {j.id: (j.attempts, j.token) for j in self.jobs.values() if j.live}
        assert {k: v[:2] for k, v in live.items()} == expected_live
        assert set(failed) == {j.id for j in self.jobs.values() if j.state == "failed"}
        for job in self.jobs.values():
            if job.live:
                reservable = live[job.id][2]
                assert reservable is (job.state in ("ready", "expired")), (job, live[job.id])
        tokens = [t for j in self.jobs.values() for t in j.tokens]
        assert len(tokens) == len(set(tokens)), "a token was issued twice"


def test_stored_functions_follow_the_model(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        QueueMachine.conn = conn
        run_state_machine_as_test(QueueMachine, settings=settings(
            max_examples=50, stateful_step_count=30, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))

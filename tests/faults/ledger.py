"""The ledger: what every test job did, what the database accepted, and the checker.

Installed into a test's database by :func:`install_ledger`:

- ``fault_ledger``: one row per execution of a handler (job id, attempt, token, worker pid),
  written by the handler itself (see :mod:`tests.faults.fault_jobs`);
- ``fault_dispatched``: every job id ever inserted into ``pgqueue.jobs`` (an AFTER INSERT
  trigger), so the checker knows what was dispatched without trusting the producer;
- ``fault_reservations``: every token handed out (an AFTER UPDATE trigger on the token), with
  the attempts it came with, whether or not a handler ever ran under it;
- ``fault_acks``: every row deleted from ``pgqueue.jobs`` (an AFTER DELETE trigger) with the
  token and attempts it carried and whether the same transaction recorded a failure for it
  (``fail``: ``pgqueue.fail`` or a reservation that gave up) or not (``ack``). A delete by
  ``pgqueue.ack`` only happens when the caller's token matched, so an ``ack`` row is an
  accepted acknowledgement and its token the one that was accepted.

:func:`check_ledger` then asserts, for every dispatched job: completed exactly once or failed
exactly once (never both, never neither); the accepted acknowledgement carried the highest
token ever issued for the job (no superseded holder was accepted); the attempts recorded by
handlers match the attempts column of the deleted row and of ``failed_jobs``.

The checker assumes the run neither retries failures nor clears queues (both legitimately
give one job id a second life), which no fault test does.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg import sql

LEDGER_SCHEMA = """
create table if not exists fault_ledger (
    job_id     uuid        not null,
    attempt    integer     not null,
    token      bigint      not null,
    worker_pid integer     not null,
    at         timestamptz not null default clock_timestamp()
);
create table if not exists fault_dispatched (
    job_id uuid primary key,
    at     timestamptz not null default clock_timestamp()
);
create table if not exists fault_acks (
    job_id   uuid        not null,
    token    bigint,
    attempts integer     not null,
    kind     text        not null,
    at       timestamptz not null default clock_timestamp()
);

create table if not exists fault_reservations (
    job_id   uuid        not null,
    token    bigint      not null,
    attempts integer     not null,
    at       timestamptz not null default clock_timestamp()
);
create table if not exists fault_echo (
    job_id uuid  not null,
    queue  text  not null,
    text   text  not null,
    data   jsonb
);

-- The triggers fire inside pgqueue's functions, which pin search_path = pg_catalog, pg_temp:
-- each trigger function keeps the path it was created with, to find the ledger tables.
create or replace function fault_note_dispatch() returns trigger language plpgsql
set search_path from current as $$
begin
    insert into fault_dispatched (job_id) values (new.id) on conflict do nothing;
    return null;
end $$;

-- AFTER triggers of a statement (CTEs included) fire when the whole statement is done, so a
-- failure row inserted by the same pgqueue.fail / pgqueue.reserve statement is visible here.
create or replace function fault_note_delete() returns trigger language plpgsql
set search_path from current as $$
begin
    insert into fault_acks (job_id, token, attempts, kind)
    values (old.id, old.token, old.attempts,
            case when exists (select 1 from pgqueue.failed_jobs f
                              where f.job_id = old.id and f.xmin = pg_current_xact_id()::xid)
                 then 'fail' else 'ack' end);
    return null;
end $$;

create or replace function fault_note_reservation() returns trigger language plpgsql
set search_path from current as $$
begin
    insert into fault_reservations (job_id, token, attempts) values (new.id, new.token, new.attempts);
    return null;
end $$;

drop trigger if exists fault_reservations on pgqueue.jobs;
create trigger fault_reservations after update of token on pgqueue.jobs
    for each row when (new.token is not null and new.token is distinct from old.token)
    execute function fault_note_reservation();
drop trigger if exists fault_dispatched on pgqueue.jobs;
create trigger fault_dispatched after insert on pgqueue.jobs
    for each row execute function fault_note_dispatch();
drop trigger if exists fault_acks on pgqueue.jobs;
create trigger fault_acks after delete on pgqueue.jobs
    for each row execute function fault_note_delete();
"""


def install_ledger(dsn: str) -> None:
    """Create the ledger tables and triggers in the database of ``dsn``.

    Sessions of that database then commit without waiting for the WAL flush, like the test
    servers the harness starts itself: the faults injected here kill clients and restart the
    server cleanly, neither of which loses a commit that was acknowledged.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(LEDGER_SCHEMA.encode())
        name = conn.info.dbname
        conn.execute(sql.SQL("alter database {} set synchronous_commit = off").format(sql.Identifier(name)))


@dataclass
class LedgerReport:
    """The checker's verdict on one run. ``problems`` must be empty."""

    dispatched: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0
    duplicate_acks: int = 0
    stale_acks: int = 0
    executions: int = 0
    reruns: int = 0
    problems: list[str] = field(default_factory=list)
    failure_reasons: dict[str, int] = field(default_factory=dict)

    def as_row(self) -> dict[str, Any]:
        """The counts (without the problem list) for the report table."""
        row = asdict(self)
        row.pop("problems")
        return row


def _fetch(conn: psycopg.Connection[Any], statement: str) -> list[tuple[Any, ...]]:
    return conn.execute(statement.encode()).fetchall()


def check_ledger(dsn: str, *, allow_pending: bool = False) -> LedgerReport:
    """Check every dispatched job of the database against the ledger; see the module docstring.

    Jobs still in ``pgqueue.jobs`` count as lost unless ``allow_pending`` (a check taken
    mid-run). Raises AssertionError listing the first problems; returns the counts.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        dispatched = [r[0] for r in _fetch(conn, "select job_id from fault_dispatched")]
        deletes: dict[uuid.UUID, list[tuple[int | None, int, str]]] = defaultdict(list)
        for job_id, token, attempts, kind in _fetch(
                conn, "select job_id, token, attempts, kind from fault_acks order by at"):
            deletes[job_id].append((token, attempts, kind))
        failures: dict[uuid.UUID, list[tuple[int, str]]] = defaultdict(list)
        for job_id, attempts, reason in _fetch(conn, "select job_id, attempts, reason from pgqueue.failed_jobs"):
            failures[job_id].append((attempts, reason))
        live = {r[0]: (r[1], r[2]) for r in _fetch(conn, "select id, attempts, token from pgqueue.jobs")}
        runs: dict[uuid.UUID, list[tuple[int, int, int]]] = defaultdict(list)
        for job_id, attempt, token, pid in _fetch(
                conn, "select job_id, attempt, token, worker_pid from fault_ledger order by token"):
            runs[job_id].append((attempt, token, pid))
        max_tries = dict(_fetch(conn, "select id, max_tries from pgqueue.jobs"))
        issued: dict[uuid.UUID, dict[int, int]] = defaultdict(dict)
        for job_id, token, attempts in _fetch(conn, "select job_id, token, attempts from fault_reservations"):
            issued[job_id][token] = attempts

    report = LedgerReport(dispatched=len(dispatched))
    problems = report.problems
    seen_tokens: dict[int, uuid.UUID] = {}
    reasons: dict[str, int] = defaultdict(int)
    for job_id in dispatched:
        job_runs = runs.get(job_id, [])
        job_deletes = deletes.get(job_id, [])
        job_failures = failures.get(job_id, [])
        acks = [d for d in job_deletes if d[2] == "ack"]
        fails = [d for d in job_deletes if d[2] == "fail"]
        report.executions += len(job_runs)
        report.reruns += max(0, len(job_runs) - 1)

        # The ledger itself: one row per reservation, attempts rising with the token.
        previous_attempt = 0
        for attempt, token, _pid in job_runs:
            other = seen_tokens.setdefault(token, job_id)
            if other != job_id:
                problems.append(f"token {token} was handed to jobs {other} and {job_id}")
            if attempt <= previous_attempt:
                problems.append(f"job {job_id}: attempt {attempt} (token {token}) ran after attempt "
                                f"{previous_attempt} with an older token")
            previous_attempt = attempt
        tokens = [t for _, t, _ in job_runs]
        if len(set(tokens)) != len(tokens):
            problems.append(f"job {job_id}: a handler ran twice under one reservation (tokens {tokens})")
        reservations = issued.get(job_id, {})
        for attempt, token, _pid in job_runs:
            if reservations.get(token) != attempt:
                problems.append(f"job {job_id}: a handler ran attempt {attempt} under token {token}, but that "
                                f"reservation gave attempts={reservations.get(token)}")
        # The highest token ever issued for the job, whether or not a handler ran under it.
        highest = max([*reservations, *tokens], default=None)

        if job_id in live:
            if not allow_pending:
                report.lost += 1
                problems.append(f"job {job_id}: still in pgqueue.jobs (attempts={live[job_id][0]}, "
                                f"token={live[job_id][1]}) after the run: neither completed nor failed")
            attempts_now = live[job_id][0]
            if job_runs and job_runs[-1][0] > attempts_now:
                problems.append(f"job {job_id}: ledger attempt {job_runs[-1][0]} above attempts column {attempts_now}")
            if job_runs and job_id in max_tries and job_runs[-1][0] > max_tries[job_id]:
                problems.append(f"job {job_id}: ran attempt {job_runs[-1][0]} of {max_tries[job_id]} tries")
            continue

        if len(acks) > 1:
            report.duplicate_acks += len(acks) - 1
            problems.append(f"job {job_id}: {len(acks)} acknowledgements accepted: {acks}")
        if acks and (fails or job_failures):
            problems.append(f"job {job_id}: both completed and failed (acks {acks}, failures {job_failures})")
        if len(fails) != len(job_failures):
            problems.append(f"job {job_id}: {len(fails)} deletions by a failure but {len(job_failures)} "
                            "failed_jobs rows")
        if len(acks) == 1 and not fails and not job_failures:
            report.completed += 1
            token, attempts, _ = acks[0]
            if token is None or token != highest:
                report.stale_acks += 1
                problems.append(f"job {job_id}: ack accepted with token {token} but token {highest} had been "
                                "issued since: a superseded holder was acknowledged")
            matching = [a for a, t, _ in job_runs if t == token]
            if not matching:
                problems.append(f"job {job_id}: ack accepted with token {token}, but no handler ran under it")
            elif matching[0] != attempts:
                problems.append(f"job {job_id}: handler recorded attempt {matching[0]} but the acknowledged row "
                                f"had attempts={attempts}")
        elif len(fails) == 1 and len(job_failures) == 1 and not acks:
            report.failed += 1
            token, attempts, _ = fails[0]
            failed_attempts, reason = job_failures[0]
            reasons[reason] += 1
            if failed_attempts != attempts:
                problems.append(f"job {job_id}: failed_jobs.attempts={failed_attempts} but the row had "
                                f"attempts={attempts}")
            if job_runs and job_runs[-1][0] > attempts:
                problems.append(f"job {job_id}: ledger attempt {job_runs[-1][0]} above failed attempts {attempts}")
            if token is not None and highest is not None and token != highest:
                problems.append(f"job {job_id}: failed with token {token} but token {highest} had been issued")
        elif not acks and not fails and not job_failures:
            report.lost += 1
            problems.append(f"job {job_id}: lost — neither in pgqueue.jobs, nor acknowledged, nor failed")
    report.failure_reasons = dict(reasons)
    assert not problems, f"{len(problems)} ledger problems, first ones:\n" + "\n".join(problems[:20])
    return report

"""Security: payloads never import code, SQL is parameterised, and least-privilege roles hold."""

from __future__ import annotations

import itertools
import logging
import re
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from pgqueue import Client, Job
from pgqueue.embedded import EmbeddedPostgres
from pgqueue.worker.depth import DepthSampler
from pgqueue.worker.instruments import Recorder
from pgqueue.worker.scheduler import Scheduler, declared_schedules
from tests.faults.fault_jobs import EchoJob, LedgerJob
from tests.faults.harness import REPO, FaultReport, fault_settings, scalar
from tests.faults.ledger import check_ledger
from tests.helpers import envelope
from tests.sql_calls import enqueue, reserve

ROLES_SQL = REPO / "sql" / "roles" / "least_privilege.sql"


async def drain(client: Client, queues: tuple[str, ...] = ("default",)) -> None:
    worker = await client.worker(queues=queues, concurrency=4, listen=False, poll_interval=0.2)
    await worker.run(stop_when_empty=True)


async def test_job_names_in_payloads_never_import_or_run_code(in_process_ledger: str, producer: Client,
                                                             tmp_path: Path, fault_report: FaultReport) -> None:
    dsn = in_process_ledger
    marker = tmp_path / "pwned"
    modules = [m for m in ("this", "antigravity", "json.tool", "http.server") if m not in sys.modules]
    names = ["os:system", "subprocess:run", "builtins:eval", "pickle:loads",
             *(f"{m}:main" for m in modules), "tests.faults.fault_jobs:LedgerJob", "../../etc/passwd"]
    args = {"command": f"touch {marker}", "args": [["touch", str(marker)]], "source": f"open('{marker}','w')"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        hostile = [conn.execute("select pgqueue.enqueue(%s)", (Jsonb(envelope(name=n, args=args)),)).fetchone()[0]  # type: ignore[index]
                   for n in names]
    await producer.dispatch_many([LedgerJob(n=i) for i in range(10)])
    await drain(producer)

    assert not marker.exists()
    assert [m for m in modules if m in sys.modules] == []
    with psycopg.connect(dsn) as conn:
        reasons: dict[object, object] = dict(conn.execute("select job_id, reason from pgqueue.failed_jobs").fetchall())
    assert [reasons[i] for i in hostile] == ["unknown_job"] * len(names)
    report = check_ledger(dsn)
    assert (report.completed, report.failed) == (10, len(names))
    fault_report.add("hostile job names (module paths, os:system)", len(names), report)


def test_the_library_has_no_pickle_and_no_dynamic_import() -> None:
    source = "\n".join(p.read_text() for p in (REPO / "pgqueue").rglob("*.py"))
    found = re.findall(r"\b(pickle|marshal|shelve|import_module|__import__|eval\(|exec\()", source)
    assert found == []


NASTY = [
    "it's",
    'say "hi"; drop table pgqueue.jobs; --',
    "$$; select pg_sleep(10); $$",
    "$tag$ $$ ' \" \\ %s %(x)s {0} ?",
    "E'\\x41' || chr(39)",
    "naïve 日本 🚀",
]


async def test_quotes_semicolons_and_dollars_are_stored_verbatim(in_process_ledger: str, producer: Client,
                                                                fault_report: FaultReport) -> None:
    dsn = in_process_ledger
    queues = tuple(f"q {text[:150]}" for text in NASTY)
    sent: dict[uuid.UUID, tuple[str, str, dict[str, object]]] = {}
    for queue_name, text in zip(queues, NASTY, strict=True):
        data = {text: [text, {"k": text}], "n": 1}
        [ok] = await producer.dispatch_many([EchoJob(text=text, data=data)], queue=queue_name)
        failing = await producer.dispatch(EchoJob(text=text, data=data, fail=True), queue=queue_name)
        sent[ok] = sent[failing] = (queue_name, text, data)
    assert {s.queue for s in await producer.stats()} == set(queues)
    await drain(producer, queues)

    with psycopg.connect(dsn) as conn:
        echoed = {r[0]: (r[1], r[2], r[3]) for r in conn.execute("select job_id, queue, text, data from fault_echo")}
    assert echoed == sent  # what each handler received, byte for byte
    repository = await producer.failed()
    for queue_name, text in zip(queues, NASTY, strict=True):
        [failure] = await repository.all(queue=queue_name)
        assert (failure.queue, failure.args["text"], failure.args["data"]) == sent[failure.job_id]
        assert failure.message == f"asked to fail: {text}"
        await producer.retry_failed(failure.id)
        assert await producer.clear(queue=queue_name) == 1
    assert scalar(dsn, "select count(*) from pgqueue.jobs") == 0
    assert scalar(dsn, "select to_regclass('pgqueue.jobs') is not null")


@pytest.fixture
def roles(dsn: str) -> Iterator[dict[str, str]]:
    """The least-privilege script applied to the test's database, and one login role per group."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ROLES_SQL.read_bytes())
        suffix = uuid.uuid4().hex[:8]
        logins = {group: f"pgq_{group}_{suffix}" for group in ("producer", "worker", "operator")}
        for group, login in logins.items():
            conn.execute(sql.SQL("create role {} login in role {}").format(
                sql.Identifier(login), sql.Identifier(f"pgqueue_{group}")))
    try:
        yield {group: make_conninfo(dsn, user=login) for group, login in logins.items()}
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for login in logins.values():
                conn.execute(sql.SQL("select pg_terminate_backend(pid) from pg_stat_activity where usename = {}")
                             .format(sql.Literal(login)))
                conn.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(login)))


def scalar_as(dsn: str, statement: str, params: tuple[object, ...] | None = None) -> object:
    """The first column of the first row of ``statement``, run as the role of ``dsn``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(statement.encode(), params).fetchone()
    assert row is not None
    return row[0]


def refused(dsn: str, statement: str, params: tuple[object, ...] | None = None) -> bool:
    """Whether ``statement`` is refused for lack of privilege."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(statement.encode(), params)
        except psycopg.errors.InsufficientPrivilege:
            return True
    return False


async def test_least_privilege_roles(dsn: str, roles: dict[str, str], fault_pyproject: Path) -> None:
    from tests.faults import fault_jobs

    fault_jobs.use_ledger(dsn)  # the test's own superuser connection writes the ledger
    queues = {group: Client(settings=fault_settings(role_dsn, fault_pyproject)) for group, role_dsn in roles.items()}
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create table fault_ledger (job_id uuid, attempt int, token bigint, worker_pid int)")
            conn.execute("create table fault_echo (job_id uuid, queue text, text text, data jsonb)")
        producer, worker_queue, operator = queues["producer"], queues["worker"], queues["operator"]

        # The producer enqueues, one by one and in bulk, and can do nothing else.
        await producer.dispatch(LedgerJob(n=1))
        await producer.dispatch_many([LedgerJob(n=2), EchoJob(text="fails", fail=True)])
        unique = await producer.dispatch_unique(LedgerJob(n=3), "ledger-3")
        assert not unique.duplicate
        assert (await producer.dispatch_unique(LedgerJob(n=3), "ledger-3")).id == unique.id
        p = roles["producer"]
        assert refused(p, "select * from pgqueue.jobs")
        assert refused(p, "select * from pgqueue.failed_jobs")
        assert refused(p, "insert into pgqueue.jobs (id, queue, envelope, max_tries) values (gen_random_uuid(), 'x', "
                          "'{}', 1)")
        assert refused(p, "select * from pgqueue.reserve(array['default'], 10, 30)")
        assert refused(p, "select * from pgqueue.ack(array[gen_random_uuid()], array[1::bigint])")
        assert refused(p, "select pgqueue.retry_failed(gen_random_uuid())")
        assert refused(p, "select pgqueue.clear('default')")
        assert refused(p, "select * from pgqueue.queue_stats")
        assert refused(p, "select nextval('pgqueue.lease_token_seq')")

        # The worker runs them (reserve, LISTEN, ack, fail) and can do nothing else.
        worker = await worker_queue.worker(concurrency=2, poll_interval=0.2)
        await worker.run(stop_when_empty=True)
        assert (worker.stats.acked, worker.stats.failed) == (3, 1)
        w = roles["worker"]
        # Snoozing a job and ticking registered schedules are the worker's too; registering a
        # schedule with the template of its jobs is the producer's (revision 0008).
        assert scalar_as(w, "select pgqueue.snooze(gen_random_uuid(), 1, 5)") == "not_yours"
        # A forced stop gives an interrupted attempt back (revision 0008's release_interrupted).
        assert scalar_as(w, "select pgqueue.release_interrupted(gen_random_uuid(), 1, null, null)") is False
        assert refused(p, "select pgqueue.release_interrupted(gen_random_uuid(), 1, null, null)")
        register = (TICK_SCHEDULE, (Jsonb(tick_template("app:tick")),))
        assert refused(w, *register)
        assert scalar_as(p, *register) == 1
        assert scalar_as(w, "select count(*) from pgqueue.schedule_state(array['app:tick'])") == 1
        assert scalar_as(w, "select pgqueue.enqueue_tick('app:tick', date_trunc('second', clock_timestamp())"
                            " + interval '1 second') is not null") is True
        assert scalar_as(w, "select ticks_deleted + keys_deleted from pgqueue.prune_ticks_and_keys(100)") == 0
        assert refused(w, "select pgqueue.enqueue(%s)", (Jsonb(envelope()),))
        assert refused(w, "select * from pgqueue.jobs")
        assert refused(w, "update pgqueue.jobs set token = null")
        assert refused(w, "select * from pgqueue.failed_jobs")
        assert refused(w, "select pgqueue.retry_failed(gen_random_uuid())")
        assert refused(w, "select pgqueue.flush_failed()")
        assert refused(w, "select pgqueue.clear('default')")

        # The operator reads and retries failures and can neither enqueue nor run jobs.
        repository = await operator.failed()
        [failure] = await repository.all()
        assert failure.args == {"text": "fails", "data": None, "fail": True}
        assert [s.queue for s in await operator.stats()] == ["default"]
        assert await operator.retry_failed(failure.id) == failure.job_id
        # Queue controls, cancel and the schedules' state are the operator's (revision 0004's functions).
        assert await operator.pause() is True
        assert await operator.resume() is True
        await operator.set_limits(concurrency=2)
        assert [(c.queue, c.concurrency) for c in await operator.controls()] == [("default", 2)]
        # issue 28, revision 0010: adaptive partitions and the cut's factor are the operator's too.
        await operator.set_partition_limit("default", "tenant:1", adaptive=(1, 3))
        await operator.set_limits(concurrency=2, adaptive_decrease=0.5)
        await operator.set_aging("default", 30)  # issue 28: priority aging
        assert [c.aging for c in await operator.controls()] == [30.0]
        o = roles["operator"]
        assert scalar_as(o, "select string_agg(schedule, ',') from pgqueue.schedule_ticks") == "app:tick"
        assert scalar_as(o, "select string_agg(name, ',') from pgqueue.schedules") == "app:tick"
        assert await operator.cancel(uuid.uuid4()) == "not_found"
        assert await operator.clear() == 2  # the retried failure and the tick's job
        assert refused(o, "select pgqueue.enqueue(%s)", (Jsonb(envelope()),))
        assert refused(o, "select * from pgqueue.reserve(array['default'], 10, 30)")
        assert refused(o, "select * from pgqueue.ack(array[gen_random_uuid()], array[1::bigint])")
        assert refused(o, "select pgqueue.release_interrupted(gen_random_uuid(), 1, null, null)")
        assert refused(o, "delete from pgqueue.failed_jobs")
        assert refused(o, "update pgqueue.jobs set attempts = 0")
        assert refused(o, "insert into pgqueue.failed_jobs (job_id, connection, queue, envelope, attempts, reason) "
                          "values (gen_random_uuid(), 'd', 'q', '{}', 1, 'exception')")
        assert not refused(o, "select count(*) from pgqueue.jobs")
    finally:
        for client in queues.values():
            await client.close()
        await fault_jobs.close_ledger()
        fault_jobs.use_ledger(None)


def test_a_least_privilege_worker_confirms_a_cancel(dsn: str, roles: dict[str, str]) -> None:
    """Revision 0008: the worker role checks a pgqueue_cancel notification with pgqueue.cancelled
    before it stops a handler (a notification alone is no proof: anyone may send one)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue(conn, envelope())
    w, o = roles["worker"], roles["operator"]
    check = "select cancelled from pgqueue.cancelled(%s::uuid[], %s::bigint[])"
    with psycopg.connect(w, autocommit=True) as conn:
        [held] = reserve(conn, ["default"], 1)
        pair = ([held["id"]], [held["token"]])
        assert conn.execute(check.encode(), pair).fetchall() == [(False,)]  # not cancelled: nothing to stop
        assert scalar_as(o, "select pgqueue.cancel(%s)", (held["id"],)) == "cancelled_running"
        assert conn.execute(check.encode(), pair).fetchall() == [(True,)]
    assert refused(roles["producer"], check, pair)


async def test_a_least_privilege_worker_samples_queue_depths(dsn: str, roles: dict[str, str]) -> None:
    """The worker role's metrics read pgqueue.queue_stats (before, its depth sampler logged
    "permission denied for view queue_stats" every interval and exported no depth), and which
    queues are paused (pgqueue.queues, issue 29)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue(conn, envelope())
        [held] = reserve(conn, ["default"], 1)
        conn.execute(b"select pgqueue.cancel(%s)", (held["id"],))
        conn.execute(b"select pgqueue.pause('stopped')")
        enqueue(conn, envelope("tenants") | {"partition": "t1"})  # issue 28: the per-partition sample
        conn.execute(b"select pgqueue.set_partition_adaptive_limit('tenants', null, 1, 5)")
    w = roles["worker"]
    recorder = Recorder()
    async with await psycopg.AsyncConnection.connect(w, autocommit=True) as conn:
        await DepthSampler(w, recorder, interval=1.0).sample(conn)
    assert recorder.depth["default"]["failed"] == 1 and recorder.depth_sampled_at is not None
    assert recorder.depth["stopped"]["paused"] == 1 and recorder.depth["default"]["paused"] == 0
    assert recorder.partitions["tenants"]["t1"] == {"running": 0, "waiting": 1, "concurrency_limit": 1}
    assert refused(w, "select pgqueue.set_partition_adaptive_limit('tenants', null, 1, 50)")  # operators only
    assert refused(w, "select * from pgqueue.failed_jobs")  # the counts, not the failures
#: Registers 'app:tick' as an every-second schedule, catch-up 5, with the template given.
TICK_SCHEDULE = ("select count(*) from pgqueue.schedule_sync(array['app:tick'], array['every 1s'], array['UTC'], "
                 "array[5], array[1]::bigint[], array[%s]::jsonb[])")


def tick_template(name: str) -> dict[str, object]:
    """The template of a schedule's jobs: an envelope without its id."""
    return {**{k: v for k, v in envelope().items() if k != "id"}, "name": name}


def test_the_worker_role_cannot_enqueue_through_ticks(dsn: str, roles: dict[str, str]) -> None:
    # Issue 24 item 9: enqueue_tick took any envelope under any schedule name from the worker
    # role (which may not enqueue), and a tick it dated 2099 stopped a 1 s schedule.
    p, w = roles["producer"], roles["worker"]
    template = tick_template("app:tick")
    assert scalar_as(p, TICK_SCHEDULE, (Jsonb(template),)) == 1
    assert scalar_as(dsn, "select to_regprocedure('pgqueue.enqueue_tick(text, timestamptz, jsonb)') is null") is True
    tick = "select pgqueue.enqueue_tick(%s, %s::timestamptz)"
    with psycopg.connect(w, autocommit=True) as conn:
        now = conn.execute(b"select date_trunc('second', clock_timestamp())").fetchone()[0]  # type: ignore[index]
        for schedule, when, words in [
                ("app:tick", "2099-01-01 00:00+00", "tick 2099-01-01 00:00:00+00 is in the future"),
                ("app:tick", now + timedelta(seconds=30), "is in the future"),
                ("app:tick", "2020-01-01 00:00+00", "older than its catch-up window (5 tick(s) of at most 1 s"),
                ("app:tick", now + timedelta(milliseconds=500), "has no tick at"),
                ("app:tick", now - timedelta(seconds=30), "is not after the schedule took its current form"),
                ("app:forged", now, "no schedule named 'app:forged' is registered")]:
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=re.escape(words)):
                conn.execute(tick.encode(), (schedule, when))
        due = now + timedelta(seconds=1)
        [job_id] = conn.execute(tick.encode(), ("app:tick", due)).fetchone()  # type: ignore[misc]
        assert conn.execute(tick.encode(), ("app:tick", due)).fetchone() == (None,)  # once per tick
        # Nor may the worker register (or re-register) a template of its own.
        assert refused(w, TICK_SCHEDULE, (Jsonb({**template, "args": {"command": "rm -rf /"}}),))
    with psycopg.connect(dsn) as conn:
        [(stored, count)] = conn.execute(b"select envelope, count(*) over () from pgqueue.jobs").fetchall()
    assert count == 1 and uuid.UUID(stored["id"]) == job_id and job_id.version == 7
    assert stored["schedule"] == "app:tick" and datetime.fromisoformat(stored["tick"]) == due
    assert {k: v for k, v in stored.items() if k not in ("id", "schedule", "tick")} == template


async def test_a_least_privilege_worker_ticks_the_schedules_as_the_producer_registered_them(
        dsn: str, roles: dict[str, str], fault_pyproject: Path, caplog: pytest.LogCaptureFixture) -> None:
    from pgqueue.jobs import _REGISTRY

    class Beat(Job):
        name = "faults:beat"
        schedule = timedelta(seconds=1)
        schedule_catch_up = 5
        schedule_args = {"n": 1}
        n: int

    class Unregistered(Job, register=False):
        name = "faults:unregistered"
        schedule = timedelta(seconds=1)

    class BeatAsDeployedNext(Beat, register=False):  # the worker's code already says every 2 s
        name = "faults:beat"
        schedule = timedelta(seconds=2)

    clients = {group: Client(settings=fault_settings(roles[group], fault_pyproject))
               for group in ("producer", "worker")}
    try:
        [listed] = await clients["producer"].sync_schedules()
        assert (listed.name, listed.expression, listed.catch_up, listed.args) == (
            "faults:beat", "every 1s", 5, {"n": 1})
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(b"update pgqueue.schedules set changed_at = now() - interval '1 hour'")
        worker = clients["worker"]
        config = worker.settings.connection(None)
        scheduler = Scheduler(await worker._store(config), config,
                              declared_schedules([BeatAsDeployedNext, Unregistered], config.name))
        with caplog.at_level(logging.WARNING, logger="pgqueue.scheduler"):
            await scheduler.tick()
            await scheduler.tick()
    finally:
        _REGISTRY.pop(Beat.name)
        for client in clients.values():
            await client.close()
    assert not scheduler.registers
    # Five ticks (the catch-up) of the registered form, a second apart: what the database accepts.
    ticks = [r[0] for r in rows_of(dsn, "select tick from pgqueue.schedule_ticks order by tick")]
    assert len(ticks) >= 5 and all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(ticks))
    assert {r[0] for r in rows_of(dsn, "select envelope->>'name' from pgqueue.jobs")} == {"faults:beat"}
    messages = [r.getMessage() for r in caplog.records]
    assert sum("may not register schedules" in m and "pgqueue schedule:sync" in m for m in messages) == 1
    assert sum("'faults:beat': its schedule is registered as 'every 1s'" in m and "declares 'every 2s'" in m
               for m in messages) == 1
    assert sum("'faults:unregistered': its schedule is not registered" in m for m in messages) == 1


def rows_of(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    """The rows of ``statement``, run as the owner."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(statement.encode()).fetchall()


def test_least_privilege_script_without_createrole_says_what_to_do(owned_server: EmbeddedPostgres) -> None:
    # Its own server: the group roles are cluster-wide, and this test needs them missing.
    with psycopg.connect(owned_server.dsn("app"), autocommit=True) as conn:
        conn.execute(b"create role schema_owner nologin")  # no CREATEROLE
        conn.execute(b"set role schema_owner")
        with pytest.raises(psycopg.errors.InsufficientPrivilege,
                           match="pgqueue_producer, pgqueue_worker, pgqueue_operator do not exist, and role "
                                 "schema_owner may not create them") as caught:
            conn.execute(ROLES_SQL.read_bytes())
        assert "create role pgqueue_producer nologin;" in (caught.value.diag.message_hint or "")
        conn.execute(b"reset role")
        assert scalar_of(conn, "select count(*) from pg_roles where rolname like 'pgqueue\\_%'") == 0
        # What the hint says: an administrator creates the roles, the owner runs the script again.
        conn.execute(b"create role pgqueue_producer nologin; create role pgqueue_worker nologin;"
                     b" create role pgqueue_operator nologin")
        conn.execute(ROLES_SQL.read_bytes())
        assert scalar_of(conn, "select has_function_privilege('pgqueue_producer',"
                               " 'pgqueue.enqueue(jsonb, double precision)', 'execute')") is True


def scalar_of(conn: psycopg.Connection[tuple[object, ...]], statement: str) -> object:
    """The first column of the first row of ``statement``."""
    row = conn.execute(statement.encode()).fetchone()
    assert row is not None
    return row[0]

"""Producers and workers through PgBouncer in transaction pooling mode; LISTEN goes direct."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue import Client
from tests.faults import fault_jobs
from tests.faults.fault_jobs import EffectJob, LedgerJob
from tests.faults.harness import (
    FaultReport,
    WorkerFleet,
    dispatch,
    fault_settings,
    scalar,
    wait_until,
    write_pyproject,
)
from tests.faults.ledger import check_ledger

PGBOUNCER = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer") if os.access(p, os.X_OK)), None)

pytestmark = pytest.mark.skipif(
    PGBOUNCER is None, reason="the pgbouncer binary is not installed (Debian/Ubuntu: apt-get install -y pgbouncer)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_as() -> str | None:
    """PgBouncer refuses to run as root: use the ``postgres`` (or ``nobody``) account then."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    pytest.skip("running as root and there is no postgres/nobody account to run pgbouncer as")


@pytest.fixture
def pgbouncer(ledger_dsn: str) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of the test's database; yields its DSN."""
    assert PGBOUNCER is not None
    server = conninfo_to_dict(ledger_dsn)
    dbname = str(server["dbname"])
    folder = Path(tempfile.mkdtemp(prefix="pgq-bouncer-", dir="/tmp"))
    user = _run_as()
    port = _free_port()
    target = " ".join(f"{key}={server[key]}" for key in ("host", "port", "user") if server.get(key))
    (folder / "users.txt").write_text(f'"{server.get("user", "postgres")}" ""\n')
    (folder / "pgbouncer.ini").write_text(f"""
[databases]
{dbname} = {target} dbname={dbname}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder}/users.txt
pool_mode = transaction
default_pool_size = 8
max_client_conn = 200
server_reset_query =
ignore_startup_parameters = extra_float_digits,options
logfile = {folder}/pgbouncer.log
pidfile = {folder}/pgbouncer.pid
""")
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (folder, *folder.iterdir()):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    process = subprocess.Popen([PGBOUNCER, str(folder / "pgbouncer.ini")], user=user, cwd=folder,
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    dsn = make_conninfo(host="127.0.0.1", port=port, dbname=dbname, user=server.get("user", "postgres"))
    try:
        deadline_tries = 200
        for _ in range(deadline_tries):
            if process.poll() is not None:
                logfile = folder / "pgbouncer.log"
                log = logfile.read_text(errors="replace") if logfile.exists() else ""
                pytest.fail(f"pgbouncer exited with {process.returncode}: {log[-2000:]}")
            try:
                with psycopg.connect(dsn, connect_timeout=2, prepare_threshold=None) as conn:
                    conn.execute("select 1")
                break
            except psycopg.OperationalError:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(0.05)
        else:
            pytest.fail("pgbouncer did not accept connections within 10 s")
        yield dsn
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


async def test_producers_and_workers_through_pgbouncer(ledger_dsn: str, pgbouncer: str, fleet: WorkerFleet,
                                                      tmp_path: Path, fault_report: FaultReport) -> None:
    total = 2000
    listen_dsn = make_conninfo(ledger_dsn, application_name="fault_listener")
    pyproject = write_pyproject(tmp_path, {"prepared_statements": False, "listen_dsn": listen_dsn})
    workers = [fleet.start(pgbouncer, ledger_dsn=ledger_dsn, pyproject=pyproject, concurrency=10, poll_interval=60)
               for _ in range(2)]
    listening = ("select count(*) from pg_stat_activity where application_name = 'fault_listener' "
                 "and query ilike '%listen pgqueue%'")
    await wait_until(lambda: scalar(ledger_dsn, listening) == 2, within=30, what="both workers LISTEN directly",
                     fleet=fleet)
    async with Client(settings=fault_settings(pgbouncer, pyproject)) as producer:
        # Many small batches: the same statements run often enough that psycopg would prepare
        # them, were prepared statements not switched off for this connection.
        await dispatch(producer, [LedgerJob(n=i) for i in range(total)], batch=50)
        for i in range(20):
            await producer.dispatch(LedgerJob(n=total + i))
    await wait_until(lambda: scalar(ledger_dsn, "select count(*) from pgqueue.jobs") == 0, within=60,
                     what="the backlog is done", fleet=fleet)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0], fleet.logs()[-3000:]
    assert "prepared statement" not in fleet.logs()

    report = check_ledger(ledger_dsn)
    assert report.completed == total + 20
    fault_report.add("PgBouncer (transaction mode), LISTEN direct", 1, report)


async def test_effects_through_context_transaction_behind_pgbouncer_commit_once(
        ledger_dsn: str, pgbouncer: str, tmp_path: Path) -> None:
    # context.transaction() begins its transaction and reads its id in one simple query of two
    # statements (issue 24, item 2): a transaction-mode pooler keeps the block on one server
    # connection from that BEGIN to the COMMIT.
    total = 200
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        conn.execute(b"create table fault_effects (job_id uuid not null, n integer not null, token bigint not null)")
    pyproject = write_pyproject(tmp_path, {"prepared_statements": False, "listen_dsn": ledger_dsn})
    fault_jobs.use_ledger(ledger_dsn)  # the handlers run in this process
    try:
        async with Client(settings=fault_settings(pgbouncer, pyproject)) as client:
            await dispatch(client, [EffectJob(n=i) for i in range(total)], batch=50)
            worker = await client.worker(concurrency=8, poll_interval=0.2, maintenance_interval=None)
            assert await worker.run(stop_when_empty=True) == total
    finally:
        await fault_jobs.close_ledger()
        fault_jobs.use_ledger(None)
    assert worker.stats.acked == total and worker.stats.failed == 0
    assert scalar(ledger_dsn, "select count(*) from pgqueue.jobs") == 0
    assert scalar(ledger_dsn, "select count(distinct n) from fault_effects") == total
    assert scalar(ledger_dsn, "select count(*) from fault_effects") == total

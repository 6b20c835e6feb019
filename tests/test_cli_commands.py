"""The ``pgqueue`` command in a subprocess against a real database: each command, its errors, its exit codes."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgqueue.redaction import MASK
from tests.cli_support import cli_env, command, enqueue, one_error_line, pgqueue, pgqueue_all, record_failure
from tests.helpers import envelope
from tests.sql_calls import scalar

Conn = psycopg.Connection[Any]

# The jobs of tests/cli_secret_jobs.py, by name: that module declares a schedule, so only the CLI
# subprocesses import it (in this process a worker would register its schedule).
SECRET = "hunter2-very-secret"
SIGN_IN, NIGHTLY_LOGIN = "cli_secret:sign_in", "cli_secret:nightly_login"

COMMANDS = ["migrate", "queue:work", "queue:failed", "queue:retry", "queue:forget", "queue:flush",
            "queue:prune-failed", "queue:clear", "queue:cancel", "queue:pause", "queue:resume", "queue:limit",
            "queue:status", "queue:dispatch", "schedule:list", "schedule:sync", "demo", "embedded", "job:show",
            "job:wait"]


def test_help_lists_every_command(tmp_path: Path) -> None:
    result, unknown = pgqueue_all(("--help",), ("queue:nope",), cwd=tmp_path)
    assert result.returncode == 0
    for name in COMMANDS:
        assert f"  {name} " in result.stdout, name
    assert unknown.returncode == 2 and "No such command" in unknown.stderr


def test_migrate_sql_needs_no_database(tmp_path: Path) -> None:
    up, down = pgqueue_all(("migrate", "--sql"), ("migrate", "--sql", "--downgrade", "base"), cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    assert "create table pgqueue.jobs" in up.stdout
    assert "create or replace function pgqueue.reserve" in up.stdout
    assert down.returncode == 0, down.stderr
    assert "drop schema" in down.stdout.lower()
    assert up.stderr == "" and down.stderr == ""  # no database was chosen or named


def test_migrate_round_trip_and_not_migrated_error(empty_dsn: str, tmp_path: Path) -> None:
    before = pgqueue("queue:status", "--dsn", empty_dsn, cwd=tmp_path)
    assert before.returncode == 1
    assert "run `pgqueue migrate`" in one_error_line(before.stderr)

    up = pgqueue("migrate", "--dsn", empty_dsn, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    assert "migrated to head" in up.stdout
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("select count(*) from pgqueue.queue_stats").fetchone() == (0,)

    down = pgqueue("migrate", "--downgrade", "base", "--dsn", empty_dsn, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("select to_regnamespace('pgqueue')").fetchone() == (None,)

    bad_revision = pgqueue("migrate", "--downgrade", "no_such_revision", "--dsn", empty_dsn, cwd=tmp_path)
    assert bad_revision.returncode == 2  # a bad argument is a usage error (issue 24)
    assert "--downgrade: Can't locate revision identified by 'no_such_revision'" in one_error_line(bad_revision.stderr)


def test_database_is_named_once_without_its_password(dsn: str, tmp_path: Path) -> None:
    result = pgqueue("queue:status", "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("pgqueue: using ")]
    assert len(lines) == 1 and lines[0].endswith("(from --dsn)"), result.stderr

    from_env = pgqueue("queue:status", cwd=tmp_path, env={"PGQUEUE_DSN": dsn})
    assert from_env.returncode == 0, from_env.stderr
    assert "(from PGQUEUE_DSN)" in from_env.stderr

    (tmp_path / "pyproject.toml").write_text(f'[tool.pgqueue.connections.database]\ndsn = "{dsn}"\n')
    from_config = pgqueue("queue:status", cwd=tmp_path)
    assert from_config.returncode == 0, from_config.stderr
    assert "(from [tool.pgqueue] in " in from_config.stderr


def test_a_sqlalchemy_database_url_works_and_a_bad_one_names_the_variable(dsn: str, tmp_path: Path) -> None:
    from tests.test_api_config import sqlalchemy_url

    good = pgqueue("queue:status", cwd=tmp_path, env={"DATABASE_URL": sqlalchemy_url(dsn)})
    assert good.returncode == 0, good.stderr
    assert "(from DATABASE_URL)" in good.stderr
    bad = pgqueue("queue:status", cwd=tmp_path, env={"DATABASE_URL": "postgresql+psycopg://u@h/db?bogus=1"})
    assert bad.returncode == 2, bad.stderr
    line = one_error_line(bad.stderr)
    assert "invalid DSN in the environment variable DATABASE_URL" in line and "--dsn" not in line


def test_a_worker_without_a_configured_database_refuses_the_embedded_fallback(tmp_path: Path) -> None:
    result = pgqueue("queue:work", "--app", "tests.cli_jobs", "--stop-when-empty", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr)
    assert "no database is configured for queue:work" in line and "--embedded" in line
    assert "embedded PostgreSQL 18" not in result.stderr  # nothing was started


def test_bad_dsn_and_unreachable_server_are_one_line_errors(tmp_path: Path) -> None:
    bad, unreachable, debug, unknown_connection = pgqueue_all(
        ("queue:failed", "--dsn", "not a dsn"),
        ("queue:status", "--dsn", "postgresql://someone:s3cr3t@127.0.0.1:1/x"),
        ("queue:status", "--debug", "--dsn", "postgresql://postgres@127.0.0.1:1/x"),
        ("queue:clear", "reports", "--force", "--dsn", "dbname=x"),
        cwd=tmp_path)
    assert bad.returncode == 2
    assert "invalid DSN in --dsn" in one_error_line(bad.stderr)

    assert unreachable.returncode == 1
    assert "cannot connect to someone@127.0.0.1:1/x" in one_error_line(unreachable.stderr)
    assert "s3cr3t" not in unreachable.stderr + unreachable.stdout

    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr

    assert unknown_connection.returncode == 2
    assert "unknown connection 'reports'" in one_error_line(unknown_connection.stderr)


def test_failed_lists_shows_and_exports(dsn: str, conn: Conn, tmp_path: Path) -> None:
    first, job_id = record_failure(conn, "mail", name="app:SendMail", args={"to": "ada@example.com"},
                                   message="smtp down")
    record_failure(conn, "reports", name="app:Report", message="disk full")

    listing = pgqueue("queue:failed", "--dsn", dsn, cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    header, *rows = listing.stdout.splitlines()
    assert header.split() == ["ID", "JOB", "QUEUE", "ATTEMPTS", "REASON", "EXCEPTION", "FAILED", "AT"]
    assert len(rows) == 2
    assert any(first in row and "app:SendMail" in row and "RuntimeError: smtp down" in row for row in rows)

    only_mail = pgqueue("queue:failed", "--queue", "mail", "--json", "--dsn", dsn, cwd=tmp_path)
    data = json.loads(only_mail.stdout)
    assert [(d["id"], d["job_id"], d["args"]) for d in data] == [(first, job_id, {"to": "ada@example.com"})]

    limited = pgqueue("queue:failed", "--limit", "1", "--dsn", dsn, cwd=tmp_path)
    assert "(1 of 2 shown; use --limit to see more)" in limited.stdout

    detail = pgqueue("queue:failed", first, "--dsn", dsn, cwd=tmp_path)
    assert detail.returncode == 0, detail.stderr
    assert f"failure id:  {first}" in detail.stdout
    assert "Traceback (most recent call last):" in detail.stdout
    assert '"to": "ada@example.com"' in detail.stdout

    as_json = json.loads(pgqueue("queue:failed", first, "--json", "--dsn", dsn, cwd=tmp_path).stdout)
    assert as_json["message"] == "smtp down" and as_json["reason"] == "exception"


def test_failed_and_schedule_list_mask_what_a_job_declares_secret(dsn: str, conn: Conn, tmp_path: Path) -> None:
    # Issue 24 item 11: queue:failed printed the args, the unique key, the message and the
    # traceback unmasked (the dashboard masked them), and schedule:list --json the schedule's args.
    # The unique key SignIn.unique_by derives (Job.derived_unique_key).
    key = f"{SIGN_IN}:" + json.dumps({"password": SECRET}, sort_keys=True, separators=(",", ":"))
    env = {**envelope("accounts", name=SIGN_IN, args={"user": "ann", "password": SECRET}),
           "unique_key": key, "unique_scope": "queued"}
    failure_id = str(scalar(conn, "select pgqueue.record_failure(%s, 3, 'app.Refused', %s, %s, 'exception')",
                            (Jsonb(env), f"login refused for {SECRET}", f"Traceback ...\napp.Refused: {SECRET}\n")))
    # The job classes are known from [tool.pgqueue] app, or from --app.
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "pyproject.toml").write_text('[tool.pgqueue]\napp = ["tests.cli_secret_jobs"]\n')
    app = ("--app", "tests.cli_secret_jobs", "--dsn", dsn)
    results = pgqueue_all(("queue:failed", "--dsn", dsn), ("queue:failed", "--json", "--dsn", dsn),
                          ("queue:failed", failure_id, "--dsn", dsn),
                          ("queue:failed", failure_id, "--json", "--dsn", dsn),
                          ("schedule:list", "--json", "--dsn", dsn), cwd=project)
    for result in results:
        assert result.returncode == 0, result.stderr
        assert SECRET not in result.stdout, result.args
    with_app, by_option = pgqueue_all(("queue:failed", failure_id, "--json", *app),
                                      ("queue:failed", failure_id, "--json", "--redact", "user", "--dsn", dsn),
                                      cwd=elsewhere)
    assert with_app.returncode == by_option.returncode == 0, with_app.stderr + by_option.stderr
    table, listed, detail, exported, schedules = results
    assert json.loads(with_app.stdout) == json.loads(exported.stdout)
    assert f"Refused: login refused for {MASK}" in table.stdout
    assert f'"password": "{MASK}"' in detail.stdout and '"user": "ann"' in detail.stdout
    assert f'"unique_key": "{SIGN_IN}:{{\\"password\\":\\"{MASK}\\"}}"' in detail.stdout
    shown = json.loads(exported.stdout)
    assert shown == json.loads(listed.stdout)[0]
    assert shown["args"] == {"user": "ann", "password": MASK} and SECRET not in shown["traceback"]
    assert shown["envelope"]["unique_key"] == f'{SIGN_IN}:{{"password":"{MASK}"}}'
    assert [s["args"] for s in json.loads(schedules.stdout) if s["name"] == NIGHTLY_LOGIN] == [
        {"user": "ops", "password": MASK}]
    # --redact masks a field of every job, whether or not its class is imported.
    assert json.loads(by_option.stdout)["args"] == {"user": MASK, "password": SECRET}


def test_job_show_masks_what_a_job_declares_secret_in_its_attempts(dsn: str, conn: Conn, tmp_path: Path) -> None:
    # Issue 26: job:show printed every attempt's message, traceback and exception unmasked (the
    # dashboard and queue:failed masked them).
    env = envelope("accounts", name=SIGN_IN, args={"user": "ann", "password": SECRET})
    scalar(conn, "select pgqueue.enqueue(%s, 0)", (Jsonb(env),))
    [held] = conn.execute("select id, token from pgqueue.reserve(array['accounts'], 1, 60)").fetchall()
    conn.execute("select pgqueue.release(%s, %s, 0, 0.5, null, %s)",
                 (held[0], held[1], Jsonb({"exception": "app.Refused", "message": f"refused {SECRET}",
                                           "traceback": f"Traceback ...\napp.Refused: {SECRET}\n",
                                           "worker": "h:1"})))
    [held] = conn.execute("select id, token from pgqueue.reserve(array['accounts'], 1, 60)").fetchall()
    assert scalar(conn, "select pgqueue.fail(%s, %s, 'app.Refused', %s, null, 'exception', 0.2, null, 'h:2')",
                  (held[0], held[1], f"gave up on {SECRET}"))
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "pyproject.toml").write_text('[tool.pgqueue]\napp = ["tests.cli_secret_jobs"]\n')
    job_id = str(env["id"])
    text, as_json = pgqueue_all(("job:show", job_id, "--dsn", dsn), ("job:show", job_id, "--json", "--dsn", dsn),
                                cwd=project)
    by_option, unmasked = pgqueue_all(("job:show", job_id, "--json", "--redact", "password", "--dsn", dsn),
                                      ("job:show", job_id, "--dsn", dsn), cwd=elsewhere)
    for result in (text, as_json, by_option):
        assert result.returncode == 0, result.stderr
        assert SECRET not in result.stdout, result.args
    shown = json.loads(as_json.stdout)
    assert [e["message"] for e in shown["errors"]] == [f"refused {MASK}", f"gave up on {MASK}"]
    assert shown["message"] == f"gave up on {MASK}" and SECRET not in (shown["errors"][0]["traceback"] or "")
    assert json.loads(by_option.stdout) == shown  # --redact, the class not imported
    assert f"refused {MASK}" in text.stdout
    assert SECRET in unmasked.stdout  # neither the class nor --redact: nothing is declared secret


def test_failed_unknown_or_malformed_id(dsn: str, tmp_path: Path) -> None:
    unknown, malformed = pgqueue_all(("queue:failed", "7a0c3c8e-1b53-4df8-a2b6-2d2b41c1c4e5", "--dsn", dsn),
                                     ("queue:forget", "42", "--dsn", dsn), cwd=tmp_path)
    assert unknown.returncode == 1
    assert "no failed job with id 7a0c3c8e-1b53-4df8-a2b6-2d2b41c1c4e5" in one_error_line(unknown.stderr)
    assert malformed.returncode == 2
    assert "'42' is not a failure id" in one_error_line(malformed.stderr)


def test_retry_forget_flush_prune(dsn: str, conn: Conn, tmp_path: Path) -> None:
    one, one_job = record_failure(conn, "mail")
    two, _ = record_failure(conn, "mail")
    three, _ = record_failure(conn, "reports")
    four, _ = record_failure(conn, "reports")
    unknown = "7a0c3c8e-1b53-4df8-a2b6-2d2b41c1c4e5"

    # One known id and one unknown: the known one is retried, the exit code says one failed.
    retried = pgqueue("queue:retry", one, unknown, "--dsn", dsn, cwd=tmp_path)
    assert retried.returncode == 1
    assert f"retried failure {one}: job {one_job} is queued again" in retried.stdout
    assert unknown in one_error_line(retried.stderr)
    # A job id where a failure id belongs is the usual mistake: the error says they differ.
    by_job_id = pgqueue("queue:retry", str(one_job), "--dsn", dsn, cwd=tmp_path)
    assert by_job_id.returncode == 1
    assert "queue:retry takes failure ids, which differ from job ids" in one_error_line(by_job_id.stderr)
    assert conn.execute("select attempts from pgqueue.jobs where id = %s", (one_job,)).fetchone() == (0,)

    wrong = pgqueue("queue:retry", two, "--queue", "mail", "--dsn", dsn, cwd=tmp_path)
    assert wrong.returncode == 2 and "--queue only applies" in one_error_line(wrong.stderr)

    retry_mail = pgqueue("queue:retry", "all", "--queue", "mail", "--dsn", dsn, cwd=tmp_path)
    assert retry_mail.returncode == 0 and "retried 1 failed job of queue 'mail'" in retry_mail.stdout

    forgot = pgqueue("queue:forget", three, "--dsn", dsn, cwd=tmp_path)
    assert forgot.returncode == 0 and f"forgot failure {three}" in forgot.stdout
    again = pgqueue("queue:forget", three, "--dsn", dsn, cwd=tmp_path)
    assert again.returncode == 1 and "no failed job" in one_error_line(again.stderr)

    record_failure(conn, "mail")
    conn.execute("update pgqueue.failed_jobs set failed_at = now() - interval '30 hours' where id = %s", (four,))
    pruned = pgqueue("queue:prune-failed", "--hours", "24", "--dsn", dsn, cwd=tmp_path)
    assert pruned.returncode == 0 and "deleted 1 failure record older than 24h" in pruned.stdout
    assert pgqueue("queue:prune-failed", "--hours", "-1", "--dsn", dsn, cwd=tmp_path).returncode == 2

    flushed = pgqueue("queue:flush", "--dsn", dsn, cwd=tmp_path)
    assert flushed.returncode == 0 and "deleted 1 failure record" in flushed.stdout
    assert conn.execute("select count(*) from pgqueue.failed_jobs").fetchone() == (0,)


def test_clear_removes_one_queue_and_warns_about_leases(dsn: str, conn: Conn, tmp_path: Path) -> None:
    for delay in (0, 0, 60):
        enqueue(conn, "reports", delay=delay)
    enqueue(conn, "default")
    enqueue(conn, "mail")
    conn.execute("select * from pgqueue.reserve(array['reports'], 1, 60)")

    cleared = pgqueue("queue:clear", "--queue", "reports", "--force", "--dsn", dsn, cwd=tmp_path)
    assert cleared.returncode == 0, cleared.stderr
    assert "removed 3 jobs from queue 'reports'" in cleared.stdout
    assert "1 of them were reserved: the handlers running them lost their leases" in cleared.stderr

    # Without --queue: the connection's configured queue ("default"), not every queue.
    default = pgqueue("queue:clear", "--force", "--dsn", dsn, cwd=tmp_path)
    assert "removed 1 job from queue 'default'" in default.stdout
    queues = conn.execute("select queue from pgqueue.jobs").fetchall()
    assert queues == [("mail",)]


def test_clear_asks_on_a_terminal(dsn: str, conn: Conn, tmp_path: Path) -> None:
    enqueue(conn, "reports")
    leader, follower = pty.openpty()
    try:
        os.write(leader, b"n\n")
        refused = pgqueue("queue:clear", "--queue", "reports", "--dsn", dsn, cwd=tmp_path, stdin=follower)
    finally:
        os.close(leader)
        os.close(follower)
    assert refused.returncode == 1
    assert "Remove every ready, delayed and reserved job of queue 'reports'" in refused.stderr
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (1,)


def test_status_counts_and_watch(dsn: str, conn: Conn, tmp_path: Path) -> None:
    enqueue(conn, "mail")
    enqueue(conn, "mail")
    enqueue(conn, "mail", delay=60)
    conn.execute("select * from pgqueue.reserve(array['mail'], 1, 60)")
    record_failure(conn, "reports")

    status = pgqueue("queue:status", "--dsn", dsn, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    rows = {line.split()[0]: line.split()[1:] for line in status.stdout.splitlines()[1:3]}
    # ready, delayed, blocked (waiting for parents, issue 26), reserved, expired, failed
    assert rows["mail"][:6] == ["1", "1", "0", "1", "0", "0"]
    assert rows["reports"][:6] == ["0", "0", "0", "0", "0", "1"]
    assert "workers listening: 0" in status.stdout

    # --watch refreshes until interrupted, and an interrupt is a clean exit.
    watch = subprocess.Popen([*command(), "queue:status", "--watch", "--interval", "0.2", "--dsn", dsn],
                             cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert watch.stdout is not None
        seen = [watch.stdout.readline() for _ in range(8)]
        assert sum(line.startswith("QUEUE") for line in seen) >= 1, seen
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=30) == 0
        # ...as the README's exit codes say (the exception to "130 interrupted").
        readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
        assert "`130` interrupted (except `queue:status --watch`,\nwhich runs until you stop it: its Ctrl-C is a " \
               "clean `0`)" in readme
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()


def test_dispatch_by_name(dsn: str, conn: Conn, tmp_path: Path) -> None:
    app = ("--app", "tests.cli_jobs", "--dsn", dsn)
    sent = pgqueue("queue:dispatch", "cli:broken", "--args", '{"reason": "x"}', "--delay", "30",
                   "--queue", "other", "--priority", "3", *app, cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    assert "to queue 'other', available in 30s" in sent.stdout
    job_id = sent.stdout.split(" as job ")[1].split()[0]
    row = conn.execute("select queue, priority, envelope, available_at > now() + interval '20 seconds' "
                       "from pgqueue.jobs where id = %s", (job_id,)).fetchone()
    assert row is not None
    queue, priority, envelope, later = row
    assert (queue, priority, envelope["name"], envelope["args"], later) == ("other", 3, "cli:broken", {"reason": "x"},
                                                                              True)

    unknown, no_app, bad_json, misfit = pgqueue_all(
        ("queue:dispatch", "cli:quik", *app),
        ("queue:dispatch", "cli:quick", "--dsn", dsn),
        ("queue:dispatch", "cli:quick", "--args", "{oops", *app),
        ("queue:dispatch", "cli:quick", "--args", '{"nope": 1}', *app),
        cwd=tmp_path)
    assert unknown.returncode == 2
    line = one_error_line(unknown.stderr)
    assert "unknown job 'cli:quik'" in line and "did you mean cli:quick" in line
    assert no_app.returncode == 2 and "no jobs are registered" in one_error_line(no_app.stderr)
    assert bad_json.returncode == 2 and "--args is not valid JSON" in one_error_line(bad_json.stderr)
    assert misfit.returncode == 2 and "--args do not fit job 'cli:quick'" in one_error_line(misfit.stderr)
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (1,)


def test_dispatch_with_a_unique_key_dispatches_once(dsn: str, conn: Conn, tmp_path: Path) -> None:
    app = ("--app", "tests.cli_jobs", "--dsn", dsn)
    first = pgqueue("queue:dispatch", "cli:broken", "--args", '{"reason": "x"}', "--delay", "30",
                    "--unique-key", "report:7", *app, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    job_id = first.stdout.split(" as job ")[1].split()[0]
    again = pgqueue("queue:dispatch", "cli:broken", "--args", '{"reason": "y"}', "--unique-key", "report:7",
                    *app, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"not dispatched: job {job_id} already holds unique key 'report:7'"
    rows = conn.execute("select id::text, unique_key from pgqueue.jobs").fetchall()
    assert rows == [(job_id, "report:7")]
    bad = pgqueue("queue:dispatch", "cli:broken", "--args", '{"reason": "z"}', "--unique-key", "k",
                  "--unique-scope", "forever", *app, cwd=tmp_path)
    assert bad.returncode == 2 and "scope" in bad.stderr, (bad.stdout, bad.stderr)
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (1,)

"""Issue 26 from the command line: ``pgqueue job:show ID [--json]`` and ``job:wait ID --timeout``
against jobs put in their states through the stored functions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from tests.cli_support import enqueue, one_error_line, pgqueue_all
from tests.sql_calls import reserve, scalar


def _succeeded(conn: psycopg.Connection[Any], result: Any) -> str:
    job_id = enqueue(conn, "done")
    [r] = reserve(conn, ["done"], 1)
    conn.execute("select * from pgqueue.ack_results(array[%s]::uuid[], array[%s]::bigint[], null, null, false, "
                 "array[%s]::jsonb[], array[60]::double precision[])", (r["id"], r["token"], Jsonb(result)))
    return str(job_id)


def _failed(conn: psycopg.Connection[Any]) -> str:
    job_id = enqueue(conn, "broken")
    [r] = reserve(conn, ["broken"], 1)
    conn.execute("select pgqueue.release(%s, %s, 0, 0.5, null, %s)",
                 (r["id"], r["token"], Jsonb({"exception": "app.Flaky", "message": "first try", "worker": "h:1"})))
    [r] = reserve(conn, ["broken"], 1)
    assert scalar(conn, "select pgqueue.fail(%s, %s, 'app.Boom', 'gave up', null, 'exception', 0.2, null, 'h:2')",
                  (r["id"], r["token"]))
    return str(job_id)


def test_job_show_and_wait(dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    done, broken = _succeeded(conn, {"total": 3}), _failed(conn)
    later = str(enqueue(conn, "later", delay=3600))
    show, show_json, shown_failed, wait_done, wait_failed, wait_later, bad = pgqueue_all(
        ("job:show", done, "--dsn", dsn), ("job:show", broken, "--json", "--dsn", dsn),
        ("job:show", broken, "--dsn", dsn), ("job:wait", done, "--timeout", "5", "--dsn", dsn),
        ("job:wait", broken, "--timeout", "5", "--dsn", dsn), ("job:wait", later, "--timeout", "0.2", "--dsn", dsn),
        ("job:show", "nope", "--dsn", dsn), cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    assert f"job {done}: succeeded" in show.stdout and 'result: {"total": 3}' in show.stdout
    data = json.loads(show_json.stdout)
    assert (data["state"], data["reason"], data["message"]) == ("failed", "exception", "gave up")
    assert [(e["attempt"], e["reason"], e["worker"]) for e in data["errors"]] == [
        (1, "retried", "h:1"), (2, "exception", "h:2")]
    assert "failed attempts (2):" in shown_failed.stdout and "app.Flaky: first try" in shown_failed.stdout
    assert wait_done.returncode == 0 and json.loads(wait_done.stdout) == {"total": 3}
    assert wait_failed.returncode == 1 and "failed after 2 attempt(s) [exception]" in one_error_line(
        wait_failed.stderr)
    assert wait_later.returncode == 1 and "did not end within 0.2s; it is delayed" in one_error_line(
        wait_later.stderr)
    assert bad.returncode == 2 and "'nope' is not a job id" in one_error_line(bad.stderr)


def test_job_show_tells_what_a_job_waits_for_and_what_waits_for_it(dsn: str, conn: psycopg.Connection[Any],
                                                                   tmp_path: Path) -> None:
    parent, child = enqueue(conn, "parents"), enqueue(conn, "children")
    scalar(conn, "select pgqueue.add_dependencies(array[%s]::uuid[], array[%s]::uuid[], 'cancel')", (child, parent))
    shown_parent, shown_child, child_json = pgqueue_all(
        ("job:show", str(parent), "--dsn", dsn), ("job:show", str(child), "--dsn", dsn),
        ("job:show", str(child), "--json", "--dsn", dsn), cwd=tmp_path)
    assert f"waited for by (children): {child}" in shown_parent.stdout, shown_parent.stderr
    assert f"job {child}: blocked" in shown_child.stdout and f"waits for (parents): {parent}" in shown_child.stdout
    data = json.loads(child_json.stdout)
    assert (data["state"], data["parents"], data["children"], data["available_at"]) == (
        "blocked", [str(parent)], [], None)

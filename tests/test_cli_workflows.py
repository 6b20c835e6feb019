"""Issue 27 from the command line: ``workflow:show ID [--json]``, ``workflow:list [--state] [--json]`` and
``workflow:signal ID NAME [--payload JSON]`` against a workflow put in its states through the stored
functions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from tests.cli_support import enqueue, one_error_line, pgqueue_all
from tests.helpers import envelope
from tests.sql_calls import reserve, scalar


def _waiting_workflow(conn: psycopg.Connection[Any]) -> str:
    """A workflow that charged (a step) and now waits for the signal 'approved'."""
    flow = envelope("flows") | {"workflow": 1, "name": "app:fulfil"}
    job_id = scalar(conn, "select pgqueue.enqueue(%s, 0)", (Jsonb(flow),))
    [r] = reserve(conn, ["flows"], 1)
    assert scalar(conn, "select pgqueue.workflow_checkpoint(%s, %s, 1, 'charge', 'step', '{\"ok\": true}', 0.25)",
                  (r["id"], r["token"])) == "recorded"
    assert scalar(conn, "select outcome from pgqueue.workflow_wait(%s, %s, 2, 'approval', 'signal', 'approved', "
                        "null)", (r["id"], r["token"])) == "parked"
    return str(job_id)


def test_workflow_show_list_and_signal(dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    flow = _waiting_workflow(conn)
    plain = str(enqueue(conn, "plain"))
    show, show_json, listed, listed_json, none_sleeping = pgqueue_all(
        ("workflow:show", flow, "--dsn", dsn), ("workflow:show", flow, "--json", "--dsn", dsn),
        ("workflow:list", "--dsn", dsn), ("workflow:list", "--json", "--state", "waiting_signal", "--dsn", dsn),
        ("workflow:list", "--state", "sleeping", "--dsn", dsn), cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    lines = show.stdout.splitlines()
    assert lines[0] == f"workflow {flow}" and lines[1].split() == [
        "SEQ", "NAME", "KIND", "STATE", "RUNS", "DURATION", "RESULT", "/", "ERROR"]
    assert lines[2].split()[:6] == ["1", "charge", "step", "succeeded", "1", "0.25s"] and '{"ok": true}' in lines[2]
    assert lines[3].split()[:4] == ["2", "approval", "signal", "waiting"] and "awaits signal 'approved'" in lines[3]
    steps = json.loads(show_json.stdout)
    assert [(s["seq"], s["name"], s["state"], s["result"]) for s in steps] == [
        (1, "charge", "succeeded", {"ok": True}), (2, "approval", "waiting", None)]
    assert steps[0]["duration"] >= 0.25
    assert flow in listed.stdout and "waiting_signal" in listed.stdout and "2. approval" in listed.stdout
    [row] = json.loads(listed_json.stdout)
    assert (row["id"], row["state"], row["awaited_signal"]) == (flow, "waiting_signal", "approved")
    assert none_sleeping.stdout.strip() == "no live workflows"

    [sent] = pgqueue_all(("workflow:signal", flow, "approved", "--payload", '{"by": "ann"}', "--dsn", dsn),
                         cwd=tmp_path)  # before the others: they run side by side
    again, refused, not_json, bad_id, empty = pgqueue_all(
        ("workflow:signal", flow, "approved", "--dsn", dsn),
        ("workflow:signal", plain, "approved", "--dsn", dsn),
        ("workflow:signal", flow, "approved", "--payload", "{nope", "--dsn", dsn),
        ("workflow:signal", "nope", "approved", "--dsn", dsn),
        ("workflow:signal", flow, "", "--dsn", dsn), cwd=tmp_path)
    assert (sent.returncode, sent.stdout.strip()) == (0, "woken")
    assert (again.returncode, again.stdout.strip()) == (0, "delivered")  # due already: kept for a later wait
    assert refused.returncode != 0 and "is not a workflow" in one_error_line(refused.stderr)
    assert not_json.returncode != 0 and "--payload is not JSON" in one_error_line(not_json.stderr)
    assert bad_id.returncode != 0 and "is not a job id" in one_error_line(bad_id.stderr)
    assert empty.returncode != 0 and "signal name" in one_error_line(empty.stderr)
    assert scalar(conn, "select count(*) from pgqueue.workflow_signals where job_id = %s", (flow,)) == 2
    assert scalar(conn, "select available_at <= now() from pgqueue.jobs where id = %s", (flow,))


def test_queue_status_counts_the_workflows_by_state(dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    _waiting_workflow(conn)
    scalar(conn, "select pgqueue.enqueue(%s, 600)", (Jsonb(envelope("flows") | {"workflow": 1}),))
    text, as_json = pgqueue_all(("queue:status", "--dsn", dsn), ("queue:status", "--json", "--dsn", dsn),
                                cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "workflows: 2 live: 1 delayed, 1 waiting_signal" in text.stdout.splitlines()
    assert json.loads(as_json.stdout)["workflows"] == {"waiting": 0, "delayed": 1, "running": 0, "sleeping": 0,
                                                       "waiting_signal": 1, "waiting_child": 0, "capped": False}

"""One rule for queue names (issue 24): the same names refused with the same message by Python
(pgqueue.limits), SQL (pgqueue.queue_name_problem, enqueue, enqueue_many, the CHECK on
pgqueue.jobs) and every entry point that takes a queue name; only None means the default queue."""

from __future__ import annotations

import re
import sys
import unicodedata
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import errors
from psycopg.types.json import Jsonb

from pgqueue import Client, Job, JobContext, QueueConfigurationError, limits, migrate
from pgqueue.resources import function_path, sql_file
from tests.api_support import client
from tests.helpers import envelope
from tests.sql_calls import Conn, enqueue, rows, scalar
from tests.worker_support import scalar as ascalar

__all__ = ["client"]

class Receipt(Job):
    """A plain job."""

    name = "tests.queue_names.receipt"

    order_id: int

    async def handle(self, context: JobContext) -> None:
        return None


# The names, and one of each kind the rule refuses or lets through.
NAMES = [
    "", "default", "mail", "a,b", " lead", "trail ", "in side", "tab\tinside", "nul\x00", "bell\x07", "del\x7f",
    "nel\x85", "csi\x9b", "soft\xadhyphen", "line\u2028sep", "para\u2029sep", "rlo\u202e", "zw\u200bsp",
    "zwj\u200d", "bom\ufeff", "lri\u2066", "wj\u2060", "vs\ufe0f", "filler\u3164", "tag\U000e0041",
    "mongolian\u180e", "nbsp\xa0", "\xa0nbsp", "ideographic\u3000", "\u3000ideographic", "émails-ünïcode-日本",
    "🚀rocket", "x" * 200, "x" * 201, "é" * 200, "é" * 201, "it's", "back\\slash", "\U0001d173music",
    "egyptian\U0001343f", "surrogate\udcff",
]
IN_SQL = [n for n in NAMES if "\x00" not in n and not any(0xD800 <= ord(c) <= 0xDFFF for c in n)]
# Characters worth drawing often: each refused range's ends, the edge spaces, the comma.
INTERESTING = sorted({chr(c) for low, high in limits.QUEUE_NAME_REFUSED + limits.QUEUE_NAME_EDGE_SPACE
                      for c in (low, high, low - 1, high + 1) if 0 < c <= sys.maxunicode
                      and not 0xD800 <= c <= 0xDFFF} | {",", "a", "Z", "é", "日", "\U0001f680", "'"})
NAME_CHARACTERS = st.one_of(st.sampled_from(INTERESTING),
                            st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))
SQL_NAMES = st.text(NAME_CHARACTERS, max_size=210)


def _check_expression(conn: Conn) -> str:
    return str(scalar(conn, "select pg_get_expr(conbin, conrelid) from pg_constraint"
                            " where conrelid = 'pgqueue.jobs'::regclass and conname = 'jobs_queue_name'"))


def _sql_verdicts(conn: Conn, names: list[str]) -> list[dict[str, Any]]:
    """Per name: pgqueue.queue_name_problem, pgqueue.shown, and whether the table's CHECK accepts it."""
    return rows(conn, f"""
        select n.ord, pgqueue.queue_name_problem(n.queue) as problem, pgqueue.shown(n.queue) as shown,
               ({_check_expression(conn)}) as check_accepts
        from unnest(%s::text[]) with ordinality as n(queue, ord) order by n.ord
    """, (names,))


def test_python_and_sql_give_the_same_message_for_every_name_of_the_table(conn: Conn) -> None:
    verdicts = _sql_verdicts(conn, IN_SQL)
    for name, verdict in zip(IN_SQL, verdicts, strict=True):
        assert verdict["problem"] == limits.queue_name_problem(name), name
        assert verdict["shown"] == limits.shown(name), name
        assert verdict["check_accepts"] == (verdict["problem"] is None), name
    refused = {n for n in NAMES if limits.queue_name_problem(n) is not None}
    assert set(NAMES) - refused == {"default", "mail", "in side", "émails-ünïcode-日本", "🚀rocket", "x" * 200,
                                    "é" * 200, "it's", "back\\slash"}


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(SQL_NAMES, min_size=1, max_size=20))
def test_python_and_sql_agree_on_drawn_names(conn: Conn, names: list[str]) -> None:
    for name, verdict in zip(names, _sql_verdicts(conn, names), strict=True):
        assert verdict["problem"] == limits.queue_name_problem(name), ascii(name)
        assert verdict["shown"] == limits.shown(name), ascii(name)
        assert verdict["check_accepts"] == (verdict["problem"] is None), ascii(name)


def test_messages_show_refused_characters_escaped_and_long_names_clipped() -> None:
    assert limits.queue_name_problem("rlo\u202e") == (
        "queue name 'rlo\\u202e' is not valid: it contains U+202E, and a queue name may not contain control, "
        "format or other invisible characters, nor line or paragraph separators")
    assert limits.queue_name_problem("a,b") == ("queue name 'a,b' is not valid: a queue name may not contain a "
                                                "comma, which separates queue names (--queue high,default)")
    assert limits.queue_name_problem("x\u3000") == ("queue name 'x\\u3000' is not valid: it ends with white space "
                                                   "(U+3000)")
    assert limits.queue_name_problem("") == "a queue name must be 1 to 200 characters, got 0: ''"
    assert "it contains U+E0041," in str(limits.queue_name_problem("tag\U000e0041"))
    long = limits.queue_name_problem("y" * 5000)
    assert long == f"a queue name must be 1 to 200 characters, got 5000: '{'y' * 100}'..."
    assert limits.queue_name_problem(None) == "a queue name must be a string, got NoneType None"


def test_every_control_format_separator_and_surrogate_character_is_refused_anywhere() -> None:
    # The frozen ranges cover these categories of this Python's Unicode data (a newer Unicode that
    # adds one fails here: add it to limits.QUEUE_NAME_REFUSED and the SQL ranges together).
    categories = {"Cc", "Cf", "Zl", "Zp", "Cs"}
    found = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in categories]
    assert len(found) > 2000
    missed = [f"U+{c:04X}" for c in found if limits.queue_name_problem(f"a{chr(c)}b") is None]
    assert missed == []
    for space in (c for c in range(sys.maxunicode + 1) if chr(c).isspace()):
        assert limits.queue_name_problem(chr(space) + "a") is not None
        assert limits.queue_name_problem("a" + chr(space)) is not None


def test_the_rule_is_spelled_the_same_in_every_sql_file_that_inlines_it() -> None:
    pattern = re.compile(r"'\^\[\^,[^']*\$'")
    enqueue, enqueue_many = function_path("enqueue"), function_path("enqueue_many")
    inlined = {path: pattern.findall(sql_file(path)) for path in
               (enqueue, enqueue_many, "revisions/0008/upgrade.sql", "head/schema.sql")}
    # 0008's delta: the check of old jobs and the CHECK; the head schema: the CHECK.
    assert [len(found) for found in inlined.values()] == [1, 1, 2, 1]
    assert len({regex for found in inlined.values() for regex in found}) == 1, inlined
    # ... and it is the ranges of pgqueue/limits.py.
    regex = inlined[enqueue][0]
    for low, high in limits.QUEUE_NAME_REFUSED:
        if (low, high) != (0xD800, 0xDFFF):  # PostgreSQL text holds no surrogate, nor a NUL
            assert _sql_escape(max(low, 1)) in regex and _sql_escape(high) in regex


def _sql_escape(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


@pytest.mark.parametrize("name", [n for n in IN_SQL if limits.queue_name_problem(n) is not None])
def test_enqueue_enqueue_many_and_the_check_refuse_what_python_refuses(conn: Conn, name: str) -> None:
    env = envelope(name)
    problem = limits.queue_name_problem(name)
    with pytest.raises(errors.InvalidParameterValue) as one:
        enqueue(conn, env)
    assert one.value.diag.message_primary == f"pgqueue.enqueue: job {env['id']}: {problem}"
    with pytest.raises(errors.InvalidParameterValue) as many:
        conn.execute(b"select pgqueue.enqueue_many(%s)", (Jsonb([envelope("fine"), env]),))
    assert many.value.diag.message_primary == f"pgqueue.enqueue_many: envelope 2 of 2: job {env['id']}: {problem}"
    with pytest.raises(errors.CheckViolation, match="jobs_queue_name"):
        conn.execute(b"insert into pgqueue.jobs (id, queue, envelope, max_tries) values (gen_random_uuid(), %s, "
                     b"'{}', 1)", (name,))
    assert scalar(conn, "select count(*) from pgqueue.jobs") == 0


# ------------------------------------------------------------------ the SQL entry points

@pytest.mark.parametrize("name", ["", "rlo\u202e", "a,b"])
def test_every_sql_function_that_takes_a_queue_name_refuses_a_bad_one(conn: Conn, name: str) -> None:
    enqueue(conn, envelope("default"))
    problem = limits.queue_name_problem(name)
    for call, suffix in (("pgqueue.clear(%s)", "; nothing was removed"), ("pgqueue.pause(%s)", ""),
                         ("pgqueue.resume(%s)", ""), ("pgqueue.set_limits(%s, 1, null, null)", ""),
                         ("pgqueue.retry_failed_all(%s)", "; nothing was retried"),
                         ("pgqueue.flush_failed(%s, null)", "; nothing was deleted")):
        function = call.split("(")[0]
        with pytest.raises(errors.InvalidParameterValue) as caught:
            conn.execute(f"select {call}".encode(), (name,))
        assert caught.value.diag.message_primary == f"{function}: {problem}{suffix}"
    assert scalar(conn, "select count(*) from pgqueue.jobs") == 1
    assert scalar(conn, "select count(*) from pgqueue.queues") == 0
    # null keeps meaning "every queue" where it did.
    assert scalar(conn, "select pgqueue.retry_failed_all(null)") == 0
    assert scalar(conn, "select pgqueue.flush_failed(null, null)") == 0


def test_retry_failed_all_leaves_failures_of_queues_the_rule_now_refuses(conn: Conn) -> None:
    # Failure records written before revision 0008 may name a queue the rule now refuses; one of
    # them must not make the whole retry fail on the CHECK.
    for queue in ("mail", "mail\u200b"):
        env = envelope(queue)
        conn.execute(b"insert into pgqueue.failed_jobs (job_id, connection, queue, envelope, attempts, exception,"
                     b" message, reason) values (%s, 'database', %s, %s, 1, 'E', 'boom', 'exception')",
                     (env["id"], queue, Jsonb(env)))
    assert scalar(conn, "select pgqueue.retry_failed_all(null)") == 1
    assert [r["queue"] for r in rows(conn, "select queue from pgqueue.jobs")] == ["mail"]
    assert [r["queue"] for r in rows(conn, "select queue from pgqueue.failed_jobs")] == ["mail\u200b"]


# --------------------------------------------------------------- the Python entry points

async def test_an_empty_queue_name_is_refused_and_never_means_the_default_queue(client: Client, dsn: str) -> None:
    # The issue: clear("") deleted every job of `default`; pause/resume/set_limits("") acted on it.
    await client.dispatch(Receipt(order_id=1))
    for name in ("", "rlo\u202e", " default"):
        problem = limits.queue_name_problem(name)
        assert problem is not None
        for call, consequence in ((client.clear(name), "nothing was removed"),
                                  (client.pause(name), "nothing was changed"),
                                  (client.resume(name), "nothing was changed"),
                                  (client.set_limits(name, concurrency=2), "the limits were not changed"),
                                  (client.retry_failed_all(name), "nothing was retried")):
            with pytest.raises(QueueConfigurationError) as caught:
                await call
            assert str(caught.value) == f"{problem}; {consequence}"
        with pytest.raises(QueueConfigurationError, match=re.escape(f"history queue filter: {problem}")):
            await client.history(queue=name)
        failed = await client.failed()
        for pending in (failed.all(queue=name), failed.count(queue=name), failed.flush(queue=name)):
            with pytest.raises(QueueConfigurationError, match=re.escape(f"failed jobs queue filter: {problem}")):
                await pending
        with pytest.raises(QueueConfigurationError, match=re.escape(problem)):
            await client.worker(queues=[name])
        with pytest.raises(QueueConfigurationError, match=re.escape(problem)):
            await client.dispatch(Receipt(order_id=2), queue=name)
    with pytest.raises(QueueConfigurationError, match="non-empty list of queue names"):
        await client.worker(queues=[])
    assert await ascalar(dsn, "select count(*) from pgqueue.jobs where queue = 'default'") == 1
    assert await ascalar(dsn, "select count(*) from pgqueue.queues") == 0
    # None is the default queue.
    assert await client.pause() is True and await client.resume() is True
    assert await client.clear() == 1


# ------------------------------------------------------------------------ the migration

def test_0008_stops_on_jobs_whose_queue_name_the_tightened_rule_refuses(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn, "pgqueue_0007")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:  # 0007 accepted these names
        for name in ("zw\u200bsp", "rlo\u202e", "fine"):
            conn.execute(b"select pgqueue.enqueue(%s)", (Jsonb(envelope(name)),))
    with pytest.raises(errors.CheckViolation, match=r"pgqueue migration 0008: 2 job\(s\) in pgqueue.jobs have a "
                                                    r"queue name the tightened rule refuses") as caught:
        migrate.upgrade(empty_dsn)
    assert "then migrate again" in (caught.value.diag.message_hint or "")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert scalar(conn, "select version_num from pgqueue_alembic_version") == "pgqueue_0007"
        # Following the hint: move the jobs to a valid queue, then the upgrade goes through.
        conn.execute(b"""update pgqueue.jobs set queue = 'fixed', envelope = jsonb_set(envelope, '{queue}', '"fixed"')
                         where queue <> 'fine'""")
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert sorted(r["queue"] for r in rows(conn, "select queue from pgqueue.jobs")) == ["fine", "fixed", "fixed"]
        with pytest.raises(errors.CheckViolation, match="jobs_queue_name"):
            conn.execute(b"update pgqueue.jobs set queue = %s where queue = 'fine'", ("nel\x85",))
    # Down again: 0007's rule, which accepts every name 0008's accepts.
    migrate.downgrade(empty_dsn, "pgqueue_0007")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(b"select pgqueue.enqueue(%s)", (Jsonb(envelope("zw\u200bsp")),))
        assert scalar(conn, "select to_regprocedure('pgqueue.shown(text)')") is None

"""CLI usage errors and input checks (issue 11, items 7 and 8): one error line, exit code 2,
nothing stored."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from pgqueue import migrate
from tests.cli_support import one_error_line, pgqueue, pgqueue_all

Conn = psycopg.Connection[tuple[object, ...]]


def test_usage_errors_are_one_line_with_exit_code_2(tmp_path: Path) -> None:
    unknown_option, unknown_command, bad_number, missing = pgqueue_all(
        ("queue:work", "--bogus"),
        ("queue:wrok",),
        ("queue:work", "--concurrency", "many"),
        ("queue:forget",),
        cwd=tmp_path)
    for result, expected in ((unknown_option, "No such option: --bogus"),
                             (unknown_command, "No such command 'queue:wrok'"),
                             (bad_number, "Invalid value for '--concurrency'"),
                             (missing, "Missing argument 'ID'")):
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [one_error_line(result.stderr)], result.stderr
        assert expected in result.stderr and "--help" in result.stderr
        assert "Usage:" not in result.stderr and "Try " not in result.stderr


@pytest.mark.parametrize("value", ["a,b", " lead", "trail ", "ctl\x01", "x" * 201])
def test_a_bad_queue_name_option_is_a_usage_error(tmp_path: Path, value: str) -> None:
    dispatch, failed, clear = pgqueue_all(
        ("queue:dispatch", "cli:quick", "--queue", value, "--app", "tests.cli_jobs"),
        ("queue:failed", "--queue", value),
        ("queue:clear", "--queue", value, "--force"),
        cwd=tmp_path)
    for result in (dispatch, failed, clear):
        assert result.returncode == 2, result.stderr
        assert "Invalid value for '--queue'" in one_error_line(result.stderr)
        assert "queue name" in result.stderr


@pytest.mark.parametrize("value", ["ctl\x01", "x" * 201, "good, ba\x7fd"])
def test_a_bad_queue_name_in_a_work_list_is_refused(tmp_path: Path, value: str) -> None:
    result = pgqueue("queue:work", "--queue", value, "--app", "tests.cli_jobs", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "--queue: " in one_error_line(result.stderr) and "queue name" in result.stderr


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_worker_durations_must_be_finite(tmp_path: Path, value: str) -> None:
    result = pgqueue("queue:work", "--poll-interval", value, "--app", "tests.cli_jobs", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "--poll-interval must be > 0 seconds and finite" in one_error_line(result.stderr)


def test_dispatch_checks_args_against_the_annotations_and_the_delay(dsn: str, conn: Conn, tmp_path: Path) -> None:
    app = ("--app", "tests.cli_jobs", "--dsn", dsn)
    wrong_type, not_int, too_late, spaced = pgqueue_all(
        ("queue:dispatch", "cli:quick", "--args", '{"n": "x"}', *app),
        ("queue:dispatch", "cli:quick", "--args", '{"n": 1.5}', *app),
        ("queue:dispatch", "cli:quick", "--args", '{"n": 1}', "--delay", "1e12", *app),
        ("queue:dispatch", "cli:quick", "--args", '{"n": 2}', "--queue", "emails high", *app),
        cwd=tmp_path)
    assert wrong_type.returncode == 2
    assert "--args do not fit job 'cli:quick': job 'cli:quick' args['n'] must be int, given str 'x'" \
        in one_error_line(wrong_type.stderr)
    assert not_int.returncode == 2 and "args['n'] must be int, given float 1.5" in one_error_line(not_int.stderr)
    assert too_late.returncode == 2
    assert "delay must be a finite number of seconds >= 0 and at most 315360000" in one_error_line(too_late.stderr)
    assert spaced.returncode == 0, spaced.stderr
    assert conn.execute("select queue, envelope->'args' from pgqueue.jobs").fetchall() == [("emails high", {"n": 2})]


# Issue 24: each of these exited 1 (a raw UnicodeEncodeError, "integer out of range", "invalid input
# syntax for type interval", alembic's CommandError, a payload error after connecting) or hung.
def _cjk(count: int) -> str:
    return "".join(chr(0x4E00 + (n * 7919) % 20000) for n in range(count))


BAD_ARGUMENTS: list[tuple[tuple[str, ...], str]] = [
    (("queue:pause", "a\udcffb"), "Invalid value for 'QUEUE': queue name 'a\\udcffb' is not valid"),
    (("queue:history", "--job", "\udcff"), "Invalid value for '--job': '\\udcff' is not valid UTF-8"),
    (("queue:failed", "--limit", "99999999999999999999"), "Invalid value for '--limit' / '-n'"),
    (("queue:prune-failed", "--hours", "inf"), "--hours must be from 0 to 87600 (10 years), got inf"),
    (("queue:prune-failed", "--hours", "1e308"), "--hours must be from 0 to 87600"),
    (("queue:limit", "mail", "--concurrency", "99999999999"), "Invalid value for '--concurrency'"),
    (("queue:limit", "mail", "--burst", "99999999999"), "Invalid value for '--burst'"),
    (("queue:limit", "mail", "--rate", "99999999999/s"), "--rate: rate '99999999999/s' is not a rate"),
    (("queue:dispatch", "cli:quick", "--unique-key", "k\udcff"), "Invalid value for '--unique-key': unique key "
                                                                 "'k\\udcff' contains U+DCFF"),
    (("queue:dispatch", "cli:quick", "--unique-key", _cjk(900)), "Invalid value for '--unique-key': a unique key "
                                                                 "must be 1 to 1000 bytes of UTF-8, got 2700"),
    (("queue:dispatch", "cli:quick", "--unique-key", "k", "--unique-scope", "period", "--unique-period", "nan"),
     "Invalid value for '--unique-period': must be a finite number of seconds above 0"),
    (("queue:dispatch", "cli:broken", "--args", '{"reason": "a\\u0000b"}'), "--args: job 'cli:broken' "
                                                                           "args['reason'] contains a NUL"),
    (("queue:dispatch", "cli:broken", "--args", '{"reason": "\\ud800"}'), "--args: job 'cli:broken' "
                                                                         "args['reason'] contains an unpaired"),
    (("queue:dispatch", "cli:quick", "--priority", "99999999"), "Invalid value for '--priority'"),
    (("queue:work", "--concurrency", "99999999999999"), "Invalid value for '--concurrency' / '-c'"),
    (("queue:work", "--prefetch", "99999999999999999999"), "Invalid value for '--prefetch'"),
    (("queue:work", "--processes", "99999999999999999999"), "Invalid value for '--processes'"),
    (("queue:work", "--lease", "1e308"), "--lease must be from 0.001 to 31536000 seconds (1 year), got 1e+308"),
    (("queue:work", "--queue", "a,,b"), "--queue: a queue name must be 1 to 200 characters, got 0: ''"),
    (("migrate", "--downgrade", "nope"), "--downgrade: Can't locate revision identified by 'nope'"),
]


def test_every_bad_argument_is_a_usage_error_naming_its_option(dsn: str, conn: Conn, tmp_path: Path) -> None:
    calls = []
    for args, _ in BAD_ARGUMENTS:
        extra = ("--app", "tests.cli_jobs") if args[0] in ("queue:dispatch", "queue:work") else ()
        calls.append((*args, *extra, "--dsn", dsn))  # the old code reached the database: nothing may change
    results = pgqueue_all(*calls, cwd=tmp_path, timeout=60)
    for (args, words), result in zip(BAD_ARGUMENTS, results, strict=True):
        assert result.returncode == 2, (ascii(args), result.stderr)
        assert words in one_error_line(result.stderr), (ascii(args), result.stderr)
    assert conn.execute("select count(*) from pgqueue.jobs").fetchone() == (0,)
    assert conn.execute("select count(*) from pgqueue.queues").fetchone() == (0,)
    assert conn.execute("select version_num from pgqueue_alembic_version").fetchone() == (migrate.revisions()[-1],)
    # --dsn itself: bytes that are not UTF-8 never reach libpq.
    [bad_dsn] = pgqueue_all(("queue:status", "--dsn", "host=\udcff"), cwd=tmp_path)
    assert bad_dsn.returncode == 2 and "Invalid value for '--dsn'" in one_error_line(bad_dsn.stderr)

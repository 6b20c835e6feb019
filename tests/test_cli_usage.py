"""CLI usage errors and input checks (issue 11, items 7 and 8): one error line, exit code 2,
nothing stored."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

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

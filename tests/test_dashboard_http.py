"""The dashboard's routes without a browser (issue 16): every page, the actions and their guards.

Requests go through httpx's ASGI transport into the app, on the test's event loop, against a
real seeded database: the pages render, the actions change the database, and a missing or
wrong CSRF token, a foreign origin, read-only mode and missing credentials change nothing.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import httpx
import psycopg
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from pgqueue import Client, QueueConfigurationError, format_rate, parse_rate
from pgqueue.dashboard import check_bind, create_app, is_local_host
from pgqueue.dashboard.core import ATTEMPTS_SHOWN
from pgqueue.redaction import MASK
from tests.cli_support import REPO, cli_env, command, pgqueue
from tests.dashboard_support import SECRET, Seeded, SetPassword, SignUp, command_served, failure, seed
from tests.helpers import envelope
from tests.sql_calls import ack, enqueue, enqueue_many, fail, release, reserve, rows, scalar
from tests.worker_support import settings_for

__all__ = ["SetPassword", "SignUp"]  # registered, so the dashboard knows their redact fields

HttpClient = Callable[..., Any]


@pytest.fixture
async def seeded(dsn: str) -> Seeded:
    return seed(dsn)


@pytest.fixture
async def opened(dsn: str) -> AsyncIterator[Client]:
    async with Client(settings=settings_for(dsn)) as client:
        yield client


def http_client(app: Any, base_url: str = "http://localhost", **kwargs: Any) -> httpx.AsyncClient:
    # localhost: a host the dashboard answers for by default (not httpx's "testserver").
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url, **kwargs)


def count(dsn: str, statement: str, *params: Any) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return scalar(conn, statement, params)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


async def test_every_page_renders(opened: Client, seeded: Seeded) -> None:
    async with http_client(create_app(opened)) as web:
        pages = ["/", "/overview/counts", "/failed", f"/failed/{seeded.failures[0]}", "/jobs",
                 f"/jobs/{seeded.reserved}", "/workers", "/queues", "/schedules",
                 "/failed?queue=emails&name=app:send_digest",
                 "/failed?reason=failed_by_handler", "/jobs?queue=reports", "/jobs?name=app:send_email",
                 "/workflows", "/workflows?state=ended", "/workflows?state=sleeping&name=x"]
        for path in pages:
            response = await web.get(path)
            assert response.status_code == 200, (path, response.text[:500])
            assert response.headers["content-security-policy"].startswith("default-src 'self'")
        counts = (await web.get("/overview/counts")).text
        assert "<html" not in counts and 'data-queue="emails"' in counts
        failed = (await web.get("/failed?name=app:send_digest")).text
        assert "template missing" in failed and "SMTP said 451" not in failed
        for asset in ("htmx.min.js", "dashboard.js", "dashboard.css"):
            assert (await web.get(f"/static/{asset}")).status_code == 200


async def test_the_nav_lists_the_pages_that_exist_and_nothing_else(opened: Client) -> None:
    async with http_client(create_app(opened)) as web:
        html = (await web.get("/")).text
    nav = re.search(r"<nav>(.*?)</nav>", html, re.S)
    assert nav is not None
    assert re.findall(r">([^<]+)</a>", nav.group(1)) == [
        "Overview", "Queues", "Failed jobs", "Jobs", "Workflows", "Schedules", "Workers"]
    # The throughput chart draws job_stats (issue 15): with no history, it says so in words.
    assert "<h2>Throughput" in html and "No jobs finished in the last hour." in html


async def test_unknown_and_malformed_ids_are_404_pages(opened: Client) -> None:
    async with http_client(create_app(opened)) as web:
        for path in (f"/failed/{uuid.uuid4()}", "/failed/not-a-uuid", f"/jobs/{uuid.uuid4()}", "/jobs/zzz"):
            response = await web.get(path)
            assert response.status_code == 404 and "No such" in response.text, path


async def test_bad_filter_input_is_named_and_the_page_still_renders(opened: Client, seeded: Seeded) -> None:
    async with http_client(create_app(opened)) as web:
        response = await web.get("/failed?since=yesterday&reason=bogus&after=garbage&queue=emails")
        assert response.status_code == 200
        assert "&#39;from&#39; &#39;yesterday&#39; is not a time" in response.text
        assert "unknown reason" in response.text and "malformed" in response.text
        assert 'value="emails"' in response.text  # the input is kept in the form
        response = await web.get("/jobs?id=nope")
        assert response.status_code == 200 and "is not a job id" in response.text
        response = await web.get(f"/jobs?id={seeded.reserved}")
        assert response.status_code == 303 and response.headers["location"] == f"/jobs/{seeded.reserved}"


async def test_the_reason_filter_offers_every_reason_the_table_accepts(dsn: str, opened: Client,
                                                                       seeded: Seeded) -> None:
    # Issue 24: reason=cancelled (what every cancel records) was refused as an unknown reason.
    await opened.cancel(seeded.ready[0])
    with psycopg.connect(dsn, autocommit=True) as conn:
        constraint = scalar(conn, "select pg_get_constraintdef(oid) from pg_constraint where conrelid = "
                                  "'pgqueue.failed_jobs'::regclass and contype = 'c' and "
                                  "pg_get_constraintdef(oid) like '%%reason%%'")
    accepted = set(re.findall(r"'([a-z_]+)'", constraint))
    async with http_client(create_app(opened)) as web:
        page = (await web.get("/failed?reason=cancelled")).text
        offered = set(re.findall(r'<option value="([a-z_]+)"', page))
        assert offered == accepted and "cancelled" in offered
        assert "unknown reason" not in page and '<option value="cancelled" selected>' in page
        assert re.findall(r'<span class="tag r-([a-z_]+)">', page) == ["cancelled"]


async def test_a_nul_in_a_filter_is_named_and_the_page_still_renders(dsn: str, opened: Client,
                                                                     seeded: Seeded) -> None:
    # Issue 24: /failed?queue=a%00b answered 503 ("PostgreSQL text fields cannot contain NUL").
    async with http_client(create_app(opened)) as web:
        for path, label, value in (("/failed?queue=em%00ails&name=app:send_email", "queue", "em\\x00ails"),
                                   ("/failed?name=app%00", "job name", "app\\x00"),
                                   ("/failed?since=2026-01-01%00", "&#39;from&#39;", "2026-01-01\\x00"),
                                   ("/jobs?queue=%00", "queue", "\\x00"), ("/jobs?name=x%00y", "job name", "x\\x00y")):
            response = await web.get(path)
            assert response.status_code == 200, (path, response.text[:300])
            assert f"{label} &#39;{value}&#39; contains a NUL character" in response.text, path
            assert "\x00" not in response.text, path
        # The other filters still apply: the name filter above found the one send_email failure.
        assert (await web.get("/failed?queue=em%00ails&name=app:send_email")).text.count("data-failure=") == 1
        for path in ("/?queue=a%00", "/overview/throughput?queue=a%00"):
            response = await web.get(path)
            assert response.status_code == 200 and "No jobs finished in the last hour in queue a" in response.text
            assert "\x00" not in response.text, path
        token = csrf_of((await web.get("/failed")).text)
        response = await web.post("/failed/flush", data={"csrf": token, "queue": "emails\x00"})
        assert "err=" in response.headers["location"] and "NUL" in unquote_plus(response.headers["location"])
    assert count(dsn, "select count(*) from pgqueue.failed_jobs") == 3


async def test_an_action_needs_the_csrf_token_of_its_cookie(dsn: str, opened: Client, seeded: Seeded) -> None:
    target = seeded.failures[0]
    async with http_client(create_app(opened)) as web:
        token = csrf_of((await web.get("/failed")).text)
        assert web.cookies.get("pgqueue_csrf") == token
        refused = [
            await web.post(f"/failed/{target}/forget", data={"next": "/failed"}),
            await web.post(f"/failed/{target}/forget", data={"csrf": "guess", "next": "/failed"}),
            await web.post(f"/failed/{target}/forget", data={"csrf": token},
                           headers={"origin": "http://evil.example"}),
        ]
        assert [r.status_code for r in refused] == [403, 403, 403]
        assert "nothing was changed" in refused[0].text
        assert count(dsn, "select count(*) from pgqueue.failed_jobs where id = %s", target) == 1
    async with http_client(create_app(opened)) as stranger:
        # Another client's token with no cookie of its own: refused too.
        response = await stranger.post(f"/failed/{target}/forget", data={"csrf": token})
        assert response.status_code == 403
    async with http_client(create_app(opened)) as web:
        token = csrf_of((await web.get("/failed")).text)
        done = await web.post(f"/failed/{target}/forget", data={"csrf": token, "next": "/failed?queue=emails"},
                              headers={"origin": "http://localhost"})
        assert done.status_code == 303
        assert done.headers["location"].startswith("/failed?queue=emails&msg=forgot")
    assert count(dsn, "select count(*) from pgqueue.failed_jobs where id = %s", target) == 0


async def test_the_page_shows_only_messages_the_server_left_for_this_browser(opened: Client,
                                                                            seeded: Seeded) -> None:
    # Issue 24: ?msg= (and ?err=) put anyone's text on the page, styled as the dashboard's own:
    # a link to /queues?msg=Session+expired,+sign+in+at+evil.example showed that sentence.
    async with http_client(create_app(opened)) as web:
        token = csrf_of((await web.get("/queues")).text)
        for query in ("msg=Sign+in+again+at+evil.example", "err=Sign+in+again+at+evil.example",
                      "msg=Sign+in+again+at+evil.example&sig=" + "0" * 64):
            page = (await web.get(f"/queues?{query}")).text
            assert "evil.example" not in page and 'class="flash' not in page, query
        response = await web.post("/queues/pause", data={"csrf": token, "queue": "emails", "next": "/queues"})
        location = response.headers["location"]
        assert location.startswith("/queues?msg=paused+queue") and "&sig=" in location
        page = (await web.get(location)).text
        assert '<p class="flash ok" role="status">paused queue &#39;emails&#39;' in page
        # The signature is for that text and that kind only.
        for forged in (location.replace("msg=paused", "msg=unpaused"), location.replace("msg=", "err=")):
            assert 'class="flash' not in (await web.get(forged)).text, forged
    # The same address in another browser (another CSRF cookie) shows nothing either.
    async with http_client(create_app(opened)) as other:
        await other.get("/queues")
        assert 'class="flash' not in (await other.get(location)).text


async def test_actions_change_the_database(dsn: str, opened: Client, seeded: Seeded) -> None:
    async with http_client(create_app(opened)) as web:
        token = csrf_of((await web.get("/failed")).text)
        response = await web.post(f"/failed/{seeded.failures[0]}/retry", data={"csrf": token})
        assert response.status_code == 303 and "msg=retried" in response.headers["location"]
        assert count(dsn, "select count(*) from pgqueue.jobs j join pgqueue.failed_jobs f on f.job_id = j.id") == 0
        response = await web.post("/failed/retry-selected", data={"csrf": token, "id": [
            str(seeded.failures[1]), str(uuid.uuid4())]})
        assert "retried+1+of+2" in response.headers["location"]
        response = await web.post("/failed/forget-selected", data={"csrf": token, "id": ["not-a-uuid"]})
        assert "err=" in response.headers["location"]
        response = await web.post("/failed/flush", data={"csrf": token, "queue": "accounts"})
        assert "flushed+1+failures+of+queue" in response.headers["location"]
    assert count(dsn, "select count(*) from pgqueue.failed_jobs") == 0
    assert count(dsn, "select count(*) from pgqueue.jobs") == 8


async def test_a_refused_retry_is_shown_and_keeps_the_failure(dsn: str, opened: Client, seeded: Seeded) -> None:
    target = seeded.failures[0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The job is queued again under the same id: retry_failed refuses (PGQ02).
        conn.execute("insert into pgqueue.jobs (id, queue, envelope, max_tries) select job_id, queue, envelope, 1"
                     " from pgqueue.failed_jobs where id = %s", (target,))
    async with http_client(create_app(opened)) as web:
        token = csrf_of((await web.get("/failed")).text)
        response = await web.post(f"/failed/{target}/retry", data={"csrf": token}, follow_redirects=True)
        assert "already queued again" in response.text and 'class="flash bad"' in response.text
    assert count(dsn, "select count(*) from pgqueue.failed_jobs where id = %s", target) == 1


async def test_next_never_leaves_the_dashboard(opened: Client, seeded: Seeded) -> None:
    async with http_client(create_app(opened)) as web:
        token = csrf_of((await web.get("/failed")).text)
        for evil in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
            response = await web.post(f"/failed/{uuid.uuid4()}/forget", data={"csrf": token, "next": evil})
            assert response.headers["location"].startswith("/?"), evil


async def test_read_only_offers_and_accepts_no_action(dsn: str, opened: Client, seeded: Seeded) -> None:
    async with http_client(create_app(opened, read_only=True)) as web:
        for path in ("/", "/failed", f"/failed/{seeded.failures[0]}", "/jobs", f"/jobs/{seeded.reserved}",
                     f"/jobs/{seeded.ready[0]}", "/queues", "/schedules"):
            html = (await web.get(path)).text
            assert 'method="post"' not in html and "<button" not in html.replace(
                '<button type="submit">Filter</button>', "").replace('<button type="submit">Find</button>', ""), path
            assert "read-only" in html
        token = csrf_of((await web.get("/failed")).text) if 'name="csrf"' in (await web.get("/failed")).text \
            else "none"
        for path in (f"/failed/{seeded.failures[0]}/retry", f"/failed/{seeded.failures[0]}/forget",
                     "/failed/flush", "/failed/retry-selected"):
            response = await web.post(path, data={"csrf": token, "id": str(seeded.failures[0])})
            assert response.status_code == 403 and "read-only" in response.text
        for path in ("/queues/pause", "/queues/resume", "/queues/limits", "/jobs/cancel-selected",
                     f"/jobs/{seeded.ready[0]}/cancel", f"/jobs/{seeded.reserved}/cancel"):
            response = await web.post(path, data={"csrf": token, "queue": "emails", "concurrency": "1",
                                                  "id": str(seeded.ready[0])})
            assert response.status_code == 403 and "read-only" in response.text, path
    assert count(dsn, "select count(*) from pgqueue.failed_jobs") == 3
    assert count(dsn, "select count(*) from pgqueue.queues") == 0
    assert count(dsn, "select count(*) from pgqueue.jobs") == 6


async def test_only_the_dashboards_own_hosts_are_served(dsn: str, opened: Client, seeded: Seeded) -> None:
    # Issue 24 item 10 (DNS rebinding): with evil.example pointed at 127.0.0.1, a page of that site
    # is same-origin with the dashboard; it read /queues (cookie and token) and paused a queue.
    async with http_client(create_app(opened)) as web:
        token = csrf_of((await web.get("/queues")).text)
        evil = {"host": "evil.example:8080", "origin": "http://evil.example:8080"}
        page = await web.get("/queues", headers=evil)
        assert page.status_code == 400, page.text[:300]
        assert "'evil.example:8080'" in page.text and "--allowed-host evil.example" in page.text
        assert "pgqueue_csrf" not in page.headers.get("set-cookie", "") and 'name="csrf"' not in page.text
        response = await web.post("/queues/pause", data={"csrf": token, "queue": "emails"}, headers=evil)
        assert response.status_code == 400
        for host in ("localhost:8080", "127.0.0.1", "127.0.0.1:8080", "[::1]:8080", "LocalHost", "localhost."):
            assert (await web.get("/workers", headers={"host": host})).status_code == 200, host
        for host in ("evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "[::1", "", "localhost:1:2"):
            assert (await web.get("/workers", headers={"host": host})).status_code == 400, host
        refused = await web.get("/static/dashboard.css", headers=evil)
        assert refused.status_code == 400 and refused.headers["x-frame-options"] == "DENY"
    assert count(dsn, "select count(*) from pgqueue.queues") == 0
    # Mounted in an application served under its own names: those are the ones allowed.
    app = create_app(opened, allowed_hosts=["queue.example.com", "*.ops.example.com"])
    async with http_client(app, base_url="http://queue.example.com") as web:
        assert (await web.get("/workers")).status_code == 200
        assert (await web.get("/workers", headers={"host": "a.ops.example.com:443"})).status_code == 200
        for host in ("ops.example.com", "localhost", "xops.example.com"):
            assert (await web.get("/workers", headers={"host": host})).status_code == 400, host
    async with http_client(create_app(opened, allowed_hosts=["*"]), base_url="http://any.example") as web:
        assert (await web.get("/workers")).status_code == 200
    for bad in ("queue.example.com:8080", "http://queue.example.com", "", "a b", "*example.com"):
        with pytest.raises(ValueError, match=r"allowed host .* is not a host name"):
            create_app(opened, allowed_hosts=[bad])


def test_the_command_answers_its_own_and_the_allowed_hosts(tmp_path: Path, dsn: str) -> None:
    with command_served(dsn, "--allowed-host", "queue.example.com", cwd=tmp_path) as base:
        for host, status in (("queue.example.com", 200), ("localhost:1234", 200), (base.removeprefix("http://"), 200),
                             ("evil.example", 400)):
            assert httpx.get(f"{base}/workers", headers={"host": host}, timeout=30).status_code == status, host
    result = pgqueue("dashboard", "--allowed-host", "queue.example.com:443", "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 2 and "--allowed-host: allowed host 'queue.example.com:443'" in result.stderr


async def test_basic_auth_guards_every_request(opened: Client) -> None:
    app = create_app(opened, auth=("ops", "pa:ss"))
    good = "Basic " + base64.b64encode(b"ops:pa:ss").decode()
    bad = "Basic " + base64.b64encode(b"ops:nope").decode()
    async with http_client(app) as web:
        for path in ("/", "/failed", "/static/dashboard.css", "/overview/counts"):
            response = await web.get(path)
            assert response.status_code == 401 and response.headers["www-authenticate"].startswith("Basic"), path
            # Issue 24: the 401 went out without the security headers every other response has.
            assert response.headers["content-security-policy"].startswith("default-src 'self'"), path
            assert response.headers["x-frame-options"] == "DENY" and response.headers["x-content-type-options"] == \
                "nosniff", path
        assert (await web.get("/", headers={"authorization": bad})).status_code == 401
        assert (await web.get("/", headers={"authorization": "Bearer ops"})).status_code == 401
        assert (await web.get("/", headers={"authorization": "Basic !!!"})).status_code == 401
        assert (await web.get("/", headers={"authorization": good})).status_code == 200


async def test_redacted_args_never_reach_the_page(opened: Client, seeded: Seeded) -> None:
    async with http_client(create_app(opened, redact=("to",))) as web:
        for path in ("/failed", f"/failed/{seeded.secret_failure}", f"/jobs/{seeded.ready[0]}"):
            html = (await web.get(path)).text
            assert SECRET not in html, path
        detail = (await web.get(f"/failed/{seeded.secret_failure}")).text
        assert "ann@example.com" in detail and "masked: password, to" in detail
        job = (await web.get(f"/jobs/{seeded.ready[0]}")).text
        assert "a@example.com" not in job  # masked for every job by redact=("to",)


async def test_a_secret_is_masked_on_every_page_that_shows_its_job(dsn: str, opened: Client) -> None:
    # Issue 24 item 11: the job page's "Failures of this job" and the failure page's earlier
    # failures showed raw messages, and the unique key unique_by derives from a secret showed it.
    job_id = await opened.dispatch(SetPassword(user="ann", password=SECRET))
    # The key as the envelope (JSON, HTML-escaped) shows it.
    shown_key = json.dumps(f'{SetPassword.name}:{{"password":"{MASK}"}}', ensure_ascii=False).replace('"', "&#34;")
    async with http_client(create_app(opened)) as web:
        page = (await web.get(f"/jobs/{job_id}")).text
        assert SECRET not in page and shown_key in page
    with psycopg.connect(dsn, autocommit=True) as conn:
        [held] = reserve(conn, ["accounts"], 1)
        assert fail(conn, job_id, held["token"], message=f"login refused for password {SECRET}")
        # The job queued again under its id, keeping that failure record (retry_failed would delete it).
        conn.execute("insert into pgqueue.jobs (id, queue, envelope, max_tries) select job_id, queue, envelope, 3"
                     " from pgqueue.failed_jobs where job_id = %s", (job_id,))
        [held] = reserve(conn, ["accounts"], 1)
        # Lists show a message's first 300 characters: this one is cut in the middle of the secret.
        assert fail(conn, job_id, held["token"], message="x" * 290 + SECRET, traceback=f"Boom: {SECRET}")
        latest = scalar(conn, "select id from pgqueue.failed_jobs where job_id = %s order by failed_at desc "
                              "limit 1", (job_id,))
    async with http_client(create_app(opened)) as web:
        for path in (f"/jobs/{job_id}", f"/failed/{latest}", "/failed", "/failed?queue=accounts"):
            page = (await web.get(path)).text
            assert "login refused for password" in page and "x" * 290 in page, path
            assert SECRET not in page and SECRET[:10] not in page, path
        assert shown_key in (await web.get(f"/failed/{latest}")).text


async def test_the_dsn_password_is_never_shown(dsn: str, seeded: Seeded) -> None:
    # Trust authentication ignores the password: the page must still never print it.
    async with Client(settings=settings_for(dsn + " password=TopSecret-9")) as client, \
            http_client(create_app(client)) as web:
        for path in ("/", "/failed", "/jobs", "/workers", f"/failed/{seeded.failures[0]}"):
            html = (await web.get(path)).text
            assert "TopSecret-9" not in html, path
        assert "/pgqueue_test_" in (await web.get("/")).text


async def test_mounted_under_a_prefix_links_and_actions_stay_inside(dsn: str, opened: Client,
                                                                   seeded: Seeded) -> None:
    outer = Starlette(routes=[Mount("/ops/queue", app=create_app(opened))])
    async with http_client(outer) as web:
        html = (await web.get("/ops/queue/failed")).text
        assert 'href="/ops/queue/static/dashboard.css"' in html and 'href="/ops/queue/jobs"' in html
        assert f'/ops/queue/failed/{seeded.failures[0]}' in html
        token = csrf_of(html)
        response = await web.post(f"/ops/queue/failed/{seeded.failures[0]}/forget",
                                  data={"csrf": token, "next": "/ops/queue/failed"})
        assert response.status_code == 303 and response.headers["location"].startswith("/ops/queue/failed?msg=")
        assert (await web.get("/ops/queue/static/htmx.min.js")).status_code == 200
    assert count(dsn, "select count(*) from pgqueue.failed_jobs") == 2


def test_a_non_local_bind_needs_credentials() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert is_local_host(host)
        check_bind(host, None)
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.com"):
        assert not is_local_host(host)
        with pytest.raises(ValueError, match="without authentication"):
            check_bind(host, None)
        check_bind(host, ("ops", "secret"))


def test_the_command_refuses_a_non_local_bind_without_auth(tmp_path: Path, dsn: str) -> None:
    result = pgqueue("dashboard", "--host", "0.0.0.0", "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "refusing to serve the dashboard on '0.0.0.0' without authentication" in result.stderr
    result = pgqueue("dashboard", "--auth", "nopassword", "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 2 and "USER:PASSWORD" in result.stderr


def test_the_command_serves_the_dashboard(tmp_path: Path, dsn: str, seeded: Seeded) -> None:
    process = subprocess.Popen([*command(), "dashboard", "--port", "0", "--read-only", "--dsn", dsn], cwd=tmp_path,
                               env=cli_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert process.stderr is not None
        line = ""
        while "serving" not in line:
            line = process.stderr.readline()
            assert line, "the command ended before serving"
        found = re.search(r"http://127\.0\.0\.1:(\d+)/ \(read-only\)", line)
        assert found, line
        response = httpx.get(f"http://127.0.0.1:{found.group(1)}/failed", timeout=30)
        assert response.status_code == 200 and "app:send_digest" in response.text
        assert "<button" not in response.text.replace('<button type="submit">Filter</button>', "")
    finally:
        process.terminate()  # the process this test started, by its own handle
        process.wait(30)


def test_pgqueue_and_its_cli_import_without_the_dashboard_extra(tmp_path: Path) -> None:
    # The web stack is blocked from importing, as if pgqueue-py[dashboard] were not installed.
    script = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('starlette', 'uvicorn', 'jinja2', 'multipart', 'python_multipart'):\n"
        "            raise ImportError(f'blocked: {name}')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import pgqueue, pgqueue_cli.app\n"
        "from typer.testing import CliRunner\n"
        "result = CliRunner().invoke(pgqueue_cli.app.app, ['dashboard'])\n"
        "print(result.exit_code, result.output)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=cli_env(), capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("2 ") and "pip install 'pgqueue-py[dashboard]'" in done.stdout + done.stderr
    assert str(REPO)


async def follow_next(web: httpx.AsyncClient, path: str, marker: str) -> list[str]:
    """Every row id (``data-<marker>``) seen following the Next links from ``path``."""
    seen: list[str] = []
    for _ in range(100):
        html = (await web.get(path)).text
        seen.extend(re.findall(rf'data-{marker}="([^"]+)"', html))
        found = re.search(r'rel="next" href="([^"]+)"', html)
        if not found:
            return seen
        path = found.group(1).replace("&amp;", "&")
    raise AssertionError("the Next links never ended")


async def test_next_links_page_through_every_match_once(dsn: str, opened: Client) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(9):
            failure(conn, "emails", name="app:a" if i % 3 else "app:b", message=f"m{i}")
        enqueue_many(conn, [envelope("q" if i % 2 else "r", name="app:x") for i in range(7)])
        newest_first = [str(r["id"]) for r in rows(
            conn, "select id from pgqueue.failed_jobs where envelope->>'name' = 'app:a' "
                  "order by failed_at desc, id desc")]
        jobs_q = {str(r["id"]) for r in rows(conn, "select id from pgqueue.jobs where queue = 'q'")}
    async with http_client(create_app(opened, page_size=2, scan_limit=3)) as web:
        assert await follow_next(web, "/failed?name=app:a", "failure") == newest_first
        assert len(await follow_next(web, "/failed", "failure")) == 9
        seen_jobs = await follow_next(web, "/jobs?queue=q", "job")
        assert len(seen_jobs) == len(jobs_q) == 3 and set(seen_jobs) == jobs_q


def test_redact_names_fields_and_masks_them_at_any_depth() -> None:
    from pgqueue import Job, JobContext, QueueConfigurationError, job
    from pgqueue.redaction import MASK, Redactor

    with pytest.raises(QueueConfigurationError, match="redact must be a tuple of arg names"):
        class Wrong(Job, register=False):
            redact = "password"  # type: ignore[assignment]  # the mistake this refuses

            async def handle(self, context: JobContext) -> None: ...

    @job(name="tests.dashboard.charge", redact=["card"])
    async def charge(card: str, amount: int) -> None: ...

    redactor = Redactor(["token"])
    args, secrets = redactor.args("tests.dashboard.charge", {
        "card": "4111-1111", "amount": 5, "nested": [{"token": "abc123", "card": {"n": 4242}}]})
    assert args == {"card": MASK, "amount": 5, "nested": [{"token": MASK, "card": MASK}]}
    assert sorted(secrets) == ["4111-1111", "4242", "abc123"]
    assert redactor.text("card 4111-1111 token abc123 n 4242", secrets) == f"card {MASK} token {MASK} n {MASK}"
    assert redactor.args("unknown:job", {"card": "x"})[0] == {"card": "x"}
    assert charge.name == "tests.dashboard.charge"
    # A value is found as typed and as JSON or repr() escape it; a list's cut end is masked too.
    quoted = 'p"ä\\ss'
    _, secrets = redactor.args("tests.dashboard.charge", {"card": quoted})
    for spelled in (quoted, json.dumps(quoted)[1:-1], json.dumps(quoted, ensure_ascii=False)[1:-1],
                    repr(quoted)[1:-1]):
        assert redactor.text(f"args {spelled}!", secrets) == f"args {MASK}!", spelled
    assert redactor.text("card 4111-11", ["4111-1111"], cut=True) == f"card {MASK}"
    assert redactor.text("card 4111-11", ["4111-1111"]) == "card 4111-11"
    # The unique key unique_by derives: the masked arg shows masked, whatever its length.
    key = 'tests.dashboard.charge:{"amount":5,"card":"ab"}'
    assert redactor.unique_key("tests.dashboard.charge", key) == key.replace('"ab"', f'"{MASK}"')
    assert redactor.unique_key("tests.dashboard.charge", "mine:4111-1111", ["4111-1111"]) == f"mine:{MASK}"


# ------------------------------------------------------------ queues, cancel, schedules
def control_row(dsn: str, queue: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = rows(conn, "select paused, concurrency, rate_limit, extract(epoch from rate_period)::float8 as period "
                           "from pgqueue.queues where name = %s", (queue,))
    return None if not found else tuple(found[0].values())


async def test_pause_resume_and_limits_change_the_queues_row(dsn: str, opened: Client, seeded: Seeded) -> None:
    async with http_client(create_app(opened)) as web:
        page = (await web.get("/queues")).text
        token = csrf_of(page)
        assert 'data-queue="emails"' in page and 'data-queue="reports"' in page

        async def post(path: str, **data: str) -> str:
            response = await web.post(path, data={"csrf": token, "next": "/queues", **data})
            assert response.status_code == 303, response.text
            return str(response.headers["location"])

        assert "msg=paused+queue" in await post("/queues/pause", queue="emails")
        assert control_row(dsn, "emails") == (True, None, None, None)
        assert "already+paused" in await post("/queues/pause", queue="emails")
        page = (await web.get("/queues")).text
        assert re.search(r'data-queue="emails".*?<span class="tag paused">paused</span>', page, re.S)
        assert ">Resume</button>" in page
        assert '<span class="tag paused">paused</span>' in (await web.get("/overview/counts")).text
        assert "msg=resumed" in await post("/queues/resume", queue="emails")
        assert control_row(dsn, "emails") == (False, None, None, None)

        assert "msg=queue" in await post("/queues/limits", queue="reports", concurrency="3", rate="20/min")
        assert control_row(dsn, "reports") == (False, 3, 20, 60.0)
        page = (await web.get("/queues")).text
        assert 'value="3"' in page and 'value="20/min"' in page
        # An empty field is no limit: only the rate is kept.
        await post("/queues/limits", queue="reports", concurrency="", rate="5/s")
        assert control_row(dsn, "reports") == (False, None, 5, 1.0)
        # The form has no burst field: a burst set elsewhere survives a change of the rate.
        await opened.set_limits("reports", rate_limit=5, rate_period=1, burst=2)
        await post("/queues/limits", queue="reports", concurrency="", rate="7/s")
        assert [c.burst for c in await opened.controls() if c.queue == "reports"] == [2]
        # issue 28: an adaptive limit shows its bounds and survives the form; Clear removes it.
        await opened.set_limits("reports", concurrency=6, adaptive=(2, 9), adaptive_decrease=0.5)
        assert "adaptive 2:9" in (await web.get("/queues")).text
        await post("/queues/limits", queue="reports", concurrency="5", rate="")
        assert [(c.concurrency, c.adaptive_min, c.adaptive_max, c.adaptive_decrease) for c in await opened.controls()
                if c.queue == "reports"] == [(5, 2, 9, 0.5)]  # the cut's factor survives too (revision 0010)
        assert "cleared+the+limits" in await post("/queues/limits", queue="reports", clear="1", concurrency="9")
        assert control_row(dsn, "reports") == (False, None, None, None)
        assert [c.adaptive_min for c in await opened.controls() if c.queue == "reports"] == [None]
        # A queue with no jobs yet can be controlled ahead of its first dispatch.
        await post("/queues/pause", queue="later")
        assert control_row(dsn, "later") == (True, None, None, None)


async def test_a_rate_the_form_shows_can_be_submitted_back(dsn: str, opened: Client, seeded: Seeded) -> None:
    # Issue 24: a rate set from Python or SQL with a 2 s period showed as "5 per 2 s", which the
    # same form then refused ("is not a rate"), so the row could not be saved without retyping it.
    async with http_client(create_app(opened)) as web:
        token = csrf_of((await web.get("/queues")).text)
        for period, shown in ((2.0, "5/2s"), (90.0, "5/90s"), (0.5, "5/0.5s"), (120.0, "5/2min"),
                              (7200.0, "5/2h"), (1.0, "5/s"), (3600.0, "5/h"), (31536000.0, "5/8760h")):
            await opened.set_limits("reports", concurrency=4, rate_limit=5, rate_period=period)
            page = (await web.get("/queues")).text
            found = re.search(r'<input name="rate" value="([^"]*)"[^>]*aria-label="rate of reports"', page)
            assert found is not None and found.group(1) == shown, (period, found and found.group(1))
            response = await web.post("/queues/limits", data={"csrf": token, "next": "/queues", "queue": "reports",
                                                              "concurrency": "4", "rate": found.group(1)})
            assert "msg=" in response.headers["location"], response.headers["location"]
            assert control_row(dsn, "reports") == (False, 4, 5, period)
    for limit, period in ((1, 0.001), (7, 1.5), (3, 59.5), (2, 3599.0), (9, 86400.0), (100, 60.0)):
        assert parse_rate(format_rate(limit, period)) == (limit, period), (limit, period)
    assert parse_rate("30 / 1.5h") == (30, 5400.0)
    for bad in ("5/0s", "5/0.0min", "5/-2s", "5/2", "5/2.s"):
        with pytest.raises(QueueConfigurationError, match="is not a rate"):
            parse_rate(bad)


async def test_bad_limit_values_are_named_and_change_nothing(dsn: str, opened: Client, seeded: Seeded) -> None:
    async with http_client(create_app(opened)) as web:
        token = csrf_of((await web.get("/queues")).text)
        await web.post("/queues/limits", data={"csrf": token, "queue": "emails", "concurrency": "2"})
        for data, said in [
            ({"concurrency": "0"}, "concurrency '0' is not a whole number from 1"),
            ({"concurrency": "-3"}, "concurrency '-3' is not a whole number"),
            ({"concurrency": "two"}, "concurrency 'two' is not a whole number"),
            ({"concurrency": "2.5"}, "concurrency '2.5' is not a whole number"),
            ({"concurrency": "99999999999"}, "from 1 to 2,147,483,647"),
            ({"rate": "fast"}, "rate 'fast' is not a rate"),
            ({"rate": "0/s"}, "rate '0/s' is not a rate"),
            ({"rate": "10/week"}, "rate '10/week' is not a rate"),
        ]:
            response = await web.post("/queues/limits", data={"csrf": token, "queue": "emails", "next": "/queues",
                                                              **data})
            assert response.status_code == 303
            location = response.headers["location"]
            assert location.startswith("/queues?err="), location
            page = (await web.get(location)).text
            assert said.replace("'", "&#39;") in page, (data, page[:2000])
            assert "the limits were not changed" in page
        for queue, said in (("", "no queue was named"), ("a,b", "may not contain a comma")):
            response = await web.post("/queues/pause", data={"csrf": token, "queue": queue})
            page = (await web.get(response.headers["location"])).text
            assert said in page and 'class="flash bad"' in page
    assert control_row(dsn, "emails") == (False, 2, None, None)
    assert count(dsn, "select count(*) from pgqueue.queues") == 1


async def test_the_new_actions_need_the_csrf_token(dsn: str, opened: Client, seeded: Seeded) -> None:
    async with http_client(create_app(opened)) as web:
        token = csrf_of((await web.get("/queues")).text)
        for path in ("/queues/pause", "/queues/limits", "/jobs/cancel-selected", f"/jobs/{seeded.ready[0]}/cancel"):
            data = {"queue": "emails", "concurrency": "1", "id": str(seeded.ready[0])}
            refused = [await web.post(path, data=data),
                       await web.post(path, data={**data, "csrf": "guess"}),
                       await web.post(path, data={**data, "csrf": token}, headers={"origin": "http://evil.example"})]
            assert [r.status_code for r in refused] == [403, 403, 403], path
    assert count(dsn, "select count(*) from pgqueue.queues") == 0
    assert count(dsn, "select count(*) from pgqueue.jobs where id = %s", seeded.ready[0]) == 1


async def test_cancel_from_the_jobs_list_and_a_job(dsn: str, opened: Client, seeded: Seeded) -> None:
    async with http_client(create_app(opened)) as web:
        page = (await web.get("/jobs?queue=emails")).text
        token = csrf_of(page)
        assert f'name="id" value="{seeded.ready[0]}"' in page and ">Cancel selected</button>" in page
        response = await web.post("/jobs/cancel-selected", data={
            "csrf": token, "next": "/jobs?queue=emails", "id": [str(seeded.ready[0]), str(seeded.delayed[0])]})
        assert response.headers["location"].startswith("/jobs?queue=emails&msg=cancelled+2+of+2")
        # A job page offers Cancel; again says it was already cancelled.
        assert ">Cancel</button>" in (await web.get(f"/jobs/{seeded.ready[1]}")).text
        response = await web.post(f"/jobs/{seeded.ready[1]}/cancel", data={"csrf": token})
        assert "msg=job" in response.headers["location"] and "cancelled+%28it+was+waiting" in response.headers[
            "location"]
        response = await web.post(f"/jobs/{seeded.ready[1]}/cancel", data={"csrf": token})
        assert "already+cancelled" in response.headers["location"]
        # A reserved job: cancelled running (no worker holds it here, the row and token go).
        assert ">Cancel (running)</button>" in (await web.get(f"/jobs/{seeded.reserved}")).text
        response = await web.post(f"/jobs/{seeded.reserved}/cancel", data={"csrf": token})
        assert "cancelled+while+running" in response.headers["location"]
        # Malformed ids: named, and nothing of the selection is cancelled.
        response = await web.post("/jobs/cancel-selected", data={"csrf": token, "id": [str(seeded.ready[2]), "x"]})
        assert "err=" in response.headers["location"] and "not+a+job+id" in response.headers["location"]
        response = await web.post("/jobs/cancel-selected", data={"csrf": token})
        assert "no+job+was+selected" in response.headers["location"]
        response = await web.post("/jobs/nope/cancel", data={"csrf": token})
        assert "err=" in response.headers["location"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        cancelled = {r["job_id"] for r in rows(conn, "select job_id from pgqueue.failed_jobs "
                                                     "where reason = 'cancelled'")}
    assert cancelled == {seeded.ready[0], seeded.ready[1], seeded.delayed[0], seeded.reserved}
    assert count(dsn, "select count(*) from pgqueue.jobs where id = %s", seeded.ready[2]) == 1


def test_the_schedules_page_lists_the_periodic_jobs_of_the_apps(tmp_path: Path, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into pgqueue.schedule_ticks (schedule, tick, job_id) "
                     "values ('cli:nightly_report', '2026-01-02 02:00+00', gen_random_uuid())")
    with command_served(dsn, "--app", "tests.cli_schedule_jobs", cwd=tmp_path) as base:
        page = httpx.get(f"{base}/schedules", timeout=30).text
    row = re.search(r'<tr data-schedule="cli:nightly_report">(.*?)</tr>', page, re.S)
    assert row is not None, page
    assert "0 3 * * *" in row.group(1) and "Europe/Paris" in row.group(1)
    assert "2026-01-02 02:00:00 UTC" in row.group(1) and "2026-01-02 03:00:00 Europe/Paris" in row.group(1)
    assert "&#34;kind&#34;: &#34;daily&#34;" in row.group(1) or '"kind": "daily"' in row.group(1)
    heartbeat = re.search(r'<tr data-schedule="cli:heartbeat">(.*?)</tr>', page, re.S)
    assert heartbeat is not None and "every 30s" in heartbeat.group(1) and "none yet" in heartbeat.group(1)


async def test_without_apps_the_schedules_page_says_how_to_list_them(opened: Client) -> None:
    async with http_client(create_app(opened)) as web:
        page = (await web.get("/schedules")).text
    assert "No periodic job is known to this dashboard" in page and "--app MODULE" in page


def buckets_of(html: str) -> list[dict[str, int]]:
    """The throughput chart's buckets as drawn: the counts in each bucket's data attributes."""
    found = re.findall(r'<g class="bucket" data-start="[^"]+" data-succeeded="(\d+)" data-failed="(\d+)" '
                       r'data-retried="(\d+)" data-cancelled="(\d+)">', html)
    return [{"succeeded": int(s), "failed": int(f), "retried": int(r)} for s, f, r, _ in found]


def finish_jobs(dsn: str, queue: str, succeeded: int, failed: int, retried: int) -> None:
    """A known workload, through the stored functions a worker calls (each writes job_stats)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope(queue, name="app:chart") for _ in range(succeeded + failed + retried)])
        held = reserve(conn, [queue], max_jobs=succeeded + failed + retried)
        assert len(held) == succeeded + failed + retried
        ack(conn, [h["id"] for h in held[:succeeded]], [h["token"] for h in held[:succeeded]])
        for h in held[succeeded:succeeded + failed]:
            assert fail(conn, h["id"], h["token"])
        for h in held[succeeded + failed:]:
            assert release(conn, h["id"], h["token"], 3600)


async def test_the_overview_charts_the_jobs_finished_per_bucket(opened: Client, dsn: str) -> None:
    # Issue 16: the throughput chart reads job_stats (aggregated in SQL); the counts per bucket
    # are in the SVG's data attributes, every bucket drawn (empty ones too).
    finish_jobs(dsn, "emails", succeeded=5, failed=2, retried=1)
    finish_jobs(dsn, "reports", succeeded=3, failed=0, retried=0)
    async with http_client(create_app(opened)) as web:
        page = (await web.get("/")).text
        assert 'data-testid="throughput"' in page and "no jobs finished" not in page.lower()
        hour = buckets_of(page)
        assert len(hour) == 60
        assert [sum(b[k] for b in hour) for k in ("succeeded", "failed", "retried")] == [8, 2, 1]
        assert all(b == {"succeeded": 0, "failed": 0, "retried": 0} for b in hour[:-2])  # recent only
        day = buckets_of((await web.get("/?range=day")).text)
        assert len(day) == 96 and [sum(b[k] for b in day) for k in ("succeeded", "failed", "retried")] == [8, 2, 1]
        fragment = (await web.get("/overview/throughput?range=hour&queue=emails")).text
        assert "<html" not in fragment and 'data-range="hour"' in fragment
        assert [sum(b[k] for b in buckets_of(fragment)) for k in ("succeeded", "failed", "retried")] == [5, 2, 1]
        assert 'hx-get="/overview/throughput?range=day&amp;queue=reports"' in (
            await web.get("/?range=day&queue=reports")).text


async def test_the_chart_says_when_no_job_finished(opened: Client, dsn: str) -> None:
    async with http_client(create_app(opened)) as web:
        fresh = (await web.get("/")).text
        assert "No jobs finished in the last hour." in fresh and 'data-testid="throughput"' not in fresh
    finish_jobs(dsn, "emails", succeeded=1, failed=0, retried=0)
    async with http_client(create_app(opened)) as web:
        empty = (await web.get("/overview/throughput?queue=nowhere")).text
        assert "No jobs finished in the last hour in queue nowhere." in empty and "<svg" not in empty
        assert 'data-testid="throughput"' in (await web.get("/overview/throughput")).text
        day = (await web.get("/?range=day&queue=nowhere")).text
        assert "No jobs finished in the last day in queue nowhere." in day


# --- issue 29: the operator's view ---
def backlog(dsn: str, queue: str, ready: int, delayed: int = 0) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope(queue, name="app:backfill") for _ in range(ready)])
        if delayed:
            enqueue_many(conn, [envelope(queue, name="app:backfill") for _ in range(delayed)],
                         delays=[3600.0] * delayed)


def cell(html: str, queue: str, col: str) -> str:
    found = re.search(rf'<tr data-queue="{queue}">.*?data-col="{col}"[^>]*>(.*?)</td>', html, re.S)
    assert found, (queue, col)
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


async def test_counts_past_the_cap_are_exact_while_the_table_is_small(dsn: str, opened: Client,
                                                                      seeded: Seeded) -> None:
    # Issue 29: a 3,000-job backlog of a small table showed ≈ 2,900 / 3,000 / 3,100, exact zeros as
    # "≈ 0", and the Queues page "201+"; read whole, the table gives exact figures on every page.
    backlog(dsn, "backfill", 3000, delayed=299)
    await opened.pause("backfill")
    jobs = count(dsn, "select count(*) from pgqueue.jobs")
    failures = count(dsn, "select count(*) from pgqueue.failed_jobs")
    async with http_client(create_app(opened)) as web:
        counts = (await web.get("/overview/counts")).text
        assert "≈" not in counts
        assert (cell(counts, "backfill", "ready"), cell(counts, "backfill", "delayed"),
                cell(counts, "backfill", "expired"), cell(counts, "backfill", "reserved")) == ("3,000", "299", "0", "0")
        assert f"{jobs:,} jobs and {failures:,} failures in the tables" in counts
        queues = (await web.get("/queues")).text
        assert (cell(queues, "backfill", "ready"), cell(queues, "backfill", "reserved")) == ("3,000", "0")
        assert "+" not in cell(queues, "reports", "reserved")
        listing = (await web.get("/jobs")).text
        assert re.search(rf'data-testid="jobs-total"[^>]*>{jobs:,} in the table<', listing)
        assert re.search(r'data-testid="jobs-total"[^>]*>3,299 in queue backfill<',
                         (await web.get("/jobs?queue=backfill")).text)
        assert re.search(rf'data-testid="failed-total"[^>]*>{failures:,} recorded<', (await web.get("/failed")).text)
        assert re.search(r'data-testid="failed-total"[^>]*>2 recorded in queue emails<',
                         (await web.get("/failed?queue=emails")).text)


async def test_an_estimate_past_the_exact_bound_is_steady_and_only_estimates_say_so(dsn: str, opened: Client,
                                                                                   seeded: Seeded) -> None:
    backlog(dsn, "backfill", 3000)
    async with http_client(create_app(opened, exact_pages=0, sample_pages=4)) as web:
        shown = {cell((await web.get("/overview/counts")).text, "backfill", "ready") for _ in range(10)}
        counts = (await web.get("/overview/counts")).text
    # The same pages are sampled while the table is unchanged: one figure over ten refreshes.
    assert len(shown) == 1 and next(iter(shown)).startswith("≈ ")
    # Uncapped counts of the other queues stay exact, never "≈".
    assert (cell(counts, "emails", "ready"), cell(counts, "emails", "expired"), cell(counts, "reports", "expired")) \
        == ("3", "0", "1")
    assert "≈" not in cell(counts, "backfill", "delayed")


async def test_the_page_of_a_job_that_ended_failed_names_it_and_shows_its_args(dsn: str, opened: Client) -> None:
    # Issue 29: the title was "job", no args, and "was not retried" after a retry that failed again.
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = failure(conn, "emails", name="app:send_email", args={"to": "ann@example.com"}, tries=1)
        job_id = count(dsn, "select job_id from pgqueue.failed_jobs where id = %s", first)
    await opened.retry_failed(first)
    with psycopg.connect(dsn, autocommit=True) as conn:
        [held] = reserve(conn, ["emails"], 1)
        assert held["id"] == job_id and fail(conn, job_id, held["token"], message="SMTP said 451 again")
    async with http_client(create_app(opened)) as web:
        html = (await web.get(f"/jobs/{job_id}")).text
    assert re.search(r'data-testid="job-title">app:send_email<', html)
    assert "ann@example.com" in html and 'data-testid="args"' in html
    assert "was not retried" not in html and "has not been retried since" in html
    assert "SMTP said 451 again" in html


async def test_a_failure_id_pasted_as_a_job_id_finds_the_failure_and_says_which(opened: Client,
                                                                              seeded: Seeded) -> None:
    # Issue 29: the id queue:failed prints is a failure id; "Job id" answered 404 for it.
    failure_id = seeded.failures[0]
    async with http_client(create_app(opened)) as web:
        response = await web.get(f"/jobs?id={failure_id}")
        assert response.status_code == 303
        assert response.headers["location"] == f"/failed/{failure_id}?given=failure"
        page = (await web.get(response.headers["location"])).text
        assert "is a <b>failure id</b>" in page
        direct = await web.get(f"/jobs/{failure_id}")
        assert direct.status_code == 303 and direct.headers["location"].startswith(f"/failed/{failure_id}")
        # A job id still goes to its job, an unknown id to the "no such job" page.
        assert (await web.get(f"/jobs?id={seeded.reserved}")).headers["location"] == f"/jobs/{seeded.reserved}"
        assert (await web.get(f"/jobs/{uuid.uuid4()}")).status_code == 404


async def test_every_page_has_an_icon(opened: Client) -> None:
    # Issue 29: /favicon.ico was a 404 on every page.
    async with http_client(create_app(opened)) as web:
        icon = await web.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
        assert '<link rel="icon" type="image/svg+xml" href="/static/favicon.svg">' in (await web.get("/")).text
        assert (await web.get("/static/favicon.svg")).status_code == 200


async def test_idle_queues_stay_listed_and_the_chart_has_a_time_axis_and_cancellations(
        dsn: str, opened: Client) -> None:
    # Issue 29: idle queues with history vanished from the overview, the Queues page and the chart's
    # list; cancelled outcomes were not drawn; the chart had no time axis.
    finish_jobs(dsn, "finished", succeeded=2, failed=0, retried=0)
    await opened.pause("quiet")
    with psycopg.connect(dsn, autocommit=True) as conn:
        doomed = enqueue(conn, envelope("emails", name="app:send_email"))
    assert await opened.cancel(doomed) == "cancelled"
    async with http_client(create_app(opened)) as web:
        overview = (await web.get("/")).text
        queues = (await web.get("/queues")).text
    for name in ("finished", "quiet"):
        assert f'<tr data-queue="{name}">' in overview and f'<tr data-queue="{name}">' in queues, name
        assert f"<option>{name}</option>" in overview, name
    assert cell(overview, "finished", "ready") == "0"
    cancelled = re.findall(r'data-cancelled="(\d+)"', overview)
    assert sum(int(n) for n in cancelled) == 1 and '<rect class="cancelled"' in overview
    axis = re.search(r'data-testid="time-axis"[^>]*>(.*?)</div>', overview, re.S)
    assert axis and len(re.findall(r"\d\d:\d\d", axis.group(1))) == 6


def listed_jobs(html: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)">', html)


async def test_jobs_are_found_by_args_a_part_of_their_name_state_queue_and_time(dsn: str, opened: Client) -> None:
    # Issue 29: find jobs by args (containment or key=value), partial name, state, queue, time range.
    with psycopg.connect(dsn, autocommit=True) as conn:
        ann = enqueue(conn, envelope("emails", name="app:send_welcome", args={"to": "ann@example.com", "n": 1}))
        bob = enqueue(conn, envelope("emails", name="app:send_digest", args={"to": "bob@example.com", "n": 2}))
        later = enqueue(conn, envelope("emails", name="app:send_welcome", args={"to": "ann@example.com"}),
                        delay=3600)
        other = enqueue(conn, envelope("reports", name="app:report", args={"to": "ann@example.com"}))
    async with http_client(create_app(opened)) as web:
        async def found(query: str) -> set[str]:
            response = await web.get(f"/jobs?{query}")
            assert response.status_code == 200 and "flash bad" not in response.text, (query, response.text[:300])
            return set(listed_jobs(response.text))

        assert await found("args=to%3Dann%40example.com") == {str(ann), str(later), str(other)}
        assert await found("args=" + httpx.QueryParams({"a": '{"to": "bob@example.com"}'})["a"]) == {str(bob)}
        assert await found("args=n%3D2") == {str(bob)}  # 2 reads as the number 2
        assert await found("args=n%3D%222%22") == set()  # "2", the text, is not the number
        assert await found("name=WELCOME") == {str(ann), str(later)}
        assert await found("name=send&state=delayed") == {str(later)}
        assert await found("queue=reports&args=to%3Dann%40example.com") == {str(other)}
        created = count(dsn, "select created_at from pgqueue.jobs where id = %s", bob)
        assert str(ann) not in await found(f"since={created.isoformat().replace('+00:00', 'Z')}")
        bad = (await web.get("/jobs?args=%7Bnot+json&state=asleep")).text
        assert "is not a JSON object" in bad and "unknown state &#39;asleep&#39;" in bad


async def test_all_matching_jobs_are_counted_confirmed_and_cancelled_or_deleted(dsn: str, opened: Client) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("webhooks", name="app:deliver", args={"host": "a.example"}) for _ in range(1203)])
        keep = enqueue(conn, envelope("webhooks", name="app:deliver", args={"host": "b.example"}))
        enqueue(conn, envelope("webhooks", name="app:deliver", args={"host": "a.example"}))
        [held] = reserve(conn, ["webhooks"], 1)  # held by a worker: delete leaves it, cancel stops it
    async with http_client(create_app(opened)) as web:
        confirm = (await web.get("/jobs/bulk?action=delete&queue=webhooks&args=host%3Da.example")).text
        assert re.search(r'data-testid="bulk-count"><b>1,204</b> jobs match \(1 of them held by a worker\)', confirm)
        token = csrf_of(confirm)
        form = {"csrf": token, "action": "delete", "queue": "webhooks", "args": "host=a.example", "next": "/jobs"}
        done = await web.post("/jobs/bulk", data=form, headers={"origin": "http://localhost"})
        assert done.status_code == 303 and "deleted+1%2C203+jobs" in done.headers["location"]
        assert count(dsn, "select count(*) from pgqueue.jobs where queue = 'webhooks'") == 2
        done = await web.post("/jobs/bulk", data={**form, "action": "cancel"}, headers={"origin": "http://localhost"})
        assert "cancelled+1+job" in done.headers["location"]
        assert count(dsn, "select count(*) from pgqueue.jobs where id = %s", held["id"]) == 0
        assert count(dsn, "select reason from pgqueue.failed_jobs where job_id = %s", held["id"]) == "cancelled"
        assert count(dsn, "select count(*) from pgqueue.jobs where id = %s", keep) == 1
        # A selection: deleted by id, in SQL.
        selected = await web.post("/jobs/delete-selected", data={"csrf": token, "id": [str(keep)], "next": "/jobs"},
                                  headers={"origin": "http://localhost"})
        assert "deleted+1+of+1+selected" in selected.headers["location"]
        # Malformed filters change nothing.
        refused = await web.post("/jobs/bulk", data={**form, "args": "{oops"}, headers={"origin": "http://localhost"})
        assert "err=" in refused.headers["location"]


async def test_all_matching_failures_are_retried_or_forgotten(dsn: str, opened: Client, seeded: Seeded) -> None:
    async with http_client(create_app(opened)) as web:
        confirm = (await web.get("/failed/bulk?action=retry&queue=emails")).text
        assert re.search(r'data-testid="bulk-count"><b>2</b> failures match \(2 of them can be retried\)', confirm)
        token = csrf_of(confirm)
        done = await web.post("/failed/bulk", data={"csrf": token, "action": "retry", "queue": "emails",
                                                    "next": "/failed"}, headers={"origin": "http://localhost"})
        assert "retried+2+failures" in done.headers["location"]
        assert count(dsn, "select count(*) from pgqueue.failed_jobs where queue = 'emails'") == 0
        done = await web.post("/failed/bulk", data={"csrf": token, "action": "forget", "reason": "exception",
                                                    "next": "/failed"}, headers={"origin": "http://localhost"})
        assert "forgot+1+failure" in done.headers["location"]
        assert count(dsn, "select count(*) from pgqueue.failed_jobs") == 0
    async with http_client(create_app(opened, read_only=True)) as web:
        assert (await web.post("/failed/bulk", data={"action": "forget"})).status_code == 403
        assert (await web.post("/jobs/bulk", data={"action": "delete"})).status_code == 403


def retried(conn: psycopg.Connection[Any], queue: str, job_id: uuid.UUID, *, message: str,
            traceback: str = "Traceback ...", worker: str = "host-1:42", duration: float = 1.5) -> None:
    """Reserve ``job_id`` and release it for a retry keeping its attempt's error (what the worker
    does when a handler raises and tries remain)."""
    [held] = [r for r in reserve(conn, [queue], 1) if r["id"] == job_id]
    error = json.dumps({"exception": "app.errors.Flaky", "message": message, "traceback": traceback,
                        "worker": worker})
    assert scalar(conn, "select pgqueue.release(%s, %s, 0, %s, 0, %s::jsonb)",
                  (job_id, held["token"], duration, error))


async def test_the_job_and_failure_pages_show_every_failed_attempt(dsn: str, opened: Client) -> None:
    # Issues 26 and 29: a job that failed, was retried with retry_failed and failed again showed only
    # its last failure ("Earlier failures" could never show anything: retry_failed deleted them).
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = failure(conn, "emails", name="app:send_email", message="SMTP said 451", tries=2)
        job_id = count(dsn, "select job_id from pgqueue.failed_jobs where id = %s", first)
    await opened.retry_failed(first)
    with psycopg.connect(dsn, autocommit=True) as conn:
        retried(conn, "emails", job_id, message="connection reset", traceback="Traceback\n  File \"x.py\"\nReset")
    async with http_client(create_app(opened)) as web:
        live = (await web.get(f"/jobs/{job_id}")).text
    # A live job (queued again after the retry): both attempts so far, newest first.
    assert re.findall(r'<tr data-attempt="(\d+)">', live) == ["1", "1"]
    assert live.index("connection reset") < live.index("SMTP said 451")
    assert "app.errors.Flaky" in live and "host-1:42" in live and "1 s" in live
    assert "<summary>Traceback</summary>" in live and "File &#34;x.py&#34;" in live
    with psycopg.connect(dsn, autocommit=True) as conn:
        [held] = reserve(conn, ["emails"], 1)
        assert held["id"] == job_id and fail(conn, job_id, held["token"], message="SMTP said 451 again")
        last = count(dsn, "select id from pgqueue.failed_jobs where job_id = %s", job_id)
    async with http_client(create_app(opened)) as web:
        for path in (f"/jobs/{job_id}", f"/failed/{last}"):
            page = (await web.get(path)).text
            assert re.findall(r'<tr data-attempt="(\d+)">', page) == ["2", "1", "1"], path
            cells = re.findall(r'<span class="tag r-([a-z_]+)">\1</span></td><td class="l mono">', page)
            assert cells == ["exception", "retried", "exception"], path
            assert page.index("SMTP said 451 again") < page.index("connection reset") < page.rindex("SMTP said 451")
            assert 'data-testid="attempts-more"' not in page and 'data-testid="attempts-none"' not in page
        # A job that never failed says so.
        fresh = await opened.dispatch(SignUp(email="bo@example.com", password="x" * 12))
        assert 'data-testid="attempts-none"' in (await web.get(f"/jobs/{fresh}")).text


async def test_the_attempts_shown_are_masked_like_the_other_failure_text(dsn: str, opened: Client) -> None:
    job_id = await opened.dispatch(SignUp(email="ann@example.com", password=SECRET))
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Pages show a message's first 1,000 characters and a traceback's last 4,000: cut inside the secret.
        retried(conn, "accounts", job_id, message="x" * 990 + SECRET, traceback=SECRET + "\n" + "y" * 4000,
                worker=f"worker-{SECRET}")
        retried(conn, "accounts", job_id, message=f"login refused for password {SECRET}",
                traceback=SECRET + "z" * 3956 + f"\nBoom: {SECRET!r}")  # its last 4,000 start at [3:]
        [held] = reserve(conn, ["accounts"], 1)
        assert fail(conn, job_id, held["token"], message=f"no: {SECRET}")
        latest = count(dsn, "select id from pgqueue.failed_jobs where job_id = %s", job_id)
    async with http_client(create_app(opened)) as web:
        for path in (f"/jobs/{job_id}", f"/failed/{latest}"):
            page = (await web.get(path)).text
            assert len(re.findall(r'<tr data-attempt="', page)) == 3, path
            assert "login refused for password" in page and "x" * 990 in page and "y" * 100 in page, path
            assert "(the traceback&#39;s start is omitted)" in page and f"no: {MASK}" in page, path
            assert SECRET not in page and SECRET[:10] not in page and SECRET[-10:] not in page, path


async def test_the_attempts_list_stops_at_its_cap_and_says_how_many_more(dsn: str, opened: Client) -> None:
    shown = ATTEMPTS_SHOWN
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = enqueue(conn, envelope("emails", name="app:send_email", tries=shown + 10))
        for n in range(1, shown + 4):
            retried(conn, "emails", job_id, message=f"failure number {n}.")
    async with http_client(create_app(opened)) as web:
        page = (await web.get(f"/jobs/{job_id}")).text
    numbers = [int(n) for n in re.findall(r'<tr data-attempt="(\d+)">', page)]
    assert numbers == list(range(shown + 3, 3, -1))
    assert "failure number 4." in page and "failure number 3." not in page
    more = re.search(r'data-testid="attempts-more">([^<]*)<', page)
    assert more is not None and more.group(1).startswith("3 more earlier attempts not shown")


async def test_the_job_page_shows_what_a_job_waits_for_and_its_batch(dsn: str, opened: Client) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent, child = enqueue(conn, envelope("emails")), enqueue(conn, envelope("emails"))
        scalar(conn, "select pgqueue.add_dependencies(array[%s]::uuid[], array[%s]::uuid[], 'cancel')",
               (child, parent))
        callback = enqueue(conn, envelope("emails"))
        scalar(conn, "select pgqueue.add_batch(%s, array[%s]::uuid[], %s)", (uuid.uuid4(), parent, callback))
    async with http_client(create_app(opened)) as web:
        of_parent = (await web.get(f"/jobs/{parent}")).text
        of_child = (await web.get(f"/jobs/{child}")).text
    assert 'data-testid="job-family"' in of_parent and f"/jobs/{child}" in of_parent
    assert "0 of 1 ended" in of_parent
    assert f"/jobs/{parent}" in of_child and "open" in of_child
    assert "s-blocked" in of_child and "once what it waits for has ended" in of_child


async def test_the_queues_page_shows_the_busiest_partitions_of_a_partitioned_queue(dsn: str, opened: Client) -> None:
    """Issue 28: a queue with per-partition limits lists its partitions (running, waiting, limits, weight)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n in range(3):
            enqueue(conn, envelope("tenants") | {"partition": f"tenant:{n}"})
    await opened.set_limits("tenants", per_partition_concurrency=2, per_partition_rate="10/s")
    await opened.set_partition_limit("tenants", "tenant:<big>", concurrency=20, weight=3)
    async with http_client(create_app(opened)) as web:
        page = (await web.get("/queues")).text
    assert 'data-testid="partitions-tenants"' in page
    assert "at most 2 at once · 10/s per partition" in page
    assert re.search(r'data-partition="tenant:1">.*?<td class="n">0</td><td class="n">1</td>.*?<td class="l">2</td>'
                     r'\s*<td class="l">10/s</td>', page, re.S)
    # Names are escaped; the override shows with its own limit and weight.
    assert re.search(r'data-partition="tenant:&lt;big&gt;">.*?<td class="l">20</td>.*?<td class="n">3</td>'
                     r'<td class="l">yes</td>', page, re.S)
    # Revision 0010: adaptive partitions show their bounds beside the current limit.
    await opened.set_limits("tenants", per_partition_concurrency=2, per_partition_adaptive=(1, 8))
    async with http_client(create_app(opened)) as web:
        page = (await web.get("/queues")).text
    assert "adaptive 1:8, starting at 2" in page
    assert re.search(r'data-partition="tenant:1">.*?<td class="l">2 <span class="sub">\(adaptive 1:8\)</span></td>',
                     page, re.S)


async def test_a_batch_has_a_page_with_its_counts_callback_and_members(dsn: str, opened: Client) -> None:
    """Issue 26: /batches/<id>: progress, the callback linked, each member's outcome, at most 200 a page."""
    from pgqueue.dashboard.pages.batches import MEMBERS_SHOWN
    batch_id = uuid.uuid4()
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("members") for _ in range(MEMBERS_SHOWN + 5)])
        members = [r["id"] for r in rows(conn, "select id from pgqueue.jobs where queue = 'members' order by id")]
        callback = enqueue(conn, envelope("emails"))
        scalar(conn, "select pgqueue.add_batch(%s, %s::uuid[], %s)", (batch_id, members, callback))
        held = reserve(conn, ["members"], 2)
        assert ack(conn, [held[0]["id"]], [held[0]["token"]]) == {held[0]["id"]: True}
        assert fail(conn, held[1]["id"], held[1]["token"], message="member failed")
    total = MEMBERS_SHOWN + 5
    async with http_client(create_app(opened)) as web:
        page = (await web.get(f"/batches/{batch_id}")).text
        of_member = (await web.get(f"/jobs/{members[-1]}")).text
        following = re.search(r'rel="next" href="([^"]+)"', page)
        assert following is not None
        second = (await web.get(following.group(1).replace("&amp;", "&"))).text
        assert (await web.get(f"/batches/{uuid.uuid4()}")).status_code == 404
        assert (await web.get("/batches/not-a-uuid")).status_code == 404
        assert (await web.get(f"/batches/{callback}")).status_code == 404  # a callback's id is not a batch's
    assert f"2 of {total} ended" in page and "1 succeeded, 1 failed" in page and f"{total - 2} pending" in page
    assert f'href="/jobs/{callback}"' in page and "waits for the" in page
    assert len(re.findall(r"data-member=", page)) == MEMBERS_SHOWN
    assert f"{MEMBERS_SHOWN} shown of {total}" in page
    tagged = re.findall(r'data-member="([^"]+)">.*?class="tag [os]-(\w+)"', page + second, re.S)
    outcomes = {uuid.UUID(m): o for m, o in tagged}
    assert set(outcomes) == set(members)  # every member once over the two pages
    assert outcomes[held[0]["id"]] == "succeeded" and outcomes[held[1]["id"]] == "failed"
    assert len(re.findall(r"data-member=", second)) == 5 and 'rel="next"' not in second
    assert f'href="/batches/{batch_id}"' in of_member


async def test_the_job_page_shows_a_chain_as_the_line_of_its_jobs(dsn: str, opened: Client) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        first, second, third = (enqueue(conn, envelope("emails")) for _ in range(3))
        for parent, child in ((first, second), (second, third)):
            scalar(conn, "select pgqueue.add_dependencies(array[%s]::uuid[], array[%s]::uuid[], 'cancel')",
                   (child, parent))
        fan_in = enqueue(conn, envelope("emails"))
        scalar(conn, "select pgqueue.add_dependencies(array[%s]::uuid[], array[%s, %s]::uuid[], 'cancel')",
               (fan_in, first, third))
    async with http_client(create_app(opened)) as web:
        of_second = (await web.get(f"/jobs/{second}")).text
        of_fan_in = (await web.get(f"/jobs/{fan_in}")).text
    line = re.search(r'data-testid="job-chain">(.*?)</dd>', of_second, re.S)
    assert line is not None
    # Each step is a job's only parent or only waiting child; fan_in (two parents) ends the line.
    found = list(dict.fromkeys(re.findall(r"[0-9a-f]{8}-[0-9a-f-]{27}", line.group(1))))  # href and text
    assert found == [str(first), str(second), str(third), str(fan_in)]
    assert "this job" in line.group(1)
    assert 'data-testid="job-chain"' not in of_fan_in  # two parents and no child: no line from it


async def test_the_counts_show_blocked_jobs_apart_from_delayed(dsn: str, opened: Client) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent, child = enqueue(conn, envelope("deps")), enqueue(conn, envelope("deps"))
        enqueue(conn, envelope("deps"), delay=3600)
        scalar(conn, "select pgqueue.add_dependencies(array[%s]::uuid[], array[%s]::uuid[], 'cancel')",
               (child, parent))
    async with http_client(create_app(opened)) as web:
        page = (await web.get("/")).text
    assert (cell(page, "deps", "ready"), cell(page, "deps", "delayed"), cell(page, "deps", "blocked")) \
        == ("1", "1", "1")
    assert "3 jobs" in page


async def test_blocked_jobs_are_searched_and_cancelled_by_their_own_state(dsn: str, opened: Client) -> None:
    """Issue 26: a job waiting for its parents (available_at = pgqueue.never()) is 'blocked' in the
    jobs list, its state filter and the bulk actions on all matching, not 'delayed'."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent, child = enqueue(conn, envelope("deps")), enqueue(conn, envelope("deps"))
        later = enqueue(conn, envelope("deps"), delay=3600)
        scalar(conn, "select pgqueue.add_dependencies(array[%s]::uuid[], array[%s]::uuid[], 'cancel')",
               (child, parent))
    async with http_client(create_app(opened)) as web:
        page = (await web.get("/jobs?state=blocked")).text
        assert listed_jobs(page) == [str(child)] and '<option selected>blocked</option>' in page
        assert 'class="tag s-blocked">blocked</span>' in page and "9999" not in page
        assert listed_jobs((await web.get("/jobs?state=delayed")).text) == [str(later)]
        confirm = (await web.get("/jobs/bulk?action=cancel&state=blocked")).text
        assert re.search(r'data-testid="bulk-count"><b>1</b> job', confirm), confirm
        form = {"csrf": csrf_of(confirm), "action": "cancel", "state": "blocked", "next": "/jobs"}
        done = await web.post("/jobs/bulk", data=form, headers={"origin": "http://localhost"})
        assert "cancelled+1+job" in done.headers["location"]
    assert count(dsn, "select reason from pgqueue.failed_jobs where job_id = %s", child) == "cancelled"
    assert count(dsn, "select count(*) from pgqueue.jobs where id in (%s, %s)", parent, later) == 2


async def test_the_chain_line_stays_whole_after_its_jobs_ended(dsn: str, opened: Client) -> None:
    """Issue 26 (revision 0010): the job page of a chain member that left pgqueue.jobs (acked keeping
    nothing, or failed) still shows the chain's line, from the dependency tables kept for the
    history's retention; an acked job is shown while anything of it is kept."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        steps = [enqueue(conn, envelope("chain")) for _ in range(4)]
        for parent, child in itertools.pairwise(steps):
            scalar(conn, "select pgqueue.add_dependencies(array[%s]::uuid[], array[%s]::uuid[], 'cancel')",
                   (child, parent))
        for _ in range(2):  # the first two succeed (a plain ack: no result kept)
            [held] = reserve(conn, ["chain"], 1)
            assert ack(conn, [held["id"]], [held["token"]]) == {held["id"]: True}
        [held] = reserve(conn, ["chain"], 1)
        assert held["id"] == steps[2] and fail(conn, held["id"], held["token"])  # the last is cancelled
        assert scalar(conn, "select count(*) from pgqueue.jobs") == 0
        assert scalar(conn, "select count(*) from pgqueue.job_state(%s)", (steps[0],)) == 0
    async with http_client(create_app(opened)) as web:
        pages = [await web.get(f"/jobs/{step}") for step in steps]
        lone = await web.get(f"/jobs/{uuid.uuid4()}")
    assert [p.status_code for p in pages] == [200, 200, 200, 200] and lone.status_code == 404
    for step, page in zip(steps, pages, strict=True):
        line = re.search(r'data-testid="job-chain">(.*?)</dd>', page.text, re.S)
        assert line is not None, step
        assert list(dict.fromkeys(re.findall(r"[0-9a-f]{8}-[0-9a-f-]{27}", line.group(1)))) == [str(s) for s in steps]
    assert "keeping nothing but what it waited for" in pages[0].text
    assert "no longer waiting" in pages[0].text and 'data-testid="attempts"' not in pages[0].text
    assert "ended in failure" in pages[2].text and "ended in failure" in pages[3].text

"""The dashboard in a real browser: Debian's chromium, headless, driven by Playwright (issue 16).

Each test serves the dashboard with uvicorn on a free 127.0.0.1 port against its own seeded
database, clicks what an operator clicks, and checks the database changed. Skipped, with the
reason, when /usr/bin/chromium is absent (CI installs it: .ci/run). Playwright never downloads a
browser here: it is pointed at the system one.
"""

from __future__ import annotations

import base64
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import Client
from tests import workflow_jobs as flows
from tests.dashboard_support import (
    BLOCKING,
    SECRET,
    BackgroundWorker,
    BlockUntilCancelled,
    Ping,
    SignUp,
    command_served,
    drain,
    failure,
    in_thread,
    seed,
    served,
)
from tests.helpers import envelope
from tests.sql_calls import ack, enqueue, enqueue_many, fail, reserve, rows, scalar
from tests.worker_support import settings_for

CHROMIUM = Path(os.environ.get("PGQUEUE_TEST_CHROMIUM", "/usr/bin/chromium"))


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go. The README's are rewritten only on request (PGQUEUE_SCREENSHOTS=1), so a
    test run leaves the working tree as it found it; otherwise pytest's own temporary folder (made
    only when a test takes a picture, and cleaned up with pytest's others: no stray /tmp folder)."""
    if os.environ.get("PGQUEUE_SCREENSHOTS"):
        return Path(__file__).resolve().parent.parent / "docs"
    return tmp_path_factory.mktemp("screenshots")


pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason=f"{CHROMIUM} is not installed (apt-get install chromium; .ci/run does)")

__all__ = ["SignUp"]  # registered, so the dashboard knows its redact fields

# evil.example resolves to 127.0.0.1 in this browser: what DNS rebinding does to a victim's browser.
REBOUND = "evil.example"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="pgq-chromium-") as profile, sync_playwright() as playwright:
        # A persistent context is how Playwright takes a user-data-dir of our own: a fresh one per module.
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), args=ARGS, headless=True,
            viewport={"width": 1280, "height": 800})
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    tab = browser.new_page()
    tab.set_default_timeout(15_000)
    browser.clear_cookies()
    try:
        yield tab
    finally:
        tab.close()


def count(dsn: str, statement: str, *params: Any) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return scalar(conn, statement, params)


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    # The pages' own default wait (set_default_timeout above), not Playwright's 5 s: on a loaded
    # 2-core CI machine a refresh every 0.3 s can take longer than that to come round.
    playwright_expect.set_options(timeout=15_000)
    return playwright_expect(locator)


def test_the_overview_lists_every_queue_and_refreshes_in_place(dsn: str, page: Any) -> None:
    seed(dsn)
    with served(dsn, refresh_seconds=0.3) as server:
        page.goto(server.url + "/")
        rows = page.locator("[data-testid=queue-counts] tbody tr")
        assert sorted(rows.evaluate_all("rows => rows.map(r => r.dataset.queue)")) == [
            "accounts", "emails", "reports"]
        emails = page.locator("tr[data-queue=emails]")
        assert emails.locator("[data-col=ready]").inner_text() == "3"
        assert emails.locator("[data-col=delayed]").inner_text() == "1"
        assert emails.locator("[data-col=failed]").inner_text() == "2"
        reports = page.locator("tr[data-queue=reports]")
        assert reports.locator("[data-col=reserved]").inner_text() == "1"
        assert reports.locator("[data-col=expired]").inner_text() == "1"

        # A marker on the window survives only if the page is not reloaded.
        page.evaluate("window.__notReloaded = true")
        with psycopg.connect(dsn, autocommit=True) as conn:
            enqueue(conn, envelope("emails", name="app:send_email"))
        # Waits (polling the DOM, no sleep) until the refreshed fragment shows the new job.
        expect(emails.locator("[data-col=ready]")).to_have_text("4")
        assert page.evaluate("window.__notReloaded") is True
        # The seeded failures went through pgqueue.fail (job_stats), so the throughput chart draws them.
        chart = page.locator("#throughput [data-testid=throughput]")
        expect(chart).to_be_visible()
        failed = chart.locator("g.bucket").evaluate_all("gs => gs.reduce((n, g) => n + +g.dataset.failed, 0)")
        assert failed >= 2 and chart.locator("g.bucket").count() == 60


def test_a_count_above_the_cap_is_an_estimate_and_says_so(dsn: str, page: Any, shots: Path) -> None:
    seed(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("webhooks", name="app:deliver") for _ in range(2400)])
        enqueue_many(conn, [envelope("webhooks", name="app:deliver") for _ in range(650)], delays=[600.0] * 650)
        for i in range(4):
            failure(conn, "webhooks", name="app:deliver", message=f"HTTP 503 from hooks.example.com ({i})")
    with served(dsn) as server:
        page.goto(server.url + "/")
        ready = page.locator("tr[data-queue=webhooks] [data-col=ready]")
        # Issue 29: the table is small enough to read whole, so the count past the cap is exact, not "≈".
        assert ready.inner_text() == "2,400"
        assert "counted exactly" in (ready.get_attribute("title") or "")
        assert page.locator("tr[data-queue=webhooks] [data-col=delayed]").inner_text() == "650"
        assert page.locator("tr[data-queue=emails] [data-col=ready]").inner_text() == "3"
        page.screenshot(path=str(shots / "dashboard-overview.png"), full_page=True)
    # Past the exact bound (here: none), the count is estimated from a sample, and says so.
    with served(dsn, exact_pages=0, sample_pages=5) as server:
        page.goto(server.url + "/")
        ready = page.locator("tr[data-queue=webhooks] [data-col=ready]")
        assert ready.inner_text().startswith("≈ ")
        assert "estimated from a random sample" in (ready.get_attribute("title") or "")
        assert page.locator("tr[data-queue=emails] [data-col=ready]").inner_text() == "3"


def test_failed_jobs_filter_detail_retry_and_forget(dsn: str, page: Any, shots: Path) -> None:
    made = seed(dsn)
    with served(dsn) as server:
        page.goto(server.url + "/failed")
        assert page.locator("[data-testid=failures] tbody tr[data-failure]").count() == 3
        page.fill("input[name=name]", "app:send_digest")
        page.click("form.filters button[type=submit]")
        # count() does not wait for the filtered page: to_have_count() does (until it matches).
        expect(page.locator("tbody tr[data-failure]")).to_have_count(1)
        assert "template missing" in page.locator("tbody").inner_text()

        # The detail of the failure with a secret: masked in args, message and traceback.
        page.goto(f"{server.url}/failed/{made.secret_failure}")
        assert page.locator("[data-testid=message]").inner_text().startswith("login refused for password")
        assert SECRET not in page.content()
        assert "ann@example.com" in page.locator("[data-testid=args]").inner_text()
        page.screenshot(path=str(shots / "dashboard-failure.png"), full_page=True)

        page.click("button:text('Retry')")
        page.wait_for_url(re.compile(r"/failed\?"))
        assert "retried failure" in page.locator(".flash.ok").inner_text()
        assert count(dsn, "select count(*) from pgqueue.failed_jobs where id = %s", made.secret_failure) == 0
        assert count(dsn, "select attempts from pgqueue.jobs where envelope->>'name' = %s", SignUp.name) == 0

        target = made.failures[0]
        page.goto(f"{server.url}/failed/{target}")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button:text('Forget')")
        page.wait_for_url(re.compile(r"/failed\?"))
        assert count(dsn, "select count(*) from pgqueue.failed_jobs where id = %s", target) == 0


def test_retry_selected_and_flush(dsn: str, page: Any) -> None:
    made = seed(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        extra = failure(conn, "emails", name="app:send_email", message="again")
    with served(dsn) as server:
        page.goto(server.url + "/failed?queue=emails")
        page.check(f"tr[data-failure='{made.failures[0]}'] input[name=id]")
        page.check(f"tr[data-failure='{extra}'] input[name=id]")
        page.click("button:text('Retry selected')")
        page.wait_for_url(re.compile(r"msg="))
        assert "retried 2 of 2" in page.locator(".flash.ok").inner_text()
        assert count(dsn, "select count(*) from pgqueue.failed_jobs where queue = 'emails'") == 1
        assert count(dsn, "select count(*) from pgqueue.jobs where id in (select job_id from pgqueue.failed_jobs)") == 0

        # Flush with the queue filter set: only that queue's failures go, after the confirmation.
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("form.flush button")
        page.wait_for_url(re.compile(r"msg=flushed"))
        assert count(dsn, "select count(*) from pgqueue.failed_jobs where queue = 'emails'") == 0
        assert count(dsn, "select count(*) from pgqueue.failed_jobs where queue = 'accounts'") == 1
        # Dismissing the confirmation changes nothing.
        page.goto(server.url + "/failed")
        page.once("dialog", lambda dialog: dialog.dismiss())
        page.click("form.flush button")
        assert count(dsn, "select count(*) from pgqueue.failed_jobs") == 1


def test_jobs_search_and_a_job_with_its_lease(dsn: str, page: Any) -> None:
    made = seed(dsn)
    with served(dsn) as server:
        page.goto(server.url + "/jobs")
        page.fill("input[name=queue]", "reports")
        page.click("form.filters button[type=submit]")
        expect(page.locator("[data-testid=jobs] tbody tr[data-job]")).to_have_count(2)
        page.fill("input[name=id]", str(made.reserved))
        page.fill("input[name=queue]", "")
        page.click("form.filters button[type=submit]")
        page.wait_for_url(re.compile(str(made.reserved)))
        facts = page.locator("[data-testid=job-facts]").inner_text()
        assert "reserved" in facts and "token" in facts and "ends in" in facts
        page.goto(f"{server.url}/jobs/{made.expired}")
        assert "expired" in page.locator("[data-testid=job-facts]").inner_text()


def test_workers_page_shows_a_listening_session(dsn: str, page: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener, served(dsn) as server:
        listener.execute("set application_name = 'worker-under-test'")
        listener.execute("listen pgqueue")
        page.goto(server.url + "/workers")
        assert "worker-under-test" in page.locator("[data-testid=workers]").inner_text()


def test_read_only_hides_every_action_and_the_server_refuses_them(dsn: str, page: Any) -> None:
    made = seed(dsn)
    with served(dsn, read_only=True) as server:
        page.goto(server.url + "/failed")
        assert page.locator("text=read-only").count() >= 1
        assert page.locator("form[method=post] button, button[formaction]").count() == 0
        page.goto(f"{server.url}/failed/{made.failures[0]}")
        assert page.locator("button").count() == 0
        # A forged post from the page itself (cookie and token included) is still refused.
        status = page.evaluate("""async (url) => {
            const body = new URLSearchParams({csrf: 'x'});
            return (await fetch(url, {method: 'POST', body})).status; }""",
                               f"{server.url}/failed/{made.failures[0]}/retry")
        assert status == 403
    assert count(dsn, "select count(*) from pgqueue.failed_jobs") == 3


def test_basic_auth_is_required_when_configured(dsn: str, page: Any) -> None:
    seed(dsn)
    with served(dsn, auth=("ops", "s3cret")) as server:
        from playwright.sync_api import Error as BrowserError

        # Headless chromium has nobody to ask for a password: the 401 ends the navigation.
        with pytest.raises(BrowserError, match="ERR_INVALID_AUTH_CREDENTIALS"):
            page.goto(server.url + "/")
        page.set_extra_http_headers({"Authorization": "Basic " + base64.b64encode(b"ops:s3cret").decode()})
        response = page.goto(server.url + "/")
        assert response is not None and response.status == 200
        assert page.locator("tr[data-queue=emails]").count() == 1


def test_the_page_loads_nothing_from_other_hosts(dsn: str, page: Any) -> None:
    seed(dsn)
    requested: list[str] = []
    with served(dsn) as server:
        page.on("request", lambda request: requested.append(request.url))
        page.goto(server.url + "/", wait_until="load")
        assert page.evaluate("typeof window.htmx") == "object"
    assert requested and all(url.startswith(server.url) for url in requested), requested


def test_a_name_rebound_to_the_dashboard_gets_no_page_and_changes_nothing(dsn: str, page: Any) -> None:
    # Issue 24 item 10: a site whose name is made to resolve to 127.0.0.1 is same-origin with the
    # dashboard for the browser; its script read /queues (cookie and CSRF token) and paused a queue.
    seed(dsn)
    with served(dsn) as server:
        rebound = f"http://{REBOUND}:{server.port}"
        response = page.goto(rebound + "/queues")
        assert response is not None and response.status == 400
        assert f"names host '{REBOUND}:{server.port}'" in page.content()
        # The attacker's script, on that origin: nothing to read, and its post is refused.
        statuses = page.evaluate("""async () => {
            const read = await fetch('/queues');
            const body = new URLSearchParams({queue: 'emails', csrf: 'x', next: '/queues'});
            const post = await fetch('/queues/pause', {method: 'POST', body, redirect: 'manual'});
            return [read.status, post.status]; }""")
        assert statuses == [400, 400]
        # The dashboard's own names are served.
        for own in (server.url, f"http://localhost:{server.port}"):
            response = page.goto(own + "/queues")
            assert response is not None and response.status == 200, own
    assert control_row(dsn, "emails") is None


def control_row(dsn: str, queue: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = rows(conn, "select paused, concurrency, rate_limit, extract(epoch from rate_period)::float8 as period "
                           "from pgqueue.queues where name = %s", (queue,))
    return None if not found else tuple(found[0].values())


def test_pause_stops_a_worker_reserving_and_resume_lets_it(dsn: str, page: Any) -> None:
    seed(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(3):
            enqueue(conn, envelope("pings", name=Ping.name, args={}))
    with served(dsn) as server:
        page.goto(server.url + "/queues")
        row = page.locator("tr[data-queue=pings]")
        expect(row.locator("[data-col=state]")).to_have_text("active")
        row.locator("button:text('Pause')").click()
        page.wait_for_url(re.compile(r"msg=paused"))
        assert "paused queue 'pings'" in page.locator(".flash.ok").inner_text()
        expect(page.locator("tr[data-queue=pings] [data-col=state]")).to_have_text("paused")
        assert control_row(dsn, "pings") == (True, None, None, None)
        # The database decides: a worker of the paused queue reserves nothing.
        assert drain(dsn, "pings") == 0
        assert count(dsn, "select count(*) from pgqueue.jobs where queue = 'pings' and token is null") == 3
        # The overview shows the pause too.
        page.goto(server.url + "/")
        assert page.locator("tr[data-queue=pings] [data-col=controls]").inner_text().strip() == "paused"

        page.goto(server.url + "/queues")
        page.locator("tr[data-queue=pings] button:text('Resume')").click()
        page.wait_for_url(re.compile(r"msg=resumed"))
        expect(page.locator("tr[data-queue=pings] [data-col=state]")).to_have_text("active")
        assert control_row(dsn, "pings") == (False, None, None, None)
        assert drain(dsn, "pings") == 3
        assert count(dsn, "select count(*) from pgqueue.jobs where queue = 'pings'") == 0


def test_limits_are_set_cleared_and_bad_values_named(dsn: str, page: Any, shots: Path) -> None:
    seed(dsn)
    with served(dsn) as server:
        page.goto(server.url + "/queues")
        form = page.locator("[data-testid=limits-emails]")
        form.locator("input[name=concurrency]").fill("3")
        form.locator("input[name=rate]").fill("100/s")
        form.locator("button:text('Set limits')").click()
        page.wait_for_url(re.compile(r"msg="))
        assert control_row(dsn, "emails") == (False, 3, 100, 1.0)
        form = page.locator("[data-testid=limits-emails]")
        expect(form.locator("input[name=concurrency]")).to_have_value("3")
        expect(form.locator("input[name=rate]")).to_have_value("100/s")
        page.locator("tr[data-queue=reports] button:text('Pause')").click()
        page.wait_for_url(re.compile(r"msg=paused"))
        expect(page.locator("tr[data-queue=reports] [data-col=state]")).to_have_text("paused")
        page.screenshot(path=str(shots / "dashboard-queues.png"), full_page=True)
        form = page.locator("[data-testid=limits-emails]")

        # A bad value: shown as an error naming it, and nothing changes.
        form.locator("input[name=concurrency]").fill("0")
        form.locator("button:text('Set limits')").click()
        page.wait_for_url(re.compile(r"err="))
        error = page.locator(".flash.bad[role=alert]").inner_text()
        assert "concurrency '0' is not a whole number" in error and "the limits were not changed" in error
        form = page.locator("[data-testid=limits-emails]")
        form.locator("input[name=rate]").fill("lots")
        form.locator("button:text('Set limits')").click()
        expect(page.locator(".flash.bad[role=alert]")).to_contain_text("rate 'lots' is not a rate")
        assert control_row(dsn, "emails") == (False, 3, 100, 1.0)

        page.locator("[data-testid=limits-emails] button:text('Clear')").click()
        page.wait_for_url(re.compile(r"msg=cleared"))
        assert control_row(dsn, "emails") == (False, None, None, None)

        # A queue that has no jobs yet, from the form below the table.
        another = page.locator("[data-testid=another-queue]")
        another.locator("input[name=queue]").fill("invoices")
        another.locator("input[name=concurrency]").fill("1")
        another.locator("button:text('Set limits')").click()
        page.wait_for_url(re.compile(r"msg="))
        assert control_row(dsn, "invoices") == (False, 1, None, None)
        expect(page.locator("tr[data-queue=invoices]")).to_have_count(1)


def test_cancel_selected_waiting_jobs_from_the_list(dsn: str, page: Any) -> None:
    made = seed(dsn)
    with served(dsn) as server:
        page.goto(server.url + "/jobs?queue=emails")
        page.check(f"tr[data-job='{made.ready[0]}'] input[name=id]")
        page.check(f"tr[data-job='{made.delayed[0]}'] input[name=id]")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button:text('Cancel selected')")
        page.wait_for_url(re.compile(r"msg=cancelled"))
        assert "cancelled 2 of 2 selected jobs" in page.locator(".flash.ok").inner_text()
        expect(page.locator("[data-testid=jobs] tbody tr[data-job]")).to_have_count(2)
    assert count(dsn, "select count(*) from pgqueue.failed_jobs where reason = 'cancelled' and job_id in (%s, %s)",
                 made.ready[0], made.delayed[0]) == 2


def test_cancel_a_running_job_stops_its_handler(dsn: str, page: Any) -> None:
    BLOCKING.update(started=threading.Event(), cancelled=threading.Event())
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = enqueue(conn, envelope("blocking", name=BlockUntilCancelled.name, args={}, tries=1))
    with served(dsn) as server, BackgroundWorker(dsn, "blocking") as worker:
        assert BLOCKING["started"].wait(30), "the handler did not start"
        page.goto(f"{server.url}/jobs/{job_id}")
        expect(page.locator("[data-testid=job-facts]")).to_contain_text("reserved")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button:text('Cancel (running)')")
        page.wait_for_url(re.compile(r"msg="))
        assert "cancelled while running" in page.locator(".flash.ok").inner_text()
        # The handler itself was cancelled (its worker heard pgqueue_cancel), not only the row removed.
        assert BLOCKING["cancelled"].wait(30), "the running handler was not cancelled"
        assert worker.stats().lost == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        [recorded] = rows(conn, "select job_id, reason, message from pgqueue.failed_jobs")
    assert recorded == {"job_id": job_id, "reason": "cancelled", "message": "cancelled while attempt 1 was running"}
    assert count(dsn, "select count(*) from pgqueue.jobs") == 0


def test_schedules_page_shows_each_periodic_job(dsn: str, page: Any, tmp_path: Path) -> None:
    with command_served(dsn, "--app", "tests.cli_schedule_jobs", cwd=tmp_path) as base:
        page.goto(base + "/schedules")
        nightly = page.locator("tr[data-schedule='cli:nightly_report']")
        assert nightly.locator("[data-col=expression]").inner_text() == "0 3 * * *"
        assert nightly.locator("[data-col=timezone]").inner_text() == "Europe/Paris"
        assert nightly.locator("[data-col=last]").inner_text() == "none yet"
        assert "Europe/Paris" in nightly.locator("[data-col=next]").inner_text()
        assert "every 30s" in page.locator("tr[data-schedule='cli:heartbeat']").inner_text()


def test_read_only_hides_the_new_actions(dsn: str, page: Any) -> None:
    made = seed(dsn)
    with served(dsn, read_only=True) as server:
        for path in ("/queues", "/jobs", f"/jobs/{made.reserved}", f"/jobs/{made.ready[0]}", "/schedules"):
            page.goto(server.url + path)
            assert page.locator("form[method=post], input[type=checkbox][name=id]").count() == 0, path
            assert page.locator("button:text('Cancel'), button:text('Pause'), button:text('Set limits')").count() == 0
        page.goto(server.url + "/queues")
        assert page.locator("tr[data-queue=emails] [data-col=concurrency]").inner_text() == "no limit"


# --- issue 29: the operator's view ---
PAGES = ("/", "/queues", "/failed", "/jobs", "/workflows", "/schedules", "/workers")


def test_every_page_fits_a_phone_and_the_header_stays_readable(dsn: str, page: Any, shots: Path) -> None:
    # Issue 29: at 390 px the pages were 825-1,197 px wide and the nav items and database name
    # overflowed the dark header, light grey on white.
    made = seed(dsn)
    page.set_viewport_size({"width": 360, "height": 740})
    with served(dsn) as server:
        for path in (*PAGES, f"/failed/{made.failures[0]}", f"/jobs/{made.reserved}"):
            page.goto(server.url + path)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 360, (path, width)
            header = page.locator("header.top").bounding_box()
            for item in page.locator("header.top nav a, header.top .where").all():
                box = item.bounding_box()
                assert box["x"] >= header["x"] and box["x"] + box["width"] <= header["x"] + header["width"] + 0.5
                assert box["y"] >= header["y"] and box["y"] + box["height"] <= header["y"] + header["height"] + 0.5
        page.goto(server.url + "/")
        page.screenshot(path=str(shots / "dashboard-phone.png"), full_page=True)


def test_the_dark_scheme_follows_the_system(dsn: str, page: Any, shots: Path) -> None:
    seed(dsn)
    with served(dsn) as server:
        page.emulate_media(color_scheme="dark")
        page.goto(server.url + "/")
        background = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
        text = page.evaluate("getComputedStyle(document.querySelector('main')).color")
        assert background == "rgb(17, 22, 28)" and text == "rgb(227, 232, 238)"
        page.screenshot(path=str(shots / "dashboard-dark.png"), full_page=True)
        page.emulate_media(color_scheme="light")
        assert page.evaluate("getComputedStyle(document.documentElement).backgroundColor") == "rgb(255, 255, 255)"


def test_the_jobs_list_refreshes_in_place_keeping_the_selection_and_the_scroll(dsn: str, page: Any) -> None:
    # Issue 29: every list page refreshes in place (as the overview does) without losing a selection.
    with psycopg.connect(dsn, autocommit=True) as conn:
        # 48 + first + newest: a page of 50 holds them all whatever the ids (random here), so first
        # stays on the page when newest comes.
        enqueue_many(conn, [envelope("bulk", name="app:bulk") for _ in range(48)])
        first = enqueue(conn, envelope("bulk", name="app:first"))
    page.set_viewport_size({"width": 1280, "height": 400})
    with served(dsn, refresh_seconds=0.3) as server:
        page.goto(server.url + "/jobs?queue=bulk")
        page.evaluate("window.__notReloaded = true")
        page.locator(f"tr[data-job='{first}'] input[name=id]").check()
        page.evaluate("window.scrollTo(0, 300)")
        with psycopg.connect(dsn, autocommit=True) as conn:
            newest = enqueue(conn, envelope("bulk", name="app:newest"))
        # Waits (polling the DOM, no sleep) until the refreshed rows show the new job.
        expect(page.locator(f"tr[data-job='{newest}']")).to_be_visible()
        # The rows are swapped first and the selection ticked again just after: wait for it (polling
        # the DOM), then for the scroll position the swap restores.
        expect(page.locator(f"tr[data-job='{first}'] input[name=id]")).to_be_checked()
        page.wait_for_function("window.scrollY === 300")
        assert page.evaluate("window.__notReloaded") is True


def test_keyboard_shortcuts_open_the_main_pages(dsn: str, page: Any) -> None:
    with served(dsn) as server:
        page.goto(server.url + "/")
        for key, path in (("j", "/jobs"), ("f", "/failed"), ("w", "/workers"), ("k", "/workflows"), ("q", "/queues"),
                          ("o", "/")):
            page.keyboard.press("g")
            page.keyboard.press(key)
            page.wait_for_url(server.url + path)
        page.goto(server.url + "/jobs")
        page.keyboard.press("/")
        assert page.evaluate("document.activeElement.name") == "id"
        # Typing in a field is typing, not a shortcut.
        page.keyboard.type("gw")
        assert page.url == server.url + "/jobs" and page.input_value("input[name=id]") == "gw"


def test_a_failure_lists_every_attempt_with_its_traceback_folded(dsn: str, page: Any) -> None:
    # Issues 26 and 29: every failed attempt of the job, its traceback behind a click; fits a phone.
    made = seed(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = scalar(conn, "select job_id from pgqueue.failed_jobs where id = %s", (made.failures[0],))
        scalar(conn, "select pgqueue.retry_failed(%s)", (made.failures[0],))
        [held] = reserve(conn, ["emails"], 1)
        assert held["id"] == job_id
        assert fail(conn, job_id, held["token"], message="SMTP said 451 again",
                    traceback='Traceback (most recent call last):\n  File "mail.py", line 3\nBoom')
        latest = scalar(conn, "select id from pgqueue.failed_jobs where job_id = %s", (job_id,))
    with served(dsn) as server:
        page.goto(f"{server.url}/failed/{latest}")
        attempts = page.locator("[data-testid=attempts] tbody tr")
        assert attempts.count() == 2
        assert "SMTP said 451 again" in attempts.nth(0).inner_text()
        assert "SMTP said 451" in attempts.nth(1).inner_text()
        trace = attempts.nth(0).locator("pre.traceback")
        assert not trace.is_visible()
        attempts.nth(0).locator("summary").click()
        expect(trace).to_be_visible()
        assert 'File "mail.py", line 3' in trace.inner_text()
        page.set_viewport_size({"width": 360, "height": 740})
        page.goto(f"{server.url}/jobs/{job_id}")
        assert page.locator("[data-testid=attempts] tbody tr").count() == 2
        assert page.evaluate("document.documentElement.scrollWidth") <= 360


def _count_polls(page: Any) -> None:
    """Count the live regions' refresh occasions in ``window.__polls`` (htmx asks before each, also
    the ones dashboard.js holds back): a test waits for N of them instead of sleeping."""
    page.evaluate("window.__polls = 0; document.addEventListener('htmx:beforeRequest', () => window.__polls++)")


def _polls_pass(page: Any, n: int = 3) -> None:
    start = page.evaluate("window.__polls")
    page.wait_for_function(f"() => window.__polls >= {start + n}")


def test_the_queues_page_refreshes_in_place_and_waits_while_an_operator_is_busy_in_it(dsn: str, page: Any) -> None:
    # Issue 29: the Queues page is live like the other lists, without losing the scroll, the focus, a
    # value being typed or a text selection.
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope(f"q{n:02}", name="app:work") for n in range(30)])
    page.set_viewport_size({"width": 1280, "height": 400})
    with served(dsn, refresh_seconds=0.3) as server:
        page.goto(server.url + "/queues")
        _count_polls(page)
        page.evaluate("window.__notReloaded = true")
        page.evaluate("window.scrollTo(0, 300)")
        with psycopg.connect(dsn, autocommit=True) as conn:
            enqueue(conn, envelope("q05", name="app:work"))
            scalar(conn, "select pgqueue.pause('q07')")
        expect(page.locator("tr[data-queue=q05] [data-col=ready]")).to_have_text("2")
        # Another operator's pause shows, with the action that now applies.
        expect(page.locator("tr[data-queue=q07] [data-col=state]")).to_have_text("paused")
        expect(page.locator("tr[data-queue=q07] button:text('Resume')")).to_have_count(1)
        page.wait_for_function("() => window.scrollY === 300")

        # A limit being typed is neither wiped nor left behind by a refresh: the table waits.
        field = page.locator("tr[data-queue=q10] input[name=concurrency]")
        field.fill("5")
        with psycopg.connect(dsn, autocommit=True) as conn:
            enqueue(conn, envelope("q10", name="app:work"))
        _polls_pass(page)
        assert field.input_value() == "5" and page.evaluate("document.activeElement.name") == "concurrency"
        assert page.locator("tr[data-queue=q10] [data-col=ready]").inner_text() == "1"
        # Put back as it was and left: the refresh goes on, and shows what it held back.
        field.fill("")
        page.locator("h1").click()
        expect(page.locator("tr[data-queue=q10] [data-col=ready]")).to_have_text("2")

        # Text selected to copy is not pulled from under the mouse either.
        page.evaluate("window.scrollTo(0, 300)")  # the clicks above scrolled to what they clicked
        cell = page.locator("tr[data-queue=q12] [data-col=ready]")
        cell.evaluate("c => { c.__same = true; window.getSelection().selectAllChildren(c); }")
        with psycopg.connect(dsn, autocommit=True) as conn:
            enqueue(conn, envelope("q12", name="app:work"))
        _polls_pass(page)
        assert cell.evaluate("c => c.__same === true") and cell.inner_text() == "1"
        page.evaluate("window.getSelection().removeAllRanges()")
        expect(cell).to_have_text("2")
        assert page.evaluate("window.__notReloaded") is True and page.evaluate("window.scrollY") == 300

        # The focus stays on the button it was on (keyboard users), across a refresh that changes it.
        page.locator("tr[data-queue=q15] button:text('Pause')").focus()
        with psycopg.connect(dsn, autocommit=True) as conn:
            scalar(conn, "select pgqueue.pause('q15')")
        expect(page.locator("tr[data-queue=q15] [data-col=state]")).to_have_text("paused")
        page.wait_for_function("() => document.activeElement.textContent === 'Resume'")
        assert page.evaluate("document.activeElement.closest('tr').dataset.queue") == "q15"


def test_a_job_page_refreshes_in_place_as_its_job_moves_on(dsn: str, page: Any) -> None:
    # Issue 29: the single job page follows its job (reserved, failed, retried, finished) without a
    # reload, keeping the scroll position and the tracebacks opened.
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = enqueue(conn, envelope("mail", name="app:send", tries=1))
    page.set_viewport_size({"width": 1280, "height": 400})
    with served(dsn, refresh_seconds=0.3) as server:
        page.goto(f"{server.url}/jobs/{job_id}")
        page.evaluate("window.__notReloaded = true")
        facts = page.locator("[data-testid=job-facts]")
        expect(facts).to_contain_text("none (not reserved)")
        with psycopg.connect(dsn, autocommit=True) as conn:
            [held] = reserve(conn, ["mail"], 1)
        expect(facts).to_contain_text("ends in")
        assert f"token {held['token']}" in facts.inner_text()

        with psycopg.connect(dsn, autocommit=True) as conn:
            assert fail(conn, job_id, held["token"], message="SMTP said 451",
                        traceback='Traceback (most recent call last):\n  File "mail.py", line 3\nBoom')
        expect(page.locator("[data-testid=job-ended]")).to_be_visible()
        attempt = page.locator("[data-testid=attempts] tr[data-attempt='1']")
        expect(attempt).to_contain_text("SMTP said 451")
        attempt.locator("summary").click()
        page.locator("details[data-key=envelope] summary").click()
        page.evaluate("window.scrollTo(0, 200)")

        # Retried (as from the failed list): live again, its attempt still listed, still unfolded.
        with psycopg.connect(dsn, autocommit=True) as conn:
            failure_id = scalar(conn, "select id from pgqueue.failed_jobs where job_id = %s", (job_id,))
            scalar(conn, "select pgqueue.retry_failed(%s)", (failure_id,))
        expect(facts).to_contain_text("none (not reserved)")
        expect(attempt.locator("pre.traceback")).to_be_visible()
        page.wait_for_function("() => window.scrollY === 200")

        # Reserved and acked: the job is gone, and the page says so instead of going stale.
        with psycopg.connect(dsn, autocommit=True) as conn:
            [held] = reserve(conn, ["mail"], 1)
            assert ack(conn, [job_id], [held["token"]]) == {job_id: True}
        expect(page.locator("#live h1")).to_have_text("No such job")
        assert "a job that finished is deleted" in page.locator("#live").inner_text()
        assert page.evaluate("window.__notReloaded") is True


def test_the_schedules_page_refreshes_in_place(dsn: str, page: Any, tmp_path: Path) -> None:
    # Issue 29, live everywhere: a tick a worker enqueues shows as the schedule's last one, no reload.
    with command_served(dsn, "--app", "tests.cli_schedule_jobs", cwd=tmp_path) as base:
        page.goto(base + "/schedules")
        page.evaluate("window.__notReloaded = true")
        last = page.locator("tr[data-schedule='cli:nightly_report'] [data-col=last]")
        assert last.inner_text() == "none yet"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("insert into pgqueue.schedule_ticks (schedule, tick, job_id)"
                         " values ('cli:nightly_report', '2026-11-30 02:00:00+00', gen_random_uuid())")
        # Waits (polling the DOM, no sleep) for the refresh, every 2 s (the command's default).
        expect(last).to_contain_text("2026-11-30 02:00:00 UTC")
        assert "2026-11-30 03:00:00 Europe/Paris" in last.inner_text()
        assert page.evaluate("window.__notReloaded") is True


def test_a_failure_page_refreshes_in_place_until_the_failure_is_gone(dsn: str, page: Any) -> None:
    # Issue 29, live everywhere: a failure's page follows its job (queued again, failed again) without
    # a reload, keeping the scroll position and the folds opened, and says so when the record is gone.
    with psycopg.connect(dsn, autocommit=True) as conn:
        failure_id = failure(conn, "mail", name="app:send", message="SMTP said 451")
        job_id = scalar(conn, "select job_id from pgqueue.failed_jobs where id = %s", (failure_id,))
    page.set_viewport_size({"width": 1280, "height": 400})
    with served(dsn, refresh_seconds=0.3) as server:
        page.goto(f"{server.url}/failed/{failure_id}")
        page.evaluate("window.__notReloaded = true")
        facts = page.locator("[data-testid=failure-facts]")
        assert "queued again" not in facts.inner_text()
        first = page.locator("[data-testid=attempts] tr[data-attempt='1']")
        first.locator("summary").click()
        page.locator("details:has([data-testid=envelope]) > summary").click()
        page.evaluate("window.scrollTo(0, 200)")

        with psycopg.connect(dsn, autocommit=True) as conn:
            # The job queued again under its id: the failure record stays (retry_failed would delete it).
            conn.execute("insert into pgqueue.jobs (id, queue, envelope, max_tries, attempts)"
                         " select job_id, queue, envelope, 3, attempts from pgqueue.failed_jobs where id = %s",
                         (failure_id,))
        expect(facts).to_contain_text("queued again: ready")
        with psycopg.connect(dsn, autocommit=True) as conn:
            [held] = reserve(conn, ["mail"], 1)
            assert fail(conn, job_id, held["token"], message="SMTP said 451 again")
        expect(page.locator("[data-testid=attempts] tbody tr")).to_have_count(2)
        expect(page.locator("[data-testid=attempts] tr[data-attempt='2']")).to_contain_text("SMTP said 451 again")
        expect(first.locator("pre.traceback")).to_be_visible()
        expect(page.locator("[data-testid=envelope]")).to_be_visible()
        page.wait_for_function("() => window.scrollY === 200")

        # Forgotten elsewhere: the page says the record is gone instead of going stale.
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert scalar(conn, "select pgqueue.forget_failed(%s)", (failure_id,)) is True
        expect(page.locator("#live h1")).to_have_text("No such failure")
        assert "it may have been retried or forgotten" in page.locator("#live").inner_text()
        assert page.evaluate("window.__notReloaded") is True


def _show(page: Any, state: str) -> None:
    """Make the page report ``state`` ("hidden", "visible") as a browser does when its tab is put behind
    another one or in front again: document.visibilityState, then a visibilitychange event."""
    page.evaluate("""state => {
        Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => state});
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => state === 'hidden'});
        document.dispatchEvent(new Event('visibilitychange')); }""", state)


def _count_requests(page: Any) -> None:
    """Count the refreshes actually sent (``window.__sent``) and ended (``window.__ended``)."""
    page.evaluate("""window.__sent = 0; window.__ended = 0;
        document.addEventListener('htmx:beforeSend', () => window.__sent++);
        document.addEventListener('htmx:afterRequest', () => window.__ended++);""")


def test_nothing_refreshes_while_the_tab_is_hidden_and_everything_at_once_when_shown(dsn: str, page: Any) -> None:
    # Issue 29: a dashboard left open in a background tab costs the database nothing.
    seed(dsn)
    with served(dsn, refresh_seconds=0.3) as server:
        page.goto(server.url + "/")
        _count_polls(page)
        _count_requests(page)
        ready = page.locator("tr[data-queue=emails] [data-col=ready]")
        _polls_pass(page, 2)
        assert page.evaluate("window.__sent") >= 1  # it refreshes while shown
        _show(page, "hidden")
        _polls_pass(page, 2)
        page.wait_for_function("() => window.__sent === window.__ended")  # none still on its way
        sent = page.evaluate("window.__sent")
        with psycopg.connect(dsn, autocommit=True) as conn:
            enqueue(conn, envelope("emails", name="app:send_email"))
        _polls_pass(page, 4)
        assert page.evaluate("window.__sent") == sent and ready.inner_text() == "3"
        _show(page, "visible")
        expect(ready).to_have_text("4")

    # Shown again, every refreshing element asks at once instead of at its next period (an hour here).
    with served(dsn, refresh_seconds=3600) as server:
        page.goto(server.url + "/")
        _show(page, "hidden")
        with psycopg.connect(dsn, autocommit=True) as conn:
            enqueue(conn, envelope("emails", name="app:send_email"))
        assert ready.inner_text() == "4"
        _show(page, "visible")
        expect(ready).to_have_text("5")


# --- issue 27: workflows ---
def test_a_workflow_waits_on_its_page_and_the_signal_form_wakes_it(dsn: str, page: Any, shots: Path) -> None:
    async def dispatch() -> Any:
        async with Client(settings=settings_for(dsn)) as client:
            return (await client.dispatch(flows.approval(key="browser", within=86_400))).id

    job_id = in_thread(dispatch)
    with served(dsn, refresh_seconds=0.3) as server, BackgroundWorker(dsn, "wf"):
        page.goto(server.url + "/workflows?state=waiting_signal")
        # The list refreshes in place until the worker has parked the workflow for its signal.
        expect(page.locator(f"tr[data-job='{job_id}']")).to_contain_text("approved")
        page.click(f"tr[data-job='{job_id}'] a")
        page.wait_for_url(re.compile(f"/workflows/{job_id}"))
        expect(page.locator("[data-testid=workflow-awaits]")).to_contain_text("approved")
        expect(page.locator("[data-testid=workflow-steps] tbody tr")).to_have_count(2)
        assert page.locator("[data-testid=workflow-steps] svg.bar rect").count() == 2
        page.screenshot(path=str(shots / "dashboard-workflow.png"), full_page=True)
        page.set_viewport_size({"width": 360, "height": 740})  # fits a phone too, like every page
        assert page.evaluate("document.documentElement.scrollWidth") <= 360
        page.set_viewport_size({"width": 1280, "height": 800})
        page.fill("textarea[name=payload]", "{by: browser}")
        page.click("button:text('Send signal')")
        page.wait_for_url(re.compile(r"err="))
        assert "is not JSON" in page.locator(".flash.bad").inner_text()
        assert count(dsn, "select count(*) from pgqueue.workflow_signals") == 0
        page.fill("textarea[name=payload]", '{"by": "browser"}')
        page.click("button:text('Send signal')")
        page.wait_for_url(re.compile(r"msg="))
        assert "woken" in page.locator(".flash.ok").inner_text()
        # The page follows the workflow to its end without a reload.
        expect(page.locator("[data-testid=workflow-outcome]")).to_contain_text("succeeded")
        expect(page.locator("[data-testid=workflow-result]")).to_contain_text("browser")

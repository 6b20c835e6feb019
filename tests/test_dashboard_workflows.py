"""The dashboard's workflow pages (issue 27): /workflows lists live workflows by state (and ended ones
whose steps are kept), /workflows/<id> shows a workflow's steps as a timeline with its signal and
cancel actions, behind the dashboard's CSRF guard and read-only mode. Real workflows run by a worker
of the test's database put each state on the pages."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any
from unittest.mock import ANY
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg
import pytest

from pgqueue import Client, Job, JobContext, WorkflowContext, workflow
from pgqueue.dashboard import create_app
from pgqueue.dashboard.pages.workflows import LIVE_STATES, STATES
from pgqueue.redaction import MASK
from pgqueue.workflow_client import WORKFLOW_STATES
from tests import workflow_jobs as flows
from tests.helpers import envelope
from tests.sql_calls import enqueue_many
from tests.worker_support import Runs, client, rows, runs, scalar, wait_until

__all__ = ["client", "runs"]

SECRET = "wf-hunter2-secret"
CHILD_OF = "select child_id from pgqueue.workflow_steps where job_id = %s"


class Parcel(Job):
    """A child on a queue no worker of these tests serves: its parent stays waiting for it."""

    name = "tests.dashboard_workflows:parcel"
    queue = "wf-kids"

    async def handle(self, context: JobContext) -> str:
        return "parcel"


@workflow(queue="wf", name="tests.dashboard_workflows:hand_off")
async def hand_off(context: WorkflowContext, key: str) -> Any:
    return await context.run(Parcel(), name="parcel <b>bold</b>")


def echo(value: Any) -> Any:
    return value


@workflow(queue="wf", name="tests.dashboard_workflows:login", redact=("password",))
async def login(context: WorkflowContext, user: str, password: str) -> Any:
    await context.step("check <i>", echo, {"password": password, "said": f"the password is {password}"})
    return await context.wait_for("go")


def http_client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost")


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def listed(page: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)"', page)


def flash_of(response: httpx.Response) -> dict[str, str]:
    """The message (msg) or error (err) an action left in its redirect."""
    assert response.status_code == 303, response.text
    query = parse_qs(urlsplit(response.headers["location"]).query)
    return {k: v[0] for k, v in query.items() if k in ("msg", "err")}


async def parked(dsn: str, job_id: object, state: str) -> bool:
    return bool(await scalar(dsn, "select state from pgqueue.workflows where id = %s", (job_id,)) == state)


async def ended(dsn: str, job_id: object) -> bool:
    return not await scalar(dsn, "select count(*) from pgqueue.jobs where id = %s", (job_id,))


@pytest.fixture
async def states(client: Client, runs: Runs, dsn: str) -> AsyncIterator[dict[str, uuid.UUID]]:
    """One workflow in each state: sleeping, waiting for a signal (with a timeout), waiting for a child,
    waiting for a signal with a secret in a step's result, succeeded, failed."""
    flows.FAILURES["doomed:charge"] = 2
    runs.start(await client.worker(queues=["wf"], concurrency=4))
    made = {
        "sleeping": (await client.dispatch(flows.sleeper(key="dash", seconds=3600))).id,
        "signal": (await client.dispatch(flows.approval(key="dash", within=7200))).id,
        "child": (await client.dispatch(hand_off(key="dash"))).id,
        "secret": (await client.dispatch(login(user="ann", password=SECRET))).id,
        "succeeded": (await client.dispatch(flows.two_steps(key="dash", amount=3))).id,
        "failed": (await client.dispatch(flows.doomed(key="doomed"))).id,
    }
    for key, state in (("sleeping", "sleeping"), ("signal", "waiting_signal"), ("child", "waiting_child"),
                       ("secret", "waiting_signal")):
        await wait_until(partial(parked, dsn, made[key], state), f"the {key} workflow parked")
    for key in ("succeeded", "failed"):
        await wait_until(partial(ended, dsn, made[key]), f"the {key} workflow ended")
    yield made


async def test_the_list_shows_each_state_and_filters_by_state_and_name(client: Client, dsn: str,
                                                                       states: dict[str, uuid.UUID]) -> None:
    async with http_client(create_app(client)) as web:
        page = (await web.get("/workflows")).text
        live = {str(states[k]) for k in ("sleeping", "signal", "child", "secret")}
        assert set(listed(page)) == live
        assert 'href="/workflows" data-key="k"' in page  # the nav entry, "g k"
        signal_row = page.split(f'data-job="{states["signal"]}"')[1].split("</tr>")[0]
        assert "waiting_signal" in signal_row and "signal <span class=\"mono\">approved</span>" in signal_row
        assert "timeout" in signal_row  # it times out: its wake time is shown
        sleeping_row = page.split(f'data-job="{states["sleeping"]}"')[1].split("</tr>")[0]
        assert "sleeping" in sleeping_row and " UTC" in sleeping_row
        child_row = page.split(f'data-job="{states["child"]}"')[1].split("</tr>")[0]
        child_id = await scalar(dsn, CHILD_OF, (states["child"],))
        assert "waiting_child" in child_row and f'href="/jobs/{child_id}"' in child_row
        assert "<b>bold</b>" not in page and "parcel &lt;b&gt;bold&lt;/b&gt;" in page  # user data escaped

        assert listed((await web.get("/workflows?state=sleeping")).text) == [str(states["sleeping"])]
        assert set(listed((await web.get("/workflows?state=waiting_signal")).text)) == {
            str(states["signal"]), str(states["secret"])}
        assert listed((await web.get("/workflows?name=HAND_OFF")).text) == [str(states["child"])]
        ended_page = (await web.get("/workflows?state=ended")).text
        assert set(listed(ended_page)) == {str(states["succeeded"]), str(states["failed"])}
        assert 'class="tag o-succeeded"' in ended_page and 'class="tag o-failed"' in ended_page
        bad = await web.get("/workflows?state=bogus")
        assert bad.status_code == 200 and "state &#39;bogus&#39; is not one of" in bad.text
        assert set(listed(bad.text)) == live


async def test_the_workflow_page_shows_its_steps_in_each_state(client: Client, dsn: str,
                                                               states: dict[str, uuid.UUID]) -> None:
    async with http_client(create_app(client)) as web:
        sleeping = (await web.get(f"/workflows/{states['sleeping']}")).text
        assert 'data-testid="workflow-state">sleeping' in sleeping
        assert "sleeps until" in sleeping and 'data-key="step-2"' in sleeping  # before, then the sleep
        assert sleeping.count("<svg class=\"bar\"") == 2

        waiting = (await web.get(f"/workflows/{states['signal']}")).text
        assert 'data-testid="workflow-awaits">signal <b class="mono">approved</b>, times out' in waiting
        assert "awaits signal" in waiting and 'data-testid="signal-form"' in waiting

        child_id = await scalar(dsn, CHILD_OF, (states["child"],))
        child = (await web.get(f"/workflows/{states['child']}")).text
        assert f'data-testid="step-child" href="/jobs/{child_id}"' in child
        assert "parcel &lt;b&gt;bold&lt;/b&gt;" in child and "<b>bold</b>" not in child
        # the job pages link both ways: the workflow's job to its page, the child to its parent
        job_page = (await web.get(f"/jobs/{states['child']}")).text
        assert f'href="/workflows/{states["child"]}"' in job_page
        child_page = (await web.get(f"/jobs/{child_id}")).text
        assert f'href="/workflows/{states["child"]}"' in child_page and "step 1. parcel &lt;b&gt;" in child_page

        done = (await web.get(f"/workflows/{states['succeeded']}")).text
        assert 'data-testid="workflow-outcome">succeeded' in done
        assert '&#34;label&#34;: &#34;label-dash&#34;' in done  # its result, escaped JSON
        assert 'data-testid="signal-form"' not in done  # an ended workflow takes no signal
        failed = (await web.get(f"/workflows/{states['failed']}")).text
        assert 'data-testid="workflow-outcome">failed' in failed and "charge failed on purpose" in failed
        assert 'class="tag t-failed"' in failed

        secret = (await web.get(f"/workflows/{states['secret']}")).text
        assert SECRET not in secret and MASK in secret
        assert "check &lt;i&gt;" in secret and "<i>" not in secret
        assert "the password is " + MASK in html.unescape(secret)

        for missing in (uuid.uuid4(), "not-a-uuid"):
            assert (await web.get(f"/workflows/{missing}")).status_code == 404
        plain = (await client.dispatch(flows.Ship(key="plain"))).id  # a job, not a workflow
        assert (await web.get(f"/workflows/{plain}")).status_code == 404


async def test_the_signal_form_sends_and_names_what_is_wrong(client: Client, dsn: str,
                                                             states: dict[str, uuid.UUID]) -> None:
    target = states["signal"]
    async with http_client(create_app(client)) as web:
        token = csrf_of((await web.get(f"/workflows/{target}")).text)
        post = {"csrf": token, "next": f"/workflows/{target}"}
        bad_json = await web.post(f"/workflows/{target}/signal", data={**post, "name": "approved",
                                                                        "payload": "{by: ann}"})
        assert flash_of(bad_json) == {"err": ANY}
        assert "is not JSON" in flash_of(bad_json)["err"] and "{by: ann}" in flash_of(bad_json)["err"]
        no_name = await web.post(f"/workflows/{target}/signal", data={**post, "name": " ", "payload": ""})
        assert "give the signal a name" in flash_of(no_name)["err"]
        unknown = uuid.uuid4()
        gone = await web.post(f"/workflows/{unknown}/signal", data={**post, "name": "approved"})
        assert "unknown" in flash_of(gone)["err"]
        finished = await web.post(f"/workflows/{states['succeeded']}/signal", data={**post, "name": "approved"})
        assert "has finished" in flash_of(finished)["err"]
        assert await scalar(dsn, "select count(*) from pgqueue.workflow_signals") == 0  # nothing stored
        refused = await web.post(f"/workflows/{target}/signal", data={"name": "approved", "payload": "1"})
        assert refused.status_code == 403

        sent = await web.post(f"/workflows/{target}/signal", data={**post, "name": "approved",
                                                                    "payload": '{"by": "ann"}'})
        assert "woken" in flash_of(sent)["msg"]
        assert sent.headers["location"].startswith(f"/workflows/{target}?msg=")
        await wait_until(lambda: ended(dsn, target), "the signalled workflow's end")
    assert await scalar(dsn, "select result from pgqueue.job_results where job_id = %s", (target,)) == {"by": "ann"}


async def test_cancel_from_the_workflow_page(client: Client, dsn: str, states: dict[str, uuid.UUID]) -> None:
    target = states["sleeping"]
    async with http_client(create_app(client)) as web:
        token = csrf_of((await web.get(f"/workflows/{target}")).text)
        done = await web.post(f"/workflows/{target}/cancel", data={"csrf": token, "next": f"/workflows/{target}"})
        assert "cancelled" in flash_of(done)["msg"]
        page = (await web.get(f"/workflows/{target}")).text
        assert 'data-testid="workflow-outcome">cancelled' in page
    assert await scalar(dsn, "select reason from pgqueue.failed_jobs where job_id = %s", (target,)) == "cancelled"
    # A workflow waiting for its child: cancelled with it (the runtime's cancel, as the page says).
    parent = states["child"]
    child = await scalar(dsn, CHILD_OF, (parent,))
    async with http_client(create_app(client)) as web:
        token = csrf_of((await web.get(f"/workflows/{parent}")).text)
        done = await web.post(f"/workflows/{parent}/cancel", data={"csrf": token, "next": f"/workflows/{parent}"})
        assert "cancelled" in flash_of(done)["msg"]
    reasons = await rows(dsn, "select job_id, reason from pgqueue.failed_jobs where job_id = any(%s)",
                         ([parent, child],))
    assert {(r["job_id"], r["reason"]) for r in reasons} == {(parent, "cancelled"), (child, "cancelled")}


async def test_read_only_shows_the_pages_and_accepts_no_action(client: Client, dsn: str,
                                                               states: dict[str, uuid.UUID]) -> None:
    async with http_client(create_app(client, read_only=True)) as web:
        for key in ("signal", "sleeping", "succeeded"):
            page = (await web.get(f"/workflows/{states[key]}")).text
            assert 'method="post"' not in page and "<button" not in page, key
        for action in ("signal", "cancel"):
            response = await web.post(f"/workflows/{states['signal']}/{action}",
                                      data={"csrf": "x", "name": "approved"})
            assert response.status_code == 403 and "read-only" in response.text
    assert await scalar(dsn, "select count(*) from pgqueue.workflow_signals") == 0
    assert await parked(dsn, states["signal"], "waiting_signal")


async def test_the_list_pages_through_a_bounded_window(client: Client, dsn: str) -> None:
    # Workflows among many plain jobs: each page reads at most scan_limit jobs, and the Next links
    # find every workflow once.
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("other", name="app:plain") for _ in range(12)])
    made = {str((await client.dispatch(flows.approval(key=f"p{i}"))).id) for i in range(3)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [envelope("other", name="app:plain") for _ in range(12)])
    seen: list[str] = []
    async with http_client(create_app(client, page_size=2, scan_limit=5)) as web:
        path = "/workflows"
        for _ in range(50):
            page = (await web.get(path)).text
            seen.extend(listed(page))
            found = re.search(r'rel="next" href="([^"]+)"', page)
            if not found:
                break
            path = found.group(1).replace("&amp;", "&")
    assert sorted(seen) == sorted(made)
    # A full page is left at its last match: no more rows read than it took.
    store = await (create_app(client).state.dashboard.store())
    page = await store.workflows_page(state=None, name=None, after=None, scan=1000, limit=2)
    newest = await rows(dsn, "select id, envelope ? 'workflow' as wf from pgqueue.jobs order by id desc")
    second = [i for i, r in enumerate(newest) if r["wf"]][1]
    assert [r["id"] for r in page.rows] == [r["id"] for r in newest if r["wf"]][:2]
    assert page.scanned == second + 1


def test_the_state_filter_offers_the_states_of_the_view() -> None:
    assert LIVE_STATES == WORKFLOW_STATES and (*WORKFLOW_STATES, "ended") == STATES


async def test_the_ended_list_is_bounded_and_a_pruned_workflow_is_gone(client: Client, dsn: str, runs: Runs,
                                                                       states: dict[str, uuid.UUID]) -> None:
    await runs.close()  # no worker's maintenance prunes meanwhile: this test does, when it says so
    store = await (create_app(client).state.dashboard.store())
    # A window of one workflow: at most one row, and where the next page goes on from.
    page = await store.workflows_ended_page(name=None, after=None, scan=1, limit=5)
    assert page.scanned == 1 and len(page.rows) <= 1 and page.last is not None
    rest = await store.workflows_ended_page(name=None, after=page.last[0], scan=10, limit=5)
    assert {r["id"] for r in page.rows + rest.rows} == {states["succeeded"], states["failed"]}
    # Once its result is gone, maintenance prunes the steps: the workflow leaves the list and its page.
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("delete from pgqueue.job_results where job_id = %s", (states["succeeded"],))
        async with http_client(create_app(client)) as web:
            shown = (await web.get(f"/workflows/{states['succeeded']}")).text
            assert 'data-testid="workflow-outcome">ended' in shown  # kept steps, no record: ended
            await conn.execute("select pgqueue.prune_workflows(100)")
            assert (await web.get(f"/workflows/{states['succeeded']}")).status_code == 404
            assert listed((await web.get("/workflows?state=ended")).text) == [str(states["failed"])]


def workflow_counts(page: str) -> dict[str, str]:
    """The overview's workflow counts by state (each cell's text, links stripped)."""
    table = page.split('data-testid="workflow-counts"')[1].split("</table>", maxsplit=1)[0]
    cells = re.findall(r'data-col="([a-z_]+)">(.*?)</td>', table)
    return {state: re.sub(r"<[^>]+>", "", text) for state, text in cells}


async def test_the_overview_counts_the_workflows_by_state(client: Client, dsn: str, states: dict[str, uuid.UUID],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    async with http_client(create_app(client)) as web:
        page = (await web.get("/")).text
        assert workflow_counts(page) == {"waiting": "0", "delayed": "0", "running": "0", "sleeping": "1",
                                         "waiting_signal": "2", "waiting_child": "1"}
        assert 'href="/workflows?state=waiting_signal"' in page and "4 live" in page
        assert 'data-testid="workflow-counts-capped"' not in page
        # the live refresh's fragment carries them too
        assert workflow_counts((await web.get("/overview/counts")).text)["sleeping"] == "1"
        # Beyond the cap, the page reads no more than cap + 1 workflows and says so.
        monkeypatch.setattr("pgqueue.dashboard.pages.overview.WORKFLOW_COUNT_CAP", 2)
        capped = (await web.get("/")).text
        assert sum(int(n.rstrip("+")) for n in workflow_counts(capped).values()) == 3
        assert 'data-testid="workflow-counts-capped"' in capped and "More than 2 live workflows" in capped
    counted = await client.workflow_counts()
    assert counted.states["waiting_signal"] == 2 and counted.total == 4 and not counted.capped
    assert (await client.workflow_counts(cap=1)).capped


async def test_the_overview_shows_no_workflow_counts_without_workflows(client: Client) -> None:
    async with http_client(create_app(client)) as web:
        assert 'data-testid="workflow-counts"' not in (await web.get("/")).text

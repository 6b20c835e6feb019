"""The shop's own tests, run by Django's test runner (``python -m django test tests.frameworks.shop``).

Django creates the test database with ``migrate``: pgqueue's schema comes with it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import connection
from django.test import TestCase


def jobs() -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute("select envelope->>'name', (envelope->'args'->>'order_id')::int from pgqueue.jobs order by id")
        return list(cur.fetchall())


class ShopTests(TestCase):
    def test_the_test_database_has_pgqueue_schema(self) -> None:
        with connection.cursor() as cur:
            cur.execute("select to_regclass('pgqueue.jobs') is not null, current_database()")
            present, name = cur.fetchone()
        assert present and name.startswith("test_"), name

    def test_a_view_dispatches_in_its_transaction(self) -> None:
        response = self.client.post("/orders/")
        assert response.status_code == 200, response.content
        assert jobs() == [("shop:send_receipt", response.json()["order"])]

    async def test_an_async_view_dispatches(self) -> None:
        response = await self.async_client.post("/orders/async/")
        assert response.status_code == 200, response.content
        from asgiref.sync import sync_to_async

        assert await sync_to_async(jobs)() == [("shop:send_receipt", response.json()["order"])]

    def test_the_admin_lists_jobs_read_only_with_a_dashboard_link(self) -> None:
        self.client.post("/orders/")
        job_id = self.client.post("/orders/").json()["job"]
        self.client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
        page = self.client.get("/admin/pgqueue/queuedjob/")
        assert page.status_code == 200
        html = page.content.decode()
        assert f'href="https://ops.example.com/pgqueue/jobs/{job_id}"' in html, html
        assert "shop:send_receipt" in html
        assert self.client.get("/admin/pgqueue/queuedjob/add/").status_code == 403
        assert self.client.get("/admin/pgqueue/failedjob/").status_code == 200

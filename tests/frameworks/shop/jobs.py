"""The test shop's job: its handler uses the Django ORM (import after ``django.setup()``)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from pgqueue import Job, JobContext
from tests.frameworks.shop.models import Order


def _mark_sent(order_id: int) -> int:
    # Plain synchronous ORM code, as the rest of a Django project writes it. Like a request,
    # the job drops a connection Django would not reuse.
    close_old_connections()
    try:
        return int(Order.objects.filter(id=order_id).update(receipt_sent=True))
    finally:
        close_old_connections()


class SendReceipt(Job):
    """Marks the order's receipt as sent."""

    name = "shop:send_receipt"
    queue = "shop"

    order_id: int

    async def handle(self, context: JobContext) -> None:
        if await sync_to_async(_mark_sent)(self.order_id) != 1:
            raise LookupError(f"order {self.order_id} does not exist")

"""A Django process that dispatches inside ``transaction.atomic()``: one order commits, one rolls back.

    APP_DSN=... python -m tests.frameworks.django_dispatch

Creates the shop's table (``migrate --run-syncdb``), then order 1 and its receipt job in one
atomic block that commits, and order 2 and its job in one that raises.
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.frameworks.django_settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from tests.frameworks.shop.jobs import SendReceipt  # noqa: E402
from tests.frameworks.shop.models import Order  # noqa: E402


class Declined(Exception):
    """Raised inside the second atomic block."""


def main() -> None:
    call_command("migrate", run_syncdb=True, verbosity=0)
    with transaction.atomic():
        order = Order.objects.create(id=1)
        # Django's own psycopg connection, inside the atomic block: the job commits with the order.
        SendReceipt(order_id=order.id).dispatch_sync(connection.connection)
    try:
        with transaction.atomic():
            order = Order.objects.create(id=2)
            SendReceipt(order_id=order.id).dispatch_sync(connection.connection)
            raise Declined("card declined")
    except Declined:
        pass


if __name__ == "__main__":
    main()

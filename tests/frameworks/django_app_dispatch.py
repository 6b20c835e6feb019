"""A fresh Django process (``pgqueue.contrib.django`` installed) that dispatches before any query.

    APP_DSN=... DJANGO_SETTINGS_MODULE=tests.frameworks.django_app_settings \\
        python -m tests.frameworks.django_app_dispatch

Django opens its connection at the first query; pgqueue's dispatch opens it when it is not yet.
"""

from __future__ import annotations

import django

django.setup()

from django.db import connection, transaction  # noqa: E402

from pgqueue.contrib.django import dispatch  # noqa: E402
from tests.frameworks.shop.jobs import SendReceipt  # noqa: E402
from tests.frameworks.shop.models import Order  # noqa: E402


class Declined(Exception):
    """Raised inside an atomic block: its job rolls back with it."""


def main() -> None:
    # Orders 1 to 4 exist (the test inserted them); this process has not queried anything yet.
    assert connection.connection is None, "the connection was opened before the test"
    dispatch(SendReceipt(order_id=1))  # autocommit: stored at once
    connection.close()
    SendReceipt(order_id=2).dispatch_sync(connection)  # Django's connection itself, unopened, is accepted too
    with transaction.atomic():
        Order.objects.filter(id=3).update(receipt_sent=False)
        dispatch(SendReceipt(order_id=3))
    try:
        with transaction.atomic():
            dispatch(SendReceipt(order_id=4))
            raise Declined("card declined")
    except Declined:
        pass


if __name__ == "__main__":
    main()

"""The pgqueue web dashboard (``pip install pgqueue-py[dashboard]``): see and operate every queue.

Serve it with ``pgqueue dashboard`` or mount it into your own ASGI app::

    from pgqueue import Client
    from pgqueue.dashboard import create_app

    client = Client(dsn)
    app.mount("/pgqueue", create_app(client, auth=("ops", password), allowed_hosts=["ops.example.com"]))

Every read and action goes through pgqueue's public API and its store (no SQL here); every
page reads a bounded number of rows, whatever the backlog.
"""

from pgqueue.dashboard.app import create_app
from pgqueue.dashboard.security import DEFAULT_ALLOWED_HOSTS, allowed_host_problem, check_bind, is_local_host

__all__ = ["DEFAULT_ALLOWED_HOSTS", "allowed_host_problem", "check_bind", "create_app", "is_local_host"]

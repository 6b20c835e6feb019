"""``--app pgqueue.contrib.django.worker``: Django set up (``DJANGO_SETTINGS_MODULE``), every app's jobs imported.

What ``manage.py pgqueue_worker`` passes to each worker process, so that ``--processes N``
workers (started as ``python -m pgqueue_cli``) load Django as the command did.
"""

from __future__ import annotations

import django

django.setup()  # a no-op when Django is already set up (manage.py)

from pgqueue.contrib.django import autodiscover  # noqa: E402

JOB_MODULES = autodiscover()

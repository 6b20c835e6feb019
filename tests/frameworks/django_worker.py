"""``pgqueue queue:work --app tests.frameworks.django_worker``: Django set up, then its jobs registered."""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.frameworks.django_settings")
django.setup()

from tests.frameworks.shop import jobs  # noqa: E402,F401  (registers the jobs; needs the apps loaded)

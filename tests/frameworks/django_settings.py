"""Django settings of the test shop: the database is the test's, from ``APP_DSN``."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ["APP_DSN"])

SECRET_KEY = "tests-only"
USE_TZ = True
INSTALLED_APPS = ["tests.frameworks.shop"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3 when it is installed
        "NAME": _db["dbname"],
        "USER": _db.get("user", "postgres"),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
        "PASSWORD": _db.get("password", ""),
    }
}

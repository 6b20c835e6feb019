"""Django settings of the test shop with ``pgqueue.contrib.django`` installed (the admin too).

The database is the test's, from ``APP_DSN``; pgqueue takes it from ``DATABASES``.
"""

from __future__ import annotations

from tests.frameworks.django_settings import DATABASES, DEFAULT_AUTO_FIELD, SECRET_KEY, USE_TZ

__all__ = ["DATABASES", "DEFAULT_AUTO_FIELD", "SECRET_KEY", "USE_TZ"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "pgqueue.contrib.django",
    "tests.frameworks.shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
ROOT_URLCONF = "tests.frameworks.django_app_urls"
PGQUEUE_DASHBOARD_URL = "https://ops.example.com/pgqueue"

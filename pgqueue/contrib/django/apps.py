"""The Django app: pgqueue's schema follows ``manage.py migrate``; jobs modules are imported."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate

from pgqueue import migrate
from pgqueue.contrib.django import AUTODISCOVER_SETTING, autodiscover, database_alias, dsn


def _upgrade_after_migrate(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    # The Django migration installed pgqueue's schema once; a newer pgqueue brings revisions that
    # no frozen Django migration names, so every `migrate` applies them (nothing when at head).
    if using == database_alias():
        migrate.upgrade(dsn(using))


class PgqueueConfig(AppConfig):
    """``INSTALLED_APPS = [..., "pgqueue.contrib.django"]``."""

    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_upgrade_after_migrate, sender=self, dispatch_uid="pgqueue-upgrade")
        if getattr(settings, AUTODISCOVER_SETTING, True):
            autodiscover()

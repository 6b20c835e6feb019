"""pgqueue in a Django project: add ``"pgqueue.contrib.django"`` to ``INSTALLED_APPS``.

- The database is Django's: the ``DATABASES`` entry named by the setting ``PGQUEUE_DATABASE``
  (default ``"default"``); no second setting for the worker.
- ``manage.py migrate`` installs and upgrades pgqueue's schema in that database (a Django
  migration runs pgqueue's alembic revisions, and every later ``migrate`` applies those a newer
  pgqueue brings), so the test database of ``manage.py test`` has it too.
- ``manage.py pgqueue_worker [queue:work options]`` runs a worker with Django set up and the
  ``jobs`` module of every installed app imported; ``manage.py pgqueue <command> ...`` runs any
  other ``pgqueue`` command against the same database.
- :func:`dispatch` / :func:`adispatch` enqueue on Django's own connection (opened if it is not
  yet), inside the caller's ``transaction.atomic()`` block; from an async view, ``await adispatch(...)``.
- The admin lists jobs and failures read-only, each linking to the pgqueue dashboard when
  ``PGQUEUE_DASHBOARD_URL`` is set.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from django.apps import apps as app_registry  # not `apps`: the submodule pgqueue.contrib.django.apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.module_loading import autodiscover_modules, module_has_submodule
from psycopg.conninfo import make_conninfo

from pgqueue.config import load_settings
from pgqueue.jobs import Job

__all__ = ["adispatch", "autodiscover", "database_alias", "dispatch", "dsn", "pgqueue_settings"]

#: Settings this app reads (all optional).
DATABASE_SETTING = "PGQUEUE_DATABASE"
DASHBOARD_SETTING = "PGQUEUE_DASHBOARD_URL"
AUTODISCOVER_SETTING = "PGQUEUE_AUTODISCOVER"

# psycopg.connect() keywords Django passes that are not libpq connection parameters.
_NOT_CONNINFO = {"cursor_factory", "context", "prepare_threshold", "autocommit", "row_factory"}


def database_alias() -> str:
    """The ``DATABASES`` alias that holds pgqueue's schema (``PGQUEUE_DATABASE``, default ``"default"``)."""
    alias = getattr(settings, DATABASE_SETTING, "default")
    if alias not in settings.DATABASES:
        raise ImproperlyConfigured(
            f"{DATABASE_SETTING} = {alias!r} names no database; DATABASES has: {', '.join(settings.DATABASES)}")
    return str(alias)


def dsn(alias: str | None = None) -> str:
    """A libpq DSN of the ``DATABASES`` entry (default: :func:`database_alias`), as Django connects to it.

    During ``manage.py test`` that is the test database (Django renames it in place).
    """
    wrapper = connections[alias or database_alias()]
    if wrapper.vendor != "postgresql":
        raise ImproperlyConfigured(f"pgqueue needs PostgreSQL; DATABASES[{wrapper.alias!r}] is {wrapper.vendor!r}")
    params = {k: v for k, v in wrapper.get_connection_params().items()
              if k not in _NOT_CONNINFO and isinstance(v, str | int) and not isinstance(v, bool)}
    return make_conninfo("", **params)


def pgqueue_settings(alias: str | None = None) -> Any:
    """pgqueue's :class:`~pgqueue.Settings` with the database of Django's ``alias`` (``[tool.pgqueue]``
    and the environment still supply the rest)."""
    return load_settings(dsn=dsn(alias), dsn_source=f"Django's DATABASES[{alias or database_alias()!r}]")


def dispatch(job: Job, *, using: str | None = None, **options: Any) -> UUID:
    """Enqueue ``job`` on Django's connection ``using`` (default: :func:`database_alias`), in its
    current transaction: inside ``transaction.atomic()`` the job commits or rolls back with the
    block. The connection is opened first if Django has not opened it yet. ``options`` are
    :meth:`pgqueue.Job.dispatch_sync`'s (``delay``, ``queue``, ``priority``, ``connection``)."""
    return job.dispatch_sync(connections[using or database_alias()], **options)


async def adispatch(job: Job, *, using: str | None = None, **options: Any) -> UUID:
    """:func:`dispatch` from async code (an async view): runs it in Django's thread for database
    work, the one ``sync_to_async`` ORM calls and ``transaction.atomic()`` blocks use."""
    result: UUID = await sync_to_async(dispatch, thread_sensitive=True)(job, using=using, **options)
    return result


def autodiscover(module: str = "jobs") -> list[str]:
    """Import ``<app>.jobs`` of every installed app that has one, so its jobs register; returns the names.

    Django's own ``autodiscover_modules`` (as the admin finds ``admin.py``): the names come from
    ``INSTALLED_APPS``, never from a job's stored data."""
    found = [f"{config.name}.{module}" for config in app_registry.get_app_configs()
             if module_has_submodule(config.module, module)]
    autodiscover_modules(module)
    return found

"""pgqueue's schema, installed by pgqueue's own alembic revisions (recorded in pgqueue_alembic_version).

Later pgqueue releases bring revisions of their own: every ``manage.py migrate`` applies them
(see ``apps.py``), so this migration never needs a successor for the schema.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from pgqueue import migrate
from pgqueue.contrib.django import database_alias, dsn


def install(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.alias == database_alias():
        migrate.upgrade(dsn(schema_editor.connection.alias))


def remove(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.alias == database_alias():
        migrate.downgrade(dsn(schema_editor.connection.alias), "base")


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.RunPython(install, remove),
        migrations.CreateModel(
            name="QueuedJob",
            fields=[
                ("id", models.UUIDField(primary_key=True, serialize=False)),
                ("queue", models.TextField()),
                ("priority", models.SmallIntegerField()),
                ("envelope", models.JSONField()),
                ("attempts", models.IntegerField()),
                ("max_tries", models.IntegerField()),
                ("available_at", models.DateTimeField()),
                ("reserved_at", models.DateTimeField(null=True)),
            ],
            options={"verbose_name": "job", "db_table": 'pgqueue"."jobs', "ordering": ("available_at",),
                     "managed": False},
        ),
        migrations.CreateModel(
            name="FailedJob",
            fields=[
                ("id", models.UUIDField(primary_key=True, serialize=False)),
                ("job_id", models.UUIDField()),
                ("connection", models.TextField()),
                ("queue", models.TextField()),
                ("envelope", models.JSONField()),
                ("attempts", models.IntegerField()),
                ("exception", models.TextField(null=True)),
                ("message", models.TextField()),
                ("traceback", models.TextField(null=True)),
                ("reason", models.TextField()),
                ("failed_at", models.DateTimeField()),
            ],
            options={"verbose_name": "failure", "db_table": 'pgqueue"."failed_jobs', "ordering": ("-failed_at",),
                     "managed": False},
        ),
    ]

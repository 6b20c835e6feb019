"""The admin's read-only lists of jobs and failures, linking to the pgqueue dashboard.

Changes go through pgqueue (the dashboard, ``manage.py pgqueue queue:retry``), never the ORM: a
job row is the queue's state, fenced by its token.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from pgqueue.contrib.django.models import FailedJob, QueuedJob


def _dashboard(path: str, label: str) -> str:
    base = getattr(settings, "PGQUEUE_DASHBOARD_URL", None)
    if not base:
        return "-"
    return str(format_html('<a href="{}{}">{}</a>', str(base).rstrip("/"), path, label))


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(QueuedJob)
class QueuedJobAdmin(_ReadOnly):
    """Jobs waiting, delayed or running."""

    list_display = ("id", "name", "queue", "priority", "attempts", "available_at", "reserved_at", "dashboard")
    list_filter = ("queue",)
    search_fields = ("id", "queue")

    @admin.display(description="name")
    def name(self, obj: QueuedJob) -> str:
        return obj.name

    @admin.display(description="dashboard")
    def dashboard(self, obj: QueuedJob) -> str:
        return _dashboard(f"/jobs/{obj.id}", "open")


@admin.register(FailedJob)
class FailedJobAdmin(_ReadOnly):
    """Jobs that failed for good; retry or forget them from the dashboard or the CLI."""

    list_display = ("id", "name", "queue", "reason", "exception", "failed_at", "job_id", "dashboard")
    list_filter = ("queue", "reason")
    search_fields = ("id", "job_id", "queue", "message")

    @admin.display(description="name")
    def name(self, obj: FailedJob) -> str:
        return obj.name

    @admin.display(description="dashboard")
    def dashboard(self, obj: FailedJob) -> str:
        return _dashboard(f"/failed/{obj.id}", "open")

"""Read-only views of pgqueue's tables for the admin (unmanaged: pgqueue's migrations own them)."""

from __future__ import annotations

from typing import Any

from django.db import models


class QueuedJob(models.Model):
    """A row of ``pgqueue.jobs``: a job waiting, delayed or running."""

    id = models.UUIDField(primary_key=True)
    queue = models.TextField()
    priority = models.SmallIntegerField()
    envelope = models.JSONField()
    attempts = models.IntegerField()
    max_tries = models.IntegerField()
    available_at = models.DateTimeField()
    reserved_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = 'pgqueue"."jobs'
        app_label = "pgqueue"
        ordering = ("available_at",)
        verbose_name = "job"

    @property
    def name(self) -> str:
        """The job's registered name."""
        envelope: dict[str, Any] = self.envelope or {}
        return str(envelope.get("name", ""))

    def __str__(self) -> str:
        return f"{self.name} {self.id}"


class FailedJob(models.Model):
    """A row of ``pgqueue.failed_jobs``: a job that failed for good (its failure id is not the job id)."""

    id = models.UUIDField(primary_key=True)
    job_id = models.UUIDField()
    connection = models.TextField()
    queue = models.TextField()
    envelope = models.JSONField()
    attempts = models.IntegerField()
    exception = models.TextField(null=True)
    message = models.TextField()
    traceback = models.TextField(null=True)
    reason = models.TextField()
    failed_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = 'pgqueue"."failed_jobs'
        app_label = "pgqueue"
        ordering = ("-failed_at",)
        verbose_name = "failure"

    @property
    def name(self) -> str:
        """The failed job's registered name."""
        envelope: dict[str, Any] = self.envelope or {}
        return str(envelope.get("name", ""))

    def __str__(self) -> str:
        return f"{self.name} failed ({self.reason})"

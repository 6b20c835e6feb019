"""Periodic jobs for the ``schedule:list`` test (``--app tests.cli_schedule_jobs``, in a CLI subprocess only)."""

from __future__ import annotations

from datetime import timedelta

from pgqueue import Job, JobContext, job


class NightlyReport(Job):
    """03:00 every day, Paris time."""

    name = "cli:nightly_report"
    queue = "reports"
    schedule = "0 3 * * *"
    schedule_timezone = "Europe/Paris"
    schedule_args = {"kind": "daily"}

    kind: str

    async def handle(self, context: JobContext) -> None:
        return None


@job(name="cli:heartbeat", schedule=timedelta(seconds=30))
async def heartbeat() -> None:
    """Every 30 seconds."""

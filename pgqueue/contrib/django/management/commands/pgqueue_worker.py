"""``manage.py pgqueue_worker [options]``: ``pgqueue queue:work`` with Django set up and every app's jobs."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from pgqueue.contrib.django.management.commands._cli import run_cli

# Each worker process (--processes N) imports it: Django set up, the apps' jobs modules imported.
WORKER_APP = ["--app", "pgqueue.contrib.django.worker"]


class Command(BaseCommand):
    help = "Run a pgqueue worker (the options of `pgqueue queue:work`) on Django's database."

    def run_from_argv(self, argv: list[str]) -> None:
        run_cli(["queue:work", *WORKER_APP, *argv[2:]])

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("args", nargs="*")

    def handle(self, *args: str, **options: Any) -> None:
        run_cli(["queue:work", *WORKER_APP, *args])

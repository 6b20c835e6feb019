"""``manage.py pgqueue <command> ...``: any ``pgqueue`` command, against Django's database."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from pgqueue.contrib.django.management.commands._cli import run_cli


class Command(BaseCommand):
    help = "Run a pgqueue command (queue:status, queue:failed, queue:retry, ...) against Django's database."

    def run_from_argv(self, argv: list[str]) -> None:
        # The pgqueue CLI parses its own options; Django's parser would refuse them.
        run_cli(argv[2:] or ["--help"])

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("args", nargs="*")

    def handle(self, *args: str, **options: Any) -> None:
        run_cli(list(args) or ["--help"])

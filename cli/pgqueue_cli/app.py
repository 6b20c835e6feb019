"""Entry point of the ``pgqueue`` command."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="pgqueue: a PostgreSQL-native job queue.")


@app.callback()
def _root() -> None:
    """pgqueue: a PostgreSQL-native job queue."""


def main() -> None:
    """Run the CLI."""
    app()

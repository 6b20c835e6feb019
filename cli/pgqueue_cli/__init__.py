"""The ``pgqueue`` command line (typer)."""

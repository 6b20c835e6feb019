"""``python -m pgqueue_cli``: the same as the ``pgqueue`` command."""

from pgqueue_cli.app import main

main()

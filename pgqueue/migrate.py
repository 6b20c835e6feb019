"""Run pgqueue's packaged alembic migrations without an alembic.ini."""

from __future__ import annotations

import io
from typing import Any

from alembic import command
from alembic.config import Config

from pgqueue.resources import migrations_dir, versions_dir


def alembic_config(dsn: str | None = None, *, output: Any = None) -> Config:
    """An alembic :class:`Config` for pgqueue's own environment, bound to ``dsn``."""
    config = Config(output_buffer=output)
    # Paths are separated the platform's way (a space in a path must not split it).
    config.set_main_option("path_separator", "os")
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("version_locations", str(versions_dir()))
    if dsn is not None:
        config.attributes["dsn"] = dsn
    return config


def upgrade(dsn: str, revision: str = "head") -> None:
    """Migrate the database at ``dsn`` to ``revision`` (default: the newest)."""
    command.upgrade(alembic_config(dsn), revision)


def downgrade(dsn: str, revision: str = "base") -> None:
    """Migrate the database at ``dsn`` down to ``revision`` (``base`` removes pgqueue)."""
    command.downgrade(alembic_config(dsn), revision)


def upgrade_sql(revision: str = "head") -> str:
    """The SQL that ``upgrade`` would run on an empty database, for teams applying DDL themselves."""
    buffer = io.StringIO()
    command.upgrade(alembic_config(output=buffer), revision, sql=True)
    return buffer.getvalue()


def downgrade_sql(from_revision: str = "head", to_revision: str = "base") -> str:
    """The SQL that ``downgrade`` would run, for teams applying DDL themselves."""
    buffer = io.StringIO()
    command.downgrade(alembic_config(output=buffer), f"{from_revision}:{to_revision}", sql=True)
    return buffer.getvalue()

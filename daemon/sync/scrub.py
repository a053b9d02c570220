"""Old keys out of conduit's backups, after a key rotation (or a tool's switch to a key reference).

Two ways in, one rule: an old key is never written again, and none survives in a backup.

- ``RedactingBackupStore``: the backups the propagating sync takes are redacted as they are written.
- ``scrub_backups``: every older backup that holds an old key is redacted in place.

Text backups get each old key replaced by its fingerprint (``conduit.redact.redact_bytes``: ``sk-...aaaa``;
the length changes, which a text file does not mind). SQLite backups are changed row by row, with the same
replacement, through SQL (``replace()``) with ``secure_delete`` on and then ``VACUUM``, so no freed page keeps
an old value (the database, not its bytes, is edited: page layout never matters). Restoring such a backup brings
back the file as it was except for the key. A backup that cannot be redacted is deleted.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from conduit.adapters.writer.backups import Backup, BackupStore
from conduit.daemon.config import paths
from conduit.redact import MIN_SECRET_LEN, fingerprint, redact_bytes

__all__ = ["RedactingBackupStore", "redact_sqlite_file", "scrub_backups"]

_SQLITE_MAGIC = b"SQLite format 3\0"


def _usable(secrets: list[str]) -> list[str]:
    """The secrets ``redact`` masks (long enough), longest first so a key inside another is masked whole."""
    return sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)


def redact_sqlite_file(path: Path, secrets: list[str]) -> int:
    """Replace every occurrence of ``secrets`` in every text column of every table of the SQLite file ``path``
    by its fingerprint, with ``secure_delete`` on, then ``VACUUM`` so no free page keeps an old value.

    Returns the number of rows changed. Raises sqlite3.Error for a file that is not a database.
    """
    changed = 0
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("BEGIN")
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                             "AND name NOT LIKE 'sqlite_%'")]
        for t in tables:
            for c in [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]:
                for s in _usable(secrets):
                    cur = conn.execute(f'UPDATE "{t}" SET "{c}" = replace("{c}", ?, ?) '
                                       f'WHERE typeof("{c}") = \'text\' AND instr("{c}", ?) > 0',
                                       (s, fingerprint(s), s))
                    changed += cur.rowcount
        conn.execute("COMMIT")
        if changed:
            conn.execute("VACUUM")
    finally:
        conn.close()
    return changed


class RedactingBackupStore(BackupStore):
    """A ``BackupStore`` whose new backups never hold any of ``secrets`` (old keys during a rotation).

    Text backups are redacted before they are written; SQLite snapshots are redacted (``redact_sqlite_file``)
    before they enter the store.

    Args:
        secrets: the old keys.
        root: the store's directory (default ``paths.backups_dir()``); keep: backups kept per file.
    """

    def __init__(self, secrets: list[str], root: Path | None = None, keep: int = 10) -> None:
        super().__init__(root=root or paths.backups_dir(), keep=keep)
        self.secrets = _usable(secrets)

    def save_bytes(self, tool: str, original: Path, data: bytes, *, mode: int, batch: str = "") -> Backup:
        """As ``BackupStore.save_bytes``, with the old keys replaced by their fingerprints."""
        return super().save_bytes(tool, original, redact_bytes(data, self.secrets), mode=mode, batch=batch)

    def snapshot_sqlite(self, tool: str, db: Path, *, timeout_s: float = 5.0) -> Path:
        """As ``BackupStore.snapshot_sqlite``, with the old keys removed from the snapshot."""
        pending = super().snapshot_sqlite(tool, db, timeout_s=timeout_s)
        try:
            redact_sqlite_file(pending, self.secrets)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(pending)
            raise
        return pending


def redacting_store(secrets: list[str], base: BackupStore | None) -> BackupStore | None:
    """A store like ``base`` (same directory and ``keep``) that never writes ``secrets``; ``base`` itself when
    there is nothing to redact (None stays None: the engine's default store)."""
    if not _usable(secrets):
        return base
    return RedactingBackupStore(secrets, root=base.root if base else None, keep=base.keep if base else 10)


def _redact_in_place(p: Path, data: bytes, secrets: list[str]) -> None:
    """Rewrite one backup file without ``secrets``. Raises OSError or sqlite3.Error when it cannot."""
    if data.startswith(_SQLITE_MAGIC):
        redact_sqlite_file(p, secrets)
        if any(s.encode() in p.read_bytes() for s in secrets):
            raise OSError("still holds the key")
        return
    tmp = p.with_name(f".{p.name}.redact-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(redact_bytes(data, secrets))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, p)


def scrub_backups(secrets: list[str], store: BackupStore | None = None, *, tool: str | None = None) -> int:
    """Redact ``secrets`` from every backup in ``store`` (default: conduit's backups directory), in place; only
    from ``tool``'s backups when given (a tool whose files no longer hold the key: ``key_delivery`` switched
    to a reference).

    Returns the number of backup files changed. A file that cannot be redacted is deleted instead (an old key
    must not survive), and counted.
    """
    base = store or BackupStore(paths.backups_dir())
    root = base.tool_dir(tool) if tool else base.root
    secrets = _usable(secrets)
    if not secrets or not root.is_dir():
        return 0
    raw = [s.encode() for s in secrets]
    count = 0
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name in ("index.json", ".lock"):
            continue
        try:
            data = p.read_bytes()
        except OSError:
            continue
        if not any(s in data for s in raw):
            continue
        try:
            _redact_in_place(p, data, secrets)
        except (OSError, sqlite3.Error):
            with contextlib.suppress(OSError):
                p.unlink()
        count += 1
    return count

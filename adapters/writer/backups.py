"""The backup store: a copy of each tool file taken before conduit changes it, and ``restore`` to put one back.

Layout: ``<root>/<tool>/<UTC timestamp>-<seq>--<filename>``, files 0600 in 0700 directories (they hold keys),
plus ``<root>/<tool>/index.json`` recording each backup's original path, mode, kind and batch. The index is
updated under an ``flock`` so several conduit processes can share the store; the newest ``keep`` backups of
each original file are kept. ``restore`` writes through ``conduit.adapters.writer.Writer`` (atomic, symlinks,
modes), taking a backup first so a restore can itself be undone.

Errors: ``OSError`` and ``sqlite3.Error`` from taking a backup propagate to the writer, which reports them;
``BackupStore.restore`` and ``tool_dir`` raise ``ToolFileError`` with a message naming the tool and backup.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import os
import re
import secrets as _secrets
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from conduit.adapters.writer.restore import write_back
from conduit.adapters.writer.results import Backup, BackupKind
from conduit.errors import ToolFileError
from conduit.fileio import TMP_MARK, atomic_write, fsync_dir, make_private_dirs, pid_alive, remove_stale_temps

__all__ = ["Backup", "BackupStore"]

_TOOL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_NAME_RE = re.compile(r"^(\d{8}T\d{6}Z)-(\d+)--(.+)$")
_INDEX = "index.json"


class BackupStore:
    """Copies of tool files taken before each change: ``<root>/<tool>/<UTC timestamp>-<seq>--<filename>``.

    Files are 0600 in 0700 directories (they hold keys). A JSON index next to them
    (``<root>/<tool>/index.json``) records each backup's original path, mode, kind and batch; it is updated
    under an ``flock`` so several conduit processes can share the store. The newest ``keep`` backups of each
    original file are kept.

    Args:
        root: the store's directory (the daemon passes ``conduit.daemon.config.paths.backups_dir()``)
            (``~/.local/state/conduit/backups``), looked up on each use so HOME redirects it.
        keep: how many backups to keep per tool and original file (>= 1).
    """

    def __init__(self, root: Path | None = None, keep: int = 10) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self._root = root
        self.keep = keep

    @property
    def root(self) -> Path:
        """The store's directory."""
        if self._root is None:
            raise ToolFileError("no backup directory given", "pass BackupStore(root); the daemon uses "
                                "conduit.daemon.config.paths.backups_dir()")  # adapters never import the daemon
        return self._root

    def tool_dir(self, tool: str) -> Path:
        """``<root>/<tool>``. Raises ToolFileError for a name that is not a plain tool name."""
        if not _TOOL_RE.match(tool):
            raise ToolFileError(f"{tool!r} is not a tool name", hint="use a name from `conduit doctor`")
        return self.root / tool

    # -- index ------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, tool: str) -> Iterator[Path]:
        directory = self.tool_dir(tool)
        make_private_dirs(directory)
        fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield directory
        finally:
            os.close(fd)

    @staticmethod
    def _load(directory: Path) -> dict[str, Any]:
        try:
            raw = (directory / _INDEX).read_text(encoding="utf-8")
            index = json.loads(raw)
            if isinstance(index, dict) and isinstance(index.get("backups"), list):
                return index
        except FileNotFoundError:
            return {"next_seq": 1, "backups": []}
        except (OSError, ValueError):
            pass
        # An unreadable index: start a new one numbered after every file present, so nothing is deleted.
        seqs = [int(m.group(2)) for p in directory.iterdir() if (m := _NAME_RE.match(p.name))]
        return {"next_seq": max(seqs, default=0) + 1, "backups": []}

    @staticmethod
    def _store(directory: Path, index: dict[str, Any]) -> None:
        atomic_write(directory / _INDEX, (json.dumps(index, indent=2) + "\n").encode(), 0o600)

    def _entry(self, tool: str, directory: Path, raw: dict[str, Any]) -> Backup:
        return Backup(
            id=raw["id"],
            tool=tool,
            path=Path(raw["path"]),
            created=datetime.fromisoformat(raw["created"]),
            size=int(raw["size"]),
            file=directory / raw["id"],
            kind=raw.get("kind", "text"),
            mode=int(raw.get("mode", 0o600)),
            batch=str(raw.get("batch", "")),
            seq=int(raw["seq"]),
        )

    def _prune(self, directory: Path, index: dict[str, Any]) -> None:
        """Keep the newest ``keep`` per original path; drop entries whose file is gone; remove orphans."""
        by_path: dict[str, list[dict[str, Any]]] = {}
        for raw in index["backups"]:
            by_path.setdefault(raw["path"], []).append(raw)
        kept: list[dict[str, Any]] = []
        for entries in by_path.values():
            entries.sort(key=lambda r: r["seq"], reverse=True)
            for raw in entries[self.keep :]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(directory / raw["id"])
            kept.extend(r for r in entries[: self.keep] if (directory / r["id"]).exists())
        kept.sort(key=lambda r: r["seq"])
        index["backups"] = kept
        known = {r["id"] for r in kept}
        for p in directory.iterdir():
            m = _NAME_RE.match(p.name)
            # A crash between copying and indexing leaves a file numbered next_seq or later: an orphan.
            if m and p.name not in known and int(m.group(2)) >= index["next_seq"]:
                with contextlib.suppress(OSError):
                    os.unlink(p)
            elif p.name.startswith(".pending-"):
                pid_text = p.name.split("-")[1]
                if not (pid_text.isdigit() and pid_alive(int(pid_text)) and int(pid_text) != os.getpid()):
                    with contextlib.suppress(OSError):
                        os.unlink(p)
            elif TMP_MARK in p.name:
                remove_stale_temps(directory / p.name.split(TMP_MARK)[0][1:])

    def _add(
        self,
        tool: str,
        original: Path,
        *,
        kind: BackupKind,
        mode: int,
        batch: str,
        fill: Callable[[Path], None],
    ) -> Backup:
        with self._locked(tool) as directory:
            index = self._load(directory)
            seq = int(index["next_seq"])
            now = datetime.now(UTC)
            name = f"{now.strftime('%Y%m%dT%H%M%SZ')}-{seq}--{original.name}"
            fill(directory / name)
            raw = {
                "id": name,
                "path": str(original),
                "created": now.isoformat(),
                "size": (directory / name).stat().st_size,
                "kind": kind,
                "mode": mode,
                "batch": batch,
                "seq": seq,
            }
            index["backups"].append(raw)
            index["next_seq"] = seq + 1
            self._prune(directory, index)
            self._store(directory, index)
            return self._entry(tool, directory, raw)

    # -- public -----------------------------------------------------------------------------------------

    def save_bytes(self, tool: str, original: Path, data: bytes, *, mode: int, batch: str = "") -> Backup:
        """Back up a text file's current ``data`` (bytes) for ``original``. Raises OSError, ToolFileError."""
        return self._add(
            tool,
            original,
            kind="text",
            mode=mode,
            batch=batch,
            fill=lambda dest: atomic_write(dest, data, 0o600),
        )

    def snapshot_sqlite(self, tool: str, db: Path, *, timeout_s: float = 5.0) -> Path:
        """Copy the committed state of the database ``db`` (``Connection.backup`` through a separate read-only
        connection) to a pending file in the tool's directory; pass it to ``save_file`` or delete it.

        The writer calls this after its ``BEGIN IMMEDIATE`` and before changing anything, so no other program
        can commit in between. (A connection that holds a write transaction cannot be the backup's source:
        SQLite answers SQLITE_LOCKED.) Raises OSError, sqlite3.Error.
        """
        directory = self.tool_dir(tool)
        make_private_dirs(directory)
        pending = directory / f".pending-{os.getpid()}-{_secrets.token_hex(4)}"
        os.close(os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        try:
            src = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=timeout_s)
            dst = sqlite3.connect(pending)
            try:
                src.backup(dst)
                dst.execute("PRAGMA journal_mode=DELETE")
            finally:
                dst.close()
                src.close()
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(pending)
            raise
        return pending

    def save_file(
        self,
        tool: str,
        original: Path,
        src: Path,
        *,
        kind: BackupKind,
        mode: int,
        batch: str = "",
    ) -> Backup:
        """Move the file ``src`` (from ``snapshot_sqlite``) into the store as a backup of ``original``."""

        def fill(dest: Path) -> None:
            os.replace(src, dest)
            fsync_dir(dest.parent)

        return self._add(tool, original, kind=kind, mode=mode, batch=batch, fill=fill)

    def forget(self, backup: Backup) -> None:
        """Delete one backup (used when the change it guarded did not happen)."""
        with self._locked(backup.tool) as directory:
            index = self._load(directory)
            index["backups"] = [r for r in index["backups"] if r["id"] != backup.id]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / backup.id)
            self._store(directory, index)

    def list(self, tool: str) -> builtins.list[Backup]:
        """The tool's backups, newest first. An unknown tool or empty store gives ``[]``."""
        directory = self.tool_dir(tool)
        if not directory.is_dir():
            return []
        index = self._load(directory)
        out = [self._entry(tool, directory, r) for r in index["backups"] if (directory / r["id"]).exists()]
        out.sort(key=lambda b: b.seq, reverse=True)
        return out

    def restore(self, tool: str, backup_id: str | None = None) -> builtins.list[Path]:
        """Put backups back, through the writer (atomic, symlinks, modes), taking a backup first.

        Args:
            tool: the tool's registry name.
            backup_id: a backup's id (or a unique prefix of one). None: undo the newest batch -- every file
                the newest ``Writer`` run changed for this tool goes back to the content before that run.

        Returns:
            The original paths written back (unchanged ones included).

        Raises:
            ToolFileError: no backups, an unknown or ambiguous id, or a file that could not be written
                (the message names it; that file is unchanged).
        """
        entries = self.list(tool)
        if not entries:
            raise ToolFileError(
                f"no backups of {tool} in {self.tool_dir(tool)}",
                hint="conduit takes one before each change it makes; nothing has been changed yet",
            )
        if backup_id:
            chosen = [b for b in entries if b.id == backup_id] or [
                b for b in entries if b.id.startswith(backup_id)
            ]
            if len(chosen) != 1:
                what = "matches no backup" if not chosen else f"matches {len(chosen)} backups"
                raise ToolFileError(
                    f"{backup_id!r} {what} of {tool}", hint=f"see `conduit restore {tool} --list` for the ids"
                )
        else:
            newest = entries[0].batch
            oldest_per_path: dict[Path, Backup] = {}
            for b in entries:  # newest first: the last one seen per path is the oldest in the batch
                if b.batch == newest:
                    oldest_per_path[b.path] = b
            chosen = list(oldest_per_path.values())
        return write_back(self, tool, chosen)

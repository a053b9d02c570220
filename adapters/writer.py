"""The one writer every adapter's output goes through (STYLE.md habit 4: adapters render, one writer writes).

An adapter returns targets (``conduit.adapters.base``); ``Writer.apply`` turns each into at most one change on
disk and a ``WriteResult`` for the report. What it guarantees (DESIGN.md "Writing other programs' files"):

- **Nothing written when nothing changed**: same bytes -> no write, the file's mtime and inode stay.
- **Merge survives concurrent edits**: the file is re-read immediately before the replace; if another program
  (Claude Code itself, a hooks installer) changed it since the first read, the target is rendered again from the
  new content, up to ``MAX_RENDERS`` times.
- **Atomic**: a temp file ``.<name>.conduit-tmp-<pid>-<random>`` in the same directory is written, fsynced,
  given its mode and owner, then ``os.replace``d over the file, and the directory is fsynced. A crash at any
  point leaves either the old or the new bytes; temp files left by a crash are removed on the next write.
- **Symlinks**: the *resolved* path is written, so a dotfile-repo symlink stays a symlink.
- **Modes**: an existing mode is kept unless looser than ``target.mode`` (then tightened, with a notice); new
  files get ``target.mode`` whatever the umask; the owner is kept where the OS allows.
- **Backups**: before any change the current file is copied to the backup store
  (``conduit.adapters.backups.BackupStore``, which also restores through this writer).
- **SQLite**: one ``BEGIN IMMEDIATE`` transaction with a busy timeout (``conduit.adapters.sqlite_apply``).
- **Secrets**: diffs, errors and notices pass through ``target.mask`` and ``conduit.redact.redact`` over the
  writer's ``secrets`` list (each replaced by its fingerprint).

Errors (STYLE.md habit 7): a tool-file problem (``ToolFileError``, ``OSError``, ``UnicodeDecodeError``,
``sqlite3.Error``) never raises out of ``apply``; it becomes ``WriteResult.error`` with a message naming the
file and what to do, and the file is left exactly as it was.

Example::

    writer = Writer(BackupStore(backups_dir), dry_run=False, secrets=[key])
    for target in adapter.plan(settings, env):
        result = writer.apply("claude_code", target)
        print(result.label, "changed" if result.changed else "unchanged", result.error or "")
"""

from __future__ import annotations

import difflib
import errno
import os
import sqlite3
import uuid
from collections.abc import Sequence
from pathlib import Path

from conduit.adapters.base import SqliteTarget, TextTarget
from conduit.adapters.results import BackupSink, WriteResult
from conduit.adapters.sqlite_apply import SqliteApplier
from conduit.errors import ToolFileError
from conduit.fileio import fill_tmp, fsync_dir, make_private_dirs, new_tmp, release_tmp, remove_stale_temps
from conduit.redact import redact

__all__ = ["MAX_RENDERS", "WriteResult", "Writer"]

MAX_RENDERS = 5
"""How often a text target is rendered again when the file keeps changing under the writer."""

_Read = tuple[bytes | None, os.stat_result | None]
"""A file's bytes and stat, or (None, None) when it does not exist."""


def _read(path: Path) -> _Read:
    """The file's bytes and stat, or (None, None) when it does not exist. Raises OSError otherwise."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            return fh.read(), st
    except FileNotFoundError:
        return None, None


def _decode(data: bytes | None, path: Path) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ToolFileError(
            f"{path}: not UTF-8 text (byte {err.start})",
            hint="the tool expects UTF-8; fix the file by hand, conduit left it unchanged",
        ) from None


def _mode_for(st: os.stat_result | None, wanted: int) -> tuple[int, list[str]]:
    """The mode to give the new file: ``wanted`` for a new file; the current one unless looser than it."""
    if st is None:
        return wanted & 0o7777, []
    current = st.st_mode & 0o7777
    if current & ~wanted & 0o777:
        tightened = current & wanted & 0o777
        return tightened, [f"tightened mode {current:04o} -> {tightened:04o}"]
    return current, []


def _os_error_message(err: OSError, path: Path) -> str:
    """A person-readable message for an OSError met while writing ``path`` (the file is unchanged)."""
    where = err.filename if err.filename is not None else path
    reason = err.strerror or str(err)
    parent = Path(where).parent if where != path else path.parent
    hints = {
        errno.EACCES: f"make {parent} writable by you (check `ls -ld {parent}`) or edit {path} by hand",
        errno.EPERM: f"make {parent} writable by you (check `ls -ld {parent}`) or edit {path} by hand",
        errno.EROFS: f"{parent} is on a read-only file system; edit the file where it is writable",
        errno.ENOSPC: "the disk is full; free some space and sync again",
        errno.EDQUOT: "the disk quota is used up; free some space and sync again",
        errno.ENOTDIR: f"a part of {path.parent} is a file, not a directory; move it away or fix the path",
        errno.EISDIR: f"{path} is a directory; move it away so the tool's file can be written",
    }
    hint = hints.get(err.errno or 0, "fix the cause and sync again")
    return str(
        ToolFileError(f"could not write {path}: {reason} ({where})", f"{hint}; conduit left it unchanged")
    )


class Writer:
    """Applies targets to disk: diff, mask, dry run, backup, atomic replace, modes, symlinks, SQLite locks.

    Args:
        backups: where backups go before each change (a ``conduit.adapters.backups.BackupStore``).
        dry_run: compute results and diffs only; write nothing, take no backup.
        secrets: strings (API keys) replaced by their fingerprints in every diff, error and notice.
        batch: groups the backups this writer takes (``BackupStore.restore`` without an id undoes the newest
            batch); default a new random id, so use one ``Writer`` per sync run.
        sqlite_timeout_s: SQLite busy timeout per attempt, seconds.
        sqlite_retries: further attempts after "database is locked" (backoff 0.05 s, doubling).
    """

    def __init__(
        self,
        backups: BackupSink,
        *,
        dry_run: bool = False,
        secrets: Sequence[str] = (),
        batch: str | None = None,
        sqlite_timeout_s: float = 5.0,
        sqlite_retries: int = 4,
    ) -> None:
        self.backups = backups
        self.dry_run = dry_run
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self.batch = batch or uuid.uuid4().hex[:12]
        self.sqlite_timeout_s = sqlite_timeout_s
        self.sqlite_retries = sqlite_retries

    def mask(self, text: str) -> str:
        """``text`` with every string of ``secrets`` replaced by its fingerprint (``conduit.redact.redact``)."""
        return redact(text, self.secrets)

    def apply(self, tool: str, target: TextTarget | SqliteTarget) -> WriteResult:
        """Bring one target's file up to date. Never raises for a problem with the tool's file.

        Returns:
            A ``WriteResult``; ``error`` is set (and the file untouched) when the file could not be parsed,
            read or written.
        """
        label = target.label or target.path.name
        result = WriteResult(tool=tool, label=label, path=target.path)
        try:
            if isinstance(target, SqliteTarget):
                SqliteApplier(self.backups, self.dry_run, self.batch, self.mask, self.sqlite_timeout_s,
                              self.sqlite_retries).apply(tool, target, result)
            else:
                self._apply_text(tool, target, result)
        except ToolFileError as err:
            result.error = str(err)
        except OSError as err:
            result.error = _os_error_message(err, target.path)
        except sqlite3.Error as err:
            result.error = str(
                ToolFileError(
                    f"could not update the database {target.path}: {err}",
                    hint="check that it is the tool's database and not damaged; conduit left it unchanged",
                )
            )
        if result.error is not None:
            result.error = self.mask(result.error)
            result.changed = False
            result.backup = None
        result.notices = [self.mask(n) for n in result.notices]
        return result

    # -- text --------------------------------------------------------------------------------------------

    def _diff(self, target: TextTarget, before: str | None, after: str) -> str:
        a = self.mask(target.mask(before)) if before is not None else ""
        b = self.mask(target.mask(after))
        name = str(target.path)
        lines = difflib.unified_diff(
            a.splitlines(),
            b.splitlines(),
            fromfile=name if before is not None else "/dev/null",
            tofile=name,
            lineterm="",
        )
        return "\n".join(lines)

    def _apply_text(self, tool: str, target: TextTarget, result: WriteResult) -> None:
        real = self._resolve(target)
        data, st = _read(real)
        if data is None and not target.create:
            result.notices.append(f"{target.path} does not exist; conduit does not create it")
            return
        if not self.dry_run:
            stale = remove_stale_temps(real)
            if stale:
                result.notices.append(f"removed {stale} temporary file(s) left by an interrupted write")
        for _ in range(MAX_RENDERS):
            current = _decode(data, real)
            new = target.render(current)
            new_bytes = new.encode("utf-8")
            if data is not None and new_bytes == data:
                result.changed, result.diff = False, ""
                self._tighten_only(real, st, target.mode, result)
                return
            result.changed = True
            result.diff = self._diff(target, current, new)
            mode, notices = _mode_for(st, target.mode)
            if self.dry_run:
                result.notices.extend(n.replace("tightened mode", "would tighten mode") for n in notices)
                return
            if data is None:
                self._make_parent(real, target.path)
            replaced, again = self._replace(tool, target, real, (data, st), new_bytes, mode, notices, result)
            if replaced:
                return
            data, st = again  # changed under us: merge into the new content instead
        raise ToolFileError(
            f"{target.path} kept changing while conduit tried to update it ({MAX_RENDERS} attempts)",
            hint="another program is rewriting it; sync again when it is idle. conduit left it unchanged",
        )

    @staticmethod
    def _resolve(target: TextTarget) -> Path:
        """The file to write: the symlink's target when the path is a link. Raises ToolFileError for a link
        into a folder that is gone (an unmounted or moved dotfiles repo): writing would create folders wherever
        it points. A link whose folder exists is written through, as a dotfiles repo expects."""
        real = Path(os.path.realpath(target.path))
        if os.path.islink(target.path) and not real.parent.is_dir():
            raise ToolFileError(
                f"{target.path} is a symlink to {real}, whose folder does not exist",
                hint="restore the link's target (or remove the link) and sync again; conduit left it alone",
            )
        return real

    def _replace(self, tool: str, target: TextTarget, real: Path, seen: _Read, new_bytes: bytes, mode: int,
                 notices: list[str], result: WriteResult) -> tuple[bool, _Read]:
        """Write ``new_bytes`` to a temp file, re-read ``real``, back it up and replace it.

        Returns:
            (True, seen) when replaced; (False, what the file holds now) when another program changed it since
            ``seen`` was read: nothing was replaced, and the caller renders again from the new content.
        """
        data, st = seen
        tmp = new_tmp(real.parent, real.name)
        replaced = False
        try:
            fill_tmp(tmp, new_bytes, mode, (st.st_uid, st.st_gid) if st else None, notices)
            again = _read(real)
            if again[0] != data:
                return False, again
            if data is not None and st is not None:
                backup = self.backups.save_bytes(tool, target.path, data, mode=st.st_mode & 0o7777,
                                                 batch=self.batch)
                result.backup = backup.file
            os.replace(tmp, real)
            replaced = True
            fsync_dir(real.parent)
        finally:
            release_tmp(tmp, unlink=not replaced)
        if real != Path(os.path.abspath(target.path)):
            notices.append(f"wrote through the symlink {target.path} -> {real}")
        if st is not None and st.st_nlink > 1:
            notices.append(f"{real} had {st.st_nlink} hard links; only this name has the new content")
        result.notices.extend(notices)
        return True, seen

    def _tighten_only(self, real: Path, st: os.stat_result | None, wanted: int, result: WriteResult) -> None:
        """Content already right, but a file holding a key may still be too open (case C17): chmod only."""
        mode, notices = _mode_for(st, wanted)
        if not notices or st is None:
            return
        result.changed = True
        if self.dry_run:
            result.notices.extend(n.replace("tightened mode", "would tighten mode") for n in notices)
            return
        os.chmod(real, mode)
        result.notices.extend(notices)

    @staticmethod
    def _make_parent(real: Path, shown: Path) -> None:
        parent = real.parent
        if parent.is_dir():
            return
        if os.path.lexists(parent):
            raise ToolFileError(
                f"cannot create {shown}: {parent} exists and is not a directory",
                hint="move that file away or fix the path; conduit changed nothing",
            )
        make_private_dirs(parent)

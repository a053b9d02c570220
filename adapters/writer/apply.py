"""The one writer every adapter's output goes through (adapters render, one writer writes).

An adapter returns targets (``conduit.adapters.base``); ``Writer.apply`` turns each into at most one change on
disk and a ``WriteResult`` for the report. What it guarantees (docs/design.md "Writing other programs' files"):

- **Nothing written when nothing changed**: same bytes -> no write, the file's mtime and inode stay.
- **Merge survives concurrent edits**: the file is re-read after the temp file is filled and compared with what
  was merged (device, inode, size, ``mtime_ns``, SHA-256: ``conduit.adapters.writer.snapshot.Seen``) once more right
  before the swap; on Linux the swap is ``renameat2(RENAME_EXCHANGE)`` and the displaced file is compared right
  after it too, the swap undone when it differs (``conduit.adapters.writer.exchange``). If another program (Claude Code
  itself, a hooks installer) changed the file, the target is rendered again from the new content, up to
  ``MAX_RENDERS`` times. In the daemon the displaced file is kept open a moment longer, so an in-place save
  opened before the swap is put back (``conduit.adapters.writer.latesaves``).
- **Half-saved files are never merged from**: a file that exists but is blank or does not parse may be in the
  middle of another program's truncate-then-write save; it is re-read after ``SETTLE_WAITS_S`` (about 200 ms),
  and if it stays so the target is skipped with an error naming the file. A missing file is created as usual.
- **Atomic**: a temp file ``.<name>.conduit-tmp-<pid>-<random>`` in the same directory is written, fsynced,
  given its mode and owner, then swapped (or ``os.replace``d) over the file, and the directory is fsynced. A
  crash at any point leaves either the old or the new bytes; temp files left by a crash are removed on the next
  write.
- **Symlinks**: the *resolved* path is written, so a dotfile-repo symlink stays a symlink.
- **Modes**: an existing mode is kept unless looser than ``target.mode`` (then tightened, with a notice); new
  files get ``target.mode`` whatever the umask; the owner is kept where the OS allows.
- **Backups**: before any change the bytes of the last re-read are copied to the backup store
  (``conduit.adapters.writer.backups.BackupStore``, which also restores through this writer); blank or unparseable
  bytes are never kept as a restore point.
- **SQLite**: one ``BEGIN IMMEDIATE`` transaction with a busy timeout (``conduit.adapters.writer.sqlite_apply``); a
  database holding a key is made 0600 with its ``-journal``/``-wal``/``-shm`` files.
- **Secrets**: diffs, errors and notices pass through ``target.mask`` and ``conduit.redact.redact`` over the
  writer's ``secrets`` list (each replaced by its fingerprint).

Errors (translated at this boundary): a tool-file problem (``ToolFileError``, ``OSError``, ``UnicodeDecodeError``,
``sqlite3.Error``) never raises out of ``apply``; it becomes ``WriteResult.error`` with a message naming the
file and what to do, and the file is left exactly as it was.

Example::

    writer = Writer(BackupStore(backups_dir), dry_run=False, secrets=[key])
    for target in adapter.plan(settings, env):
        result = writer.apply("claude_code", target)
        print(result.label, "changed" if result.changed else "unchanged", result.error or "")
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import os
import sqlite3
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from conduit.adapters.base import SqliteTarget, TextTarget
from conduit.adapters.writer.exchange import swap_if_same
from conduit.adapters.writer.latesaves import LATE_SAVES
from conduit.adapters.writer.results import Backup, BackupSink, WriteResult
from conduit.adapters.writer.snapshot import SETTLE_WAITS_S, Seen, blank, read_seen, whole_text_problem
from conduit.adapters.writer.sqlite_apply import SqliteApplier
from conduit.errors import ToolFileError
from conduit.fileio import fill_tmp, fsync_dir, make_private_dirs, new_tmp, release_tmp, remove_stale_temps
from conduit.redact import redact

__all__ = ["MAX_RENDERS", "WriteResult", "Writer"]

MAX_RENDERS = 5
"""How often a text target is rendered again when the file keeps changing under the writer."""

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
        backups: where backups go before each change (a ``conduit.adapters.writer.backups.BackupStore``).
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
        result.notices = [self.mask(n) for n in (*getattr(target, "notices", ()), *result.notices)]
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
        seen = read_seen(real)
        if seen.data is None and not target.create:
            result.notices.append(f"{target.path} does not exist; conduit does not create it")
            return
        if not self.dry_run:
            stale = remove_stale_temps(real)
            if stale:
                result.notices.append(f"removed {stale} temporary file(s) left by an interrupted write")
        for _ in range(MAX_RENDERS):
            seen, current, new = self._settled(target, real, seen)
            new_bytes = new.encode("utf-8")
            if seen.data is not None and new_bytes == seen.data:
                result.changed, result.diff = False, ""
                self._tighten_only(real, seen.st, target.mode, result)
                return
            result.changed = True
            result.diff = self._diff(target, current, new)
            mode, notices = _mode_for(seen.st, target.mode)
            if self.dry_run:
                result.notices.extend(n.replace("tightened mode", "would tighten mode") for n in notices)
                return
            if seen.data is None:
                self._make_parent(real, target.path)
            replaced, seen = self._replace(tool, target, real, seen, new_bytes, mode, notices, result)
            if replaced:
                return
            # changed under us: merge into the new content instead
        raise ToolFileError(
            f"{target.path} kept changing while conduit tried to update it ({MAX_RENDERS} attempts)",
            hint="another program is rewriting it; sync again when it is idle. conduit left it unchanged",
        )

    @staticmethod
    def _settled(target: TextTarget, real: Path, seen: Seen) -> tuple[Seen, str | None, str]:
        """Render ``target`` from ``seen``: (what it was rendered from, its text, the new text).

        A file that exists but is blank, not UTF-8 or does not parse may be half-saved by another program (a
        truncate-then-write save): it is re-read after each of ``SETTLE_WAITS_S``. Raises ToolFileError when it
        stays so (nothing is written over it); a render that ignores the current content (``merge=False``)
        is never held back.
        """
        waits = iter(SETTLE_WAITS_S)
        while True:
            try:
                if target.merge and blank(seen.data):
                    raise ToolFileError(
                        f"{target.path} is empty ({len(seen.data or b'')} bytes): another program may be saving it",
                        hint="conduit left it alone and synced the other tools. If the tool left it empty for good, "
                        "delete it (conduit then creates it) and sync again",
                    )
                current = _decode(seen.data, real)
                return seen, current, target.render(current)
            except ToolFileError:
                wait = next(waits, None)
                if wait is None or seen.data is None or not target.merge:
                    raise
            time.sleep(wait)
            seen = read_seen(real)

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

    def _replace(self, tool: str, target: TextTarget, real: Path, seen: Seen, new_bytes: bytes, mode: int,
                 notices: list[str], result: WriteResult) -> tuple[bool, Seen]:
        """Fill a temp file with ``new_bytes``, re-read ``real``, back up the bytes of that re-read, and put the
        temp file in place only if ``real`` is still what was merged (``seen``), compared once more right
        before the swap and, where the OS can swap two names, right after it (``swap_if_same``).

        Returns:
            (True, seen) when replaced; (False, what the file holds now) when another program changed it since
            ``seen`` was read: nothing was replaced, and the caller renders again from the new content.
        """
        tmp = new_tmp(real.parent, real.name)
        placed = False
        backup: Backup | None = None
        try:
            fill_tmp(tmp, new_bytes, mode, (seen.st.st_uid, seen.st.st_gid) if seen.st else None, notices)
            again = read_seen(real)
            if not again.same(seen):
                return False, again
            backup = self._backup(tool, target, again, result)
            placed, now = swap_if_same(tmp, real, seen)
            if not placed:
                return False, now
            LATE_SAVES.keep(tmp, real, seen)  # an in-place save opened before the swap may still land in it
            fsync_dir(real.parent)
        finally:
            release_tmp(tmp, unlink=True)  # after a swap it holds the replaced file; else our unused one
            if backup is not None and not placed:
                with contextlib.suppress(OSError, ToolFileError):
                    self.backups.forget(backup)
        result.backup = backup.file if backup is not None else None
        if real != Path(os.path.abspath(target.path)):
            notices.append(f"wrote through the symlink {target.path} -> {real}")
        if seen.st is not None and seen.st.st_nlink > 1:
            notices.append(f"{real} had {seen.st.st_nlink} hard links; only this name has the new content")
        result.notices.extend(notices)
        return True, seen

    def _backup(self, tool: str, target: TextTarget, seen: Seen, result: WriteResult) -> Backup | None:
        """Back up the bytes of the last re-read, unless they are no restore point: a file that did not exist,
        or one that is blank or not whole (possible only for a ``merge=False`` target such as a restore)."""
        if seen.data is None or seen.st is None:
            return None
        problem = whole_text_problem(target.path, seen.data) if (not target.merge or blank(seen.data)) else None
        if problem is not None:
            result.notices.append(f"took no backup of {target.path}: {problem}, so it is no restore point")
            return None
        return self.backups.save_bytes(tool, target.path, seen.data, mode=seen.st.st_mode & 0o7777,
                                       batch=self.batch)

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

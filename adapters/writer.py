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
- **Backups**: before any change the current file is copied to ``BackupStore`` (the last ``keep`` per file);
  ``BackupStore.restore`` puts one back through the same path, taking a backup first so it can be undone.
- **SQLite**: the existing database only (never created), one ``BEGIN IMMEDIATE`` transaction with a busy
  timeout, retried with backoff on "database is locked" (CC Switch sets no busy timeout of its own:
  shared/formats/cc-switch.md "Locking").
- **Secrets**: diffs, errors and notices pass through ``target.mask`` and the writer's ``secrets`` list
  (each replaced by ``fingerprint()``).

Errors (STYLE.md habit 7): a tool-file problem (``ToolFileError``, ``OSError``, ``UnicodeDecodeError``,
``sqlite3.Error``) never raises out of ``apply``; it becomes ``WriteResult.error`` with a message naming the
file and what to do, and the file is left exactly as it was. ``BackupStore.restore`` raises ``ToolFileError``.

Example::

    writer = Writer(BackupStore(backups_dir), dry_run=False, secrets=[key])
    for target in adapter.plan(settings, env):
        result = writer.apply("claude_code", target)
        print(result.label, "changed" if result.changed else "unchanged", result.error or "")
"""

from __future__ import annotations

import builtins
import contextlib
import difflib
import errno
import fcntl
import json
import os
import re
import secrets as _secrets
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from conduit.adapters.base import SqliteTarget, TextTarget
from conduit.errors import ToolFileError
from conduit.fileio import (
    TMP_MARK,
    atomic_write,
    fill_tmp,
    fsync_dir,
    make_private_dirs,
    new_tmp,
    pid_alive,
    release_tmp,
    remove_stale_temps,
)
from conduit.redact import fingerprint

MAX_RENDERS = 5
"""How often a text target is rendered again when the file keeps changing under the writer."""


# ---------------------------------------------------------------------------------------------------- results


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
    kind: Literal["text", "sqlite"]
    mode: int
    batch: str
    seq: int


def _read(path: Path) -> tuple[bytes | None, os.stat_result | None]:
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


# ------------------------------------------------------------------------------------------------- backups


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
        kind: Literal["text", "sqlite"],
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
        kind: Literal["text", "sqlite"],
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
        writer = Writer(self)
        restored: builtins.list[Path] = []
        for b in chosen:
            target: TextTarget | SqliteTarget
            if b.kind == "sqlite":
                target = SqliteTarget(path=b.path, apply=_sqlite_restorer(b), label=f"restore {b.id}")
            else:
                text = b.file.read_bytes().decode("utf-8")
                target = TextTarget(
                    path=b.path, render=_constant(text), mode=b.mode, create=True, label=f"restore {b.id}"
                )
            result = writer.apply(tool, target)
            if result.error:
                raise ToolFileError(result.error)
            restored.append(b.path)
        return restored


def _constant(text: str) -> Callable[[str | None], str]:
    """A ``TextTarget.render`` that ignores the current content and returns ``text``."""

    def render(_current: str | None) -> str:
        return text

    return render


def _sqlite_restorer(backup: Backup) -> Callable[[sqlite3.Connection, bool], builtins.list[str]]:
    """An ``SqliteTarget.apply`` that makes each table of ``backup`` hold the backup's rows again.

    Works row by row inside the writer's transaction (a ``Connection.backup`` into a connection in a
    transaction is refused), so the live database keeps its file, journal mode and tables the backup lacks.
    """

    def apply(conn: sqlite3.Connection, dry_run: bool) -> builtins.list[str]:
        src = sqlite3.connect(f"file:{quote(str(backup.file))}?mode=ro", uri=True)
        lines: builtins.list[str] = []
        try:
            tables = [
                r[0]
                for r in src.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
                )
            ]
            for table in tables:
                q = '"' + table.replace('"', '""') + '"'
                cols = [r[1] for r in src.execute(f"PRAGMA table_info({q})")]
                col_list = ", ".join('"' + c.replace('"', '""') + '"' for c in cols)
                old = src.execute(f"SELECT {col_list} FROM {q}").fetchall()
                try:
                    cur = conn.execute(f"SELECT {col_list} FROM main.{q}").fetchall()
                except sqlite3.OperationalError as err:
                    raise ToolFileError(
                        f"{backup.path}: table {table} no longer matches the backup ({err})",
                        hint="the tool changed its schema since the backup; restore by hand from "
                        + str(backup.file),
                    ) from None
                if sorted(map(repr, cur)) == sorted(map(repr, old)):
                    continue
                conn.execute(f"DELETE FROM main.{q}")
                marks = ", ".join("?" for _ in cols)
                conn.executemany(f"INSERT INTO main.{q} ({col_list}) VALUES ({marks})", old)
                lines.append(f"table {table}: {len(cur)} rows -> {len(old)} rows from backup {backup.id}")
        finally:
            src.close()
        return lines

    return apply


# -------------------------------------------------------------------------------------------------- writer


class Writer:
    """Applies targets to disk: diff, mask, dry run, backup, atomic replace, modes, symlinks, SQLite locks.

    Args:
        backups: where backups go before each change.
        dry_run: compute results and diffs only; write nothing, take no backup.
        secrets: strings (API keys) replaced by ``fingerprint()`` in every diff, error and notice.
        batch: groups the backups this writer takes (``BackupStore.restore`` without an id undoes the newest
            batch); default a new random id, so use one ``Writer`` per sync run.
        sqlite_timeout_s: SQLite busy timeout per attempt, seconds.
        sqlite_retries: further attempts after "database is locked" (backoff 0.05 s, doubling).
    """

    def __init__(
        self,
        backups: BackupStore,
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
        """``text`` with every string of ``secrets`` replaced by its fingerprint."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, fingerprint(secret))
        return text

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
                self._apply_sqlite(tool, target, result)
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
        real = Path(os.path.realpath(target.path))
        if os.path.islink(target.path) and not real.parent.is_dir():
            # A link into a folder that is gone (an unmounted or moved dotfiles repo): writing would create
            # folders wherever it points. A link whose folder exists is written through, as a dotfiles repo expects.
            raise ToolFileError(
                f"{target.path} is a symlink to {real}, whose folder does not exist",
                hint="restore the link's target (or remove the link) and sync again; conduit left it alone",
            )
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
            tmp = new_tmp(real.parent, real.name)
            replaced = False
            try:
                fill_tmp(tmp, new_bytes, mode, (st.st_uid, st.st_gid) if st else None, notices)
                again, st_again = _read(real)
                if again != data:  # changed under us: merge into the new content instead
                    data, st = again, st_again
                    continue
                if data is not None and st is not None:
                    backup = self.backups.save_bytes(
                        tool, target.path, data, mode=st.st_mode & 0o7777, batch=self.batch
                    )
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
            return
        raise ToolFileError(
            f"{target.path} kept changing while conduit tried to update it ({MAX_RENDERS} attempts)",
            hint="another program is rewriting it; sync again when it is idle. conduit left it unchanged",
        )

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

    # -- sqlite ------------------------------------------------------------------------------------------

    def _apply_sqlite(self, tool: str, target: SqliteTarget, result: WriteResult) -> None:
        if not target.path.is_file():
            raise ToolFileError(
                f"{target.path}: database not found",
                hint="start the tool once so it creates its database; conduit never creates it",
            )
        uri = f"file:{quote(str(target.path))}?mode=rw"
        delay = 0.05
        for attempt in range(self.sqlite_retries + 1):
            try:
                self._sqlite_once(tool, target, uri, result)
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) and "busy" not in str(err):
                    raise
                if attempt == self.sqlite_retries:
                    raise ToolFileError(
                        f"{target.path}: the database stayed locked by another program "
                        f"({self.sqlite_retries + 1} attempts)",
                        hint="the tool may be writing it; sync again in a moment. conduit changed nothing",
                    ) from None
                time.sleep(delay)
                delay *= 2

    def _sqlite_once(self, tool: str, target: SqliteTarget, uri: str, result: WriteResult) -> None:
        conn = sqlite3.connect(uri, uri=True, timeout=self.sqlite_timeout_s, isolation_level=None)
        # Overwritten rows may hold a key: zero freed pages so an old key does not linger in free space
        # (some SQLite builds default to this, not all).
        conn.execute("PRAGMA secure_delete = ON")
        pending: Path | None = None
        try:
            conn.execute("BEGIN IMMEDIATE")
            mode = os.stat(target.path).st_mode & 0o7777
            if not self.dry_run:
                pending = self.backups.snapshot_sqlite(tool, target.path, timeout_s=self.sqlite_timeout_s)
            lines = list(target.apply(conn, self.dry_run))
            result.changed = bool(lines)
            result.diff = self.mask("\n".join(lines))
            if not lines or self.dry_run:
                conn.execute("ROLLBACK")
                return
            assert pending is not None
            backup = self.backups.save_file(
                tool, target.path, pending, kind="sqlite", mode=mode, batch=self.batch
            )
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

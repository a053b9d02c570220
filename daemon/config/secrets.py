"""conduit's own secrets file and the work of ``conduit key set/list/rm``.

The file (``~/.config/conduit/secrets.toml``, ``conduit.daemon.config.paths.secrets_path()``) is TOML::

    [secrets]
    taotoken = "sk-..."

It is read with ``conduit.fileio.read_regular_file`` (a regular file of at most ``PROFILE_MAX_BYTES``, 1 MiB,
opened without blocking: a FIFO in its place is refused, never waited on). It is mode 0600 from the moment it
exists (its directory 0700), written atomically (temp file in the same
directory, fsync, ``os.replace``) under an ``flock`` on ``<file>.lock`` so that two ``conduit key set`` runs do
not lose each other's change. A channel reads a stored key with ``key = { secret = "NAME" }``
(``conduit.daemon.config.sources``). Keys are stored clean (``clean_key``) and never shown: only fingerprints.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError, TOMLKitError

from conduit.daemon.config import paths
from conduit.daemon.config.normalize import CleanKey, clean_key, decode_key_bytes
from conduit.daemon.config.tomlwords import toml_problem
from conduit.errors import KeyError_
from conduit.fileio import PROFILE_MAX_BYTES, atomic_write, locked, make_private_dirs, read_regular_file
from conduit.redact import fingerprint

__all__ = ["LOCK_TIMEOUT_S", "NAME_RE", "SecretsStore", "check_name", "key_list", "key_rm", "key_set",
           "looks_like_key"]

log = logging.getLogger("conduit.keys")

#: Secret names: what ``conduit key set NAME`` and ``{ secret = "NAME" }`` accept.
NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")

LOCK_TIMEOUT_S = 30.0
"""How long (seconds) a write waits for another ``conduit key`` run to release the secrets file's lock."""

_KEY_LIKE = re.compile(r"^sk-[A-Za-z0-9_-]{12,}|[A-Za-z0-9]{32,}")
_UNPARSABLE_HINT = "fix it by hand, or move it away and set the keys again with `conduit key set NAME`"


def looks_like_key(name: str) -> bool:
    """True for a secret *name* that is probably a key typed where the name goes (``sk-...``, a long token)."""
    return bool(_KEY_LIKE.search(name))


def check_name(name: str) -> str:
    """``name`` when it is a valid secret name (``NAME_RE``).

    Raises:
        KeyError_: it holds anything but letters, digits, ``_``, ``.`` and ``-`` (the name is not echoed: it
            may be a key).
    """
    if not NAME_RE.fullmatch(name):
        raise KeyError_(
            "a secret name may hold only letters, digits, `_`, `.` and `-`",
            hint="pick a name such as `taotoken` or `openrouter-work`",
        )
    return name


class SecretsStore:
    """conduit's own secrets file: TOML ``[secrets]`` with ``name = "key"`` lines.

    Args:
        path: the file; default ``paths.secrets_path()`` (``~/.config/conduit/secrets.toml``).

    The file is created 0600 and its directory 0700 (whatever the umask). A file found readable by group or
    others is tightened to 0600, and a notice is kept in ``notices``. Writes keep the rest of the document
    (comments, order), go through ``atomic_write``, under an exclusive ``flock`` on ``<file>.lock``.

    Raises (all methods): ``KeyError_`` when the file cannot be read, parsed (line and column only, never
    the text) or written, the lock is held longer than ``LOCK_TIMEOUT_S``, or a name is not ``NAME_RE``.

    Example::

        store = SecretsStore()
        store.set("taotoken", clean_key(raw, source="stdin").key)
        store.get("taotoken")        # "sk-..."
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else paths.secrets_path()
        self.notices: list[str] = []

    @property
    def shown(self) -> str:
        """The file's path for messages, with ``~`` for the home directory."""
        return paths.display_path(self.path)

    def get(self, name: str) -> str | None:
        """The stored key for ``name`` (as stored, not re-cleaned), or None when absent."""
        check_name(name)
        value = self._table(self._load()).get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise KeyError_(
                f"secrets file {self.shown}: `secrets.{name}` is not a string",
                hint=f"set it again with `conduit key set {name}`",
            )
        return str(value)

    def names(self) -> list[str]:
        """The stored secret names, sorted."""
        return sorted(str(k) for k in self._table(self._load()))

    def set(self, name: str, key: str) -> bool:
        """Store ``key`` under ``name``; returns True when a key of that name was replaced.

        ``key`` must already be clean (``clean_key``): it is checked again, and refused without writing.
        """
        check_name(name)
        if clean_key(key, source=f"the key for `{name}`").key != key:
            raise KeyError_(f"the key for `{name}` has characters around or in it that are not part of a key "
                            "(spaces, line breaks, quotes or a `Bearer ` prefix); nothing was stored",
                            hint=f"give only the key: `conduit key set {name} < KEYFILE`")
        with self._locked():
            doc = self._load()
            table = doc.get("secrets")
            if table is None:
                table = tomlkit.table()
                doc["secrets"] = table
            elif not isinstance(table, dict):
                self._table(doc)  # raises
            replaced = name in table
            table[name] = key
            self._write(doc)
        return replaced

    def delete(self, name: str) -> bool:
        """Remove ``name``; returns False (and writes nothing) when it was not there."""
        check_name(name)
        with self._locked():
            doc = self._load()
            table = self._table(doc)
            if name not in table:
                return False
            del table[name]
            self._write(doc)
        return True

    # -- the file --------------------------------------------------------------------------------------

    def _load(self) -> tomlkit.TOMLDocument:
        try:
            data = read_regular_file(self.path, max_bytes=PROFILE_MAX_BYTES, what="secrets file", error=KeyError_)
        except FileNotFoundError:
            return tomlkit.document()
        except KeyError_ as exc:
            exc.hint = exc.hint or f"check its owner and mode (it should be yours, mode 0600: chmod 600 {self.shown})"
            raise
        self._tighten()
        text = decode_key_bytes(data)
        try:
            return tomlkit.parse(text)
        except ParseError as exc:
            problem = toml_problem(exc, text)  # words and position only: the file holds keys
            raise KeyError_(f"secrets file {self.shown} cannot be parsed ({problem.where()}: {problem.reason})",
                            hint=_UNPARSABLE_HINT) from None
        except (TOMLKitError, RecursionError):
            raise KeyError_(f"secrets file {self.shown} cannot be parsed", hint=_UNPARSABLE_HINT) from None

    def _tighten(self) -> None:
        """Make a file other users can read 0600 again, and say so once (opened without blocking, regular
        files only: ``_load`` has just read it as one)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o077:
                return
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
        notice = (f"secrets file {self.shown} could be read by other users "
                  f"(mode {stat.S_IMODE(st.st_mode):04o}); it is now 0600")
        if notice not in self.notices:
            self.notices.append(notice)
            log.warning("%s", notice)

    def _table(self, doc: tomlkit.TOMLDocument) -> dict[str, Any]:
        table = doc.get("secrets")
        if table is None:
            return {}
        if not isinstance(table, dict):
            raise KeyError_(
                f"secrets file {self.shown}: `secrets` is not a table",
                hint="the file holds a [secrets] table of name = \"key\" lines",
            )
        return table

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock_path = self.path.with_name(self.path.name + ".lock")
        held = False  # errors from the body are the body's, not the lock's
        try:
            make_private_dirs(self.path.parent)
            with locked(lock_path, timeout_s=LOCK_TIMEOUT_S):
                held = True
                yield
        except TimeoutError:
            if held:
                raise
            raise KeyError_(f"{paths.display_path(lock_path)} stayed locked for {LOCK_TIMEOUT_S:g} s",
                            hint="another `conduit key` command is running; wait for it, then try again") from None
        except OSError as exc:
            if held:
                raise
            raise KeyError_(f"cannot lock {paths.display_path(lock_path)}: {exc.strerror or exc}",
                            hint="check the permissions") from None

    def _write(self, doc: tomlkit.TOMLDocument) -> None:
        try:
            atomic_write(self.path, tomlkit.dumps(doc).encode("utf-8"), 0o600)
        except OSError as exc:
            raise KeyError_(
                f"cannot write secrets file {self.shown}: {exc.strerror or exc}",
                hint="check the directory's permissions and free space; the old file is unchanged",
            ) from None


# ------------------------------------------------------------------------------------ `conduit key` work


def clean_named_key(name: str, raw: str, *, flags: str = "") -> CleanKey:
    """The checks of ``conduit key set NAME [flags]`` before anything is stored: ``name`` is a name, not a key
    (never echoed: it is probably a key typed where the name goes, now in the shell history) and matches
    ``NAME_RE``; ``raw`` is a key ``clean_key`` accepts. Returns the clean key.

    Raises:
        KeyError_: any of these refused, naming what to do (``flags`` goes into the hint's command line).
    """
    if looks_like_key(name):
        raise KeyError_(
            "that looks like an API key, not a name: the key is read from stdin, never from the command line",
            hint="run `conduit key set NAME` and paste the key when asked; if that was a real key, it is in "
            "your shell history now: rotate it",
        )
    check_name(name)
    try:
        return clean_key(raw, source=f"the input for `{name}`")
    except KeyError_ as exc:
        if exc.message.endswith("is empty"):
            exc.hint = (f"pipe the key in (`conduit key set {name}{flags} < KEYFILE`) or type it at the hidden "
                        "prompt")
        raise


def key_set(name: str, raw: str, *, store: SecretsStore | None = None) -> str:
    """Clean ``raw`` and store it as secret ``name``; returns one line for a person (fingerprint, no key).

    Raises:
        KeyError_: a bad name, or a key ``clean_key`` refuses; nothing is written then.
    """
    clean = clean_named_key(name, raw)
    store = store or SecretsStore()
    replaced = store.set(name, clean.key)
    verb = "replaced" if replaced else "stored"
    line = f"{verb} key `{name}` ({clean.fingerprint}) in {store.shown}"
    notes = [*clean.notices, *store.notices]
    if notes:
        line += "; " + "; ".join(notes)
    return line


def key_list(*, store: SecretsStore | None = None) -> list[tuple[str, str]]:
    """``(name, fingerprint)`` for every stored secret, sorted by name."""
    store = store or SecretsStore()
    return [(name, fingerprint(store.get(name))) for name in store.names()]


def key_rm(name: str, *, store: SecretsStore | None = None) -> str:
    """Remove secret ``name``; returns one line for a person.

    Raises:
        KeyError_: no secret of that name (the file is left unchanged).
    """
    store = store or SecretsStore()
    if not store.delete(name):
        raise KeyError_(
            f"there is no key `{name}` in {store.shown}",
            hint="`conduit key list` shows the stored names",
        )
    return f"removed key `{name}` from {store.shown}"

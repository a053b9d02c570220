"""Key sources (file, environment variable, command, conduit's secrets file) and conduit's own secrets file.

A channel names where its key lives (DESIGN.md "Keys")::

    key = { file = "~/.config/conduit/keys/taotoken" }   # one line; a trailing newline is fine
    key = { env = "TAOTOKEN_API_KEY" }                   # the daemon's environment, not your shell's
    key = { command = "pass show taotoken" }             # stdout is the key; run through /bin/sh
    key = { secret = "taotoken" }                        # ~/.config/conduit/secrets.toml, via `conduit key set`

Every key read passes through ``conduit.daemon.config.normalize.clean_key``. Errors are ``KeyError_`` naming the
source (``KeySource.describe()``) with a hint; they never contain the key: a command's stdout is never shown,
and a line of its stderr that holds the key is masked.

The secrets file is TOML (``[secrets]`` then ``name = "key"``), mode 0600 from the moment it exists, written
atomically (temp file in the same directory, fsync, ``os.replace``) under an ``flock`` so that two
``conduit key set`` runs do not lose each other's change.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import signal
import stat
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tomlkit
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from tomlkit.exceptions import ParseError, TOMLKitError

from conduit.daemon.config import paths
from conduit.daemon.config.normalize import CleanKey, clean_key
from conduit.errors import KeyError_, ProfileError
from conduit.fileio import atomic_write
from conduit.redact import fingerprint

__all__ = [
    "KEY_FILE_MAX_BYTES",
    "NAME_RE",
    "KeySource",
    "SecretsStore",
    "display_path",
    "key_list",
    "key_rm",
    "key_set",
    "key_source_from",
    "read_key",
]

log = logging.getLogger("conduit.keys")

#: Secret names: what ``conduit key set NAME`` and ``{ secret = "NAME" }`` accept.
NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")

#: A key file or command output larger than this is not a key (the wrong file, a binary): refused, in bytes.
KEY_FILE_MAX_BYTES = 64 * 1024

_SOURCES = ("file", "env", "command", "secret")


def display_path(path: Path | str, environ: Mapping[str, str] | None = None) -> str:
    """``path`` with the home directory written as ``~`` (for messages)."""
    home = (environ if environ is not None else os.environ).get("HOME", "")
    text = str(path)
    if home and home != "/" and (text == home or text.startswith(home.rstrip("/") + "/")):
        return "~" + text[len(home.rstrip("/")) :]
    return text


_KEY_LIKE = re.compile(r"^sk-[A-Za-z0-9_-]{12,}|[A-Za-z0-9]{32,}")


def looks_like_key(name: str) -> bool:
    """True for a secret *name* that is probably a key typed where the name goes (``sk-...``, a long token)."""
    return bool(_KEY_LIKE.search(name))


def _check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise KeyError_(
            "a secret name may hold only letters, digits, `_`, `.` and `-`",
            hint="pick a name such as `taotoken` or `openrouter-work`",
        )
    return name


class KeySource(BaseModel):
    """Where one channel's key comes from: exactly one of ``file``, ``env``, ``command``, ``secret``.

    Attributes:
        file: path of a file holding the key (``~`` is the user's home; a relative path is relative to
            conduit's config directory, ``~/.config/conduit``).
        env: name of an environment variable of the process that reads the key (the daemon).
        command: a shell command whose standard output is the key (``pass show x``, ``op read op://...``).
        secret: a name in conduit's secrets file (``conduit key set NAME``).

    Raises (on validation): pydantic ``ValidationError``; use ``key_source_from`` to get a ``ProfileError``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str | None = None
    env: str | None = None
    command: str | None = None
    secret: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> KeySource:
        given = [name for name in _SOURCES if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("a key source needs exactly one of file, env, command, secret")
        value = getattr(self, given[0])
        if not value.strip():
            raise ValueError(f"the key source's `{given[0]}` is empty")
        if self.secret is not None and not NAME_RE.fullmatch(self.secret):
            raise ValueError("a secret name may hold only letters, digits, `_`, `.` and `-`")
        if self.env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.env):
            raise ValueError("an environment variable name holds only letters, digits and `_`")
        return self

    @property
    def kind(self) -> str:
        """Which source this is: ``file``, ``env``, ``command`` or ``secret``."""
        return next(name for name in _SOURCES if getattr(self, name) is not None)

    def describe(self) -> str:
        """The source in words, for messages: ``key file ~/.config/conduit/keys/x``, ``environment variable
        X``, ``command `pass show x```, ``secret `x` in ~/.config/conduit/secrets.toml``."""
        if self.file is not None:
            return f"key file {self.file}"
        if self.env is not None:
            return f"environment variable {self.env}"
        if self.command is not None:
            return f"command `{self.command}`"
        return f"secret `{self.secret}` in {display_path(paths.secrets_path())}"


def key_source_from(value: Any, *, where: str) -> KeySource:
    """Validate a profile's ``key = ...`` value into a ``KeySource``, as a ``ProfileError`` on failure.

    Unlike ``str(ValidationError)``, the message never quotes the value: a person who wrote the key itself
    into the profile (``key = "sk-..."``) is told where keys belong without the key being echoed.

    Args:
        value: the parsed TOML value (a table/dict is expected).
        where: file and key path, e.g. ``~/.config/conduit/profile.toml: channels.taotoken.key``.

    Raises:
        ProfileError: naming ``where``, with a hint.
    """
    hint = 'write key = { file = "~/.config/conduit/keys/NAME" } (or env, command, secret)'
    if isinstance(value, str):
        raise ProfileError(
            f"{where}: the key itself must not be written in the profile",
            hint="store it with `conduit key set NAME` and write key = { secret = \"NAME\" }, or " + hint[6:],
        )
    if not isinstance(value, Mapping):
        raise ProfileError(f"{where}: expected a table such as {{ file = \"...\" }}", hint=hint)
    try:
        return KeySource.model_validate(dict(value))
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_input=False, include_url=False):
            loc = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{loc}: {msg}" if loc else msg)
        raise ProfileError(f"{where}: " + "; ".join(problems), hint=hint) from None


# ----------------------------------------------------------------------------------------------- reading


def _with_notice(clean: CleanKey, notice: str) -> CleanKey:
    return CleanKey(key=clean.key, notices=(*clean.notices, notice))


def _decode(data: bytes) -> str:
    """Bytes of a key file or command output as text: UTF-16 when it starts with a UTF-16 BOM (Windows
    editors), else UTF-8 with undecodable bytes as U+FFFD (which ``clean_key`` then refuses by position)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")


def _read_file(source: KeySource, environ: Mapping[str, str]) -> CleanKey:
    assert source.file is not None
    described = source.describe()
    text = source.file
    home = environ.get("HOME") or os.path.expanduser("~")
    if text == "~" or text.startswith("~/"):
        path = Path(home) / text[2:]
    else:
        path = Path(text).expanduser()
        if not path.is_absolute():
            path = paths.config_dir() / path
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise KeyError_(f"{described} is a directory", hint="point `file` at the file holding the key")
        if st.st_size > KEY_FILE_MAX_BYTES:
            raise KeyError_(
                f"{described} is {st.st_size} bytes; a key file holds one key on one line",
                hint="check that `file` names the right file",
            )
        with path.open("rb") as fh:
            data = fh.read(KEY_FILE_MAX_BYTES + 1)
    except FileNotFoundError:
        raise KeyError_(
            f"{described} does not exist",
            hint='create it or run `conduit key set NAME` and use key = { secret = "NAME" } '
            "(a key file holds the key on one line, mode 0600)",
        ) from None
    except PermissionError:
        raise KeyError_(
            f"{described} cannot be read: permission denied",
            hint=f"make it readable by the user conduit runs as (chmod 600 {text})",
        ) from None
    except OSError as exc:
        raise KeyError_(f"{described} cannot be read: {exc.strerror or exc}", hint="check the path") from None
    clean = clean_key(_decode(data), source=described)
    if st.st_mode & 0o077:
        clean = _with_notice(
            clean,
            f"{described} can be read by other users (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"run `chmod 600 {text}`",
        )
    return clean


def _read_env(source: KeySource, environ: Mapping[str, str]) -> CleanKey:
    assert source.env is not None
    value = environ.get(source.env)
    if value is None or not value.strip():
        state = "is not set" if value is None else "is empty"
        raise KeyError_(
            f"{source.describe()} {state}",
            hint="set it in the environment conduit runs in: a systemd user service does not see variables "
            "exported in your shell (use a key file or `conduit key set NAME` instead)",
        )
    return clean_key(value, source=source.describe())


def _last_line(data: bytes, key_guess: str | None) -> str:
    lines = [ln.strip() for ln in _decode(data).splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[-1]
    if key_guess and len(key_guess) >= 4 and key_guess in line:
        line = line.replace(key_guess, fingerprint(key_guess))
    if len(line) > 200:
        line = line[:200] + "..."
    return line


def _read_command(source: KeySource, environ: Mapping[str, str], timeout_s: float) -> CleanKey:
    assert source.command is not None
    described = source.describe()
    try:
        proc = subprocess.Popen(
            source.command,
            shell=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(environ),
            start_new_session=True,  # a timeout kills the whole group, not only /bin/sh
        )
    except OSError as exc:
        raise KeyError_(f"{described} could not be started: {exc.strerror or exc}", hint="check the command") from None
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.communicate()
        raise KeyError_(
            f"{described} did not finish within {timeout_s:g} s",
            hint="run it by hand; a password manager may be waiting for an unlock or a prompt",
        ) from None
    if proc.returncode != 0:
        try:
            guess: str | None = clean_key(_decode(out[:KEY_FILE_MAX_BYTES]), source=described).key
        except KeyError_:
            guess = None
        if proc.returncode < 0:
            try:
                how = f"was killed by {signal.Signals(-proc.returncode).name}"
            except ValueError:
                how = f"was killed by signal {-proc.returncode}"
        else:
            how = f"exited with code {proc.returncode}"
        last = _last_line(err, guess)
        raise KeyError_(
            f"{described} {how}" + (f": {last}" if last else ""),
            hint="run the command by hand to see what it needs (an unlocked store, a login)",
        )
    if len(out) > KEY_FILE_MAX_BYTES:
        raise KeyError_(f"{described} printed {len(out)} bytes; a key is one line", hint="make it print only the key")
    try:
        return clean_key(_decode(out), source=described)
    except KeyError_ as exc:
        if "line break" in exc.message:
            exc.hint = "make the command print only the key (for a `pass` entry with more lines: `| head -n 1`)"
        raise


def read_key(source: KeySource, *, environ: Mapping[str, str] | None = None, timeout_s: float = 15) -> CleanKey:
    """Read and clean the key a ``KeySource`` names.

    Args:
        source: where the key lives.
        environ: the environment to use for ``env`` sources, for ``~`` in files (``HOME``) and for commands;
            default ``os.environ``.
        timeout_s: seconds a ``command`` may run before its process group is killed.

    Returns:
        ``CleanKey`` (notices include a warning when a key file can be read by other users).

    Raises:
        KeyError_: the file is missing/unreadable/a directory/over ``KEY_FILE_MAX_BYTES``; the variable is
            unset or empty; the command failed, was killed or timed out (exit code and the last line of its
            stderr; never its stdout); the secret is missing; or ``clean_key`` refused the key.
    """
    env = os.environ if environ is None else environ
    if source.file is not None:
        return _read_file(source, env)
    if source.env is not None:
        return _read_env(source, env)
    if source.command is not None:
        return _read_command(source, env, timeout_s)
    assert source.secret is not None
    store = SecretsStore()
    value = store.get(source.secret)
    if value is None:
        raise KeyError_(
            f"{source.describe()} does not exist",
            hint=f"run `conduit key set {source.secret}` (it reads the key from stdin or a hidden prompt)",
        )
    clean = clean_key(value, source=source.describe())
    for notice in store.notices:
        clean = _with_notice(clean, notice)
    return clean


# ------------------------------------------------------------------------------------------ secrets file


class SecretsStore:
    """conduit's own secrets file: TOML ``[secrets]`` with ``name = "key"`` lines.

    Args:
        path: the file; default ``conduit.daemon.config.paths.secrets_path()`` (``~/.config/conduit/secrets.toml``).

    The file is created 0600 (``os.open`` with mode 0600 and ``fchmod``, so the umask does not matter) and
    its directory 0700 when conduit creates it. A file found readable by group or others is tightened to
    0600, and a notice is kept in ``notices``. Writes keep the rest of the document (comments, order),
    go through a temp file in the same directory, fsync and ``os.replace``, under an exclusive ``flock`` on
    ``<file>.lock``.

    Raises (all methods): ``KeyError_`` when the file cannot be read, parsed (line and column only, never
    the text) or written, or a name is not ``[A-Za-z0-9_.-]+``.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else paths.secrets_path()
        self.notices: list[str] = []

    @property
    def shown(self) -> str:
        """The file's path for messages, with ``~`` for the home directory."""
        return display_path(self.path)

    def _load(self) -> tomlkit.TOMLDocument:
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return tomlkit.document()
        except OSError as exc:
            raise KeyError_(
                f"secrets file {self.shown} cannot be read: {exc.strerror or exc}",
                hint=f"check its owner and mode (it should be yours, mode 0600: chmod 600 {self.shown})",
            ) from None
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_mode & 0o077:
                os.fchmod(fh.fileno(), 0o600)
                notice = (
                    f"secrets file {self.shown} could be read by other users "
                    f"(mode {stat.S_IMODE(st.st_mode):04o}); it is now 0600"
                )
                if notice not in self.notices:
                    self.notices.append(notice)
                    log.warning("%s", notice)
            data = fh.read()
        try:
            return tomlkit.parse(_decode(data))
        except ParseError as exc:
            raise KeyError_(
                f"secrets file {self.shown} cannot be parsed (line {exc.line}, column {exc.col})",
                hint="fix it by hand, or move it away and set the keys again with `conduit key set NAME`",
            ) from None
        except TOMLKitError:
            raise KeyError_(
                f"secrets file {self.shown} cannot be parsed",
                hint="fix it by hand, or move it away and set the keys again with `conduit key set NAME`",
            ) from None

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

    def get(self, name: str) -> str | None:
        """The stored key for ``name`` (as stored, not re-cleaned), or None when absent."""
        _check_name(name)
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
        _check_name(name)
        if clean_key(key, source=f"the key for `{name}`").key != key:
            raise KeyError_(f"the key for `{name}` is not clean", hint="pass it through clean_key first")
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
        _check_name(name)
        with self._locked():
            doc = self._load()
            table = self._table(doc)
            if name not in table:
                return False
            del table[name]
            self._write(doc)
        return True

    def _ensure_dir(self) -> None:
        directory = self.path.parent
        if directory.is_dir():
            return
        try:
            directory.parent.mkdir(parents=True, exist_ok=True)
            directory.mkdir(mode=0o700)
            os.chmod(directory, 0o700)  # mkdir's mode is filtered by the umask
        except FileExistsError:
            pass
        except OSError as exc:
            raise KeyError_(
                f"cannot create {display_path(directory)}: {exc.strerror or exc}", hint="check the permissions"
            ) from None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self._ensure_dir()
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            raise KeyError_(
                f"cannot lock {display_path(lock_path)}: {exc.strerror or exc}", hint="check the permissions"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write(self, doc: tomlkit.TOMLDocument) -> None:
        try:
            atomic_write(self.path, tomlkit.dumps(doc).encode("utf-8"), 0o600)
        except OSError as exc:
            raise KeyError_(
                f"cannot write secrets file {self.shown}: {exc.strerror or exc}",
                hint="check the directory's permissions and free space; the old file is unchanged",
            ) from None


# ------------------------------------------------------------------------------------ `conduit key` work


def key_set(name: str, raw: str, *, store: SecretsStore | None = None) -> str:
    """Clean ``raw`` and store it as secret ``name``; returns one line for a person (fingerprint, no key).

    Raises:
        KeyError_: a bad name, or a key ``clean_key`` refuses; nothing is written then.
    """
    if looks_like_key(name):
        # Never echo it: it is probably a key typed where the name goes (and now in the shell history).
        raise KeyError_(
            "that looks like an API key, not a name: the key is read from stdin, never from the command line",
            hint="run `conduit key set NAME` and paste the key when asked; if that was a real key, it is in "
            "your shell history now: rotate it",
        )
    _check_name(name)
    store = store or SecretsStore()
    try:
        clean = clean_key(raw, source=f"the input for `{name}`")
    except KeyError_ as exc:
        if exc.message.endswith("is empty"):
            exc.hint = f"pipe the key in (`conduit key set {name} < KEYFILE`) or type it at the hidden prompt"
        raise
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

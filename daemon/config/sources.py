"""Key sources: where a channel's key lives, and reading it from there.

A channel names its source in the profile (DESIGN.md "Keys")::

    key = { file = "~/.config/conduit/keys/taotoken" }   # one line; a trailing newline is fine
    key = { env = "TAOTOKEN_API_KEY" }                   # the daemon's environment, not your shell's
    key = { command = "pass show taotoken" }             # stdout is the key; run through /bin/sh
    key = { secret = "taotoken" }                        # conduit's secrets file, via `conduit key set`

Every key read passes through ``conduit.daemon.config.normalize.clean_key`` (re-exported here: the one
cleaning step of every key source). Errors are ``KeyError_`` naming the source (``KeySource.describe()``) with
a hint; they never contain the key: a command's stdout is never shown, and a line of its stderr that holds
the key is masked (``conduit.redact.redact``).
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from conduit.daemon.config import paths
from conduit.daemon.config.normalize import CleanKey, clean_key, decode_key_bytes
from conduit.daemon.config.secrets import NAME_RE, SecretsStore
from conduit.errors import KeyError_, ProfileError
from conduit.redact import redact

__all__ = [
    "KEY_FILE_MAX_BYTES",
    "CleanKey",
    "KeySource",
    "clean_key",
    "key_file_path",
    "key_source_from",
    "read_key",
]

#: A key file or command output larger than this is not a key (the wrong file, a binary): refused, in bytes.
KEY_FILE_MAX_BYTES = 64 * 1024

_SOURCES = ("file", "env", "command", "secret")
_STDERR_LINE_MAX = 200  # characters of a failed command's last stderr line that an error quotes


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
        return f"secret `{self.secret}` in {paths.display_path(paths.secrets_path())}"


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


def key_file_path(source: KeySource, environ: Mapping[str, str] | None = None) -> Path | None:
    """The file a key source reads, or None for ``env`` and ``command`` sources.

    ``file``: ``~`` is ``$HOME`` of ``environ`` (default ``os.environ``), a relative path is relative to
    ``paths.config_dir()``. ``secret``: conduit's secrets file (``paths.secrets_path()``). The daemon watches
    these files; ``conduit key rotate`` writes the new key into them.
    """
    if source.file is not None:
        env = os.environ if environ is None else environ
        text = source.file
        if text == "~" or text.startswith("~/"):
            return Path(env.get("HOME") or os.path.expanduser("~")) / text[2:]
        p = Path(text).expanduser()
        return p if p.is_absolute() else paths.config_dir() / p
    if source.secret is not None:
        return paths.secrets_path()
    return None


# ----------------------------------------------------------------------------------------------- reading


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
    return _read_secret(source)


def _with_notices(clean: CleanKey, notices: list[str]) -> CleanKey:
    return CleanKey(key=clean.key, notices=(*clean.notices, *notices)) if notices else clean


def _file_bytes(path: Path, described: str, shown: str) -> tuple[bytes, os.stat_result]:
    """The bytes of a key file and its ``stat``, or a ``KeyError_`` that says what is wrong with it."""
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
            return fh.read(KEY_FILE_MAX_BYTES + 1), st
    except FileNotFoundError:
        raise KeyError_(
            f"{described} does not exist",
            hint='create it or run `conduit key set NAME` and use key = { secret = "NAME" } '
            "(a key file holds the key on one line, mode 0600)",
        ) from None
    except PermissionError:
        raise KeyError_(
            f"{described} cannot be read: permission denied",
            hint=f"make it readable by the user conduit runs as (chmod 600 {shown})",
        ) from None
    except OSError as exc:
        raise KeyError_(f"{described} cannot be read: {exc.strerror or exc}", hint="check the path") from None


def _read_file(source: KeySource, environ: Mapping[str, str]) -> CleanKey:
    assert source.file is not None
    described = source.describe()
    path = key_file_path(source, environ)
    assert path is not None
    data, st = _file_bytes(path, described, source.file)
    clean = clean_key(decode_key_bytes(data), source=described)
    if st.st_mode & 0o077:
        return _with_notices(clean, [f"{described} can be read by other users (mode "
                                     f"{stat.S_IMODE(st.st_mode):04o}); run `chmod 600 {source.file}`"])
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


def _read_secret(source: KeySource) -> CleanKey:
    assert source.secret is not None
    store = SecretsStore()
    value = store.get(source.secret)
    if value is None:
        raise KeyError_(
            f"{source.describe()} does not exist",
            hint=f"run `conduit key set {source.secret}` (it reads the key from stdin or a hidden prompt)",
        )
    return _with_notices(clean_key(value, source=source.describe()), store.notices)


# ----------------------------------------------------------------------------------------------- commands


def _run_command(command: str, described: str, environ: Mapping[str, str], timeout_s: float
                 ) -> tuple[int, bytes, bytes]:
    """Run ``command`` through /bin/sh in a session of its own; ``(returncode, stdout, stderr)``.

    A timeout kills the whole process group (not only /bin/sh) and raises ``KeyError_``.
    """
    try:
        proc = subprocess.Popen(command, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=dict(environ), start_new_session=True)
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
    return proc.returncode, out, err


def _last_line(data: bytes, key_guess: str | None) -> str:
    """The last non-blank line of a failed command's stderr, with the key it may hold masked, shortened."""
    lines = [ln.strip() for ln in decode_key_bytes(data).splitlines() if ln.strip()]
    if not lines:
        return ""
    line = redact(lines[-1], [key_guess])
    return line[:_STDERR_LINE_MAX] + "..." if len(line) > _STDERR_LINE_MAX else line


def _command_failed(described: str, returncode: int, out: bytes, err: bytes) -> KeyError_:
    """The error for a command that exited non-zero or was killed: how, and its stderr's last line."""
    try:  # what the key would have been, so that stderr echoing it (`set -x`, a debug line) is masked
        guess: str | None = clean_key(decode_key_bytes(out[:KEY_FILE_MAX_BYTES]), source=described).key
    except KeyError_:
        guess = None
    if returncode < 0:
        try:
            how = f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"was killed by signal {-returncode}"
    else:
        how = f"exited with code {returncode}"
    last = _last_line(err, guess)
    return KeyError_(
        f"{described} {how}" + (f": {last}" if last else ""),
        hint="run the command by hand to see what it needs (an unlocked store, a login)",
    )


def _read_command(source: KeySource, environ: Mapping[str, str], timeout_s: float) -> CleanKey:
    assert source.command is not None
    described = source.describe()
    returncode, out, err = _run_command(source.command, described, environ, timeout_s)
    if returncode != 0:
        raise _command_failed(described, returncode, out, err)
    if len(out) > KEY_FILE_MAX_BYTES:
        raise KeyError_(f"{described} printed {len(out)} bytes; a key is one line", hint="make it print only the key")
    try:
        return clean_key(decode_key_bytes(out), source=described)
    except KeyError_ as exc:
        if "line break" in exc.message:
            exc.hint = "make the command print only the key (for a `pass` entry with more lines: `| head -n 1`)"
        raise

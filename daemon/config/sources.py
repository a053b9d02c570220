"""Key sources: where a channel's key lives, and reading it from there.

A channel names its source in the profile (docs/design.md "Keys")::

    key = { file = "~/.config/conduit/keys/taotoken" }   # one line; a trailing newline is fine
    key = { env = "TAOTOKEN_API_KEY" }                   # the daemon's environment, not your shell's
    key = { command = "pass show taotoken" }             # stdout is the key; run through /bin/sh
    key = { secret = "taotoken" }                        # conduit's secrets file, via `conduit key set`
    key = { keyring = "taotoken" }                       # the OS keychain, via `conduit key set --keyring`

Every key read passes through ``conduit.daemon.config.normalize.clean_key`` (re-exported here: the one
cleaning step of every key source), and every key read is registered with the process-wide ``REDACTOR``
(``conduit.daemon.config.redaction``) that masks the CLI's errors, ``--json`` and the state file.

Files (a key file, the secrets file) are read with ``conduit.fileio.read_regular_file``: a regular file only,
never blocking (a FIFO cannot hang a sync), at most ``KEY_MAX_BYTES``. Commands run under
``conduit.daemon.config.keycommand.run_key_command``: a timeout, an output cap, the whole process group killed.
Keychain entries are read by ``conduit.daemon.config.keychain``: a child process with a deadline.
Errors are ``KeyError_`` naming the source (``KeySource.describe()``) with a hint; they never contain the key:
nothing a command prints (stdout or stderr) is ever shown, only its exit status.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from conduit.daemon.config import paths
from conduit.daemon.config.keychain import keyring_get
from conduit.daemon.config.keycommand import run_key_command
from conduit.daemon.config.normalize import CleanKey, clean_key, decode_key_bytes
from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.config.secrets import NAME_RE, SecretsStore
from conduit.errors import KeyError_, ProfileError
from conduit.fileio import KEY_MAX_BYTES, read_regular_file

__all__ = [
    "KEY_FILE_MAX_BYTES",
    "REDACTOR",
    "CleanKey",
    "KeySource",
    "clean_key",
    "key_file_path",
    "key_source_from",
    "read_key",
]

#: A key file or command output larger than this is not a key (the wrong file, a binary): refused, in bytes.
KEY_FILE_MAX_BYTES = KEY_MAX_BYTES

_SOURCES = ("file", "env", "command", "secret", "keyring")


class KeySource(BaseModel):
    """Where one channel's key comes from: exactly one of ``file``, ``env``, ``command``, ``secret``,
    ``keyring``.

    Attributes:
        file: path of a file holding the key (``~`` is the user's home; a relative path is relative to
            conduit's config directory, ``~/.config/conduit``).
        env: name of an environment variable of the process that reads the key (the daemon).
        command: a shell command whose standard output is the key (``pass show x``, ``op read op://...``).
        secret: a name in conduit's secrets file (``conduit key set NAME``).
        keyring: a name in the OS keychain, service ``conduit`` (``conduit key set NAME --keyring``).

    Raises (on validation): pydantic ``ValidationError``; use ``key_source_from`` to get a ``ProfileError``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str | None = None
    env: str | None = None
    command: str | None = None
    secret: str | None = None
    keyring: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> KeySource:
        given = [name for name in _SOURCES if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("a key source needs exactly one of file, env, command, secret, keyring")
        value = getattr(self, given[0])
        if not value.strip():
            raise ValueError(f"the key source's `{given[0]}` is empty")
        for name in (self.secret, self.keyring):
            if name is not None and not NAME_RE.fullmatch(name):
                raise ValueError("a secret name may hold only letters, digits, `_`, `.` and `-`")
        if self.env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.env):
            raise ValueError("an environment variable name holds only letters, digits and `_`")
        return self

    @property
    def kind(self) -> str:
        """Which source this is: ``file``, ``env``, ``command``, ``secret`` or ``keyring``."""
        return next(name for name in _SOURCES if getattr(self, name) is not None)

    def describe(self) -> str:
        """The source in words, for messages: ``key file ~/.config/conduit/keys/x``, ``environment variable
        X``, ``command `pass show x```, ``secret `x` in ~/.config/conduit/secrets.toml``, ``keyring entry
        `x```."""
        if self.file is not None:
            return f"key file {self.file}"
        if self.env is not None:
            return f"environment variable {self.env}"
        if self.command is not None:
            return f"command `{self.command}`"
        if self.keyring is not None:
            return f"keyring entry `{self.keyring}`"
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
    hint = 'write key = { file = "~/.config/conduit/keys/NAME" } (or env, command, secret, keyring)'
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
            if err["type"] == "extra_forbidden":
                close = difflib.get_close_matches(loc, _SOURCES, n=1, cutoff=0.6)
                if close:  # the name is the person's typo, never the value (which may be a key)
                    hint = f'did you mean `{close[0]}`? write key = {{ {close[0]} = "..." }}'
                problems.append(f"unknown key source `{loc}` (the sources are {', '.join(_SOURCES)})")
                continue
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{loc}: {msg}" if loc else msg)
        raise ProfileError(f"{where}: " + "; ".join(problems), hint=hint) from None


def key_file_path(source: KeySource, environ: Mapping[str, str] | None = None) -> Path | None:
    """The file a key source reads, or None for ``env``, ``command`` and ``keyring`` sources.

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
    """Read and clean the key a ``KeySource`` names, and register it with ``REDACTOR``.

    Args:
        source: where the key lives.
        environ: the environment to use for ``env`` sources, for ``~`` in files (``HOME``) and for commands;
            default ``os.environ``.
        timeout_s: seconds a ``command`` may run before its process group is killed.

    Returns:
        ``CleanKey`` (notices include a warning when a key file can be read by other users).

    Raises:
        KeyError_: the file is missing, unreadable, not a regular file (a FIFO, a device, a directory) or over
            ``KEY_MAX_BYTES``; the variable is unset or empty; the command failed, was killed, timed out or
            printed more than ``KEY_MAX_BYTES`` (its exit status only: never what it printed); the secret is
            missing; the keychain has no such entry, no usable backend, a locked collection or did not answer
            within its bound (``conduit.daemon.config.keychain``); or ``clean_key`` refused the key.
    """
    env = os.environ if environ is None else environ
    if source.file is not None:
        clean = _read_file(source, env)
    elif source.env is not None:
        clean = _read_env(source, env)
    elif source.command is not None:
        clean = _read_command(source, env, timeout_s)
    elif source.keyring is not None:
        clean = _read_keyring(source, env)
    else:
        clean = _read_secret(source)
    REDACTOR.add([clean.key])
    return clean


def _with_notices(clean: CleanKey, notices: list[str]) -> CleanKey:
    return CleanKey(key=clean.key, notices=(*clean.notices, *notices)) if notices else clean


def _file_bytes(path: Path, described: str, shown: str) -> tuple[bytes, int]:
    """The bytes of a key file and its permission bits, or a ``KeyError_`` that says what is wrong with it."""
    try:
        data = read_regular_file(path, max_bytes=KEY_MAX_BYTES, what="key file", error=KeyError_)
        return data, stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        raise KeyError_(
            f"{described} does not exist",
            hint='create it or run `conduit key set NAME` and use key = { secret = "NAME" } '
            "(a key file holds the key on one line, mode 0600)",
        ) from None
    except KeyError_ as exc:
        if "Permission denied" in exc.message:
            exc.hint = f"make it readable by the user conduit runs as (chmod 600 {shown})"
        raise
    except OSError as exc:
        raise KeyError_(f"{described} cannot be read: {exc.strerror or exc}", hint="check the path") from None


def _read_file(source: KeySource, environ: Mapping[str, str]) -> CleanKey:
    assert source.file is not None
    described = source.describe()
    path = key_file_path(source, environ)
    assert path is not None
    data, mode = _file_bytes(path, described, source.file)
    clean = clean_key(decode_key_bytes(data), source=described)
    if mode & 0o077:
        return _with_notices(clean, [f"{described} can be read by other users (mode "
                                     f"{mode:04o}); run `chmod 600 {source.file}`"])
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


def _read_keyring(source: KeySource, environ: Mapping[str, str]) -> CleanKey:
    assert source.keyring is not None
    value = keyring_get(source.keyring, environ=environ)
    if value is None:
        raise KeyError_(
            f"{source.describe()} does not exist in the keychain (service `conduit`)",
            hint=f"run `conduit key set {source.keyring} --keyring` (it reads the key from stdin or a hidden prompt)",
        )
    return clean_key(value, source=source.describe())


def _read_command(source: KeySource, environ: Mapping[str, str], timeout_s: float) -> CleanKey:
    assert source.command is not None
    described = source.describe()
    out = run_key_command(source.command, described=described, environ=environ, timeout_s=timeout_s)
    try:
        return clean_key(decode_key_bytes(out), source=described)
    except KeyError_ as exc:
        if "line break" in exc.message:
            exc.hint = "make the command print only the key (for a `pass` entry with more lines: `| head -n 1`)"
        raise

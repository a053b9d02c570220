"""The OS keychain as a key source (``key = { keyring = "NAME" }``), every call bounded in time.

Keys are kept through the ``keyring`` library (https://github.com/jaraco/keyring: the Secret Service on Linux,
the macOS Keychain, the Windows Credential Manager) under the service name ``SERVICE`` (``conduit``) and the
user name ``NAME``. A keyring call can block without end: a locked collection waits for an unlock prompt that
never shows on a headless box, a Secret Service that stopped answering holds the D-Bus call. So each call runs
in a child Python process (``sys.executable -I``) that conduit kills, with its whole process group, after
``timeout_s()`` seconds (``CONDUIT_KEYRING_TIMEOUT_S``, default ``DEFAULT_TIMEOUT_S``).

The key never appears in the child's argv or environment: it goes in on stdin (``set``) and comes back on
stdout (``get``). The child's stderr holds only a word for what failed (``KIND: exception class``), never a
message of the backend (a backend may quote what it was given).

Errors are ``KeyError_`` naming what is missing (no D-Bus session bus, no Secret Service, a locked collection,
no answer in time) and the fallback: conduit's own secrets file (``conduit key set NAME`` and
``key = { secret = "NAME" }``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping

from conduit.daemon.config.secrets import clean_named_key
from conduit.errors import KeyError_
from conduit.fileio import KEY_MAX_BYTES

__all__ = ["DEFAULT_TIMEOUT_S", "SERVICE", "keychain_key_rm", "keychain_key_set", "keyring_delete", "keyring_get",
           "keyring_set", "timeout_s"]

SERVICE = "conduit"
"""The service name every conduit key is stored under in the keychain (the user name is the key's NAME)."""

DEFAULT_TIMEOUT_S = 10.0
"""Seconds one keyring call may take before it is abandoned (its child process group killed)."""

_FALLBACK = ('or keep the key in conduit\'s secrets file instead: `conduit key set NAME` and '
             'key = { secret = "NAME" } in the profile')

# The child: argv is [op, name]; exit 0 done, 3 no such entry, 4 no backend, 5 no keyring library, 6 locked or
# no collection (KeyringLocked, InitError: keyring/backends/SecretService.py get_preferred_collection),
# 7 any other failure. stderr: at most the exception's class name (never its message: it may quote input).
_CHILD = r"""
import sys
op, name = sys.argv[1], sys.argv[2]
try:
    import keyring
    from keyring import errors
except Exception as exc:
    sys.stderr.write(type(exc).__name__); sys.exit(5)
try:
    kr = keyring.get_keyring()
    if op == "get":
        value = kr.get_password("conduit", name)
        if value is None:
            sys.exit(3)
        sys.stdout.write(value)
    elif op == "set":
        kr.set_password("conduit", name, sys.stdin.read())
    elif op == "delete":
        try:
            kr.delete_password("conduit", name)
        except errors.PasswordDeleteError:
            sys.exit(3)
except (errors.KeyringLocked, errors.InitError):
    sys.exit(6)
except errors.NoKeyringError:
    sys.stderr.write(type(kr).__module__); sys.exit(4)
except Exception as exc:
    sys.stderr.write(type(exc).__module__ + "." + type(exc).__name__); sys.exit(7)
"""


def timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """The bound of one keyring call, seconds: ``CONDUIT_KEYRING_TIMEOUT_S`` when it is a number > 0, else
    ``DEFAULT_TIMEOUT_S``."""
    raw = (os.environ if environ is None else environ).get("CONDUIT_KEYRING_TIMEOUT_S", "")
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if 0 < value < 3600 else DEFAULT_TIMEOUT_S


def _missing(environ: Mapping[str, str]) -> str:
    """What is missing when no backend answers, in words (Linux: the bus or the Secret Service)."""
    if sys.platform.startswith("linux"):
        if not environ.get("DBUS_SESSION_BUS_ADDRESS") and not os.path.exists(
                os.path.join(environ.get("XDG_RUNTIME_DIR", f"/run/user/{os.getuid()}"), "bus")):
            return "no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set and there is no $XDG_RUNTIME_DIR/bus)"
        return "no Secret Service answers on the D-Bus session bus (gnome-keyring-daemon, KeePassXC, KWallet)"
    return "no keyring backend is usable"


def _run(op: str, name: str, *, stdin: bytes = b"", environ: Mapping[str, str] | None = None,
         limit_s: float | None = None) -> tuple[int, bytes, str]:
    """Run the child for ``op`` on ``name``; returns (exit status, stdout, stderr word). Raises ``KeyError_``
    when it cannot start or runs past the bound (its process group is killed then)."""
    env = dict(os.environ if environ is None else environ)
    limit = timeout_s(env) if limit_s is None else limit_s
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-c", _CHILD, op, name], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    except OSError as exc:
        raise KeyError_(f"the keyring could not be asked: {exc.strerror or exc}", hint=_FALLBACK) from None
    try:
        out, err = proc.communicate(stdin, timeout=limit)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise KeyError_(f"the keyring did not answer within {limit:g} s (keyring entry `{name}`): a locked "
                        "collection waiting for an unlock prompt, or a Secret Service that stopped answering; "
                        "conduit stopped there and wrote no file",
                        hint="unlock the keyring (log in to the desktop session, or `gnome-keyring-daemon "
                        "--unlock`), raise CONDUIT_KEYRING_TIMEOUT_S, " + _FALLBACK) from None
    except BaseException:
        _kill(proc)
        raise
    return proc.returncode, out[:KEY_MAX_BYTES + 1], err[:200].decode("ascii", "replace").strip()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (a backend's helper included) and reap the child; called before the
    child was reaped, so its group id cannot belong to another process yet."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=5)


def _failed(rc: int, word: str, name: str, environ: Mapping[str, str] | None) -> KeyError_:
    """The ``KeyError_`` for a child that exited ``rc`` (4, 5, 6, 7, or a signal)."""
    env = os.environ if environ is None else environ
    entry = f"keyring entry `{name}` (service `{SERVICE}`)"
    if rc == 4:
        return KeyError_(f"{entry}: {_missing(env)}",
                         hint="start a Secret Service in this session (or give the daemon "
                         "DBUS_SESSION_BUS_ADDRESS), " + _FALLBACK)
    if rc == 5:
        return KeyError_(f"{entry}: the Python `keyring` library is not installed ({word})",
                         hint="reinstall conduit (`pip install conduit` pulls it in), " + _FALLBACK)
    if rc == 6:
        return KeyError_(f"{entry}: the keyring's collection is locked (or there is none), and no unlock prompt "
                         "could be shown",
                         hint="unlock it (log in to the desktop session, or `gnome-keyring-daemon --unlock`), "
                         + _FALLBACK)
    how = f"failed ({word})" if rc == 7 and word else f"ended with status {rc}"
    return KeyError_(f"{entry}: the keyring {how}", hint="check the keyring service, " + _FALLBACK)


def keyring_get(name: str, *, environ: Mapping[str, str] | None = None,
                limit_s: float | None = None) -> str | None:
    """The key stored as ``name`` in the keychain (raw, to be cleaned by the caller), or None when there is
    no such entry.

    Args:
        name: the entry's user name (service ``SERVICE``); environ: the child's environment (default
            ``os.environ``: it carries ``DBUS_SESSION_BUS_ADDRESS``); limit_s: the bound (default ``timeout_s()``).

    Raises:
        KeyError_: no backend, a locked collection, no answer within the bound, a value over ``KEY_MAX_BYTES``.
    """
    rc, out, word = _run("get", name, environ=environ, limit_s=limit_s)
    if rc == 3:
        return None
    if rc != 0:
        raise _failed(rc, word, name, environ)
    if len(out) > KEY_MAX_BYTES:
        raise KeyError_(f"keyring entry `{name}` holds more than {KEY_MAX_BYTES} bytes; a key is one line",
                        hint=f"store it again: `conduit key set {name} --keyring`")
    return out.decode("utf-8", "replace")


def keyring_set(name: str, key: str, *, environ: Mapping[str, str] | None = None,
                limit_s: float | None = None) -> None:
    """Store ``key`` as ``name`` in the keychain (replacing an entry of that name).

    Raises:
        KeyError_: as ``keyring_get``; the entry is unchanged then, except after a timeout: the backend may
            have stored the key before it stopped answering (conduit writes no file of its own either way).
    """
    rc, _, word = _run("set", name, stdin=key.encode("utf-8"), environ=environ, limit_s=limit_s)
    if rc != 0:
        raise _failed(rc, word, name, environ)


def keyring_delete(name: str, *, environ: Mapping[str, str] | None = None,
                   limit_s: float | None = None) -> bool:
    """Remove entry ``name`` from the keychain; False when there was none.

    Raises:
        KeyError_: as ``keyring_get``.
    """
    rc, _, word = _run("delete", name, environ=environ, limit_s=limit_s)
    if rc == 3:
        return False
    if rc != 0:
        raise _failed(rc, word, name, environ)
    return True


def keychain_key_set(name: str, raw: str) -> str:
    """``conduit key set NAME --keyring``: clean ``raw`` and store it as entry ``name``; returns one line for a
    person (the fingerprint, never the key).

    Raises:
        KeyError_: a name that looks like a key or holds other characters than ``NAME_RE``, a key ``clean_key``
            refuses (nothing is stored then), or the keyring's errors (see ``keyring_get``).
    """
    clean = clean_named_key(name, raw, flags=" --keyring")
    replaced = keyring_get(name) is not None
    keyring_set(name, clean.key)
    verb = "replaced" if replaced else "stored"
    line = f"{verb} key `{name}` ({clean.fingerprint}) in the keychain (service `{SERVICE}`)"
    return line + ("; " + "; ".join(clean.notices) if clean.notices else "")


def keychain_key_rm(name: str) -> str:
    """``conduit key rm NAME --keyring``: remove entry ``name``; returns one line for a person.

    Raises:
        KeyError_: no such entry (nothing changed), or the keyring's errors (see ``keyring_get``).
    """
    if not keyring_delete(name):
        raise KeyError_(f"there is no key `{name}` in the keychain (service `{SERVICE}`)",
                        hint="the name is the one given to `conduit key set NAME --keyring`")
    return f"removed key `{name}` from the keychain (service `{SERVICE}`)"

"""``conduit key rotate CHANNEL``: check a new key, store it where the channel's key source lives, propagate it.

Steps (the second everyday use of docs/design.md: rotate a key in one place):

1. The new key comes from stdin (never argv) and is cleaned (``clean_key``).
2. It is checked with ``GET <root>/v1/models`` (the channel's OpenAI root with its version segment, or the
   Anthropic root + ``/v1/models`` for an Anthropic-only channel), sent the way the channel authenticates
   (``Authorization: Bearer`` or ``x-api-key``). 401/403 refuses; a network error refuses; ``--force`` stores
   anyway. Other answers (404: the gateway has no models list) are reported and do not refuse.
3. It is stored where the channel's key source lives: ``secret`` -> conduit's secrets file; ``file`` -> that
   file, rewritten atomically with mode 0600; ``keyring`` -> the OS keychain entry (``conduit.daemon.config.
   keychain``, bounded in time). ``env`` and ``command`` sources are refused with a hint: conduit
   cannot change a variable in another process or a password manager's entry.
4. A running ``conduit daemon`` (``conduit.daemon.sync.lock``) sees the key file change (a keychain entry has
   no file: the daemon is sent SIGHUP, which re-reads the keys) and syncs every tool;
   rotation waits for the state file to show the new key's fingerprint. Without a daemon, a direct sync runs.
5. The old key is never written again: the propagating sync's backups are redacted as they are written, and
   every older backup that holds it is redacted in place (``conduit.daemon.sync.scrub``). Neither key is ever
   printed: only the new key's fingerprint.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from conduit.daemon.config.gateway import GatewayTimeout, auth_headers, read_bounded
from conduit.daemon.config.keychain import keyring_set
from conduit.daemon.config.normalize import clean_key
from conduit.daemon.config.profile import LoadedProfile, load_profile
from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.config.resolve import require_channel
from conduit.daemon.config.secrets import SecretsStore
from conduit.daemon.config.sources import KeySource, key_file_path, read_key
from conduit.daemon.sync.engine import SyncReport, sync
from conduit.daemon.sync.lock import running_daemon_pid
from conduit.daemon.sync.scrub import RedactingBackupStore, scrub_backups
from conduit.daemon.sync.state import SyncState, read_state, state_path
from conduit.errors import ConduitError, KeyError_
from conduit.fileio import atomic_write
from conduit.redact import fingerprint

CHECK_TIMEOUT_S = 10.0
"""How long (seconds) the gateway may take to answer the key check, the whole exchange (a drip included)."""
CHECK_MAX_BYTES = 64 << 10
"""At most this much of the key check's answer is read, after decoding (bytes; only its status matters)."""


# ------------------------------------------------------------------------------------------- the check


@dataclass(frozen=True)
class KeyCheck:
    """The answer of ``GET .../models`` with a key.

    Attributes:
        ok: the gateway accepted the key (2xx).
        refused: the gateway rejected it (401/403) or could not be reached: rotation stops unless forced.
        status: the HTTP status, or None for a network error.
        message: one sentence for a person (never the key).
        url: the URL asked.
    """

    ok: bool
    refused: bool
    status: int | None
    message: str
    url: str


def models_request(profile: LoadedProfile, channel: str, key: str) -> tuple[str, dict[str, str]]:
    """The URL and headers of the key check for ``channel``: the OpenAI root's ``/<version>/models`` when the
    channel speaks OpenAI, else the Anthropic root + ``/v1/models`` (Anthropic's models list); the key goes in
    ``Authorization: Bearer`` or, for ``auth = "x-api-key"``, ``x-api-key``; the Anthropic models list also gets
    ``anthropic-version``."""
    ch = profile.model.channels[channel]
    roots = profile.roots[channel]
    if "openai" in roots:
        return roots["openai"].openai_base() + "/models", auth_headers("openai", key, ch.auth)
    return roots["anthropic"].anthropic_base() + "/v1/models", auth_headers("anthropic", key, ch.auth)


def check_key(profile: LoadedProfile, channel: str, key: str, *, timeout_s: float = CHECK_TIMEOUT_S,
              transport: httpx.AsyncBaseTransport | None = None) -> KeyCheck:
    """Ask the gateway whether it accepts ``key`` (see ``models_request``): the status decides, within
    ``timeout_s`` seconds for the whole exchange, the body read to its end or ``CHECK_MAX_BYTES``
    (``conduit.daemon.config.gateway.read_bounded``: an answer that drips is a timeout, a huge one or a gzip
    bomb costs at most the cap). Never raises for HTTP trouble."""
    url, headers = models_request(profile, channel, key)
    try:
        got = read_bounded("GET", url, headers=headers, max_bytes=CHECK_MAX_BYTES, deadline_s=timeout_s,
                           transport=transport)
    except (httpx.HTTPError, OSError) as exc:
        return KeyCheck(False, True, None, f"could not reach {url} to check the key ({_unreached(exc)})", url)
    status = got.status
    if 200 <= status < 300:
        return KeyCheck(True, False, status, f"the gateway accepted the key (GET {url}: "
                        f"{status})", url)
    if status in (401, 403):
        return KeyCheck(False, True, status, f"the gateway rejected the key (GET {url}: "
                        f"{status})", url)
    return KeyCheck(False, False, status, f"could not confirm the key: GET {url} answered "
                    f"{status}; storing it anyway", url)


# -------------------------------------------------------------------------------------------- storing


def _write_key_file(path: Path, key: str) -> None:
    try:
        Path(os.path.realpath(path)).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(path, (key + "\n").encode("utf-8"), 0o600)
    except OSError as exc:
        raise KeyError_(f"cannot write the key file {path}: {exc.strerror or exc}",
                        "check the directory's permissions; the old key file is unchanged") from None


def store_key(profile: LoadedProfile, channel: str, key: str) -> str:
    """Store ``key`` where ``channel``'s key source lives; returns where, in words.

    Raises:
        KeyError_: the source is ``env`` or ``command`` (conduit cannot change those), or the write failed.
        ConduitError: the channel has no key source.
    """
    src = profile.model.channels[channel].key
    if src is None:
        raise ConduitError(f"channels.{channel} has no key source ({profile.path})",
                           f'add key = {{ secret = "{channel}" }} to [channels.{channel}], then run '
                           f"`conduit key rotate {channel}` again")
    if src.env is not None:
        raise KeyError_(f"channels.{channel} reads its key from the environment variable {src.env}; conduit "
                        "cannot change another process's environment. Nothing was stored",
                        f"store keys conduit can rotate: `conduit key set {channel}` (stdin) and "
                        f'key = {{ secret = "{channel}" }} in the profile; or change {src.env} where it is set '
                        "and restart the daemon")
    if src.command is not None:
        raise KeyError_(f"channels.{channel} reads its key from the command `{src.command}`; conduit cannot "
                        "change what it prints. Nothing was stored",
                        "update the entry in your password manager, then run `conduit sync` (or send the "
                        "daemon SIGHUP: `systemctl --user reload conduit-sync`)")
    if src.keyring is not None:
        keyring_set(src.keyring, key)
        return f"keyring entry `{src.keyring}`"
    if src.secret is not None:
        store = SecretsStore()
        store.set(src.secret, key)
        return f"secret `{src.secret}` in {store.shown}"
    path = key_file_path(src)
    assert path is not None
    _write_key_file(path, key)
    return f"key file {src.file}"


# ------------------------------------------------------------------------------------------- rotation


@dataclass
class RotateResult:
    """What ``rotate_key`` did.

    Attributes:
        channel: the channel rotated.
        fingerprint: the new key's fingerprint (the old key is never shown).
        stored: where the key was stored, in words; None when nothing was stored (unchanged key).
        check: the gateway check.
        daemon_pid: the daemon that propagates it, or None when a direct sync ran.
        propagated: the daemon synced with the new key within the wait (or the direct sync ran).
        report: the direct sync's report (None when the daemon propagates).
        scrubbed: backup files from which the old key was removed.
        lines: what to tell the person, in order.
    """

    channel: str
    fingerprint: str
    stored: str | None = None
    check: KeyCheck | None = None
    daemon_pid: int | None = None
    propagated: bool = False
    report: SyncReport | None = None
    scrubbed: int = 0
    lines: list[str] = field(default_factory=list)


def rotate_key(channel: str, raw_key: str, *, profile_path: str | Path | None = None, force: bool = False,
               wait_s: float = 15.0, transport: httpx.AsyncBaseTransport | None = None) -> RotateResult:
    """Rotate ``channel``'s key to ``raw_key`` (see the module docstring).

    Args:
        channel: a channel of the profile.
        raw_key: the new key as given on stdin (cleaned here).
        profile_path: the profile (None: ``CONDUIT_PROFILE`` or the default).
        force: store even when the gateway rejects the key or cannot be reached.
        wait_s: how long to wait (seconds) for a running daemon to sync with the new key.
        transport: httpx transport for the check (tests may pass one; default: the network).
    Raises:
        ProfileError: invalid profile. ConduitError: unknown channel, no key source, a refused key without
        ``force``. KeyError_: an ``env``/``command`` source, a key ``clean_key`` refuses, a failed write.
    """
    profile = load_profile(profile_path)
    src = _rotatable_source(profile, channel)
    new = clean_key(raw_key, source=f"the new key for channel `{channel}`").key
    REDACTOR.add([new])
    result = RotateResult(channel=channel, fingerprint=fingerprint(new))
    old: str | None = None
    if src is not None:
        old = _old_key(src)
    if old == new:
        result.lines.append(f"channels.{channel}: this key ({result.fingerprint}) is already in use; nothing changed")
        return result
    result.check = _check_or_refuse(profile, channel, new, force=force, transport=transport)
    result.lines.append(result.check.message + (" (--force: storing anyway)" if result.check.refused else ""))
    since = time.time()
    result.stored = store_key(profile, channel, new)
    result.lines.append(f"stored the new key ({result.fingerprint}) in {result.stored}")
    olds = [old] if old else []
    pid = running_daemon_pid()
    if pid is not None:
        if src is not None and src.keyring is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGHUP)  # no file changed for it to notice: re-read the keys now
        _await_daemon(result, pid, since, wait_s)
    else:
        _sync_directly(result, profile_path, olds)
    result.scrubbed = scrub_backups(olds)
    if result.scrubbed:
        result.lines.append(f"removed the old key from {result.scrubbed} backup file(s)")
    return result


def _rotatable_source(profile: LoadedProfile, channel: str) -> KeySource | None:
    """The channel's key source; refuses an unknown channel, and an ``env``/``command`` source before anything
    else happens (``store_key`` raises the refusal with its hint)."""
    require_channel(profile, channel)  # exit code 3, like every command given an unknown channel
    src = profile.model.channels[channel].key
    if src is not None and (src.env is not None or src.command is not None):
        store_key(profile, channel, "")
    return src


def _old_key(src: KeySource) -> str | None:
    """The key the source holds now (to scrub it from backups afterwards), None when it holds none or cannot be
    read; a keychain that does not answer or has no backend is raised (``KeyError_``): storing would fail too."""
    try:
        return read_key(src).key
    except KeyError_ as exc:
        if src.keyring is not None and "does not exist" not in exc.message:
            raise
        return None


def _check_or_refuse(profile: LoadedProfile, channel: str, key: str, *, force: bool,
                     transport: httpx.AsyncBaseTransport | None) -> KeyCheck:
    """``check_key``, raising ``ConduitError`` (nothing stored) when the gateway refused it and not ``force``."""
    check = check_key(profile, channel, key, transport=transport)
    if check.refused and not force:
        first = ("check the channel's base_url and your network" if check.status is None
                 else "check the key (and the channel's base_url)")
        raise ConduitError(f"{check.message}; nothing was stored", f"{first}, or pass --force to store it anyway")
    return check


def _wait_for_daemon(channel: str, fp: str, since: float, wait_s: float) -> SyncState | None:
    """The state file once the daemon wrote it (after ``since``, a ``time.time()``) with ``channel``'s key
    fingerprint ``fp`` and a sync; None when ``wait_s`` seconds pass first."""
    deadline = time.monotonic() + wait_s
    path = state_path()
    while time.monotonic() < deadline:
        try:
            fresh = path.stat().st_mtime >= since
        except OSError:
            fresh = False
        if fresh:
            doc = read_state(path)
            ch = doc.channels.get(channel)
            if ch is not None and ch.key_fingerprint == fp and doc.last_sync is not None:
                return doc
        time.sleep(0.05)
    return None


def _await_daemon(result: RotateResult, pid: int, since: float, wait_s: float) -> None:
    """A running daemon propagates the key: wait for it, and say what it did."""
    result.daemon_pid = pid
    doc = _wait_for_daemon(result.channel, result.fingerprint, since, wait_s)
    result.propagated = doc is not None
    if doc is not None:
        tools = ", ".join(f"{k} {v.status}" for k, v in sorted(doc.tools.items()))
        result.lines.append(f"the running daemon (pid {pid}) propagated it: {tools}")
    else:
        result.lines.append(f"the running daemon (pid {pid}) has not synced yet after {wait_s:g} s; check "
                            "`conduit doctor`")


def _sync_directly(result: RotateResult, profile_path: str | Path | None, olds: list[str]) -> None:
    """No daemon: sync every tool now, with backups that never hold the old key."""
    result.report = sync(load_profile(profile_path), backups=RedactingBackupStore(olds))
    result.propagated = True
    for t in result.report.tools:
        result.lines.append(f"{t.display}: {t.status.replace('_', ' ')}"
                            + (f" ({t.message.splitlines()[0]})" if t.message else ""))


def _unreached(exc: httpx.HTTPError | OSError) -> str:
    """Why the gateway could not be reached, in words (httpx's class names mean nothing to a user)."""
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(chain) < 10:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    text = " ".join(f"{e!r} {e}" for e in chain)
    if isinstance(exc, GatewayTimeout):
        return f"no whole answer within {exc.deadline_s:g} s"
    if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
        return "no answer in time"
    if "Name or service not known" in text or "nodename nor servname" in text or "Errno -2" in text \
            or "Errno -3" in text:
        return "the host name does not resolve"
    if "Connection refused" in text or "Errno 111" in text or "ConnectionRefusedError" in text:
        return "nothing listens on that port"
    if "CERTIFICATE" in text.upper() or "SSL" in text.upper():
        return "the TLS handshake failed (a certificate problem?)"
    return "the connection failed"


"""``conduit key rotate CHANNEL``: check a new key, store it where the channel's key source lives, propagate it.

Steps (issue 3, "Key rotation"):

1. The new key comes from stdin (never argv) and is cleaned (``clean_key``).
2. It is checked with ``GET <root>/v1/models`` (the channel's OpenAI root with its version segment, or the
   Anthropic root + ``/v1/models`` for an Anthropic-only channel), sent the way the channel authenticates
   (``Authorization: Bearer`` or ``x-api-key``). 401/403 refuses; a network error refuses; ``--force`` stores
   anyway. Other answers (404: the gateway has no models list) are reported and do not refuse.
3. It is stored where the channel's key source lives: ``secret`` -> conduit's secrets file; ``file`` -> that
   file, rewritten atomically with mode 0600. ``env`` and ``command`` sources are refused with a hint: conduit
   cannot change a variable in another process or a password manager's entry.
4. A running ``conduit daemon`` sees the key file change and syncs every tool; without one, a direct sync runs.
5. The old key is never written again: the backups the propagating sync takes are redacted as they are written
   (``RedactingBackupStore``), and every older backup that holds the old key is redacted in place
   (``scrub_backups``: text backups get ``REDACTED_MARK`` instead of the key; SQLite backups are updated row
   by row with ``secure_delete`` on and vacuumed, so no freed page keeps it). Restoring such a backup brings
   back the file as it was except for the key. Neither key is ever printed: only the new key's fingerprint.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from conduit.adapters.writer import Backup, BackupStore
from conduit.daemon.config import paths
from conduit.daemon.config.keys import SecretsStore, read_key
from conduit.daemon.config.normalize import clean_key
from conduit.daemon.config.profile import LoadedProfile, load_profile
from conduit.daemon.sync.engine import SyncReport, sync
from conduit.daemon.sync.state import read_state
from conduit.errors import ConduitError, KeyError_
from conduit.fileio import atomic_write
from conduit.redact import fingerprint

REDACTED_MARK = "conduit-redacted-old-key"
"""What replaces an old key in conduit's backups after a rotation."""

CHECK_TIMEOUT_S = 10.0


# ------------------------------------------------------------------------------------------- redaction


def _redact_text(data: bytes, secrets: list[bytes]) -> bytes:
    for s in secrets:
        data = data.replace(s, REDACTED_MARK.encode())
    return data


def redact_sqlite_file(path: Path, secrets: list[str]) -> int:
    """Replace every occurrence of ``secrets`` in every text column of every table of the SQLite file ``path``
    by ``REDACTED_MARK``, with ``secure_delete`` on, then ``VACUUM`` so no free page keeps an old value.

    Returns the number of rows changed. Raises sqlite3.Error for a file that is not a database.
    """
    changed = 0
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("BEGIN")
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                             "AND name NOT LIKE 'sqlite_%'")]
        for t in tables:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
            for c in cols:
                for s in secrets:
                    cur = conn.execute(f'UPDATE "{t}" SET "{c}" = replace("{c}", ?, ?) '
                                       f'WHERE typeof("{c}") = \'text\' AND instr("{c}", ?) > 0',
                                       (s, REDACTED_MARK, s))
                    changed += cur.rowcount
        conn.execute("COMMIT")
        if changed:
            conn.execute("VACUUM")
    finally:
        conn.close()
    return changed


class RedactingBackupStore(BackupStore):
    """A ``BackupStore`` whose new backups never hold any of ``secrets`` (old keys during a rotation).

    Text backups are redacted before they are written; SQLite snapshots are redacted (``redact_sqlite_file``)
    before they enter the store.
    """

    def __init__(self, secrets: list[str], root: Path | None = None, keep: int = 10) -> None:
        super().__init__(root=root or paths.backups_dir(), keep=keep)
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def save_bytes(self, tool: str, original: Path, data: bytes, *, mode: int, batch: str = "") -> Backup:
        """As ``BackupStore.save_bytes``, with the old keys replaced by ``REDACTED_MARK``."""
        return super().save_bytes(tool, original, _redact_text(data, [s.encode() for s in self.secrets]),
                                  mode=mode, batch=batch)

    def snapshot_sqlite(self, tool: str, db: Path, *, timeout_s: float = 5.0) -> Path:
        """As ``BackupStore.snapshot_sqlite``, with the old keys removed from the snapshot."""
        pending = super().snapshot_sqlite(tool, db, timeout_s=timeout_s)
        try:
            redact_sqlite_file(pending, self.secrets)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(pending)
            raise
        return pending


def scrub_backups(secrets: list[str], store: BackupStore | None = None) -> int:
    """Redact ``secrets`` from every backup in ``store`` (default: conduit's backups directory), in place.

    Returns the number of backup files changed. A file that cannot be redacted is deleted instead (an old key
    must not survive), and counted.
    """
    root = (store or BackupStore(paths.backups_dir())).root
    secrets = [s for s in secrets if s]
    if not secrets or not root.is_dir():
        return 0
    raw = [s.encode() for s in secrets]
    count = 0
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name in ("index.json", ".lock"):
            continue
        try:
            data = p.read_bytes()
        except OSError:
            continue
        if not any(s in data for s in raw):
            continue
        try:
            if data.startswith(b"SQLite format 3\0"):
                redact_sqlite_file(p, secrets)
                if any(s in p.read_bytes() for s in raw):
                    raise OSError("still holds the key")
            else:
                tmp = p.with_name(f".{p.name}.redact-{os.getpid()}")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(_redact_text(data, raw))
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, p)
        except (OSError, sqlite3.Error):
            with contextlib.suppress(OSError):
                p.unlink()
        count += 1
    return count


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
    ``Authorization: Bearer`` or, for ``auth = "x-api-key"``, ``x-api-key`` (plus ``anthropic-version``)."""
    ch = profile.model.channels[channel]
    roots = profile.roots[channel]
    if "openai" in roots:
        url = roots["openai"].openai_base() + "/models"
    else:
        url = roots["anthropic"].anthropic_base() + "/v1/models"
    if ch.auth == "x-api-key":
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    else:
        headers = {"Authorization": f"Bearer {key}"}
    return url, headers


def check_key(profile: LoadedProfile, channel: str, key: str, *, timeout_s: float = CHECK_TIMEOUT_S,
              transport: httpx.BaseTransport | None = None) -> KeyCheck:
    """Ask the gateway whether it accepts ``key`` (see ``models_request``). Never raises for HTTP trouble."""
    url, headers = models_request(profile, channel, key)
    try:
        with httpx.Client(timeout=timeout_s, transport=transport, follow_redirects=False) as client:
            resp = client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        reason = type(exc).__name__
        return KeyCheck(False, True, None, f"could not reach {url} to check the key ({reason}: "
                        f"{str(exc).replace(key, fingerprint(key))})", url)
    if 200 <= resp.status_code < 300:
        return KeyCheck(True, False, resp.status_code, f"the gateway accepted the key (GET {url}: "
                        f"{resp.status_code})", url)
    if resp.status_code in (401, 403):
        return KeyCheck(False, True, resp.status_code, f"the gateway rejected the key (GET {url}: "
                        f"{resp.status_code})", url)
    return KeyCheck(False, False, resp.status_code, f"could not confirm the key: GET {url} answered "
                    f"{resp.status_code}; storing it anyway", url)


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
    from conduit.daemon.sync.syncd import key_file_path

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


def _wait_for_daemon(channel: str, fp: str, since: float, wait_s: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + wait_s
    state_file = paths.state_dir() / "sync.json"
    while time.monotonic() < deadline:
        try:
            fresh = state_file.stat().st_mtime >= since
        except OSError:
            fresh = False
        if fresh:
            doc = read_state()
            ch = ((doc or {}).get("channels") or {}).get(channel) or {}
            if ch.get("key_fingerprint") == fp and (doc or {}).get("last_sync"):
                return doc
        time.sleep(0.05)
    return None


def rotate_key(channel: str, raw_key: str, *, profile_path: str | Path | None = None, force: bool = False,
               wait_s: float = 15.0, transport: httpx.BaseTransport | None = None) -> RotateResult:
    """Rotate ``channel``'s key to ``raw_key`` (see the module docstring).

    Args:
        channel: a channel of the profile.
        raw_key: the new key as given on stdin (cleaned here).
        force: store even when the gateway rejects the key or cannot be reached.
        wait_s: how long to wait (seconds) for a running daemon to sync with the new key.
        transport: httpx transport for the check (tests may pass one; default: the network).
    Raises:
        ProfileError: invalid profile. ConduitError: unknown channel, no key source, a refused key without
        ``force``. KeyError_: an ``env``/``command`` source, a key ``clean_key`` refuses, a failed write.
    """
    profile = load_profile(profile_path)
    if channel not in profile.model.channels:
        from conduit.daemon.config.profile import _did_you_mean

        raise ConduitError(f"channel `{channel}` is not defined in {profile.path}",
                           _did_you_mean(channel, profile.model.channels))
    src = profile.model.channels[channel].key
    if src is not None and (src.env is not None or src.command is not None):
        store_key(profile, channel, "")  # raises the refusal with its hint, before anything else happens
    new = clean_key(raw_key, source=f"the new key for channel `{channel}`").key
    result = RotateResult(channel=channel, fingerprint=fingerprint(new))
    old: str | None = None
    if src is not None:
        with contextlib.suppress(KeyError_):
            old = read_key(src).key
    if old == new:
        result.lines.append(f"channels.{channel}: this key ({result.fingerprint}) is already in use; nothing changed")
        return result
    check = check_key(profile, channel, new, transport=transport)
    result.check = check
    if check.refused and not force:
        raise ConduitError(f"{check.message}; nothing was stored",
                           "check the key (and the channel's base_url), or pass --force to store it anyway")
    result.lines.append(check.message + (" (--force: storing anyway)" if check.refused else ""))
    since = time.time()
    result.stored = store_key(profile, channel, new)
    result.lines.append(f"stored the new key ({result.fingerprint}) in {result.stored}")
    pid = _running_daemon()
    olds = [old] if old else []
    if pid is not None:
        result.daemon_pid = pid
        doc = _wait_for_daemon(channel, result.fingerprint, since, wait_s)
        result.propagated = doc is not None
        if doc is not None:
            tools = ", ".join(f"{k} {v.get('status')}" for k, v in sorted((doc.get("tools") or {}).items()))
            result.lines.append(f"the running daemon (pid {pid}) propagated it: {tools}")
        else:
            result.lines.append(f"the running daemon (pid {pid}) has not synced yet after {wait_s:g} s; check "
                                "`conduit doctor`")
    else:
        from conduit.daemon.sync.rotate import RedactingBackupStore

        result.report = sync(load_profile(profile_path), backups=RedactingBackupStore(olds))
        result.propagated = True
        for t in result.report.tools:
            result.lines.append(f"{t.display}: {t.status.replace('_', ' ')}"
                                + (f" ({t.message.splitlines()[0]})" if t.message else ""))
    result.scrubbed = scrub_backups(olds)
    if result.scrubbed:
        result.lines.append(f"removed the old key from {result.scrubbed} backup file(s)")
    return result


def _running_daemon() -> int | None:
    from conduit.daemon.sync.syncd import running_daemon_pid

    return running_daemon_pid()

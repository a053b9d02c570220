"""The one redaction function: every text that leaves a conduit process (logs, errors, the state file, the
socket, ``--json``, diffs, vLLM log tails) passes through ``redact`` or a ``Redactor`` holding the keys the
profile resolves, so a key is only ever shown as its ``fingerprint`` (``sk-...c3f9``).

Example::

    redactor = Redactor()
    redactor.add([key])
    log.info(redactor("sent with %s" % key))     # "sent with sk-...c3f9"
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

MIN_SECRET_LEN = 4
"""Shorter strings are not masked: replacing every ``"abc"`` in a log would garble it and protect nothing."""


def fingerprint(key: str | None) -> str:
    """Return a printable stand-in for a secret: ``sk-...c3f9`` (first 3 and last 4 characters).

    Short keys (under 12 characters) show only ``...`` and their length, so a fingerprint never reveals
    most of a short secret; None or empty gives ``(none)``.
    """
    if not key:
        return "(none)"
    if len(key) < 12:
        return f"...({len(key)} chars)"
    return f"{key[:3]}...{key[-4:]}"


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every occurrence of each secret replaced by its fingerprint.

    Longer secrets are replaced first, so a key that contains another is masked whole. Secrets shorter than
    ``MIN_SECRET_LEN`` characters, empty strings and None are ignored.
    """
    for s in sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True):
        if s in text:
            text = text.replace(s, fingerprint(s))
    return text


def redact_bytes(data: bytes, secrets: Iterable[str | None]) -> bytes:
    """``redact`` for bytes (a backup file, a SQLite page): each secret's UTF-8 bytes become its fingerprint's.

    The replacement changes the length of ``data``; callers that need a fixed length must not use it.
    """
    for s in sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True):
        raw = s.encode("utf-8")
        if raw in data:
            data = data.replace(raw, fingerprint(s).encode("utf-8"))
    return data


class Redactor:
    """A thread-safe set of secrets and ``redact`` over it; call it like a function.

    Shared by a process's log filter, its error messages and its answers, so a key learned once (a profile
    reload, a rotation) is masked everywhere from then on.
    """

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: frozenset[str] = frozenset()
        self.add(secrets)

    def add(self, secrets: Iterable[str | None]) -> None:
        """Remember more secrets to mask (empty and very short strings are ignored)."""
        new = {s for s in secrets if s and len(s) >= MIN_SECRET_LEN}
        with self._lock:
            self._secrets = self._secrets | new

    @property
    def secrets(self) -> frozenset[str]:
        """The secrets masked now (a snapshot)."""
        with self._lock:
            return self._secrets

    def __call__(self, text: str) -> str:
        """``redact(text, self.secrets)``."""
        return redact(text, self.secrets)

"""The one place secrets are masked: every text that leaves a conduit process (logs, errors, the state file, the
socket, ``--json``, diffs, vLLM log tails) passes through ``redact`` or a ``Redactor`` holding the keys the
profile resolves, so a key is only ever shown as its ``fingerprint`` (``sk-...c3f9``). Text written by other
programs (vLLM's log, a launcher's output, a malformed request) may hold secrets conduit never read: for those
``mask_key_flags`` masks the values of key-like flags and assignments by their syntax.

Example::

    redactor = Redactor()
    redactor.add([key])
    log.info(redactor("sent with %s" % key))     # "sent with sk-...c3f9"
"""

from __future__ import annotations

import re
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


_SECRET_NAME = r"(?:api[-_]?key|token|secret|password|passwd|credentials?)"
KEY_FLAG_RE = re.compile(rf"^--?(?:[A-Za-z0-9]+[-_])*(?:{_SECRET_NAME}|key)$", re.IGNORECASE)
"""A command-line flag whose value is a secret: ``--api-key``, ``--key``, ``--token``, ``--hf-token``, ``--password``."""

_VALUE = r"[^\s'\"\\,;)\]}]+"  # up to whitespace, a quote, a backslash (a JSON escape) or a closing bracket
_KEY_FLAGS = (
    # --api-key X, --api-key=X, '--api-key', 'X' (an argv list), --hf-token X (the name ends with the secret
    # word: --tokenizer is not one)
    re.compile(rf"(?i)(--[\w-]*{_SECRET_NAME})(?![\w-])(\s*=\s*|\s+|['\"],\s*)(['\"]?)({_VALUE})"),
    # api_key=X, VLLM_API_KEY=X, 'api_key': 'X', x-api-key: X, hf_token = X
    re.compile(rf"(?i)(?<![\w-])([\w.-]*{_SECRET_NAME})(?![\w-])(['\"]?\s*[=:]\s*)(['\"]?)({_VALUE})"),
    # Authorization: Bearer X, Authorization: Basic X, Authorization: X
    re.compile(rf"(?i)(\bauthorization['\"]?\s*[:=]\s*['\"]?(?:(?:basic|bearer|token)(?=\s))?)(\s*)()({_VALUE})"),
    # Bearer X (a header quoted without its name)
    re.compile(rf"(?i)(\bbearer)(\s+)()({_VALUE})"),
)


def _mask(m: re.Match[str]) -> str:
    value = m.group(4)
    if "..." in value or value.lower() in ("none", "null", "true", "false", "***"):
        return m.group(0)  # already a fingerprint, or not a value
    return f"{m.group(1)}{m.group(2)}{m.group(3)}{fingerprint(value)}"


def mask_key_flags(text: str) -> str:
    """``text`` with the values of key-like flags and assignments replaced by their fingerprints:
    ``--api-key X``/``--api-key=X``, ``api_key=X``/``api_key: X`` (any name ending in api_key, token, secret,
    password or credentials, so ``VLLM_API_KEY=X`` and ``hf_token=X`` too, but not ``max_num_batched_tokens``)
    and ``Authorization: Bearer X``/``Authorization: Basic X``/``Bearer X``. A value ends at whitespace, a quote, a backslash, a comma, a semicolon or a
    closing bracket."""
    for pattern in _KEY_FLAGS:
        text = pattern.sub(_mask, text)
    return text


def mask_argv(argv: list[str]) -> list[str]:
    """A copy of ``argv`` with the value after (or in) a key-like flag masked: ``["--api-key", "X"]`` and
    ``["--api-key=X"]`` keep the flag and show ``X`` as its fingerprint (``mask_key_flags`` on each pair)."""
    out = list(argv)
    for i, arg in enumerate(out):
        if i + 1 < len(out) and _KEY_FLAGS[0].fullmatch(f"{arg} {out[i + 1]}"):
            out[i + 1] = mask_key_flags(f"{arg} {out[i + 1]}")[len(arg) + 1:]
        elif "=" in arg:
            out[i] = mask_key_flags(arg)
    return out

"""The process-wide ``Redactor`` of the config layer: every key the profile resolves is registered here where it
is read (``conduit.daemon.config.sources.read_key``, the literal ``[vllm].api_key``), and so is the value of
every key-like flag (``--api-key X``, ``--api-key=X``) found in a command line or in ``[vllm].extra_args``.

What leaves a conduit process passes through it: the CLI's error messages (``conduit.daemon.cli.main``), the
``--json`` outputs of ``sync`` and ``doctor``, the state file a plain ``conduit sync`` writes. A key learned
once stays masked everywhere in the process from then on (``conduit.redact.Redactor`` is thread-safe).

Example::

    REDACTOR.add(["sk-live-0123456789abcdef"])
    REDACTOR("rejected sk-live-0123456789abcdef")    # "rejected sk-...cdef"
    redact_data({"message": "sk-live-0123456789abcdef"})   # {"message": "sk-...cdef"}
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from conduit.redact import KEY_FLAG_RE, Redactor

__all__ = ["KEY_FLAG_RE", "REDACTOR", "flag_values", "learn_flags", "redact_data"]

REDACTOR = Redactor()
"""The keys this process has read, and key-like flag values it has seen: one set for every output."""

def flag_values(argv: Sequence[str]) -> list[str]:
    """The values of key-like flags in ``argv``: the word after ``--api-key`` and the part after ``=`` in
    ``--api-key=X`` (``KEY_FLAG_RE``). Other words are not returned."""
    found: list[str] = []
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if not KEY_FLAG_RE.match(name):
            continue
        if eq:
            found.append(value)
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            found.append(argv[i + 1])
    return found


def learn_flags(argv: Iterable[str]) -> None:
    """Register the values of key-like flags in ``argv`` with ``REDACTOR`` (``flag_values``)."""
    REDACTOR.add(flag_values(list(argv)))


def redact_data(data: Any) -> Any:
    """A copy of JSON-like ``data`` (dicts, lists, tuples, strings, scalars) with ``REDACTOR`` applied to every
    string, keys of dicts included. Masking the data rather than its JSON text also catches a key holding a
    character JSON escapes (``"``, ``\\``)."""
    if isinstance(data, str):
        return REDACTOR(data)
    if isinstance(data, dict):
        return {redact_data(k): redact_data(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_data(v) for v in data]
    return data

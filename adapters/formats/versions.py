"""Which version of a tool is installed: ``<binary> --version``, bounded, cached, never raising.

Adapters ask it before writing a setting some versions refuse (Codex ``wire_api = "chat"``), and doctor
reports it. The answer is cached per resolved binary path and its mtime (nanoseconds), so an upgrade in place
is seen at the next call and a sync loop does not start a process per tool per batch.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence

TIMEOUT_S = 5.0
"""How long one ``--version`` may take (seconds); a tool that hangs counts as "version unknown"."""

_VERSION = re.compile(r"(\d+(?:\.\d+)+)")
_CACHE: dict[tuple[str, int], str | None] = {}


def installed_version(binaries: Sequence[str], *, path: str | None = None) -> str | None:
    """The version of the first of ``binaries`` found on ``PATH``, as its dotted number (``"0.171.0"``).

    Args:
        binaries: command names to look for, in order (``("codex",)``).
        path: the ``PATH`` to search (None: this process's).

    Returns:
        the first dotted number in the first line of the tool's ``--version`` output (stdout, else stderr), or
        None when no binary is found, it fails, prints no version, or takes longer than ``TIMEOUT_S``.
        Never raises.
    """
    for name in binaries:
        found = shutil.which(name, path=path)
        if not found:
            continue
        try:
            real = os.path.realpath(found)
            key = (real, os.stat(real).st_mtime_ns)
        except OSError:
            continue
        if key not in _CACHE:
            _CACHE[key] = _ask(found)
        return _CACHE[key]
    return None


def _ask(exe: str) -> str | None:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=TIMEOUT_S,
                             stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    for stream in (out.stdout or "", out.stderr or ""):
        lines = stream.strip().splitlines()
        if lines:
            m = _VERSION.search(lines[0])
            if m:
                return m.group(1)
    return None


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    """``"0.171.0"`` -> ``(0, 171, 0)``; None for None or a string without a dotted number."""
    m = _VERSION.search(version or "")
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def at_least(version: str | None, minimum: tuple[int, ...]) -> bool:
    """Whether ``version`` is known and not older than ``minimum`` (missing parts count as 0)."""
    have = version_tuple(version)
    if have is None:
        return False
    width = max(len(have), len(minimum))
    return have + (0,) * (width - len(have)) >= minimum + (0,) * (width - len(minimum))


__all__ = ["TIMEOUT_S", "at_least", "installed_version", "version_tuple"]

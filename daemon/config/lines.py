"""Where a key path is written in the profile's text: the line numbers every profile error names.

Understands ``[a.b]`` tables, ``a.b = ...`` dotted keys and ``key = {...}`` inline tables; a plain line scan,
because tomlkit's document does not keep line numbers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_.-]+)\s*=""")


def _split_dotted(s: str) -> list[str]:
    return [part.strip().strip("\"'") for part in re.findall(r"""(?:"[^"]*"|'[^']*'|[^.]+)""", s)]


def where_in(path: Path, text: str, keys: Sequence[Any]) -> str:
    """``path:line: `` for the line that defines ``keys`` (the deepest part found), or ``path: `` when the
    key is not written in the file (a missing key)."""
    line = find_line(text, [str(k) for k in keys])
    return f"{path}:{line}" if line else f"{path}"


def find_line(text: str, keys: Sequence[str]) -> int | None:
    """1-based line where the key path ``keys`` is written, or where its nearest written parent is.

    Understands ``[a.b]`` tables, ``a.b = ...`` dotted keys and ``key = {...}`` inline tables (the line of
    ``key``). Returns None when no part of the path is written.
    """
    best: tuple[int, int] | None = None  # (matched depth, line)
    table: list[str] = []
    for no, raw in enumerate(text.splitlines(), start=1):
        m = _HEADER.match(raw)
        if m:
            table = _split_dotted(m.group(1))
            depth = _prefix_len(table, keys)
            if depth == len(table) and (best is None or depth > best[0]):
                best = (depth, no)
            continue
        k = _KEY.match(raw)
        if not k:
            continue
        full = table + _split_dotted(k.group(1))
        depth = _prefix_len(full, keys)
        if depth == len(full) and (best is None or depth > best[0]):
            best = (depth, no)
    return best[1] if best else None


def _prefix_len(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n

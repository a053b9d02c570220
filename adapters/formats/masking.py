"""Finding the secrets in a tool file's text, for diffs and doctor: the values are found *structurally* (the
file is parsed and the values under the secret key names are collected), then masked by the kernel's one
redaction function, ``conduit.redact.redact`` (each becomes its fingerprint, ``sk-...c3f9``).

Because ``redact`` replaces every occurrence, a key is masked wherever it appears (also inside a URL or an
unrelated value) and the layout of the text, and so a diff's line numbers, is kept. A value is also looked for
in its JSON-escaped spelling, as JSON, JSONC, TOML basic strings and double-quoted YAML write it.

Text that does not parse (the writer only masks texts that did, but errors and notices may quote fragments)
falls back to ``assigned_values``: the values written after ``NAME=``, ``NAME: `` or ``"NAME": `` on a line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable
from typing import Any

from conduit.redact import redact

__all__ = ["assigned_values", "mask_values", "masker", "secret_values", "shown"]


def secret_values(doc: Any, names: Collection[str]) -> list[str]:
    """Every string (or number) value under a key named in ``names``, at any depth of a parsed document
    (mappings and sequences, as ``json``, tomlkit, ruamel.yaml and python-dotenv return them)."""
    found: list[str] = []
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if str(key) in names and isinstance(value, str | int | float) and not isinstance(value, bool):
                    found.append(str(value))
                else:
                    stack.append(value)
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return found


_HEAD = r"""(?:^|[\s{,"'])(?:export\s+)?(?:"""
_TAIL = r""")["']?\s*[:=]\s*(?P<q>["']?)(?P<v>[^"'\s#,{}][^"'\s#,}]*)(?P=q)"""


def assigned_values(text: str, names: Collection[str]) -> list[str]:
    """The values assigned to ``names`` in text that did not parse (``NAME=v``, ``NAME = "v"``, ``name: v``,
    ``"name": "v"``): the fallback of ``masker``."""
    if not names:
        return []
    pattern = re.compile(_HEAD + "|".join(re.escape(n) for n in names) + _TAIL, re.MULTILINE)
    return [m.group("v") for m in pattern.finditer(text)]


def _spellings(value: str) -> list[str]:
    """``value`` as it may be written in a file: as is, and JSON-escaped (with and without ``\\uXXXX``)."""
    return [value, json.dumps(value, ensure_ascii=False)[1:-1], json.dumps(value)[1:-1]]


def mask_values(text: str, values: Iterable[str]) -> str:
    """``text`` with every spelling of each of ``values`` replaced by its fingerprint (``redact``)."""
    return redact(text, [form for value in values for form in _spellings(value)])


def masker(parse: Callable[[str], Any], names: Collection[str]) -> Callable[[str], str]:
    """A ``TextTarget.mask``: parse the text with ``parse``, collect the values under ``names``, redact them.

    ``parse`` may raise anything (a broken file): then the values are found by ``assigned_values``.
    """
    wanted = frozenset(names)

    def mask(text: str) -> str:
        if not wanted:
            return text
        try:
            values = secret_values(parse(text), wanted)
        except Exception:  # any parser's error: the text is not in the format, find assignments instead
            values = assigned_values(text, wanted)
        return mask_values(text, values)

    return mask


def shown(value: Any, *, secret: bool) -> Any:
    """A value for doctor's facts: a secret as its fingerprint (``redact`` over the value itself), any other
    value (and None) as it is."""
    if not secret or value is None:
        return value
    text = str(value)
    return mask_values(text, [text])

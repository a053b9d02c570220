"""A profile value of the wrong kind, in plain words: what the key takes, and what to write.

pydantic words a type error as its validator sees it ("Input should be a valid number, unable to parse string
as a number"); ``plain_message`` gives the sentence a person can act on, and ``type_hint`` / ``missing_hint`` the
line to write. Source of the error types: pydantic's documented error codes (``float_parsing``,
``int_parsing``, ``bool_type``, ``string_type``, ``list_type``, ``literal_error``, ...).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

_PLAIN: dict[str, str] = {
    "float_parsing": "must be a number, without quotes or a unit",
    "float_type": "must be a number, without quotes or a unit",
    "int_parsing": "must be a whole number, without quotes",
    "int_type": "must be a whole number, without quotes",
    "int_from_float": "must be a whole number",
    "bool_parsing": "must be true or false, without quotes",
    "bool_type": "must be true or false, without quotes",
    "string_type": 'must be text in quotes, such as "value"',
    "list_type": 'must be a list, such as ["a", "b"]',
    "dict_type": "must be a table, such as { file = \"~/path\" }",
}

#: What a key takes when it is written wrong (the last key of the location).
_TAKES: dict[str, str] = {
    "timeout": "seconds, as a number: timeout = 600",
    "base_url": 'base_url = "https://gateway.example.com/api" (the root the gateway documents)',
}


def plain_message(err: Mapping[str, Any]) -> str:
    """pydantic's ``err`` (one entry of ``ValidationError.errors()``) as a sentence; its own words when the
    type is not a plain kind mistake (a validator's message is already ours). A word outside a fixed set gets
    a "did you mean" (it is short and one of the set's names, so never a key)."""
    if err["type"] == "literal_error" and isinstance(err.get("input"), str) and len(err["input"]) <= 40:
        choices = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
        close = difflib.get_close_matches(err["input"], choices, n=1, cutoff=0.6)
        return (f"`{err['input']}` is not one of {', '.join(choices)}"
                + (f"; did you mean `{close[0]}`?" if close else ""))
    return _PLAIN.get(str(err["type"])) or str(err["msg"]).removeprefix("Value error, ")


def missing_hint(loc: Sequence[Any]) -> str:
    """The line to add for a required key that is missing at ``loc``."""
    if tuple(loc) == ("channels",):
        return 'add a [channels.NAME] table with base_url = "https://..."'
    if tuple(loc) in (("channel",), ("model",)):
        return f'add `{loc[0]} = "..."` at the top of the profile'
    return "add it, or see the starter profiles (`conduit init --print`)"


def type_hint(loc: Sequence[Any]) -> str | None:
    """What the key at ``loc`` takes, or None when its message says it already."""
    if len(loc) >= 3 and loc[0] == "channels" and loc[2] == "key":
        return 'write the key source as key = { file = "~/path" } (or env/command/secret), never the key itself'
    if len(loc) >= 3 and loc[0] == "channels" and loc[2] == "protocols":
        return 'protocols = ["openai", "anthropic"]: any of "openai", "anthropic", "gemini"'
    return _TAKES.get(str(loc[-1])) if loc else None

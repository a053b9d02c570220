"""Small tomlkit edits the TOML adapters share: a root key placed where a person reads it, an array-of-tables
entry found by one of its keys.

Both keep everything else of the document (comments, order, the other entries) as tomlkit parsed it.
"""

from __future__ import annotations

from typing import Any

import tomlkit
import tomlkit.items

__all__ = ["aot_entry", "set_root"]


def set_root(doc: tomlkit.TOMLDocument, key: str, value: Any) -> None:
    """Set the root key ``key`` to ``value``; unchanged when it already holds it. A new key goes right after the
    last root key (before the first table), so it never lands under a table's leading comment."""
    if key in doc:
        if doc[key] != value:
            doc[key] = value
        return
    roots = [k for k, v in doc.items() if not isinstance(v, tomlkit.items.Table | tomlkit.items.AoT)]
    try:
        if roots:
            doc._insert_after(roots[-1], key, value)  # tomlkit's Container API: keeps the order a person reads
            return
    except Exception:  # a tomlkit without it: plain assignment is still valid TOML (tomlkit puts it first)
        pass
    doc[key] = value


def aot_entry(doc: tomlkit.TOMLDocument, array: str, key: str, value: str) -> tuple[Any, bool]:
    """The table of the array of tables ``[[array]]`` whose ``key`` equals ``value``, and whether it was just
    added (an empty table appended to the array, which is created when missing).

    Raises:
        ValueError: ``array`` exists and is not an array of tables (``providers = "x"``): the caller reports it.
    """
    current = doc.get(array)
    if current is None:
        current = tomlkit.aot()
        doc[array] = current
    elif not isinstance(current, tomlkit.items.AoT | list):
        raise ValueError(f"{array} is not an array of tables")
    for entry in current:
        if isinstance(entry, dict) and entry.get(key) == value:
            return entry, False
    table = tomlkit.table() if isinstance(current, tomlkit.items.AoT) else tomlkit.inline_table()
    table[key] = value
    current.append(table)
    return current[-1], True

"""Who owns a context-window / output-limit value in a tool's file: conduit only while it is still exactly what
conduit wrote there last.

The limit keys (Codex ``model_context_window``, Cline ``contextWindow``/``maxTokens``, Aider's metadata entry)
are also keys a person, or the tool's own settings window, sets. So each one is a *slot* with a record of what
conduit wrote into it last and what it found there before (``{"wrote": V, "had": U}``; no ``had`` when the
key was absent). A render asks ``LimitLedger.settle`` for each slot:

- a limit known now is written; the value it replaces is remembered, unless that value is conduit's own;
- a limit unknown now puts back what conduit found (or removes the key it added), but only while the file still
  holds what conduit wrote; a value the person changed or set is kept, and its record dropped;
- a token figure found without any record that equals the one conduit writes now is taken for conduit's (a
  conduit from before these records wrote it); words (``openai``, ``chat``) stay the person's;
- a value found without any record that equals what another route of the profile writes into the slot and the
  route in force does not (``derived``: the ``[fallback]`` route's small model and timeout) is conduit's too, so
  a switch back removes it even when the record file was lost or damaged during the fallback.

The daemon loads the records per tool (``conduit.daemon.catalog.context``), hands this object to the adapter
in ``ToolSettings.limits``, and saves ``records`` after a write that succeeded (never in a dry run), so a render
only collects its decisions here and the disk is touched by the daemon alone. Values are JSON scalars.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ABSENT", "LimitLedger"]


class _Absent:
    """The key is not in the file (distinct from a JSON ``null``)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()
"""``settle``'s "no such key" in and out: the slot's key is missing / must be removed."""


def _same(a: Any, b: Any) -> bool:
    """Equal JSON scalars of the same kind (``True`` is not ``1``; a tomlkit Integer is an int)."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _upgraded(current: Any, wanted: Any) -> bool:
    """A token figure found without a record that equals the one conduit writes now: taken for conduit's own
    (written before these records existed), so it goes when the limit becomes unknown. Only integers: a
    person's own entry often repeats conduit's words (Aider ``litellm_provider: openai``), not its figures."""
    return (isinstance(wanted, int) and not isinstance(wanted, bool) and _same(current, wanted))


@dataclass
class LimitLedger:
    """The slot records of one tool: ``{file path: {slot: {"wrote": V, "had": U}}}``.

    Attributes:
        before: the records as loaded (what earlier syncs wrote); never changed here.
        after: the records each rendered file ends with (a file rendered again starts over: ``begin``).
        derived: ``{file path: {slot: value}}``: what a route of the profile other than the one in force (the
            ``[fallback]``'s) writes into a slot where the primary route writes something else or nothing; such a
            value found without a record is conduit's (the sync engine fills it; default: none).
    """

    before: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    after: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    derived: dict[str, dict[str, Any]] = field(default_factory=dict)

    def begin(self, path: object) -> None:
        """A render of ``path`` starts: its records so far are discarded (the writer may render twice)."""
        self.after[str(path)] = {}

    def settle(self, path: object, slot: str, current: Any, wanted: Any) -> Any:
        """The value ``slot`` of ``path`` gets: ``wanted`` when not None, else what conduit found there before
        its own write, or ``current`` when the file no longer holds conduit's value. ``current`` and the result
        are ``ABSENT`` for a missing key. Records the decision for ``path``."""
        rec = self.before.get(str(path), {}).get(slot)
        owned = isinstance(rec, dict) and current is not ABSENT and _same(current, rec.get("wrote"))
        had = rec.get("had", ABSENT) if owned and isinstance(rec, dict) else current
        if rec is None and (_upgraded(current, wanted) or self._derived(path, slot, current)):
            had = ABSENT  # no record, and the file holds a value only conduit writes there: conduit's own
        mine = self.after.setdefault(str(path), {})
        if wanted is None:
            mine.pop(slot, None)
            return had
        mine[slot] = {"wrote": wanted} if had is ABSENT else {"wrote": wanted, "had": had}
        return wanted

    def settle_key(self, path: object, doc: MutableMapping[str, Any], key: str, wanted: Any, slot: str | None = None,
                   *, keep_equal: bool = False) -> None:
        """``settle`` the slot (default: ``key``) that ``doc[key]`` holds and apply the result to ``doc``: the key
        removed for ``ABSENT``, else set (left as it is when ``keep_equal`` and it already equals the result, so a
        YAML/TOML value keeps its formatting)."""
        value = self.settle(path, key if slot is None else slot, doc.get(key, ABSENT), wanted)
        if value is ABSENT:
            doc.pop(key, None)
        elif not (keep_equal and doc.get(key, ABSENT) == value):
            doc[key] = value

    def _derived(self, path: object, slot: str, current: Any) -> bool:
        """``current`` is what another route of the profile writes into ``slot`` of ``path`` (``derived``)."""
        mine = self.derived.get(str(path), {})
        return current is not ABSENT and slot in mine and _same(current, mine[slot])

    def owned(self, path: object) -> list[str]:
        """The slots of ``path`` conduit wrote last time (to settle those this render no longer targets)."""
        return list(self.before.get(str(path), {}))

    def records(self, paths: set[str]) -> dict[str, dict[str, dict[str, Any]]]:
        """The records to keep when the files ``paths`` (as ``str``) were written: their new records, the
        earlier ones of every other file; files left with none are dropped."""
        out = {p: r for p, r in self.before.items() if p not in paths or p not in self.after}
        out.update({p: r for p, r in self.after.items() if p in paths})
        return {p: r for p, r in out.items() if r}

"""``conduit doctor``'s table: one row per tool that needs a look, with what is wrong and its fix on the row.

Sized for a person's terminal: 80 columns hold a profile with one channel and three tools in about 25 lines.
Tools the profile does not manage are counted on one line (``--all`` lists them), diffs are printed only with
``--diff`` (``conduit sync --dry-run`` shows them too), and a path is never cut: the details column folds a long
word instead of ending it with an ellipsis, and ``$HOME`` is written ``~``.
"""

from __future__ import annotations

import os
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape as esc
from rich.table import Table

from conduit.daemon.cli.console import print_diff

STYLE = {"error": "red", "unsupported": "red", "in_sync": "green", "drifted": "yellow", "not_managed": "dim",
         "not_synced": "yellow", "not_found": "yellow", "disabled": "dim", "not installed": "dim",
         "overridden": "red", "untrusted": "red", "refused": "red"}
MAX_KEYS = 4
"""Changed keys named on a drifted tool's row; more are counted."""


def home_short(text: str, home: str | None = None) -> str:
    """``text`` with the home directory written ``~`` (``/home/me/.claude`` -> ``~/.claude``)."""
    home = (home or os.path.expanduser("~")).rstrip("/")
    if not home or home == "/":
        return text
    return text.replace(home + "/", "~/").replace(home + " ", "~ ")


def shown_state(t: dict[str, Any]) -> str:
    """The state column: the tool's state, or ``not installed`` for an in-sync tool whose command is absent
    (conduit keeps its files, so the tool works once installed; no restart advice applies)."""
    if t.get("installed") is False and t["state"] == "in_sync":
        return "not installed"
    return str(t["state"])


def details(t: dict[str, Any]) -> str:
    """The details cell: what is the matter, then ``fix: ...`` on a line of its own when there is one."""
    state, lines = t["state"], []
    if t.get("installed") is False and state in ("in_sync", "not_synced", "drifted"):
        lines.append("not installed (its command is not on PATH)" if state != "in_sync"
                     else "its command is not on PATH; its files are in sync with the profile")
    if state in ("drifted", "not_synced"):
        keys = t.get("changed_keys") or []
        named = ", ".join(keys[:MAX_KEYS]) + (f" (+{len(keys) - MAX_KEYS} more)" if len(keys) > MAX_KEYS else "")
        files = ", ".join(t.get("changed_files") or []) or "its files"
        verb = "differs" if state == "drifted" else "would be written"
        lines.append(f"{files} {verb}" + (f": {named}" if named else ""))
    elif state in ("in_sync", "not_managed", "disabled", "unknown") or not (t.get("why") or t.get("message")):
        if t.get("installed") is not False or state == "not_managed":
            lines.append(t.get("summary") or t.get("why") or "")
    else:
        lines.append(str(t.get("why") or t.get("message")))
    if t.get("fix") and state != "in_sync":
        lines.append(f"fix: {t['fix']}")
    return home_short("\n".join(ln for ln in lines if ln))


def print_doctor(out: Console, report: dict[str, Any], *, show_all: bool, show_diff: bool) -> None:
    """Print the profile line, the tools table, the unmanaged count, the diffs (``show_diff``) and the warnings."""
    prof = report["profile"]
    if prof.get("ok"):
        out.print(f"profile: {esc(home_short(str(prof.get('path'))))} [green]ok[/]", soft_wrap=True)
    else:
        out.print(f"profile: [red]{esc(str(prof.get('error')))}[/]")
    for notice in prof.get("notices") or ():
        out.print(f"  [yellow]notice[/] {esc(notice)}", soft_wrap=True)
    table = Table("tool", "state", "details", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
              padding=(0, 1, 0, 0))
    table.columns[0].no_wrap = True
    table.columns[1].no_wrap = True
    table.columns[2].overflow = "fold"  # a long path folds; never an ellipsis in a path
    hidden = []
    for t in report["tools"].values():
        if not show_all and t["state"] == "not_managed":
            hidden.append(t["display"])
            continue
        state = shown_state(t)
        table.add_row(esc(t["display"]), f"[{STYLE.get(state, 'white')}]{esc(state)}[/]", esc(details(t)))
    out.print(table)
    rests = [f"{t['display']} {t['key_at_rest']['where']}" for t in report["tools"].values() if t.get("key_at_rest")]
    if rests:
        out.print(f"keys at rest: {esc('; '.join(rests))}")
    if hidden:
        out.print(f"[dim]{len(hidden)} more tools not managed by the profile (`conduit doctor --all` lists them)[/]")
    diffs = [t for t in report["tools"].values() if t.get("diff")]
    if show_diff:
        for t in diffs:
            out.print(f"[bold]{esc(t['display'])}[/] differs from the profile:")
            print_diff(out, t["diff"])
    elif diffs:
        out.print("[dim]the differences: `conduit doctor --diff` (or `conduit sync --dry-run`)[/]")
    for w in report["warnings"]:
        out.print(f"[yellow]warning[/] {esc(home_short(w))}")


__all__ = ["details", "home_short", "print_doctor", "shown_state"]

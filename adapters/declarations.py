"""What stops a tool from using conduit's settings although its files match: ``Blocker`` and shared look-ups.

``conduit doctor`` asks each adapter's ``outranks(settings, env)`` (``AdapterDefaults`` answers ``[]``); a
non-empty answer turns the tool's state from ``in_sync`` into the first blocker's state:
- ``overridden``: a source ranks above the file conduit writes, or bypasses the gateway (an exported variable,
  a project file, a cloud-provider switch, a selected Codex profile...);
- ``untrusted``: Gemini CLI will not read its ``.env`` in the working folder (folder trust);
- ``refused``: the installed version refuses a setting in the tool's file (Codex ``wire_api = "chat"``).
Every blocker names its source and the fix a person can apply. Values in ``why``/``fix`` never hold a key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

BlockerState = Literal["overridden", "untrusted", "refused"]

__all__ = ["Blocker", "BlockerState", "git_root", "read_env_quietly"]


@dataclass(frozen=True)
class Blocker:
    """One reason a tool will not use conduit's settings.

    Attributes:
        state: ``overridden`` / ``untrusted`` / ``refused`` (see the module docstring).
        source: what wins instead: a file path, ``shell environment``, or ``<file> [profiles.x]``.
        why: the reason in words (``"CLAUDE_CODE_USE_BEDROCK=1 sends every request to Amazon Bedrock"``).
        fix: what to do, as a person would type it (``"unset CLAUDE_CODE_USE_BEDROCK ..."``).
    """

    state: BlockerState
    source: str
    why: str
    fix: str

    def as_dict(self) -> dict[str, Any]:
        """``{"state", "source", "why", "fix"}`` as ``conduit doctor --json`` shows each blocker."""
        return {"state": self.state, "source": self.source, "why": self.why, "fix": self.fix}


def read_env_quietly(path: Path) -> dict[str, str]:
    """A ``.env`` file's variables; ``{}`` when missing or unreadable."""
    # lazy (python-dotenv imports logging; most runs read no .env file); python-dotenv itself, not
    # conduit.adapters.formats.dotenvfile: that module imports base, which imports this one
    from dotenv import dotenv_values

    try:
        values = dotenv_values(path, interpolate=False)
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return {name: value for name, value in values.items() if value is not None}


def git_root(cwd: Path) -> Path | None:
    """The nearest folder at or above ``cwd`` holding ``.git`` (a directory or a worktree's file), or None."""
    d = cwd
    while True:
        if (d / ".git").exists():
            return d
        if d.parent == d:
            return None
        d = d.parent
